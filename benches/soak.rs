//! Soak (issue 38): trains a classifier for minutes on end and checks that what the
//! process holds stays flat once warmed up: device memory, pinned memory, streams and
//! threads.
//!
//!     cargo bench --bench soak -- --minutes 10 --out soak.tsv
//!
//! The workload is a training loop with every moving part of one: a `Loader` (4 worker
//! threads building and pinning batches, copied to cuda:0 on a side stream), a new
//! loader each epoch; `DataParallel` over every device (replica threads, the batch
//! scattered and the logits gathered); `cross_entropy`, `backward`, `clip_grad_norm` and
//! `AdamW`; and checkpoints of the model and the optimizer written to temp files and
//! loaded back into both (training goes on from what was loaded): after the first step,
//! every 5 s during warm-up and every 30 s after.
//!
//! Once a second (at the first step boundary after each whole second, after
//! synchronizing every device, so each sample sees the same point of the step) it
//! writes a line of tab-separated values to `--out`: `t_s step allocated reserved pinned
//! streams threads rss_kib`, then `loss` (the mean training loss since the last sample)
//! and each device's `allocated_cuda:N` and `reserved_cuda:N`. `allocated` and
//! `reserved` are `memory_allocated` and `memory_reserved` summed over the devices,
//! `pinned` is `pinned_stats().bytes_held` (page-locked memory the pool holds, in use or
//! cached), `streams` is `stream_count()`, and `threads` and `rss_kib` are `Threads:` and
//! `VmRSS:` of `/proc/self/status`. `benches/soak_plot.py` draws the file.
//!
//! The verdict: the first 10% of the run is warm-up. For each series, the largest sample
//! in the window of 5% of the run (at least 2 s) right after warm-up is compared with
//! the largest in the last 5% of the run; the growth is their difference as a
//! percentage of the first. A window's largest sample rather than a single one, because
//! an epoch's loader threads come and go and a batch may or may not be in flight at a
//! sample; a leak raises the whole window. The run passes when allocated, reserved, pinned, streams
//! and threads each grow by less than 1%, and exits non-zero otherwise. RSS is reported
//! beside them but not judged: it also counts what the system allocator keeps for
//! reuse, and on a GPU it does not see device memory.
//!
//! The backend is chosen at run time as everywhere in locus (`LOCUS_BACKEND`, default
//! the GPU when there is one): the same binary soaks a GPU or the host backend, with a
//! larger model on a GPU. `cargo bench` passes `--bench`; run without it and without
//! `--minutes` (as `cargo test --benches` runs it) it trains for 3 seconds and judges
//! nothing.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use locus::nn::{self, LayerNorm, Linear, Module};
use locus::optim::{clip_grad_norm, AdamW};
use locus::parallel::DataParallel;
use locus::{devices, Cpu, Cuda, Device, DeviceId, Loader, Parameters, Tensor, ToDevice};

type G = Cuda<0>;

/// Warm-up, as a fraction of the run.
const WARM_UP: f64 = 0.10;
/// The windows compared, as a fraction of the run.
const WINDOW: f64 = 0.05;
/// The largest growth that passes, in percent.
const LIMIT: f64 = 1.0;
const CHECKPOINT_EVERY: Duration = Duration::from_secs(30);
/// Checkpoints during warm-up: the pinned pool grows to what a checkpoint's copies
/// need at once, which depends on how far the copies lag behind, so it takes a few
/// checkpoints to reach.
const CHECKPOINT_WARMING: Duration = Duration::from_secs(5);

/// Sizes of the data and the model.
struct Sizes {
    samples: usize,
    features: usize,
    hidden: usize,
    classes: usize,
    batch: usize,
}

const HOST: Sizes = Sizes { samples: 65_536, features: 64, hidden: 256, classes: 10, batch: 256 };
const GPU: Sizes = Sizes { samples: 262_144, features: 512, hidden: 2048, classes: 100, batch: 2048 };

/// `linear3(gelu(linear2(relu(norm(linear1(x))))))`.
#[derive(Parameters, ToDevice)]
struct Mlp<D: Device> {
    l1: Linear<D>,
    norm: LayerNorm<D>,
    l2: Linear<D>,
    l3: Linear<D>,
}

impl Mlp<G> {
    fn new(s: &Sizes) -> locus::Result<Self> {
        Ok(Mlp {
            l1: Linear::new(s.features, s.hidden, 1)?,
            norm: LayerNorm::new(s.hidden)?,
            l2: Linear::new(s.hidden, s.hidden, 2)?,
            l3: Linear::new(s.hidden, s.classes, 3)?,
        })
    }
}

impl<D: Device> Module<D> for Mlp<D> {
    fn forward(&self, x: &Tensor<D>) -> locus::Result<Tensor<D>> {
        let h = self.norm.forward(&self.l1.forward(x)?)?.relu()?;
        self.l3.forward(&self.l2.forward(&h)?.gelu()?)
    }
}

/// The command line.
struct Args {
    run: Duration,
    out: PathBuf,
    /// Judge the run (false for the short run `cargo test` makes).
    judge: bool,
    /// Whether `--out` was given (a short run's samples in the temp dir are removed).
    keep: bool,
}

fn args() -> Result<Args, String> {
    let (mut minutes, mut out, mut bench) = (None, None, false);
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--minutes" => {
                let v = it.next().ok_or("--minutes needs a value")?;
                let m: f64 = v.parse().map_err(|_| format!("--minutes {v}: not a number"))?;
                if !(m > 0.0 && m.is_finite()) {
                    return Err(format!("--minutes {v}: must be above 0"));
                }
                minutes = Some(m);
            }
            "--out" => out = Some(PathBuf::from(it.next().ok_or("--out needs a path")?)),
            "--bench" => bench = true,
            other => return Err(format!("unknown argument {other}; expected --minutes M, --out PATH")),
        }
    }
    let judge = bench || minutes.is_some();
    let run = if judge { Duration::from_secs_f64(minutes.unwrap_or(10.0) * 60.0) } else { Duration::from_secs(3) };
    let keep = out.is_some();
    let out = out.unwrap_or_else(|| std::env::temp_dir().join(format!("locus-soak-{}.tsv", std::process::id())));
    Ok(Args { run, out, judge, keep })
}

fn main() -> ExitCode {
    match soak() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("soak: {e}");
            ExitCode::FAILURE
        }
    }
}

/// One line of the output.
struct Sample {
    t: f64,
    /// allocated, reserved, pinned, streams, threads, rss_kib.
    values: [f64; 6],
}

const SERIES: [&str; 6] = ["allocated", "reserved", "pinned", "streams", "threads", "rss_kib"];
/// The series the verdict judges (all but RSS).
const JUDGED: usize = 5;

fn soak() -> Result<bool, Box<dyn std::error::Error>> {
    let args = args()?;
    let backend = locus::backend_name()?;
    let ids = devices()?;
    let s = if backend == "cuda" { GPU } else { HOST };
    println!(
        "soak: backend {backend}, {} device(s); a {}-{}-{}-{} MLP, batch {}, {} samples; {:.1} min; samples to {}",
        ids.len(),
        s.features,
        s.hidden,
        s.hidden,
        s.classes,
        s.batch,
        s.samples,
        args.run.as_secs_f64() / 60.0,
        args.out.display()
    );

    // Inputs uniform in [-1, 1), labelled by the largest output of a random linear map.
    let x = ((Tensor::<Cpu>::rand([s.samples, s.features], 11)? - 0.5)? * 2.0)?;
    let teacher = (Tensor::<Cpu>::rand([s.features, s.classes], 12)? - 0.5)?;
    let labels = x.matmul(&teacher)?.argmax(1, false)?.to_vec()?;
    let x = Arc::new(x);

    let mut dp = DataParallel::new(Mlp::new(&s)?, &ids, G::default())?;
    let mut opt = AdamW::new(1e-3).weight_decay(1e-4);
    let tmp = std::env::temp_dir();
    let pid = std::process::id();
    let (model_path, opt_path) = (
        tmp.join(format!("locus-soak-model-{pid}.safetensors")),
        tmp.join(format!("locus-soak-opt-{pid}.safetensors")),
    );

    let mut out = std::io::BufWriter::new(std::fs::File::create(&args.out)?);
    write!(out, "t_s\tstep\t{}\tloss", SERIES.join("\t"))?;
    for id in &ids {
        write!(out, "\tallocated_{id}\treserved_{id}")?;
    }
    writeln!(out)?;

    let warm_up = args.run.as_secs_f64() * WARM_UP;
    let start = Instant::now();
    let (mut next_sample, mut next_checkpoint, mut next_report) =
        (Duration::ZERO, Duration::ZERO, Duration::from_secs(60));
    let mut samples: Vec<Sample> = Vec::new();
    let (mut step, mut epoch, mut checkpoints) = (0u64, 0u64, 0u64);
    let mut loss_sum = Tensor::<G>::zeros([])?;
    let mut loss_steps = 0u64;
    'run: loop {
        let loader = Loader::from_pairs(Arc::clone(&x), noisy(&labels, s.classes, epoch)?, s.batch, Some(7))?
            .epoch(epoch)
            .workers(4)
            .prefetch(4)
            .to::<G>()?;
        for batch in loader {
            let (x, y) = batch?;
            nn::zero_grad(dp.module());
            let loss = dp.forward(&x)?.cross_entropy(&y)?;
            loss.backward()?;
            clip_grad_norm(dp.module(), 1.0)?;
            opt.step(dp.module_mut())?;
            loss_sum = (loss_sum + loss.detach())?;
            loss_steps += 1;
            step += 1;

            let now = start.elapsed();
            if now >= next_checkpoint {
                checkpoint(&mut dp, &mut opt, &model_path, &opt_path)?;
                checkpoints += 1;
                let every = if now.as_secs_f64() < warm_up { CHECKPOINT_WARMING } else { CHECKPOINT_EVERY };
                next_checkpoint = start.elapsed() + every;
            }
            if now < next_sample {
                continue;
            }
            for &id in &ids {
                locus::synchronize(id)?;
            }
            let loss = loss_sum.item()? / loss_steps.max(1) as f32;
            (loss_sum, loss_steps) = (Tensor::zeros([])?, 0);
            let (per_device, sample) = measure(&ids, start.elapsed().as_secs_f64())?;
            let mut line = format!("{:.3}\t{step}", sample.t);
            for v in sample.values {
                write!(line, "\t{v}")?;
            }
            write!(line, "\t{loss:.6}")?;
            for (a, r) in &per_device {
                write!(line, "\t{a}\t{r}")?;
            }
            writeln!(out, "{line}")?;
            if now >= next_report {
                out.flush()?;
                let v = sample.values;
                println!(
                    "[{:5.1} min] step {step}, epoch {epoch}, loss {loss:.4}, allocated {:.1} MiB, reserved {:.1} \
                     MiB, pinned {:.1} MiB, {} streams, {} threads, RSS {:.1} MiB, {checkpoints} checkpoints",
                    now.as_secs_f64() / 60.0,
                    v[0] / 1048576.0,
                    v[1] / 1048576.0,
                    v[2] / 1048576.0,
                    v[3],
                    v[4],
                    v[5] / 1024.0
                );
                next_report += Duration::from_secs(60);
            }
            samples.push(sample);
            while next_sample <= now {
                next_sample += Duration::from_secs(1);
            }
            if now >= args.run {
                break 'run;
            }
        }
        epoch += 1;
    }
    out.flush()?;
    drop(out);
    std::fs::remove_file(&model_path).ok();
    std::fs::remove_file(&opt_path).ok();
    println!(
        "{step} steps, {epoch} epochs, {checkpoints} checkpoints, {} samples in {:.1} min; wrote {}",
        samples.len(),
        start.elapsed().as_secs_f64() / 60.0,
        args.out.display()
    );
    if !args.judge {
        if !args.keep {
            std::fs::remove_file(&args.out).ok();
        }
        println!("a short run (no --minutes, no --bench): no verdict");
        return Ok(true);
    }
    Ok(verdict(&samples, args.run.as_secs_f64()))
}

/// The labels of an epoch: one in five replaced by a random class, drawn anew each
/// epoch. The model cannot learn noise it never sees twice, so the loss settles at the
/// noise's entropy (0.87) rather than falling towards zero, where AdamW's steps turn
/// unstable; a soak has to stay a healthy training run however long it lasts.
fn noisy(clean: &[i32], classes: usize, epoch: u64) -> locus::Result<Tensor<Cpu, i32>> {
    let labels = clean
        .iter()
        .enumerate()
        .map(|(i, &label)| {
            let h = (i as u64 ^ (epoch << 40)).wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let h = (h ^ (h >> 31)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            let h = h ^ (h >> 29);
            if h % 5 == 0 {
                ((h >> 32) % classes as u64) as i32
            } else {
                label
            }
        })
        .collect();
    Tensor::from_vec(labels, [clean.len()])
}

/// Saves the model and the optimizer, loads both back, and checks that the model's
/// parameters came back unchanged.
fn checkpoint(
    dp: &mut DataParallel<Mlp<G>, G>,
    opt: &mut AdamW<G>,
    model_path: &std::path::Path,
    opt_path: &std::path::Path,
) -> Result<(), Box<dyn std::error::Error>> {
    let before: Vec<Vec<f32>> =
        nn::state_dict(dp.module()).into_iter().map(|(_, t)| t.to_vec()).collect::<locus::Result<_>>()?;
    nn::save_state_dict(dp.module(), model_path)?;
    opt.save_state(opt_path)?;
    nn::load_state_dict(dp.module_mut(), &locus::load_safetensors::<G>(model_path)?)?;
    opt.load_state(&locus::load_safetensors::<G>(opt_path)?)?;
    for ((name, t), want) in nn::state_dict(dp.module()).into_iter().zip(before) {
        if t.to_vec()? != want {
            return Err(format!("{name} differs after the checkpoint round trip").into());
        }
    }
    Ok(())
}

/// Each device's (allocated, reserved), and the sample.
type Measured = (Vec<(usize, usize)>, Sample);

fn measure(ids: &[DeviceId], t: f64) -> locus::Result<Measured> {
    let mut per_device = Vec::with_capacity(ids.len());
    for &id in ids {
        per_device.push((locus::memory_allocated(id)?, locus::memory_reserved(id)?));
    }
    let allocated: usize = per_device.iter().map(|p| p.0).sum();
    let reserved: usize = per_device.iter().map(|p| p.1).sum();
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let values = [
        allocated as f64,
        reserved as f64,
        locus::pinned_stats().bytes_held as f64,
        locus::stream_count()? as f64,
        field("Threads:"),
        field("VmRSS:"),
    ];
    Ok((per_device, Sample { t, values }))
}

/// Prints each series' growth and returns whether the judged ones all stayed under
/// [`LIMIT`].
fn verdict(samples: &[Sample], run: f64) -> bool {
    // Samples come a second apart: a window shorter than 2 s may hold none.
    let (warm, window) = (run * WARM_UP, (run * WINDOW).max(2.0));
    let largest = |i: usize, from: f64, to: f64| {
        samples.iter().filter(|s| s.t >= from && s.t <= to).map(|s| s.values[i]).fold(f64::NAN, f64::max)
    };
    let last = samples.last().map_or(run, |s| s.t);
    println!(
        "verdict: warm-up is the first {warm:.1} s (10% of the run); the largest sample of {window:.1} s after it \
         against the largest of the last {window:.1} s; pass below {LIMIT}% growth"
    );
    if largest(0, warm, warm + window).is_nan() || warm + window > last - window {
        println!("soak: FAIL (the run is too short to judge: the two windows overlap or one is empty)");
        return false;
    }
    let mut pass = true;
    for (i, name) in SERIES.iter().enumerate() {
        let (a, b) = (largest(i, warm, warm + window), largest(i, last - window, last));
        let growth = if a > 0.0 {
            (b - a) / a * 100.0
        } else if b > 0.0 {
            f64::INFINITY
        } else {
            0.0
        };
        let judged = i < JUDGED;
        let ok = growth < LIMIT;
        pass &= ok || !judged;
        let mark = match (judged, ok) {
            (false, _) => "(reported, not judged)",
            (true, true) => "PASS",
            (true, false) => "FAIL",
        };
        println!("  {name:<10} {a:>14.0} -> {b:>14.0}  growth {growth:+8.3}%  {mark}");
    }
    println!("soak: {}", if pass { "PASS" } else { "FAIL" });
    pass
}
