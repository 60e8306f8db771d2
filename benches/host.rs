//! Host-side benchmarks: what needs no GPU. The device guard (entering
//! the current device, and switching devices) and the dispatch overhead of a small op on
//! the host backend (everything from `&a + &b` to the backend call, with a 16-element
//! kernel that costs next to nothing: the submit alone, and submit + kernel + synchronize).
//! And host tensors at CPU speed (issue 23), each beside its reference in the same run:
//! f32 matmul against `matrixmultiply::sgemm` with its threads, f32 add and sum of 16 Mi
//! elements against ceilings that do the same reads and writes the same way (a kept pool
//! of threads, AVX streaming stores into a reused output; a read-only AVX sum), without
//! locus (issue 35: the earlier memcpy bound spawned threads per sample and used plain
//! stores).
//!
//!     LOCUS_BACKEND=host cargo bench --bench host [-- FILTER]
//!
//! Each row runs its body in batches long enough to time (10 ms or more, at least one
//! call), one untimed batch then its samples, and prints the time per call as median, min
//! and max, tab-separated (`# row median unit note min max`). FILTER picks rows by
//! substring, `a|b` for either (`-- "f32 matmul|16 Mi"`).

use std::hint::black_box;
use std::sync::{mpsc, Arc};
use std::time::Instant;

#[path = "common/layer.rs"]
mod layer;

use layer::Layer;
use locus::{Cpu, Cuda, DataParallel, DeviceGuard, DeviceId, Tensor};

fn guard(c: &Bench) {
    let _outer = DeviceGuard::enter(DeviceId::Cuda(0)).expect("cuda:0 exists on every backend");
    c.bench_function("guard enter+exit, same device", |b| {
        b.iter(|| drop(black_box(DeviceGuard::enter(DeviceId::Cuda(0)))))
    });
    if locus::device_count().unwrap_or(0) >= 2 {
        c.bench_function("guard enter+exit, switching device", |b| {
            b.iter(|| drop(black_box(DeviceGuard::enter(DeviceId::Cuda(1)))))
        });
    }
}

fn dispatch(c: &Bench) {
    let a = Tensor::<Cuda<0>>::ones([16]).expect("a 16-element tensor");
    let x = Tensor::<Cuda<0>>::ones([16]).expect("a 16-element tensor");
    // The host backend is asynchronous: `&a + &x` queues the kernel on the simulated
    // stream's worker and returns. The first row is that submit alone; the second waits
    // for the kernel too.
    c.bench_function("add of 16 elements, submit (the kernel runs on the stream's worker)", |b| {
        b.iter(|| black_box(&a + &x))
    });
    c.bench_function("add of 16 elements, submit + kernel + synchronize", |b| {
        b.iter(|| {
            let y = black_box(&a + &x);
            locus::synchronize(DeviceId::Cuda(0)).expect("synchronize");
            y
        })
    });
    let s = Tensor::<Cuda<0>>::ones([16]).expect("a 16-element tensor").into_dyn();
    c.bench_function("add of 16 elements, Dyn operand (run-time check)", |b| b.iter(|| black_box(&a + &s)));
}

/// DataParallel's hand-offs on the host backend's simulated devices (issue 35 item 2):
/// a forward over every device of a batch of 64 rows of 16, then a synchronize of each.
fn data_parallel(c: &Bench) {
    let ids = locus::devices().expect("the devices");
    if ids.len() < 2 {
        eprintln!("host bench: DataParallel row skipped: one device (LOCUS_HOST_DEVICES=4 simulates four)");
        return;
    }
    let dp = DataParallel::new(Layer { w: Tensor::<Cuda<0>>::ones([16, 16]).expect("w") }, &ids, Cuda::<0>)
        .expect("replicas on every device");
    let x = Tensor::<Cuda<0>>::ones([64, 16]).expect("x");
    let name = format!(
        "DataParallel forward over {} devices, relu([64, 16] @ [16, 16]), gathered on cuda:0, + synchronize of each",
        ids.len()
    );
    c.bench_function(&name, |b| {
        b.iter(|| {
            drop(black_box(dp.forward(&x).expect("forward")));
            for &d in &ids {
                locus::synchronize(d).expect("synchronize");
            }
        })
    });
}

fn matmul(c: &Bench) {
    let g = c.group("f32 matmul", 30);
    for n in [256usize, 1024] {
        let a = Tensor::<Cpu>::rand([n, n], 1).expect("a");
        let b = Tensor::<Cpu>::rand([n, n], 2).expect("b");
        g.bench_function(&format!("locus Tensor<Cpu>::matmul/{n}"), |bch| {
            bch.iter(|| black_box(a.matmul(&b).expect("matmul")))
        });
        let (x, y) = (a.to_vec().expect("a"), b.to_vec().expect("b"));
        let mut out = vec![0f32; n * n];
        g.bench_function(&format!("matrixmultiply::sgemm (threading)/{n}"), |bch| {
            bch.iter(|| {
                // SAFETY: x, y and out hold n * n f32 each, row-major with row stride n.
                unsafe {
                    let (p, q, r, s) = (x.as_ptr(), y.as_ptr(), out.as_mut_ptr(), n as isize);
                    matrixmultiply::sgemm(n, n, n, 1.0, p, s, 1, q, s, 1, 0.0, r, s, 1);
                }
                black_box(&out);
            })
        });
    }
}

/// Threads made once and kept, each running the jobs sent to it, as locus's host pool
/// does (the reference rows below must not pay for starting threads each sample).
struct Pool {
    senders: Vec<mpsc::Sender<Job>>,
    done: mpsc::Receiver<()>,
}

type Job = Box<dyn FnOnce() + Send>;

impl Pool {
    fn new() -> Pool {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let (done_tx, done) = mpsc::channel();
        let senders = (0..threads)
            .map(|_| {
                let (tx, rx) = mpsc::channel::<Job>();
                let done = done_tx.clone();
                std::thread::spawn(move || {
                    for job in rx {
                        job();
                        let _ = done.send(());
                    }
                });
                tx
            })
            .collect();
        Pool { senders, done }
    }

    fn threads(&self) -> usize {
        self.senders.len()
    }

    /// Runs `job(i)` on thread `i` of the pool for every thread, and waits for all.
    fn run(&self, job: impl Fn(usize) + Send + Sync + Clone + 'static) {
        for (i, tx) in self.senders.iter().enumerate() {
            let job = job.clone();
            tx.send(Box::new(move || job(i))).expect("a pool thread");
        }
        for _ in 0..self.senders.len() {
            self.done.recv().expect("a pool thread");
        }
    }
}

/// The part of `0..n` thread `i` of `threads` takes: whole blocks of 64 elements.
fn part(i: usize, threads: usize, n: usize) -> std::ops::Range<usize> {
    let per = n.div_ceil(threads).div_ceil(64) * 64;
    (i * per).min(n)..((i + 1) * per).min(n)
}

/// `c = a + b`, stored past the cache: two reads and one write per element, the add
/// row's memory traffic, with AVX streaming stores where the CPU has AVX (as locus's own
/// add), SSE ones otherwise.
fn add_part(a: &[f32], b: &[f32], c: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx") {
            // SAFETY: the CPU has AVX (checked); the slices hold `c.len()` elements each
            // (the caller's ranges are equal).
            unsafe { add_avx(a, b, c) };
            return;
        }
    }
    for ((c, a), b) in c.iter_mut().zip(a).zip(b) {
        *c = a + b;
    }
}

/// [`add_part`] with AVX: eight at a time, streaming stores from a 32-byte aligned output.
///
/// # Safety
/// The CPU has AVX; `a` and `b` hold at least `c.len()` elements.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn add_avx(a: &[f32], b: &[f32], c: &mut [f32]) {
    use std::arch::x86_64::{_mm256_add_ps, _mm256_loadu_ps, _mm256_stream_ps, _mm_sfence};
    let n = c.len();
    let head = c.as_ptr().align_offset(32).min(n);
    for i in 0..head {
        c[i] = a[i] + b[i];
    }
    let body = head + (n - head) / 8 * 8;
    let mut i = head;
    while i < body {
        // SAFETY: `i + 8 <= body <= n` elements of each slice; `c` at `i` is 32-byte
        // aligned (`head` made it so and `i - head` is a multiple of 8 elements).
        unsafe {
            let v = _mm256_add_ps(_mm256_loadu_ps(a.as_ptr().add(i)), _mm256_loadu_ps(b.as_ptr().add(i)));
            _mm256_stream_ps(c.as_mut_ptr().add(i), v);
        }
        i += 8;
    }
    for i in body..n {
        c[i] = a[i] + b[i];
    }
    _mm_sfence();
}

/// The sum of `a`: one read per element, the sum row's traffic, in as many independent
/// f32 lanes as the CPU adds at once (AVX where it has it), so the reads set the pace.
fn sum_part(a: &[f32]) -> f64 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx") {
            // SAFETY: the CPU has AVX (checked).
            return unsafe { sum_avx(a) };
        }
    }
    a.iter().map(|&x| f64::from(x)).sum()
}

/// [`sum_part`] with AVX: four 8-lane accumulators.
///
/// # Safety
/// The CPU has AVX.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn sum_avx(a: &[f32]) -> f64 {
    use std::arch::x86_64::{_mm256_add_ps, _mm256_loadu_ps, _mm256_setzero_ps, _mm256_storeu_ps};
    let mut acc = [_mm256_setzero_ps(); 4];
    let blocks = a.len() / 32;
    for k in 0..blocks {
        for (j, s) in acc.iter_mut().enumerate() {
            // SAFETY: block `k` holds 32 elements from `32 k`, within `a`.
            *s = _mm256_add_ps(*s, unsafe { _mm256_loadu_ps(a.as_ptr().add(32 * k + 8 * j)) });
        }
    }
    let mut lanes = [0f32; 8];
    let mut total = 0f64;
    for s in acc {
        // SAFETY: `lanes` holds 8 f32.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), s) };
        total += lanes.iter().map(|&x| f64::from(x)).sum::<f64>();
    }
    total + a[32 * blocks..].iter().map(|&x| f64::from(x)).sum::<f64>()
}

/// A raw pointer a pool job may carry (the caller keeps the memory alive and apart).
#[derive(Clone, Copy)]
struct Ptr(usize);

fn bandwidth(c: &Bench) {
    const N: usize = 16 << 20;
    let g = c.group("16 Mi f32", 10);
    let a = Tensor::<Cpu>::rand([N], 1).expect("a");
    let b = Tensor::<Cpu>::rand([N], 2).expect("b");
    g.bench_function("locus add (3 x 64 MiB moved, output from the host cache)", |bch| {
        bch.iter(|| black_box((&a + &b).expect("add")))
    });
    g.bench_function("locus sum (64 MiB read)", |bch| bch.iter(|| black_box(a.sum().expect("sum"))));
    // The ceilings do each row's reads and writes with the same kind of code locus runs
    // (a kept pool of threads, streaming stores for the output), without locus: `c = a + b`
    // and a read-only sum.
    let pool = Pool::new();
    let threads = pool.threads();
    let (x, y) = (Arc::new(a.to_vec().expect("a")), Arc::new(b.to_vec().expect("b")));
    // The output: memory used before, as locus's add takes a block of its host cache (a
    // fresh 64 MiB vector would add 16 Ki first-touch page faults to every sample).
    let mut out = vec![0f32; N];
    g.bench_function("ceiling: pooled c = a + b, streaming stores, reused c (3 x 64 MiB moved)", |bch| {
        bch.iter(|| {
            let dst = Ptr(out.as_mut_ptr() as usize);
            let (x, y) = (Arc::clone(&x), Arc::clone(&y));
            pool.run(move |i| {
                let r = part(i, threads, N);
                // SAFETY: `out` holds N f32 and outlives `run`, which waits for every job;
                // the threads' ranges are disjoint, and nothing else touches `out` meanwhile.
                let c = unsafe { std::slice::from_raw_parts_mut((dst.0 as *mut f32).add(r.start), r.len()) };
                add_part(&x[r.clone()], &y[r], c);
            });
            black_box(&out);
        })
    });
    let sums = Arc::new(std::sync::Mutex::new(vec![0f64; threads]));
    g.bench_function("ceiling: pooled sum, AVX lanes (64 MiB read)", |bch| {
        bch.iter(|| {
            let (x, sums2) = (Arc::clone(&x), Arc::clone(&sums));
            pool.run(move |i| {
                let s = sum_part(&x[part(i, threads, N)]);
                sums2.lock().expect("sums")[i] = s;
            });
            black_box(sums.lock().expect("sums").iter().sum::<f64>())
        })
    });
}

/// The rows the command line picks (every row without a filter), timed as the module's
/// doc says.
struct Bench {
    filters: Vec<String>,
}

/// Rows under one name, each with `samples` timed batches.
struct Group<'a> {
    bench: &'a Bench,
    name: &'static str,
    samples: usize,
}

/// What a row's body is given: `iter` runs the timed call.
struct Bencher {
    iters: u64,
    secs: f64,
}

impl Bencher {
    fn iter<R>(&mut self, mut f: impl FnMut() -> R) {
        let t = Instant::now();
        for _ in 0..self.iters {
            black_box(f());
        }
        self.secs = t.elapsed().as_secs_f64();
    }
}

impl Bench {
    fn from_args() -> Bench {
        // `cargo bench` passes `--bench`; anything else not an option is a filter.
        let args = std::env::args().skip(1).filter(|a| !a.starts_with("--"));
        Bench { filters: args.flat_map(|a| a.split('|').map(str::to_string).collect::<Vec<_>>()).collect() }
    }

    fn group(&self, name: &'static str, samples: usize) -> Group<'_> {
        Group { bench: self, name, samples }
    }

    fn bench_function(&self, name: &str, body: impl FnMut(&mut Bencher)) {
        Group { bench: self, name: "", samples: 21 }.bench_function(name, body);
    }
}

impl Group<'_> {
    fn bench_function(&self, name: &str, mut body: impl FnMut(&mut Bencher)) {
        let row = if self.name.is_empty() { name.to_string() } else { format!("{}/{name}", self.name) };
        if !self.bench.filters.is_empty() && !self.bench.filters.iter().any(|f| row.contains(f.as_str())) {
            return;
        }
        let mut batch = |iters: u64| {
            let mut b = Bencher { iters, secs: 0.0 };
            body(&mut b);
            b.secs
        };
        // Calls per batch: doubled until a batch takes 10 ms (that batch is the untimed one).
        let mut iters = 1;
        while batch(iters) < 0.01 && iters < 1 << 30 {
            iters *= 2;
        }
        let mut per_call: Vec<f64> = (0..self.samples).map(|_| batch(iters) / iters as f64).collect();
        per_call.sort_by(f64::total_cmp);
        let (scale, unit) = match per_call[per_call.len() / 2] {
            t if t < 1e-6 => (1e9, "ns"),
            t if t < 1e-3 => (1e6, "us"),
            _ => (1e3, "ms"),
        };
        let (median, min, max) = (per_call[per_call.len() / 2], per_call[0], per_call[per_call.len() - 1]);
        let note = format!("{} samples, {iters} calls each", self.samples);
        println!("{row}\t{:.3}\t{unit}\t{note}\t{:.3}\t{:.3}", median * scale, min * scale, max * scale);
    }
}

fn main() {
    let bench = Bench::from_args();
    println!("# row\tmedian\tunit\tnote\tmin\tmax");
    guard(&bench);
    dispatch(&bench);
    data_parallel(&bench);
    matmul(&bench);
    bandwidth(&bench);
}
