//! Saving named tensors of any placement as a safetensors file.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use safetensors::tensor::{Metadata, TensorInfo};

use super::load::safetensors_dtype;
use super::{each, AnyTensor};
use crate::device::Device;
use crate::error::{Error, Result};

const OP: &str = "save_safetensors";

/// Saves `tensors` (name and tensor pairs, of any placement and element type) to `path`
/// in the safetensors format, readable by `safetensors.torch.load_file` and by
/// [`load_safetensors`](crate::load_safetensors). The file is written beside `path` and
/// renamed over it at the end, so a reader never sees half a file. Device tensors are
/// copied to the host one at a time. Two tensors of one name, or the name
/// `__metadata__`, are an `Err`.
///
/// Tensors of different placements go in as `Dyn` ones: `(name, t.into_dyn())`, or
/// [`AnyTensor::into_dyn`].
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{AnyTensor, Cpu, Cuda, Dyn, Tensor};
/// let path = std::env::temp_dir().join(format!("locus-doc-save-{}.safetensors", std::process::id()));
/// let w = Tensor::<Cuda<0>>::rand([3, 2], 7)?.into_dyn();
/// let steps = Tensor::<Cpu, i32>::full([1], 100)?.into_dyn();
/// locus::save_safetensors(&path, [("w", AnyTensor::from(&w)), ("steps", steps.into())])?;
/// let back = locus::load_safetensors::<Cpu>(&path)?;
/// assert_eq!(back.get::<f32>("w")?.to_vec()?, w.to_vec()?);
/// assert_eq!(back.get::<i32>("steps")?.item()?, 100);
/// assert!(locus::save_safetensors(&path, [("a", w.clone()), ("a", w)]).is_err());
/// # std::fs::remove_file(&path).ok();
/// # Ok::<(), locus::Error>(())
/// ```
pub fn save_safetensors<D, N, T>(path: impl AsRef<Path>, tensors: impl IntoIterator<Item = (N, T)>) -> Result<()>
where
    D: Device,
    N: AsRef<str>,
    T: Into<AnyTensor<D>>,
{
    let list = tensors.into_iter().map(|(n, t)| (n.as_ref().to_string(), t.into())).collect();
    save(path.as_ref(), list, &BTreeMap::new())
}

/// As [`save_safetensors`], with `metadata` in the file's `__metadata__` (string keys and
/// values, as `safetensors.torch.save_file(.., metadata=)` writes; readers get it from
/// `safe_open(..).metadata()` and [`Checkpoint::metadata`](crate::Checkpoint::metadata)).
///
/// ```
/// # extern crate locus_runtime as locus;
/// use std::collections::BTreeMap;
/// use locus::{Cuda, Tensor};
/// let path = std::env::temp_dir().join(format!("locus-doc-meta-{}.safetensors", std::process::id()));
/// let meta = BTreeMap::from([("format".to_string(), "pt".to_string()), ("step".into(), "1200".into())]);
/// locus::save_safetensors_with_metadata(&path, [("w", Tensor::<Cuda<0>>::ones([2])?)], &meta)?;
/// assert_eq!(locus::load_safetensors::<Cuda<0>>(&path)?.metadata(), &meta);
/// # std::fs::remove_file(&path).ok();
/// # Ok::<(), locus::Error>(())
/// ```
pub fn save_safetensors_with_metadata<D, N, T>(
    path: impl AsRef<Path>,
    tensors: impl IntoIterator<Item = (N, T)>,
    metadata: &BTreeMap<String, String>,
) -> Result<()>
where
    D: Device,
    N: AsRef<str>,
    T: Into<AnyTensor<D>>,
{
    let list = tensors.into_iter().map(|(n, t)| (n.as_ref().to_string(), t.into())).collect();
    save(path.as_ref(), list, metadata)
}

pub(super) fn save<D: Device>(
    path: &Path,
    mut list: Vec<(String, AnyTensor<D>)>,
    metadata: &BTreeMap<String, String>,
) -> Result<()> {
    let shown = path.display().to_string();
    let file_err = |reason: String| Error::Checkpoint { op: OP, path: shown.clone(), reason };
    let tensor_err = |tensor: &str, reason: &str| Error::CheckpointTensor {
        op: OP,
        path: shown.clone(),
        tensor: tensor.into(),
        reason: reason.into(),
    };
    // As the safetensors writers do: the widest elements first, then by name, so that
    // every tensor's data starts aligned for its type.
    list.sort_by(|(a, x), (b, y)| y.dtype().size().cmp(&x.dtype().size()).then(a.cmp(b)));
    for w in list.windows(2) {
        if w[0].0 == w[1].0 {
            return Err(tensor_err(&w[0].0, "is named twice; each tensor needs a name of its own"));
        }
    }
    let mut infos = Vec::with_capacity(list.len());
    let mut at = 0;
    for (name, t) in &list {
        if name == "__metadata__" {
            return Err(tensor_err(name, "has the name the format keeps for metadata; choose another"));
        }
        let bytes = t.numel() * t.dtype().size();
        let info = TensorInfo {
            dtype: safetensors_dtype(t.dtype()),
            shape: t.shape().to_vec(),
            data_offsets: (at, at + bytes),
        };
        infos.push((name.clone(), info));
        at += bytes;
    }
    let meta = (!metadata.is_empty()).then(|| metadata.iter().map(|(k, v)| (k.clone(), v.clone())).collect());
    let meta = Metadata::new(meta, infos).map_err(|e| file_err(format!("the header cannot be made: {e}")))?;
    let mut header =
        serde_json::to_string(&meta).map_err(|e| file_err(format!("the header cannot be made: {e}")))?.into_bytes();
    header.resize(header.len().next_multiple_of(8), b' ');

    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".locus-{}.tmp", std::process::id()));
    let tmp = std::path::PathBuf::from(tmp);
    let io = |what: &str, e: std::io::Error| {
        file_err(format!("cannot be written ({what}: {e}); check the directory and the free space"))
    };
    // Each write may fail (a full disk, or the fault plan's `write` point).
    let put = |out: &mut std::io::BufWriter<std::fs::File>, bytes: &[u8]| {
        crate::faults::io(crate::faults::Point::Write).and_then(|()| out.write_all(bytes)).map_err(|e| io("write", e))
    };
    let write = || -> Result<()> {
        let file = std::fs::File::create(&tmp).map_err(|e| io("create", e))?;
        let mut out = std::io::BufWriter::with_capacity(8 << 20, file);
        put(&mut out, &(header.len() as u64).to_le_bytes())?;
        put(&mut out, &header)?;
        for (_, t) in &list {
            each!(t, t => {
                let v = t.to_vec()?;
                put(&mut out, bytemuck::cast_slice(&v))?;
            });
        }
        out.flush().map_err(|e| io("write", e))?;
        drop(out);
        std::fs::rename(&tmp, path).map_err(|e| io("rename", e))
    };
    let written = write();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}
