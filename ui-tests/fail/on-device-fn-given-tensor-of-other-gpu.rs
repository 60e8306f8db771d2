// A tensor on cuda:0 passed to an `#[on_device(1)]` fn that takes `&Tensor<Here>`.
// `Here` is `Cuda<1>` there, so this is a plain type mismatch (E0308 "expected 1, found
// 0"): rustc gives `#[diagnostic::on_unimplemented]` messages only for unmet trait
// bounds, never for a mismatch of concrete types, so the runtime cannot name the fix
// here. A custom message would need the macro to check the argument through a trait
// bound; the fix is `.to::<Cuda<1>>()` before the call, or `#[on_device(0)]`.
use locus::{on_device, Cuda, Tensor};

#[on_device(1)]
fn f(x: &Tensor<Here>) -> locus::Result<Tensor<Here>> {
    x.relu()
}

fn main() -> locus::Result<()> {
    let a = Tensor::<Cuda<0>>::ones([2])?;
    let _b = f(&a)?;
    Ok(())
}
