//! Which tensors of a file a load keeps, and in which element type ([`LoadOptions`]): a
//! PyTorch checkpoint holds tensors a model may not want (`num_batches_tracked`, i64
//! buffers, dtypes locus does not have), and weights saved in one type may be wanted in
//! another. Conversions run on the host, on the mapped bytes, before the upload, with the
//! rules of [`Tensor::to_dtype`](crate::Tensor::to_dtype); one that would lose a value is
//! an error naming the tensor, never a silent wrap.

use std::fmt;
use std::path::Path;

use super::load::load;
use super::Checkpoint;
use crate::device::{Device, StaticDevice};
use crate::element::{with_dtype, DType, Element};
use crate::error::Result;

/// How to load a safetensors file: which tensors to skip and which element types to
/// convert. [`LoadOptions::new`] keeps every tensor as it is, as
/// [`load_safetensors`](crate::load_safetensors) does.
///
/// A PyTorch checkpoint with `f32` weights, an `i64` `num_batches_tracked` and `i64`
/// class counts, loaded without the counter and with the other `i64` tensors as `i32`:
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{Cpu, Cuda, DType, LoadOptions, Tensor};
/// let path = std::env::temp_dir().join(format!("locus-doc-options-{}.safetensors", std::process::id()));
/// locus::save_safetensors(&path, [
///     ("bn.weight", locus::AnyTensor::from(Tensor::<Cpu>::ones([2])?)),
///     ("bn.num_batches_tracked", Tensor::<Cpu, i64>::from_vec(vec![7], [])?.into()),
///     ("counts", Tensor::<Cpu, i64>::from_vec(vec![3, 4], [2])?.into()),
/// ])?;
/// let ck = LoadOptions::new()
///     .skip(|name, _| name.ends_with("num_batches_tracked"))
///     .convert(DType::I64, DType::I32)
///     .load::<Cuda<0>>(&path)?;
/// assert_eq!(ck.names().collect::<Vec<_>>(), vec!["bn.weight", "counts"]);
/// assert_eq!(ck.get::<i32>("counts")?.to_vec()?, vec![3, 4]);
///
/// // A value that does not fit is an error naming the tensor.
/// locus::save_safetensors(&path, [("big", Tensor::<Cpu, i64>::from_vec(vec![1 << 40], [1])?)])?;
/// let e = LoadOptions::new().convert(DType::I64, DType::I32).load::<Cpu>(&path).unwrap_err();
/// assert!(e.to_string().contains("big"));
/// # std::fs::remove_file(&path).ok();
/// # Ok::<(), locus::Error>(())
/// ```
pub struct LoadOptions<'a> {
    skip: Option<SkipFn<'a>>,
    skip_unsupported: bool,
    convert: Vec<(DType, DType)>,
}

/// The user's choice of tensors to leave out: `(name, dtype in the file) -> skip?`.
type SkipFn<'a> = Box<dyn Fn(&str, DType) -> bool + 'a>;

impl Default for LoadOptions<'_> {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for LoadOptions<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadOptions")
            .field("skip", &self.skip.as_ref().map(|_| "<fn>"))
            .field("skip_unsupported", &self.skip_unsupported)
            .field("convert", &self.convert)
            .finish()
    }
}

impl<'a> LoadOptions<'a> {
    /// Every tensor, each in its own element type.
    pub fn new() -> Self {
        Self { skip: None, skip_unsupported: false, convert: Vec::new() }
    }

    /// Leaves out every tensor for which `skip(name, dtype)` is true (`dtype` as the file
    /// holds it, before any [`convert`](Self::convert)). Its bytes are never read. A
    /// second call replaces the first.
    pub fn skip(mut self, skip: impl Fn(&str, DType) -> bool + 'a) -> Self {
        self.skip = Some(Box::new(skip));
        self
    }

    /// Leaves out every tensor of a dtype locus does not have (`BOOL`, `I8`, `I16`, `U16`,
    /// the 8-bit floats, …) instead of failing on it.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// let path = std::env::temp_dir().join(format!("locus-doc-unsupported-{}.safetensors", std::process::id()));
    /// let header = br#"{"flags":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}}"#;
    /// let mut file = (header.len() as u64).to_le_bytes().to_vec();
    /// file.extend_from_slice(header);
    /// file.extend_from_slice(&[1, 0]);
    /// std::fs::write(&path, file).unwrap();
    /// assert!(locus::load_safetensors::<locus::Cpu>(&path).is_err());
    /// let ck = locus::LoadOptions::new().skip_unsupported().load::<locus::Cpu>(&path)?;
    /// assert!(ck.is_empty());
    /// # std::fs::remove_file(&path).ok();
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn skip_unsupported(mut self) -> Self {
        self.skip_unsupported = true;
        self
    }

    /// Loads tensors stored as `from` as `to`, converted as
    /// [`Tensor::to_dtype`](crate::Tensor::to_dtype) converts (Rust's `as`; a 16-bit float
    /// rounded once), except that a value the conversion would lose is an
    /// [`Error::CheckpointTensor`](crate::Error::CheckpointTensor) naming the tensor and
    /// the element: to an integer type every value must come back unchanged (an i64 past
    /// i32's range, a float with a fraction or NaN, is refused), to a float type it is
    /// rounded but no finite value may become infinite. A later rule for the same `from`
    /// replaces an earlier one.
    pub fn convert(mut self, from: DType, to: DType) -> Self {
        self.convert.retain(|&(f, _)| f != from);
        self.convert.push((from, to));
        self
    }

    /// Loads the file at `path` onto the static placement `D`.
    pub fn load<D: StaticDevice>(&self, path: impl AsRef<Path>) -> Result<Checkpoint<D>> {
        load(D::resolve()?, path.as_ref(), &mut |_, _| {}, self)
    }

    /// Loads the file at `path` onto `placement`.
    pub fn load_on<D: Device>(&self, placement: D, path: impl AsRef<Path>) -> Result<Checkpoint<D>> {
        load(placement, path.as_ref(), &mut |_, _| {}, self)
    }

    /// Loads the file at `path` onto `placement`, calling `progress(bytes_done,
    /// bytes_total)` as [`load_safetensors_with`](crate::load_safetensors_with) does (the
    /// bytes of the file's kept tensors).
    pub fn load_with<D: Device>(
        &self,
        placement: D,
        path: impl AsRef<Path>,
        mut progress: impl FnMut(usize, usize),
    ) -> Result<Checkpoint<D>> {
        load(placement, path.as_ref(), &mut progress, self)
    }

    /// Whether the tensor `name` of `dtype` (`None`: a dtype locus does not have) is left out.
    pub(super) fn skips(&self, name: &str, dtype: Option<DType>) -> bool {
        match dtype {
            None => self.skip_unsupported,
            Some(d) => self.skip.as_ref().is_some_and(|f| f(name, d)),
        }
    }

    /// The element type a tensor stored as `from` is loaded as.
    pub(super) fn target(&self, from: DType) -> DType {
        self.convert.iter().find(|&&(f, _)| f == from).map_or(from, |&(_, t)| t)
    }
}

/// `bytes` (elements of `from`, in the file's little-endian order, not necessarily
/// aligned) as elements of `to`; `Err` with a sentence naming the first element the
/// conversion would lose.
pub(super) fn convert(from: DType, to: DType, bytes: &[u8]) -> std::result::Result<Vec<u8>, String> {
    with_dtype!(from, F => with_dtype!(to, U => convert_typed::<F, U>(bytes)))
}

fn convert_typed<F: Element, U: Element>(bytes: &[u8]) -> std::result::Result<Vec<u8>, String> {
    let (fs, us) = (std::mem::size_of::<F>(), std::mem::size_of::<U>());
    let mut out = Vec::with_capacity(bytes.len() / fs * us);
    for (i, c) in bytes.chunks_exact(fs).enumerate() {
        let v: F = bytemuck::pod_read_unaligned(c);
        let u = U::from_scalar(v.to_scalar());
        let lost = if U::DTYPE.is_float() {
            v.to_f64().is_finite() && !u.to_f64().is_finite()
        } else {
            // NaN != NaN: a NaN, which becomes 0, is lost too.
            F::from_scalar(u.to_scalar()) != v
        };
        if lost {
            return Err(format!(
                "cannot be converted from {} to {} without loss: element {i} is {v:?}, which would become {u:?}",
                F::DTYPE,
                U::DTYPE
            ));
        }
        out.extend_from_slice(bytemuck::bytes_of(&u));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes<T: Element>(v: &[T]) -> Vec<u8> {
        bytemuck::cast_slice(v).to_vec()
    }

    #[test]
    fn conversions_keep_values_or_refuse() {
        let fits = [i32::MIN as i64, -1, 0, i32::MAX as i64];
        assert_eq!(convert(DType::I64, DType::I32, &bytes(&fits)), Ok(bytes(&[i32::MIN, -1, 0, i32::MAX])));
        let e = convert(DType::I64, DType::I32, &bytes(&[1i64, i32::MAX as i64 + 1])).unwrap_err();
        assert!(e.contains("element 1 is 2147483648"), "{e}");
        assert!(convert(DType::F32, DType::I64, &bytes(&[1.5f32])).is_err());
        assert!(convert(DType::F32, DType::I32, &bytes(&[f32::NAN])).is_err());
        assert!(convert(DType::F32, DType::F16, &bytes(&[1e6f32])).is_err());
        // Rounding into a float type is no loss; infinities and NaN stay what they are.
        let r = convert(DType::I64, DType::F32, &bytes(&[(1i64 << 40) + 1, i64::MAX])).unwrap();
        assert_eq!(r, bytes(&[(1u64 << 40) as f32, 9.223372e18f32]));
        assert!(convert(DType::F32, DType::BF16, &bytes(&[f32::INFINITY, f32::NAN])).is_ok());
        // Unaligned input reads as well as aligned.
        let mut odd = vec![0u8];
        odd.extend(bytes(&[5i64, -6]));
        assert_eq!(convert(DType::I64, DType::I32, &odd[1..]), Ok(bytes(&[5i32, -6])));
    }
}
