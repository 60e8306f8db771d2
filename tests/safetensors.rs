//! safetensors checkpoints: round trips of every element type through several
//! placements, the typed accessors, and every kind of bad file as an `Err` naming the
//! file or the tensor, on the selected backend.

use std::path::PathBuf;

use locus::{bf16, f16, AnyTensor, Checkpoint, Cpu, Cuda, DType, DeviceId, Dyn, Error, LoadOptions, Pinned, Tensor};

/// A file in the temp dir, removed when dropped.
struct TempFile(PathBuf);

impl TempFile {
    fn new(tag: &str) -> Self {
        TempFile(std::env::temp_dir().join(format!("locus-test-{tag}-{}.safetensors", std::process::id())))
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// One tensor of every element type, on `Cuda<0>` (odd sizes: no alignment luck).
/// cuda:1 where there are two devices, else cuda:0.
fn last_device() -> locus::Result<DeviceId> {
    Ok(DeviceId::Cuda(locus::device_count()?.clamp(1, 2) as u32 - 1))
}

fn every_dtype() -> locus::Result<Vec<(&'static str, AnyTensor<Dyn>)>> {
    Ok(vec![
        ("w.f32", Tensor::<Cuda<0>>::rand([3, 5], 1)?.into_dyn().into()),
        ("w.f64", Tensor::<Cuda<0>, f64>::rand([7], 2)?.into_dyn().into()),
        ("n.i32", (Tensor::<Cuda<0>, i32>::arange(-4, 5, 1)? * 1000)?.into_dyn().into()),
        ("n.i64", Tensor::<Cuda<0>, i64>::from_vec(vec![i64::MIN, -1, 1 << 40, i64::MAX, 0], [5])?.into_dyn().into()),
        ("mask.u8", Tensor::<Cpu, u8>::from_slice(&[0, 1, 255], [3, 1])?.into_dyn().into()),
        ("scalar", Tensor::<Pinned>::full([], 0.25)?.into_dyn().into()),
        ("h.bf16", Tensor::<Cuda<0>>::rand([5, 3], 3)?.to_dtype::<bf16>()?.into_dyn().into()),
        ("h.f16", (Tensor::<Cpu>::rand([9], 4)? - 0.5)?.to_dtype::<f16>()?.into_dyn().into()),
        ("empty", Tensor::<Dyn, i32>::zeros_on(Dyn::new(last_device()?), [0, 4])?.into()),
    ])
}

fn same_contents<A: locus::Device, B: locus::Device>(a: &AnyTensor<A>, b: &AnyTensor<B>) -> locus::Result<bool> {
    Ok(a.dtype() == b.dtype()
        && a.shape() == b.shape()
        && match (a, b) {
            (AnyTensor::F32(x), AnyTensor::F32(y)) => x.to_vec()? == y.to_vec()?,
            (AnyTensor::F64(x), AnyTensor::F64(y)) => x.to_vec()? == y.to_vec()?,
            (AnyTensor::I32(x), AnyTensor::I32(y)) => x.to_vec()? == y.to_vec()?,
            (AnyTensor::I64(x), AnyTensor::I64(y)) => x.to_vec()? == y.to_vec()?,
            (AnyTensor::U8(x), AnyTensor::U8(y)) => x.to_vec()? == y.to_vec()?,
            (AnyTensor::BF16(x), AnyTensor::BF16(y)) => x.to_vec()? == y.to_vec()?,
            (AnyTensor::F16(x), AnyTensor::F16(y)) => x.to_vec()? == y.to_vec()?,
            _ => false,
        })
}

fn check_round_trip<D: locus::Device>(
    ck: &Checkpoint<D>,
    want: &[(&str, AnyTensor<Dyn>)],
    on: DeviceId,
) -> locus::Result<()> {
    assert_eq!(ck.len(), want.len());
    for (name, t) in want {
        let got = ck.get_any(name).unwrap_or_else(|| panic!("`{name}` is missing"));
        assert_eq!(got.device(), on, "`{name}`");
        assert!(same_contents(got, t)?, "`{name}` differs after the round trip");
    }
    Ok(())
}

#[test]
fn every_dtype_round_trips_through_every_placement() -> locus::Result<()> {
    let f = TempFile::new("round-trip");
    let want = every_dtype()?;
    locus::save_safetensors(&f.0, want.clone())?;
    check_round_trip(&locus::load_safetensors::<Cuda<0>>(&f.0)?, &want, DeviceId::Cuda(0))?;
    if locus::testing::needs_devices_for(2, "the round trip through cuda:1")? {
        check_round_trip(&locus::load_safetensors::<Cuda<1>>(&f.0)?, &want, DeviceId::Cuda(1))?;
    }
    check_round_trip(&locus::load_safetensors::<Cpu>(&f.0)?, &want, DeviceId::Cpu)?;
    check_round_trip(&locus::load_safetensors::<Pinned>(&f.0)?, &want, DeviceId::Pinned)?;
    let dyn_ck = locus::load_safetensors_on(Dyn::new(last_device()?), &f.0)?;
    check_round_trip(&dyn_ck, &want, last_device()?)?;
    // Saved again from the device, the same file.
    let g = TempFile::new("round-trip-again");
    dyn_ck.save(&g.0)?;
    assert_eq!(std::fs::read(&f.0).unwrap(), std::fs::read(&g.0).unwrap());
    Ok(())
}

/// On the cuda backend each batch is one staged pass through the copy threads' pinned
/// stages; the host backend copies plainly, so there this checks the batching and bytes.
#[test]
fn a_large_checkpoint_loads_exactly_in_batches_of_whole_tensors() -> locus::Result<()> {
    // 3 tensors of 40 MiB and many small ones: batches of whole tensors, chunks that
    // straddle tensors.
    let f = TempFile::new("large");
    let big = |seed| Tensor::<Cpu>::rand([10 << 20], seed);
    let mut list: Vec<(String, AnyTensor<Cpu>)> =
        (0..3).map(|i| Ok((format!("big{i}"), big(i)?.into()))).collect::<locus::Result<_>>()?;
    for i in 0..50 {
        list.push((format!("small{i:02}"), Tensor::<Cpu, i32>::full([i + 1], i as i32)?.into()));
    }
    locus::save_safetensors(&f.0, list.clone())?;
    let mut steps = Vec::new();
    let ck = locus::load_safetensors_with(Cuda::<0>, &f.0, |done, total| steps.push((done, total)))?;
    let total = 3 * (40 << 20) + (1..=50).sum::<usize>() * 4;
    assert_eq!(steps.first(), Some(&(0, total)));
    assert_eq!(steps.last(), Some(&(total, total)));
    assert!(steps.windows(2).all(|w| w[0].0 < w[1].0), "progress only grows: {steps:?}");
    for (name, t) in &list {
        assert!(same_contents(ck.get_any(name).unwrap(), t)?, "`{name}` differs");
    }
    Ok(())
}

#[test]
fn typed_accessors_check_the_element_type_and_the_name() -> locus::Result<()> {
    let f = TempFile::new("typed");
    locus::save_safetensors(&f.0, [("w", Tensor::<Cpu>::ones([2])?)])?;
    let mut ck = locus::load_safetensors::<Cpu>(&f.0)?;
    assert_eq!(ck.dtype("w"), Some(DType::F32));
    let err = ck.get::<i32>("w").unwrap_err();
    assert!(matches!(&err, Error::CheckpointTensor { tensor, .. } if tensor == "w"), "{err}");
    assert!(err.to_string().contains("holds f32, not i32; ask for it as get::<f32>(\"w\")"), "{err}");
    let err = ck.take::<u8>("nope").unwrap_err();
    assert!(err.to_string().contains("tensor `nope` is not in the checkpoint; it holds 1 tensors: w"), "{err}");
    assert!(ck.take::<f64>("w").is_err());
    assert_eq!(ck.take::<f32>("w")?.to_vec()?, vec![1.0, 1.0]);
    assert!(ck.is_empty());
    Ok(())
}

/// A safetensors file from a header and data, as another writer might make it.
fn raw_file(tag: &str, header: &str, data: &[u8]) -> TempFile {
    let f = TempFile::new(tag);
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(data);
    std::fs::write(&f.0, bytes).unwrap();
    f
}

fn load_err(f: &TempFile) -> Error {
    locus::load_safetensors::<Cuda<0>>(&f.0).map(|_| ()).unwrap_err()
}

fn assert_tensor_err(err: &Error, name: &str, says: &str) {
    match err {
        Error::CheckpointTensor { op: "load_safetensors", tensor, reason, .. } if tensor == name => {
            assert!(reason.contains(says), "`{err}` does not say `{says}`")
        }
        other => panic!("expected an error naming tensor `{name}`, got: {other}"),
    }
}

#[test]
fn a_truncated_file_names_the_tensor_whose_data_is_missing() -> locus::Result<()> {
    let f = TempFile::new("whole");
    locus::save_safetensors(&f.0, [("a", Tensor::<Cpu>::ones([4])?), ("b", Tensor::<Cpu>::ones([1000])?)])?;
    let bytes = std::fs::read(&f.0).unwrap();
    std::fs::write(&f.0, &bytes[..bytes.len() - 100]).unwrap();
    let err = load_err(&f);
    assert_tensor_err(&err, "b", "the file is truncated");
    // Cut inside the header, and before the header's length.
    std::fs::write(&f.0, &bytes[..20]).unwrap();
    let err = load_err(&f);
    assert!(
        matches!(&err, Error::Checkpoint { reason, .. } if reason.contains("truncated, or not a safetensors file")),
        "{err}"
    );
    std::fs::write(&f.0, &bytes[..5]).unwrap();
    let err = load_err(&f);
    assert!(err.to_string().contains("fewer than the 8 of a header length"), "{err}");
    Ok(())
}

#[test]
fn a_bad_header_is_an_error_naming_the_file() {
    let f = raw_file("bad-json", "{\"a\": {\"dtype\": \"F32\", ", &[]);
    let err = load_err(&f);
    match &err {
        Error::Checkpoint { op: "load_safetensors", path, reason } => {
            assert!(path.ends_with(".safetensors") && reason.contains("not a safetensors header"), "{err}")
        }
        other => panic!("expected a file error, got {other}"),
    }
    let f = raw_file("bad-entry", r#"{"a": {"dtype": "F32", "shape": "two"}}"#, &[]);
    assert!(matches!(load_err(&f), Error::Checkpoint { .. } | Error::CheckpointTensor { .. }));
    let missing = TempFile::new("does-not-exist");
    let err = load_err(&missing);
    assert!(err.to_string().contains("cannot be opened"), "{err}");
}

#[test]
fn a_dtype_locus_does_not_have_is_named_with_its_tensor() {
    let header = r#"{"ok": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "short": {"dtype": "I16", "shape": [2], "data_offsets": [4, 8]}}"#;
    let f = raw_file("i16", header, &[0; 8]);
    let err = load_err(&f);
    assert_tensor_err(&err, "short", "has dtype I16, which locus does not have");
    assert_tensor_err(&err, "short", "LoadOptions::skip_unsupported");
    let ck = LoadOptions::new().skip_unsupported().load::<Cuda<0>>(&f.0).unwrap();
    assert_eq!(ck.names().collect::<Vec<_>>(), vec!["ok"]);
}

/// A file as PyTorch writes a BatchNorm's state: f32 weights, an i64 `num_batches_tracked`
/// (a 0-d tensor) and i64 class indices, in name order, with the header bytes written here.
fn torch_like_file(tag: &str, labels: &[i64]) -> TempFile {
    let n = labels.len();
    let header = format!(
        r#"{{"__metadata__":{{"format":"pt"}},"bn.num_batches_tracked":{{"dtype":"I64","shape":[],"data_offsets":[0,8]}},"bn.weight":{{"dtype":"F32","shape":[3],"data_offsets":[8,20]}},"labels":{{"dtype":"I64","shape":[{n}],"data_offsets":[20,{}]}}}}"#,
        20 + 8 * n
    );
    let mut data = 123i64.to_le_bytes().to_vec();
    for w in [0.5f32, -1.0, 2.0] {
        data.extend_from_slice(&w.to_le_bytes());
    }
    for l in labels {
        data.extend_from_slice(&l.to_le_bytes());
    }
    raw_file(tag, &header, &data)
}

#[test]
fn a_pytorch_file_with_i64_tensors_loads_whole_skipping_or_converting() -> locus::Result<()> {
    let labels = [2i64, 0, i64::MAX, -5];
    let f = torch_like_file("torch-i64", &labels);
    // Whole: the i64 tensors are i64 tensors, the 0-d counter included.
    let ck = locus::load_safetensors::<Cuda<0>>(&f.0)?;
    assert_eq!(ck.dtype("labels"), Some(DType::I64));
    assert_eq!(ck.get::<i64>("labels")?.to_vec()?, labels);
    let counter = ck.get::<i64>("bn.num_batches_tracked")?;
    assert_eq!((counter.shape(), counter.item()?), (&[][..], 123));
    assert_eq!(ck.get::<f32>("bn.weight")?.to_vec()?, vec![0.5, -1.0, 2.0]);
    assert!(ck.get::<i32>("labels").is_err(), "no implicit conversion");

    // Skipping by name and by dtype: the skip sees the file's dtype.
    let seen = std::cell::RefCell::new(Vec::new());
    let ck = LoadOptions::new()
        .skip(|name, dtype| {
            seen.borrow_mut().push((name.to_string(), dtype));
            name.ends_with("num_batches_tracked")
        })
        .load_on(Dyn::new(last_device()?), &f.0)?;
    assert_eq!(ck.names().collect::<Vec<_>>(), vec!["bn.weight", "labels"]);
    assert_eq!(ck.get::<i64>("labels")?.device(), last_device()?);
    assert!(seen.borrow().contains(&("bn.num_batches_tracked".to_string(), DType::I64)));
    let ck = LoadOptions::new().skip(|_, dtype| dtype == DType::I64).load::<Cpu>(&f.0)?;
    assert_eq!(ck.names().collect::<Vec<_>>(), vec!["bn.weight"]);
    let mut progress = Vec::new();
    LoadOptions::new().skip(|_, d| d == DType::F32).load_with(Cpu, &f.0, |a, b| progress.push((a, b)))?;
    assert_eq!(progress.last(), Some(&(40, 40)), "the bytes of the tensors kept");

    // Converting: a value beyond i32's range is an error naming the tensor, not a wrap.
    let to_i32 = LoadOptions::new().convert(DType::I64, DType::I32);
    let err = to_i32.load::<Cuda<0>>(&f.0).map(|_| ()).unwrap_err();
    assert_tensor_err(&err, "labels", "element 2 is 9223372036854775807");
    let fits = torch_like_file("torch-i64-fits", &[2, 0, i32::MAX as i64, i32::MIN as i64]);
    let ck = to_i32.load::<Cuda<0>>(&fits.0)?;
    assert_eq!(ck.get::<i32>("labels")?.to_vec()?, vec![2, 0, i32::MAX, i32::MIN]);
    assert_eq!(ck.get::<i32>("bn.num_batches_tracked")?.item()?, 123);
    assert_eq!(ck.get::<f32>("bn.weight")?.to_vec()?, vec![0.5, -1.0, 2.0]);
    // To a float type values round; the weights can change type too.
    let ck =
        LoadOptions::new().convert(DType::I64, DType::F64).convert(DType::F32, DType::BF16).load::<Cuda<0>>(&f.0)?;
    assert_eq!(ck.get::<f64>("labels")?.to_vec()?, labels.map(|l| l as f64));
    assert_eq!(ck.get::<bf16>("bn.weight")?.to_vec()?, [0.5, -1.0, 2.0].map(bf16::from_f32));
    // The i64 labels index and score directly.
    let labels = locus::load_safetensors::<Cuda<0>>(&fits.0)?.get::<i64>("labels")?;
    let table = Tensor::<Cuda<0>>::arange(0.0, 3.0, 1.0)?;
    let e = table.index_select(0, &labels).unwrap_err();
    assert!(e.to_string().contains("index 2147483647 (at position 2) is out of range for dim 0 of size 3"), "{e}");
    let wide = locus::load_safetensors::<Cuda<0>>(&f.0)?.get::<i64>("labels")?;
    let e = table.index_select(0, &wide).unwrap_err();
    assert!(e.to_string().contains("index 9223372036854775807 (at position 2) is out of range"), "{e}");
    let picked = table.index_select(0, &wide.narrow(0, 0, 2)?)?;
    assert_eq!(picked.to_vec()?, vec![2.0, 0.0]);
    Ok(())
}

#[test]
fn a_shape_that_does_not_match_its_bytes_is_named_with_its_tensor() {
    let header = r#"{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "I32", "shape": [3, 2], "data_offsets": [8, 20]}}"#;
    let f = raw_file("shape", header, &[0; 20]);
    let err = load_err(&f);
    assert_tensor_err(&err, "b", "which needs 24 bytes, but its data_offsets [8, 20] hold 12");
    let header = r#"{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}}"#;
    let f = raw_file("gap", header, &[0; 12]);
    assert_tensor_err(&load_err(&f), "b", "the offsets overlap or leave a gap");
}

#[test]
fn saving_two_tensors_of_one_name_or_the_metadata_name_is_an_error() -> locus::Result<()> {
    let f = TempFile::new("dupes");
    let t = Tensor::<Cpu>::ones([1])?;
    let err = locus::save_safetensors(&f.0, [("x", t.clone()), ("x", t.clone())]).unwrap_err();
    assert!(matches!(&err, Error::CheckpointTensor { op: "save_safetensors", tensor, .. } if tensor == "x"), "{err}");
    let err = locus::save_safetensors(&f.0, [("__metadata__", t)]).unwrap_err();
    assert!(err.to_string().contains("keeps for metadata"), "{err}");
    assert!(!f.0.exists(), "a refused save leaves no file");
    Ok(())
}

#[test]
fn metadata_is_kept_and_files_of_other_writers_load() -> locus::Result<()> {
    // As PyTorch's writer leaves it: metadata, tensors in name order rather than by size.
    let header = r#"{"__metadata__": {"format": "pt"}, "b": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}, "a": {"dtype": "F64", "shape": [1], "data_offsets": [2, 10]}}"#;
    let mut data = vec![7u8, 9];
    data.extend_from_slice(&1.5f64.to_le_bytes());
    let f = raw_file("torch", header, &data);
    let ck = locus::load_safetensors::<Cuda<0>>(&f.0)?;
    assert_eq!(ck.metadata().get("format").map(String::as_str), Some("pt"));
    assert_eq!(ck.get::<u8>("b")?.to_vec()?, vec![7, 9]);
    assert_eq!(ck.get::<f64>("a")?.to_vec()?, vec![1.5]);
    let g = TempFile::new("torch-again");
    ck.save(&g.0)?;
    assert_eq!(locus::load_safetensors::<Cpu>(&g.0)?.metadata(), ck.metadata());
    Ok(())
}

/// A seeded stream of numbers (SplitMix64) for the mutations below.
struct Mix(u64);

impl Mix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Hostile files (issue 38, item 4): 1500 mutations of a valid checkpoint (bytes
/// overwritten in the header or the data, the header length rewritten, cut short at a
/// random length, numbers in the header replaced by huge or negative ones), each loaded
/// onto `Cuda<0>` and onto `Cpu`. Each load returns `Ok` or an `Err`, never a panic; device
/// memory in use afterwards is what it was before (nothing leaks); and no load reserves
/// more device memory than four times the file's size (a header that declares a huge
/// tensor is refused before anything is allocated). Seeded: a failure prints the case.
/// The memory figures are the process's, so the cases run in a process of their own (this
/// test binary started again for this test alone).
#[test]
fn mutated_and_truncated_files_are_errors_never_panics_or_huge_allocations() -> locus::Result<()> {
    const ALONE: &str = "LOCUS_SAFETENSORS_FUZZ_ALONE";
    if std::env::var_os(ALONE).is_none() {
        let name = "mutated_and_truncated_files_are_errors_never_panics_or_huge_allocations";
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([name, "--exact", "--nocapture", "--test-threads=1"])
            .env(ALONE, "1")
            .output()
            .unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(
            out.status.success() && text.contains("1 passed"),
            "the fuzz cases, in a process of their own:\n{text}"
        );
        return Ok(());
    }
    let f = TempFile::new("fuzz-source");
    locus::save_safetensors(
        &f.0,
        [
            ("a.weight", Tensor::<Cpu>::rand([16, 8], 1)?),
            ("a.bias", Tensor::<Cpu>::rand([8], 2)?),
            ("b", Tensor::<Cpu>::rand([3, 3, 3], 3)?),
        ],
    )?;
    let source = std::fs::read(&f.0).unwrap();
    let header_len = u64::from_le_bytes(source[..8].try_into().unwrap()) as usize;
    let out = TempFile::new("fuzz-case");
    let device = DeviceId::Cuda(0);
    let before = locus::memory_allocated(device)?;
    let cap = 4 * source.len();
    let mut mix = Mix(2026);
    let (mut ok, mut err) = (0, 0);
    for case in 0..1500 {
        let mut bytes = source.clone();
        let how = mix.below(5);
        match how {
            // Bytes of the header.
            0 => {
                for _ in 0..1 + mix.below(4) {
                    let at = 8 + mix.below(header_len);
                    bytes[at] = mix.next() as u8;
                }
            }
            // Bytes anywhere.
            1 => {
                for _ in 0..1 + mix.below(8) {
                    let at = mix.below(bytes.len());
                    bytes[at] = mix.next() as u8;
                }
            }
            // The header's length.
            2 => {
                let len = match mix.below(3) {
                    0 => mix.next(),
                    1 => header_len as u64 + mix.below(64) as u64,
                    _ => (header_len as u64).saturating_sub(mix.below(64) as u64),
                };
                bytes[..8].copy_from_slice(&len.to_le_bytes());
            }
            // Cut short.
            3 => bytes.truncate(mix.below(bytes.len())),
            // A number in the header replaced by a huge or negative one.
            _ => {
                let header = String::from_utf8_lossy(&bytes[8..8 + header_len]).into_owned();
                let digits: Vec<usize> = header.match_indices(|c: char| c.is_ascii_digit()).map(|(i, _)| i).collect();
                let at = digits[mix.below(digits.len())];
                let end = header[at..].find(|c: char| !c.is_ascii_digit()).map_or(header.len(), |e| at + e);
                let with = ["18446744073709551615", "4294967296", "-1", "99999999999", "0"][mix.below(5)];
                let header = format!("{}{with}{}", &header[..at], &header[end..]);
                let mut b = (header.len() as u64).to_le_bytes().to_vec();
                b.extend_from_slice(header.as_bytes());
                b.extend_from_slice(&source[8 + header_len..]);
                bytes = b;
            }
        }
        std::fs::write(&out.0, &bytes).unwrap();
        locus::reset_peak_memory_stats(device)?;
        let loads = std::panic::catch_unwind(|| {
            let gpu = locus::load_safetensors::<Cuda<0>>(&out.0).map(drop);
            let cpu = locus::load_safetensors::<Cpu>(&out.0).map(drop);
            (gpu, cpu)
        });
        let (gpu, cpu) = loads.unwrap_or_else(|_| panic!("case {case} (mutation {how}) panicked"));
        assert_eq!(
            gpu.is_ok(),
            cpu.is_ok(),
            "case {case} (mutation {how}): {gpu:?} on the device, {cpu:?} on the host"
        );
        if gpu.is_ok() {
            ok += 1;
        } else {
            err += 1;
        }
        let peak = locus::max_memory_allocated(device)?;
        assert!(
            peak <= before + cap,
            "case {case} (mutation {how}): {peak} bytes allocated for a file of {}",
            bytes.len()
        );
        assert_eq!(locus::memory_allocated(device)?, before, "case {case} (mutation {how}): memory left allocated");
    }
    println!("1500 mutated files: {ok} loaded, {err} refused with an error");
    assert!(err > 500, "most mutations break the file: only {err} of 1500 were refused");
    Ok(())
}

/// A save that fails while writing (the disk full: the temporary file is a link to
/// `/dev/full`, so every write fails with ENOSPC after the file opened) or before (the
/// temporary file cannot be created) is an `Err` naming the file, leaves the previous
/// checkpoint as it was, byte for byte, and leaves no temporary file behind.
#[cfg(target_os = "linux")]
#[test]
fn a_failed_save_never_damages_the_previous_file() -> locus::Result<()> {
    let f = TempFile::new("failed-save");
    let old = Tensor::<Cpu>::arange(0.0, 6.0, 1.0)?.reshape([2, 3])?;
    locus::save_safetensors(&f.0, [("w", old.clone())])?;
    let before = std::fs::read(&f.0).expect("the first save wrote the file");
    let mut tmp = f.0.as_os_str().to_owned();
    tmp.push(format!(".locus-{}.tmp", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let big = Tensor::<Cpu>::ones([1 << 20])?; // 4 MiB: past the writer's buffer
    if std::path::Path::new("/dev/full").exists() {
        std::os::unix::fs::symlink("/dev/full", &tmp).expect("a link in the temp dir");
        let err = locus::save_safetensors(&f.0, [("w", big.clone())]).unwrap_err();
        assert!(err.to_string().contains("cannot be written"), "{err}");
        assert_eq!(std::fs::read(&f.0).unwrap(), before, "a save that failed while writing changed the previous file");
        assert!(std::fs::symlink_metadata(&tmp).is_err(), "the temporary file is left behind");
    } else {
        eprintln!("skipped: the disk-full case needs /dev/full");
    }
    std::fs::create_dir(&tmp).expect("a directory where the temporary file goes");
    let err = locus::save_safetensors(&f.0, [("w", big)]).unwrap_err();
    std::fs::remove_dir(&tmp).ok();
    assert!(err.to_string().contains("cannot be written (create"), "{err}");
    assert_eq!(std::fs::read(&f.0).unwrap(), before, "a save that could not start changed the previous file");
    let back = locus::load_safetensors::<Cpu>(&f.0)?;
    assert_eq!(back.get::<f32>("w")?.to_vec()?, old.to_vec()?);
    Ok(())
}

/// The values of tests/fixtures/make_safetensors.py: multiples of 1/8, exact in every
/// float type.
fn fixture_floats(n: usize) -> Vec<f64> {
    (0..n).map(|i| ((i * 37) % 101) as f64 / 8.0 - 50.0 / 8.0).collect()
}

/// The tensors of tests/fixtures/make_safetensors.py, built by locus (on `Cuda<0>` and the
/// host placements), by the same formulas.
fn fixture_tensors() -> locus::Result<Vec<(&'static str, AnyTensor<Dyn>)>> {
    let f = fixture_floats;
    let f32s = |n| f(n).into_iter().map(|v| v as f32).collect::<Vec<_>>();
    Ok(vec![
        ("f32", Tensor::<Cuda<0>>::from_vec(f32s(12), [3, 4])?.into_dyn().into()),
        ("f64", Tensor::<Cpu, f64>::from_vec(f(5).into_iter().map(|v| v / 3.0).collect(), [5])?.into_dyn().into()),
        ("bf16", Tensor::<Cuda<0>>::from_vec(f32s(6), [2, 3])?.to_dtype::<bf16>()?.into_dyn().into()),
        ("f16", Tensor::<Pinned>::from_vec(f32s(7), [7])?.to_dtype::<f16>()?.into_dyn().into()),
        (
            "i32",
            Tensor::<Cuda<0>, i32>::from_vec(
                (0..4).map(|i: i64| ((i * 7919) % (1 << 31) - (1 << 30)) as i32).collect(),
                [4],
            )?
            .into_dyn()
            .into(),
        ),
        (
            "i64",
            Tensor::<Cuda<0>, i64>::from_vec((0..4).map(|i: i64| i * (1 << 33) - 5).collect(), [2, 2])?
                .into_dyn()
                .into(),
        ),
        (
            "u8",
            Tensor::<Cpu, u8>::from_vec((0..10).map(|i: u32| ((i * 37) % 256) as u8).collect(), [10])?
                .into_dyn()
                .into(),
        ),
        ("scalar", Tensor::<Cuda<0>>::full([], 2.5)?.into_dyn().into()),
        ("empty", Tensor::<Cuda<0>>::zeros([0])?.into_dyn().into()),
    ])
}

/// A file of every dtype written by the Python `safetensors` package (PyTorch's writer,
/// tests/fixtures/make_safetensors.py, run on the GPU machine) loads with every value,
/// shape, dtype and the metadata, onto a device and onto the host.
#[test]
fn a_file_the_python_safetensors_package_wrote_loads_exactly() -> locus::Result<()> {
    let f = TempFile::new("python-writer");
    std::fs::write(&f.0, include_bytes!("fixtures/python_writer.safetensors")).unwrap();
    let want = fixture_tensors()?;
    let on_gpu = locus::load_safetensors::<Cuda<0>>(&f.0)?;
    let on_host = locus::load_safetensors::<Cpu>(&f.0)?;
    assert_eq!(on_gpu.metadata().get("writer").map(String::as_str), Some("python safetensors"));
    assert_eq!(on_gpu.metadata().get("note").map(String::as_str), Some("ünïcode ✓"));
    assert_eq!(on_host.metadata(), on_gpu.metadata());
    assert_eq!(on_gpu.len(), want.len());
    for (name, t) in &want {
        let (g, h) = (on_gpu.get_any(name).unwrap(), on_host.get_any(name).unwrap());
        assert!(same_contents(g, t)?, "{name} on the device: {g:?}, not {t:?}");
        assert!(same_contents(h, t)?, "{name} on the host: {h:?}, not {t:?}");
    }
    Ok(())
}

/// A file locus writes (every dtype, metadata) loads in Python's `safetensors` with every
/// value (tests/fixtures/check_safetensors.py), where Python has the package and PyTorch
/// (the GPU machine); elsewhere it says it skipped.
#[test]
fn files_locus_writes_load_in_python() -> locus::Result<()> {
    let probe = std::process::Command::new("python3").args(["-c", "import safetensors, torch"]).output();
    if !probe.is_ok_and(|o| o.status.success()) {
        println!("skipped: python3 with the safetensors package and torch is not here (the GPU machine has them)");
        return Ok(());
    }
    let f = TempFile::new("for-python");
    let meta = [("format", "pt"), ("writer", "locus"), ("note", "ünïcode ✓")]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .into_iter()
        .collect();
    locus::save_safetensors_with_metadata(&f.0, fixture_tensors()?, &meta)?;
    let script = std::env::temp_dir().join(format!("locus-check-safetensors-{}.py", std::process::id()));
    std::fs::write(&script, include_str!("fixtures/check_safetensors.py")).unwrap();
    let out = std::process::Command::new("python3").arg(&script).arg(&f.0).output().unwrap();
    std::fs::remove_file(&script).ok();
    let log = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && log.contains("python: ok"), "python said: {log}");
    Ok(())
}
