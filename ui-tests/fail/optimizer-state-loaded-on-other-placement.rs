// Optimizer state loads onto the optimizer's own placement: a checkpoint loaded to the
// host cannot become the moments of a `Cuda<0>` optimizer. Load it with
// `load_safetensors::<Cuda<0>>`.
use locus::optim::AdamW;
use locus::{Cpu, Cuda};

fn main() -> locus::Result<()> {
    let mut opt = AdamW::<Cuda<0>>::new(1e-3);
    opt.load_state(&locus::load_safetensors::<Cpu>("adam.safetensors")?)?;
    Ok(())
}
