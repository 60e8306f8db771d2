//! Checkpoints in the safetensors format: named tensors loaded from a file straight to a
//! placement, and saved from any placement.
//!
//! Loading maps the file (memmap2), checks the header with the `safetensors` crate and
//! every tensor against what locus has (its dtype, its shape against its bytes), then
//! moves the data in batches of whole tensors: to a CUDA device through one staged pass
//! per batch (the copy threads copy the mapped pages into pinned stages while the DMAs
//! of earlier stages run), so a large checkpoint loads at host-memory and PCIe speed.
//! Anything wrong is an [`Error::Checkpoint`] naming the file or an
//! [`Error::CheckpointTensor`] naming the tensor.
//!
//! `load.rs` reads (and explains bad files), `options.rs` says which tensors a load
//! keeps and converts ([`LoadOptions`]), `save.rs` writes.

mod load;
mod options;
mod save;

use std::collections::BTreeMap;

use crate::device::{Device, DeviceId};
use crate::element::{DType, Element};
use crate::error::{Error, Result};
use crate::tensor::Tensor;

pub use load::{load_safetensors, load_safetensors_on, load_safetensors_with};
pub use options::LoadOptions;
pub use save::{save_safetensors, save_safetensors_with_metadata};

/// A tensor of any element type locus has, on placement `D`: what a checkpoint holds.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{AnyTensor, Cpu, DType, Tensor};
/// let t: AnyTensor<Cpu> = Tensor::<Cpu, i32>::arange(0, 3, 1)?.into();
/// assert_eq!((t.dtype(), t.shape()), (DType::I32, &[3][..]));
/// let back: Tensor<Cpu, i32> = t.clone().try_into_typed().unwrap();
/// assert_eq!(back.to_vec()?, vec![0, 1, 2]);
/// assert!(t.try_into_typed::<f32>().is_err());
/// # Ok::<(), locus::Error>(())
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum AnyTensor<D: Device> {
    /// `f32` elements.
    F32(Tensor<D, f32>),
    /// `f64` elements.
    F64(Tensor<D, f64>),
    /// `i32` elements.
    I32(Tensor<D, i32>),
    /// `i64` elements.
    I64(Tensor<D, i64>),
    /// `u8` elements.
    U8(Tensor<D, u8>),
    /// `bf16` elements.
    BF16(Tensor<D, half::bf16>),
    /// `f16` elements.
    F16(Tensor<D, half::f16>),
}

macro_rules! each {
    ($self:expr, $t:ident => $e:expr) => {
        match $self {
            AnyTensor::F32($t) => $e,
            AnyTensor::F64($t) => $e,
            AnyTensor::I32($t) => $e,
            AnyTensor::I64($t) => $e,
            AnyTensor::U8($t) => $e,
            AnyTensor::BF16($t) => $e,
            AnyTensor::F16($t) => $e,
        }
    };
}
pub(crate) use each;

impl<D: Device> AnyTensor<D> {
    /// The element type.
    pub fn dtype(&self) -> DType {
        match self {
            AnyTensor::F32(_) => DType::F32,
            AnyTensor::F64(_) => DType::F64,
            AnyTensor::I32(_) => DType::I32,
            AnyTensor::I64(_) => DType::I64,
            AnyTensor::U8(_) => DType::U8,
            AnyTensor::BF16(_) => DType::BF16,
            AnyTensor::F16(_) => DType::F16,
        }
    }

    /// The dims, outermost first.
    pub fn shape(&self) -> &[usize] {
        each!(self, t => t.shape())
    }

    /// The number of elements.
    pub fn numel(&self) -> usize {
        each!(self, t => t.numel())
    }

    /// Where the data lives.
    pub fn device(&self) -> DeviceId {
        each!(self, t => t.device())
    }

    /// The tensor typed with `T`, if `T` is its element type; else itself, unchanged.
    pub fn try_into_typed<T: Element>(self) -> std::result::Result<Tensor<D, T>, Self> {
        match self {
            AnyTensor::F32(t) => t.retyped().map_err(AnyTensor::F32),
            AnyTensor::F64(t) => t.retyped().map_err(AnyTensor::F64),
            AnyTensor::I32(t) => t.retyped().map_err(AnyTensor::I32),
            AnyTensor::I64(t) => t.retyped().map_err(AnyTensor::I64),
            AnyTensor::U8(t) => t.retyped().map_err(AnyTensor::U8),
            AnyTensor::BF16(t) => t.retyped().map_err(AnyTensor::BF16),
            AnyTensor::F16(t) => t.retyped().map_err(AnyTensor::F16),
        }
    }

    /// The same tensor with its placement checked at run time (no copy).
    pub fn into_dyn(self) -> AnyTensor<crate::device::Dyn> {
        match self {
            AnyTensor::F32(t) => AnyTensor::F32(t.into_dyn()),
            AnyTensor::F64(t) => AnyTensor::F64(t.into_dyn()),
            AnyTensor::I32(t) => AnyTensor::I32(t.into_dyn()),
            AnyTensor::I64(t) => AnyTensor::I64(t.into_dyn()),
            AnyTensor::U8(t) => AnyTensor::U8(t.into_dyn()),
            AnyTensor::BF16(t) => AnyTensor::BF16(t.into_dyn()),
            AnyTensor::F16(t) => AnyTensor::F16(t.into_dyn()),
        }
    }
}

/// Any tensor as an [`AnyTensor`] of its element type (no copy).
impl<D: Device, T: Element> From<Tensor<D, T>> for AnyTensor<D> {
    fn from(t: Tensor<D, T>) -> Self {
        // `T::DTYPE` names `T`, so each arm relabels a tensor with its own element type.
        match T::DTYPE {
            DType::F32 => AnyTensor::F32(t.relabeled()),
            DType::F64 => AnyTensor::F64(t.relabeled()),
            DType::I32 => AnyTensor::I32(t.relabeled()),
            DType::I64 => AnyTensor::I64(t.relabeled()),
            DType::U8 => AnyTensor::U8(t.relabeled()),
            DType::BF16 => AnyTensor::BF16(t.relabeled()),
            DType::F16 => AnyTensor::F16(t.relabeled()),
        }
    }
}

/// A borrowed tensor as an [`AnyTensor`] sharing its memory (no copy).
impl<D: Device, T: Element> From<&Tensor<D, T>> for AnyTensor<D> {
    fn from(t: &Tensor<D, T>) -> Self {
        t.clone().into()
    }
}

/// The named tensors of a safetensors file, on placement `D`, with the file's metadata.
/// [`Checkpoint::get`] hands a tensor out typed, and is an `Err` naming the tensor and its
/// real dtype when asked for another.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{Checkpoint, Cuda, Tensor};
/// let path = std::env::temp_dir().join(format!("locus-doc-checkpoint-{}.safetensors", std::process::id()));
/// let w = Tensor::<Cuda<0>>::rand([2, 3], 1)?;
/// locus::save_safetensors(&path, [("w", w.clone())])?;
/// let ck: Checkpoint<Cuda<0>> = locus::load_safetensors(&path)?;
/// assert_eq!(ck.names().collect::<Vec<_>>(), vec!["w"]);
/// assert_eq!(ck.get::<f32>("w")?.to_vec()?, w.to_vec()?);
/// assert!(ck.get::<i32>("w").is_err()); // it holds f32
/// assert!(ck.get::<f32>("b").is_err()); // no such tensor
/// # std::fs::remove_file(&path).ok();
/// # Ok::<(), locus::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Checkpoint<D: Device> {
    path: String,
    tensors: BTreeMap<String, AnyTensor<D>>,
    metadata: BTreeMap<String, String>,
}

impl<D: Device> Checkpoint<D> {
    /// The tensor `name` typed with `T` (no copy: the checkpoint keeps its handle too).
    /// `Err` when there is no such tensor, or when it holds another element type.
    pub fn get<T: Element>(&self, name: &str) -> Result<Tensor<D, T>> {
        let t = self.tensors.get(name).ok_or_else(|| self.missing("get", name))?;
        self.typed("get", name, t.clone())
    }

    /// Takes the tensor `name` out of the checkpoint, typed with `T`. On `Err` (no such
    /// tensor, another element type) the checkpoint is unchanged.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// let path = std::env::temp_dir().join(format!("locus-doc-take-{}.safetensors", std::process::id()));
    /// locus::save_safetensors(&path, [("n", Tensor::<Cpu, u8>::ones([2])?)])?;
    /// let mut ck = locus::load_safetensors::<Cpu>(&path)?;
    /// assert!(ck.take::<f64>("n").is_err());
    /// assert_eq!(ck.take::<u8>("n")?.to_vec()?, vec![1, 1]);
    /// assert!(ck.is_empty());
    /// # std::fs::remove_file(&path).ok();
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn take<T: Element>(&mut self, name: &str) -> Result<Tensor<D, T>> {
        let t = self.tensors.remove(name).ok_or_else(|| self.missing("take", name))?;
        match t.try_into_typed::<T>() {
            Ok(t) => Ok(t),
            Err(t) => {
                let e = self.mismatch("take", name, t.dtype(), T::DTYPE);
                self.tensors.insert(name.to_string(), t);
                Err(e)
            }
        }
    }

    /// The tensor `name` as it is stored, of whatever element type.
    pub fn get_any(&self, name: &str) -> Option<&AnyTensor<D>> {
        self.tensors.get(name)
    }

    /// The element type of tensor `name`.
    pub fn dtype(&self, name: &str) -> Option<DType> {
        self.tensors.get(name).map(AnyTensor::dtype)
    }

    /// The tensors' names, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }

    /// The tensors by name, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &AnyTensor<D>)> {
        self.tensors.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// How many tensors there are.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    /// The file's `__metadata__` (free-form strings, e.g. `format: pt`).
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        &self.metadata
    }

    /// The tensors by name.
    pub fn into_map(self) -> BTreeMap<String, AnyTensor<D>> {
        self.tensors
    }

    /// Saves every tensor (and the metadata) to `path`, as [`save_safetensors`].
    pub fn save(&self, path: impl AsRef<std::path::Path>) -> Result<()> {
        save::save(path.as_ref(), self.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(), &self.metadata)
    }

    fn typed<T: Element>(&self, op: &'static str, name: &str, t: AnyTensor<D>) -> Result<Tensor<D, T>> {
        t.try_into_typed::<T>().map_err(|t| self.mismatch(op, name, t.dtype(), T::DTYPE))
    }

    fn mismatch(&self, op: &'static str, name: &str, has: DType, asked: DType) -> Error {
        Error::CheckpointTensor {
            op,
            path: self.path.clone(),
            tensor: name.into(),
            reason: format!("holds {has}, not {asked}; ask for it as {op}::<{has}>(\"{name}\")"),
        }
    }

    fn missing(&self, op: &'static str, name: &str) -> Error {
        let mut known: Vec<&str> = self.names().take(8).collect();
        if self.len() > known.len() {
            known.push("…");
        }
        Error::CheckpointTensor {
            op,
            path: self.path.clone(),
            tensor: name.into(),
            reason: format!("is not in the checkpoint; it holds {} tensors: {}", self.len(), known.join(", ")),
        }
    }
}
