//! Procedural macros of [locus](https://docs.rs/locus): `#[on_device]`, `with_device!`,
//! `#[derive(ToDevice)]` and `#[kernel]`. Use them through the `locus` crate, which re-exports them.
//!
//! This crate only parses, checks and rewrites syntax; what the generated code calls
//! lives in the runtime and is reached as `::locus::__private::…`.

mod async_body;
mod derive;
mod expand;
mod fallback;
mod kernel;
mod parse;
mod signature;
mod validate;

use proc_macro::TokenStream;

/// Runs a fn, a method or every method of an `impl` block with a device current, as
/// `with torch.cuda.device(n):` around the body.
///
/// The device is one of:
///
/// | argument | device | `Here` |
/// |---|---|---|
/// | `#[on_device(1)]` | `cuda:1` | `Cuda<1>`, in the signature and the body |
/// | `#[on_device(N)]` | `Cuda<N>` for a `const N: usize` of the fn (or the impl) | — |
/// | `#[on_device(dyn expr)]` | `expr` at run time: a `u32`/`usize`/`i32` ordinal, a `DeviceId` or a `Dyn` | — |
///
/// - The previous device is current again on every way out: return, `?`, panic.
/// - A fn returning a `Result` gets a failed guard (`Error::NoSuchDevice`, a negative
///   `dyn` ordinal) as an `Err` through `?`, so its error type needs
///   `From<locus::Error>`; any other fn panics with a message naming the device.
/// - `async fn`s keep their signature; the device is made current around every poll
///   of the body and left between polls, so it follows the future across threads and
///   never leaks into other futures.
/// - With a literal device, a `Cuda<m>` with another literal `m` in a signature does
///   not compile, and the error points at it.
/// - On an `impl` block, methods with their own `#[on_device]` keep theirs, and
///   `const fn`s are left alone.
///
/// Ops on statically placed tensors follow their tensor whatever the current device;
/// the current device matters for `Tensor<Dyn>` factories and raw CUDA calls.
///
/// ```
/// use locus::{current_device, on_device, Cuda, DeviceId, Tensor};
///
/// # let n = locus::device_count()?;
/// # if n < 2 { eprintln!("skipped: needs 2 devices, found {n}"); return Ok(()); }
/// #[on_device(1)]
/// fn step(x: &Tensor<Here>) -> locus::Result<Tensor<Here>> {
///     assert_eq!(current_device(), DeviceId::Cuda(1));
///     (x * 2.0)?.relu()
/// }
///
/// #[on_device(N)]
/// fn replica<const N: usize>(x: &Tensor<Cuda<N>>) -> locus::Result<Tensor<Cuda<N>>> {
///     x + x
/// }
///
/// #[on_device(dyn rank)]
/// async fn serve(rank: u32) -> DeviceId {
///     current_device()
/// }
///
/// let y = step(&Tensor::<Cuda<1>>::ones([2])?)?;
/// assert_eq!(y.to_vec()?, vec![2.0, 2.0]);
/// assert_eq!(replica(&Tensor::<Cuda<0>>::ones([1])?)?.to_vec()?, vec![2.0]);
/// assert_eq!(current_device(), DeviceId::Cpu);
/// let _future = serve(0);
/// # Ok::<(), locus::Error>(())
/// ```
///
/// # Expansion
///
/// Before:
///
/// ```
/// # use locus::{on_device, Tensor};
/// #[on_device(1)]
/// fn step(x: &Tensor<Here>) -> locus::Result<Tensor<Here>> {
///     x.relu()
/// }
/// ```
///
/// After (the guard's name is hygienic: the body cannot see it):
///
/// ```
/// # use locus::Tensor;
/// fn step(x: &Tensor<::locus::__private::Cuda<1>>) -> locus::Result<Tensor<::locus::__private::Cuda<1>>> {
///     #[allow(dead_code)]
///     type Here = ::locus::__private::Cuda<1>;
///     let __locus_guard =
///         ::locus::__private::enter(::locus::__private::static_id::<::locus::__private::Cuda<1>>())?;
///     x.relu()
/// }
/// ```
///
/// An `async fn` moves its body into a future wrapped by `on_device_async`, which
/// enters the device around each poll:
///
/// ```
/// # use locus::on_device;
/// #[on_device(dyn rank)]
/// async fn serve(rank: u32) -> usize {
///     rank as usize
/// }
/// ```
///
/// becomes
///
/// ```
/// async fn serve(rank: u32) -> usize {
///     let __locus_device = ::locus::__private::dynamic_id(rank);
///     ::locus::__private::expect_entered(
///         ::locus::__private::on_device_async::<usize, _>(__locus_device, async move {
///             ::core::convert::identity::<usize>({ rank as usize })
///         })
///         .await,
///     )
/// }
/// ```
///
/// The `identity::<usize>` gives the body's tail and `return`s the coercions an
/// `async fn` body has.
#[proc_macro_attribute]
pub fn on_device(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::attribute(args.into(), item.into()).into()
}

/// Runs a block, a closure or an async block with a device current:
/// `with_device!(device => body)`, the expression form of `#[on_device]` (attributes on
/// blocks are unstable, and one name cannot be both an attribute and a `!` macro).
///
/// The device takes the three forms of `#[on_device]`: `1` (where `Here` is
/// `Cuda<1>`), `N` (a const generic in scope) or `dyn expr`. Entering can fail (a
/// missing device), so every form gives a `locus::Result`, never a panic:
///
/// | body | result |
/// |---|---|
/// | `{ block }` or any expression | `Result<T>`: the block's value |
/// | `\|args\| body` | a closure of the same arguments returning `Result<T>`; each call enters the device, and a `dyn` device is read once, when the closure is made |
/// | `async { .. }` | a future of `Result<T>`, entering the device around every poll |
///
/// `return`, `?` and `break` in a block act on the enclosing fn or loop, as in any
/// block. A closure that is stored rather than passed straight to a function may need
/// its argument types written out (`|x: &Tensor<Here>|`), as for any stored closure.
///
/// ```
/// use locus::{current_device, with_device, Cuda, DeviceId, Tensor};
///
/// let t = with_device!(0 => {
///     assert_eq!(current_device(), DeviceId::Cuda(0));
///     Tensor::<Here>::ones([2])?
/// })?;
/// let _: Tensor<Cuda<0>> = t;
///
/// let rank = 0u32;
/// let scale = with_device!(dyn rank => |x: f32| (current_device(), x * 2.0));
/// assert_eq!(scale(1.5)?, (DeviceId::Cuda(0), 3.0));
///
/// assert!(with_device!(4096 => ()).is_err());
/// assert_eq!(current_device(), DeviceId::Cpu);
/// # Ok::<(), locus::Error>(())
/// ```
///
/// # Expansion
///
/// Before:
///
/// ```
/// # use locus::with_device;
/// # let n = locus::device_count()?;
/// # if n < 2 { eprintln!("skipped: needs 2 devices, found {n}"); return Ok(()); }
/// let y = with_device!(1 => { 2 + 1 })?;
/// # Ok::<(), locus::Error>(())
/// ```
///
/// After:
///
/// ```
/// # let n = locus::device_count()?;
/// # if n < 2 { eprintln!("skipped: needs 2 devices, found {n}"); return Ok(()); }
/// let y = {
///     #[allow(dead_code)]
///     type Here = ::locus::__private::Cuda<1>;
///     match ::locus::__private::enter(::locus::__private::static_id::<::locus::__private::Cuda<1>>()) {
///         ::core::result::Result::Ok(__locus_guard) => {
///             let __locus_value = { 2 + 1 };
///             ::core::mem::drop(__locus_guard);
///             ::core::result::Result::Ok(__locus_value)
///         }
///         ::core::result::Result::Err(__locus_error) => ::core::result::Result::Err(__locus_error),
///     }
/// }?;
/// # Ok::<(), locus::Error>(())
/// ```
#[proc_macro]
pub fn with_device(input: TokenStream) -> TokenStream {
    expand::macro_call(input.into()).into()
}

/// Implements `locus::ToDevice` for a struct generic over one placement `D: Device`:
/// `model.to::<Cuda<1>>()`, `model.to_dyn(id)` and `model.to_placement(p)` copy every
/// tensor to the new placement, as PyTorch's `module.to(device)` does, giving the same
/// struct typed for that placement.
///
/// Fields move by their type:
///
/// - `D` itself becomes the new placement;
/// - a type mentioning `D` (`Tensor<D, T>`, another `ToDevice` struct, `Vec`, `Option`,
///   `Box` or an array of them) moves with `ToDevice`;
/// - anything else is cloned.
///
/// Enums, structs without a device parameter and structs with two are compile errors.
///
/// ```
/// use locus::{Cpu, Cuda, Device, Tensor, ToDevice};
///
/// #[derive(ToDevice)]
/// struct Linear<D: Device> {
///     weight: Tensor<D>,
///     bias: Option<Tensor<D>>,
/// }
///
/// #[derive(ToDevice)]
/// struct Mlp<D: Device> {
///     layers: Vec<Linear<D>>,
///     name: String,
/// }
///
/// let layer = Linear::<Cpu> { weight: Tensor::ones([2, 2])?, bias: None };
/// let mlp = Mlp { layers: vec![layer], name: "mlp".into() };
/// let on_gpu: Mlp<Cuda<0>> = mlp.to::<Cuda<0>>()?;
/// assert_eq!(on_gpu.layers[0].weight.device().to_string(), "cuda:0");
/// assert_eq!(on_gpu.name, "mlp");
/// # Ok::<(), locus::Error>(())
/// ```
///
/// # Expansion
///
/// Before:
///
/// ```
/// # use locus::{Device, Tensor, ToDevice};
/// #[derive(ToDevice)]
/// struct Linear<D: Device> {
///     weight: Tensor<D>,
///     name: String,
/// }
/// ```
///
/// After:
///
/// ```
/// # use locus::{Device, Tensor};
/// # struct Linear<D: Device> {
/// #     weight: Tensor<D>,
/// #     name: String,
/// # }
/// const _: () = {
///     #[automatically_derived]
///     impl<D: Device> ::locus::__private::ToDevice for Linear<D> {
///         type On<__LocusE: ::locus::__private::Device> = Linear<__LocusE>;
///
///         fn to_placement<__LocusE: ::locus::__private::Device>(
///             &self,
///             __locus_placement: __LocusE,
///         ) -> ::locus::__private::Result<Self::On<__LocusE>> {
///             ::core::result::Result::Ok(Linear {
///                 weight: ::locus::__private::move_field::<Tensor<D>, _>(&self.weight, __locus_placement)?,
///                 name: ::core::clone::Clone::clone(&self.name),
///             })
///         }
///     }
/// };
/// ```
#[proc_macro_derive(ToDevice)]
pub fn derive_to_device(input: TokenStream) -> TokenStream {
    derive::to_device(input.into()).into()
}

/// Declares a CUDA C kernel as a typed Rust fn. KERNEL_DOCS
#[proc_macro_attribute]
pub fn kernel(args: TokenStream, item: TokenStream) -> TokenStream {
    kernel::attribute(args.into(), item.into()).into()
}
