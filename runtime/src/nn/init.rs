//! Initial values of parameters (PyTorch's `torch.nn.init`): uniform in a range, and
//! the ranges PyTorch's layers use by default. Every value comes from a seed, so a model
//! made twice with one seed is the same model.

use crate::device::Device;
use crate::element::Float;
use crate::error::Result;
use crate::tensor::Tensor;

/// Values uniform in `[lo, hi)` from `seed`.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::nn::init;
/// use locus::Cpu;
/// let t = init::uniform_on::<_, f32>(Cpu, [1000], -0.5, 0.5, 3)?;
/// assert!(t.to_vec()?.iter().all(|v| (-0.5..0.5).contains(v)));
/// # Ok::<(), locus::Error>(())
/// ```
pub fn uniform_on<D: Device, T: Float>(
    device: D,
    shape: impl AsRef<[usize]>,
    lo: f64,
    hi: f64,
    seed: u64,
) -> Result<Tensor<D, T>> {
    Tensor::<D, T>::rand_on(device, shape, seed)?.scaled(hi - lo)?.shifted(lo)
}

/// PyTorch's default for a layer reading `fan_in` inputs (`Linear`'s weight and bias,
/// Kaiming-uniform with `a = √5`): uniform in `±1/√fan_in` (0 for `fan_in = 0`).
pub fn fan_in_uniform_on<D: Device, T: Float>(
    device: D,
    shape: impl AsRef<[usize]>,
    fan_in: usize,
    seed: u64,
) -> Result<Tensor<D, T>> {
    let bound = if fan_in == 0 { 0.0 } else { 1.0 / (fan_in as f64).sqrt() };
    uniform_on(device, shape, -bound, bound, seed)
}

/// A second seed derived from `seed`, for the second tensor of a layer.
pub(crate) fn derive_seed(seed: u64, k: u64) -> u64 {
    seed ^ k.wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// Values normal with mean 0 and standard deviation `std`, from `seed`
/// ([`Tensor::randn_on`], made on the device).
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::nn::init;
/// use locus::Cpu;
/// let v = init::normal_on::<_, f32>(Cpu, [10_000], 2.0, 1)?.to_vec()?;
/// let mean = v.iter().sum::<f32>() / v.len() as f32;
/// let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f32>() / v.len() as f32;
/// assert!(mean.abs() < 0.1 && (var.sqrt() - 2.0).abs() < 0.1);
/// # Ok::<(), locus::Error>(())
/// ```
pub fn normal_on<D: Device, T: Float>(
    device: D,
    shape: impl AsRef<[usize]>,
    std: f64,
    seed: u64,
) -> Result<Tensor<D, T>> {
    Tensor::<D, T>::randn_on(device, shape, seed)?.scaled(std)
}
