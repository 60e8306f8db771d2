//! Tensors made from nothing: `fill`, `arange`, `rand` and `randn` (init.cu).

use crate::backend::host::kernels::GRAIN;
use crate::backend::workers::split_mut;
use crate::backend::{normal, normal_seed, rand_bits, Dist};
use crate::element::{Element, Float};
use crate::error::Result;

/// Every element of `out` set to `value`.
pub(in crate::backend) fn fill<T: Element>(out: &mut [T], value: T) -> Result<()> {
    split_mut(out, 1, GRAIN, &|_, o| {
        o.fill(value);
        Ok(())
    })
}

pub(in crate::backend) fn arange<T: Element>(out: &mut [T], start: f64, step: f64) -> Result<()> {
    split_mut(out, 1, GRAIN, &|at, o| {
        for (i, o) in o.iter_mut().enumerate() {
            *o = T::from_f64(start + (at + i) as f64 * step);
        }
        Ok(())
    })
}

/// Samples of `dist`: element i depends on `seed` and i alone, whatever the split.
pub(in crate::backend) fn rand<T: Float>(out: &mut [T], seed: u64, dist: Dist) -> Result<()> {
    split_mut(out, 1, GRAIN, &|at, o| {
        match dist {
            Dist::Uniform => o.iter_mut().enumerate().for_each(|(i, o)| {
                *o = T::from_bits_uniform(rand_bits(seed, (at + i) as u64));
            }),
            Dist::Normal => {
                let seed = normal_seed(seed);
                o.iter_mut().enumerate().for_each(|(i, o)| *o = T::from_f64(normal(seed, (at + i) as u64)));
            }
        }
        Ok(())
    })
}
