//! `relu(x @ w)`: the module of the DataParallel rows of the GPU bench and the host bench
//! (the PyTorch baseline computes the same product, `x @ w`, not `nn.Linear`'s `x @ w.T`).

use locus::parallel::Module;
use locus::{Device, Tensor, ToDevice};

#[derive(ToDevice)]
pub(crate) struct Layer<D: Device> {
    pub(crate) w: Tensor<D>,
}

impl<D: Device> Module<D> for Layer<D> {
    fn forward(&self, x: &Tensor<D>) -> locus::Result<Tensor<D>> {
        x.matmul(&self.w)?.relu()
    }
}
