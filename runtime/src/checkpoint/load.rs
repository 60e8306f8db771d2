//! Loading a safetensors file to a placement, and saying what is wrong with a bad one.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fs::File;
use std::path::Path;

use safetensors::tensor::{Metadata, TensorInfo};
use safetensors::{Dtype, SafeTensorError, SafeTensors};

use super::options::{convert, LoadOptions};
use super::{AnyTensor, Checkpoint};
use crate::backend::{self, Buffer};
use crate::device::{Device, StaticDevice};
use crate::element::DType;
use crate::error::{Error, Result};
use crate::shape::Shape;
use crate::tensor::Tensor;

/// Tensors are moved in batches of at least this many bytes (whole tensors): large
/// enough that a batch's setup costs nothing, small enough for a progress bar to move.
const BATCH: usize = 256 << 20;

/// Loads every tensor of the safetensors file at `path` onto the static placement `D`.
/// See [`load_safetensors_with`].
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{Cpu, Cuda, Tensor};
/// let path = std::env::temp_dir().join(format!("locus-doc-load-{}.safetensors", std::process::id()));
/// locus::save_safetensors(&path, [("x", Tensor::<Cpu, f64>::full([2], 0.5)?)])?;
/// let ck = locus::load_safetensors::<Cuda<0>>(&path)?;
/// assert_eq!(ck.get::<f64>("x")?.to_vec()?, vec![0.5, 0.5]);
/// # std::fs::remove_file(&path).ok();
/// # Ok::<(), locus::Error>(())
/// ```
pub fn load_safetensors<D: StaticDevice>(path: impl AsRef<Path>) -> Result<Checkpoint<D>> {
    load_safetensors_with(D::resolve()?, path, |_, _| {})
}

/// Loads every tensor of the safetensors file at `path` onto `placement` (a [`Dyn`]
/// one chosen at run time, say). See [`load_safetensors_with`].
///
/// [`Dyn`]: crate::Dyn
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{Dyn, Pinned, Tensor};
/// let path = std::env::temp_dir().join(format!("locus-doc-load-on-{}.safetensors", std::process::id()));
/// locus::save_safetensors(&path, [("x", Tensor::<Pinned, i32>::arange(0, 3, 1)?)])?;
/// let ck = locus::load_safetensors_on(Dyn::new("cuda:0".parse()?), &path)?;
/// assert_eq!(ck.get::<i32>("x")?.device().to_string(), "cuda:0");
/// # std::fs::remove_file(&path).ok();
/// # Ok::<(), locus::Error>(())
/// ```
pub fn load_safetensors_on<D: Device>(placement: D, path: impl AsRef<Path>) -> Result<Checkpoint<D>> {
    load_safetensors_with(placement, path, |_, _| {})
}

/// Loads every tensor of the safetensors file at `path` onto `placement`, calling
/// `progress(bytes_done, bytes_total)` as the tensor data moves (after each batch of
/// whole tensors, about 256 MiB).
///
/// The file is memory-mapped, not read: its pages are copied once, by the copy threads,
/// into pinned stages whose DMAs to the device overlap the next copies (to a host
/// placement, straight into the tensors). The tensors are queued on the current stream
/// of the device, as any op's output; the file may be changed or removed once this
/// returns. Every tensor is checked before any data moves: a truncated file, a header
/// that does not parse, a dtype locus does not have (it has f32, f64, i32, i64, u8, bf16
/// and f16), a shape that does not match its bytes are `Err`s that name the tensor where
/// there is one to name. The file must not be truncated or written by another process
/// while it loads (as with any memory-mapped file). [`LoadOptions`] skips or converts
/// tensors on the way.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{Cpu, Tensor};
/// let path = std::env::temp_dir().join(format!("locus-doc-load-with-{}.safetensors", std::process::id()));
/// locus::save_safetensors(&path, [("a", Tensor::<Cpu>::ones([4])?), ("b", Tensor::<Cpu>::zeros([4])?)])?;
/// let mut seen = Vec::new();
/// let ck = locus::load_safetensors_with(Cpu, &path, |done, total| seen.push((done, total)))?;
/// assert_eq!(ck.len(), 2);
/// assert_eq!(seen.last(), Some(&(32, 32)));
/// # std::fs::remove_file(&path).ok();
/// # Ok::<(), locus::Error>(())
/// ```
pub fn load_safetensors_with<D: Device>(
    placement: D,
    path: impl AsRef<Path>,
    mut progress: impl FnMut(usize, usize),
) -> Result<Checkpoint<D>> {
    load(placement, path.as_ref(), &mut progress, &LoadOptions::new())
}

/// Every load: the tensors of the file at `path` that `options` keeps, converted as it
/// says, onto `placement`.
pub(super) fn load<D: Device>(
    placement: D,
    path: &Path,
    progress: &mut dyn FnMut(usize, usize),
    options: &LoadOptions<'_>,
) -> Result<Checkpoint<D>> {
    const OP: &str = "load_safetensors";
    let shown = path.display().to_string();
    let file_err = |reason: String| Error::Checkpoint { op: OP, path: shown.clone(), reason };
    let device = placement.id();
    let backend = backend::for_device(device)?;
    let file = crate::faults::io(crate::faults::Point::Read)
        .and_then(|()| File::open(path))
        .map_err(|e| file_err(format!("cannot be opened: {e}")))?;
    // SAFETY: the map is read while this function runs and dropped before it returns.
    // Another process truncating or writing the file meanwhile is the documented
    // exception every memory-mapped reader has (a SIGBUS, or torn data).
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| file_err(format!("cannot be mapped: {e}")))?;
    #[cfg(unix)]
    let _ = map.advise(memmap2::Advice::WillNeed); // read ahead where the page cache is cold

    let (header, meta) = SafeTensors::read_metadata(&map).map_err(|e| explain(&shown, &map, e))?;
    let data = &map[8 + header..];
    let entries = entries(&shown, &meta, options)?;
    let metadata: BTreeMap<String, String> =
        meta.metadata().iter().flatten().map(|(k, v)| (k.clone(), v.clone())).collect();

    let total = entries.iter().map(Entry::bytes).sum();
    let mut tensors = BTreeMap::new();
    let mut done = 0;
    progress(0, total);
    let mut rest = &entries[..];
    while !rest.is_empty() {
        // Whole tensors until the batch holds `BATCH` bytes (at least one tensor).
        let mut bytes = 0;
        let take = rest
            .iter()
            .take_while(|e| {
                let before = bytes;
                bytes += e.bytes();
                before < BATCH
            })
            .count();
        let (batch, next) = rest.split_at(take.max(1));
        rest = next;
        let parts = batch
            .iter()
            .map(|e| {
                let bytes = &data[e.start..e.start + e.bytes()];
                if e.from == e.dtype {
                    return Ok(Cow::Borrowed(bytes));
                }
                convert(e.from, e.dtype, bytes).map(Cow::Owned).map_err(|reason| Error::CheckpointTensor {
                    op: OP,
                    path: shown.clone(),
                    tensor: e.name.clone(),
                    reason,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let parts: Vec<&[u8]> = parts.iter().map(|p| &p[..]).collect();
        let bufs = backend.upload_parts(device, &parts)?;
        for (e, buf) in batch.iter().zip(bufs) {
            done += e.bytes();
            tensors.insert(e.name.clone(), tensor(placement, e, buf));
        }
        progress(done, total);
    }
    Ok(Checkpoint { path: shown, tensors, metadata })
}

/// One tensor of the file, checked: where its bytes start in the data, its type in the
/// file and the type it is loaded as, its shape.
struct Entry {
    name: String,
    start: usize,
    from: DType,
    dtype: DType,
    shape: Shape,
}

impl Entry {
    /// Its bytes in the file.
    fn bytes(&self) -> usize {
        self.shape.numel() * self.from.size()
    }
}

fn tensor<D: Device>(placement: D, e: &Entry, buf: Buffer) -> AnyTensor<D> {
    let shape = e.shape.clone();
    match e.dtype {
        DType::F32 => AnyTensor::F32(Tensor::from_buffer(placement, buf, shape)),
        DType::F64 => AnyTensor::F64(Tensor::from_buffer(placement, buf, shape)),
        DType::I32 => AnyTensor::I32(Tensor::from_buffer(placement, buf, shape)),
        DType::I64 => AnyTensor::I64(Tensor::from_buffer(placement, buf, shape)),
        DType::U8 => AnyTensor::U8(Tensor::from_buffer(placement, buf, shape)),
        DType::BF16 => AnyTensor::BF16(Tensor::from_buffer(placement, buf, shape)),
        DType::F16 => AnyTensor::F16(Tensor::from_buffer(placement, buf, shape)),
    }
}

/// The locus element type of a safetensors dtype, if locus has it.
pub(super) fn dtype_of(d: Dtype) -> Option<DType> {
    match d {
        Dtype::F32 => Some(DType::F32),
        Dtype::F64 => Some(DType::F64),
        Dtype::I32 => Some(DType::I32),
        Dtype::I64 => Some(DType::I64),
        Dtype::U8 => Some(DType::U8),
        Dtype::BF16 => Some(DType::BF16),
        Dtype::F16 => Some(DType::F16),
        _ => None,
    }
}

/// The safetensors dtype of a locus element type.
pub(super) fn safetensors_dtype(d: DType) -> Dtype {
    match d {
        DType::F32 => Dtype::F32,
        DType::F64 => Dtype::F64,
        DType::I32 => Dtype::I32,
        DType::I64 => Dtype::I64,
        DType::U8 => Dtype::U8,
        DType::BF16 => Dtype::BF16,
        DType::F16 => Dtype::F16,
    }
}

/// Every tensor of a header the crate has validated (offsets contiguous, sizes matching
/// shapes), in the order of its data, checked against what locus has.
fn entries(path: &str, meta: &Metadata, options: &LoadOptions<'_>) -> Result<Vec<Entry>> {
    let infos = meta.tensors();
    let mut out = Vec::with_capacity(infos.len());
    for name in meta.offset_keys() {
        let Some(info) = infos.get(&name) else { continue };
        let bad = |reason: String| Error::CheckpointTensor {
            op: "load_safetensors",
            path: path.into(),
            tensor: name.clone(),
            reason,
        };
        let from = dtype_of(info.dtype);
        if options.skips(&name, from) {
            continue;
        }
        let from = from.ok_or_else(|| {
            bad(format!(
                "has dtype {}, which locus does not have (it has f32, f64, i32, i64, u8, bf16, f16); convert the tensor \
                 to one of those when saving (in PyTorch, `.float()` for {}), or leave it out with \
                 `LoadOptions::skip_unsupported`",
                info.dtype, info.dtype
            ))
        })?;
        let dtype = options.target(from);
        let shape = Shape::new("load_safetensors", info.shape.clone(), from)
            .and_then(|s| Shape::new("load_safetensors", s.to_vec(), dtype))
            .map_err(|e| bad(format!("has shape {:?}, which locus cannot hold: {e}", info.shape)))?;
        out.push(Entry { name: name.clone(), start: info.data_offsets.0, from, dtype, shape });
    }
    Ok(out)
}

/// The crate's error for a file it refused, as a sentence that names the tensor at fault
/// where there is one (the crate names it for some errors only, so the header is read
/// again here to find it).
fn explain(path: &str, file: &[u8], e: SafeTensorError) -> Error {
    let file_err = |reason: String| Error::Checkpoint { op: "load_safetensors", path: path.into(), reason };
    let tensor_err = |tensor: &str, reason: String| Error::CheckpointTensor {
        op: "load_safetensors",
        path: path.into(),
        tensor: tensor.into(),
        reason,
    };
    let not_safetensors = "it is truncated, or not a safetensors file";
    let header_len = file.get(..8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])));
    match e {
        SafeTensorError::HeaderTooSmall => {
            return file_err(format!(
                "the file has {} bytes, fewer than the 8 of a header length: {not_safetensors}",
                file.len()
            ))
        }
        SafeTensorError::HeaderTooLarge | SafeTensorError::InvalidHeaderLength => {
            return file_err(format!(
                "the header length says {} bytes, but {} follow it (and a header holds at most 100 MB): \
                 {not_safetensors}",
                header_len.unwrap_or(0),
                file.len().saturating_sub(8)
            ))
        }
        SafeTensorError::InvalidHeader(u) => {
            return file_err(format!("the header is not UTF-8 ({u}): {not_safetensors}"))
        }
        SafeTensorError::InvalidHeaderDeserialization(j) | SafeTensorError::JsonError(j) => {
            return file_err(format!("the header is not a safetensors header ({j}): {not_safetensors}"))
        }
        _ => {}
    }
    // The header parsed as JSON: find the tensor at fault.
    let Some(n) = header_len.and_then(|n| usize::try_from(n).ok()) else { return file_err(e.to_string()) };
    let Some(text) = file.get(8..8 + n).and_then(|h| std::str::from_utf8(h).ok()) else {
        return file_err(e.to_string());
    };
    let Ok(serde_json::Value::Object(map)) = serde_json::from_str::<serde_json::Value>(text) else {
        return file_err(e.to_string());
    };
    let data_len = file.len() - 8 - n;
    let mut infos: Vec<(String, TensorInfo)> = Vec::new();
    for (name, v) in map {
        if name == "__metadata__" {
            continue;
        }
        match serde_json::from_value::<TensorInfo>(v) {
            Ok(info) => infos.push((name, info)),
            Err(j) => return tensor_err(&name, format!("has an entry that does not parse ({j}): {not_safetensors}")),
        }
    }
    infos.sort_by_key(|(_, i)| i.data_offsets);
    let mut at = 0;
    for (name, info) in &infos {
        let (s, end) = info.data_offsets;
        if s != at || end < s {
            return tensor_err(
                name,
                format!(
                    "has data_offsets [{s}, {end}], but the tensors before it end at byte {at}: the offsets overlap \
                     or leave a gap, so the header is corrupt"
                ),
            );
        }
        at = end;
        let elements = info.shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        let size = elements.and_then(|n| n.checked_mul(info.dtype.bitsize())).map(|b| b.div_ceil(8));
        match size {
            None => return tensor_err(name, format!("has shape {:?}, too large to exist", info.shape)),
            Some(size) if size != end - s => {
                return tensor_err(
                    name,
                    format!(
                        "has shape {:?} of {}, which needs {size} bytes, but its data_offsets [{s}, {end}] hold {}: \
                         the shape does not match its bytes",
                        info.shape,
                        info.dtype,
                        end - s
                    ),
                )
            }
            Some(_) => {}
        }
        if end > data_len {
            return tensor_err(
                name,
                format!(
                    "needs bytes {s}..{end} of the data, but the file holds only {data_len} bytes of data: the file is \
                     truncated (copied or downloaded only in part?)"
                ),
            );
        }
    }
    if at < data_len {
        return file_err(format!(
            "the file has {} bytes after the last tensor's data, which the header does not describe: it is corrupt",
            data_len - at
        ));
    }
    file_err(e.to_string())
}
