//! The CUDA graph rows (issue 17): a chain of 20 adds on 1024 f32 elements, replayed
//! from a `Graph`, run eagerly, and captured. The same chain, batches and rows are in
//! `benches/torch_baseline.py` (`torch.cuda.CUDAGraph`) and `benches/cpp/baseline.cu`
//! (a raw CUDA graph of the same 20 launches, the floor of the replay row).

use std::time::Instant;

use locus::{on_stream, Graph, Stream, Tensor};

use crate::method::{row, samples};
use crate::G;

/// Adds in the chain.
const CHAIN: usize = 20;
/// Chains per batch of the replay and eager rows: 1000, so 20000 ops per batch, as the
/// small-op rows.
const REPLAYS: usize = crate::raw::LAUNCHES / CHAIN;
/// Captures per batch of the capture row.
const CAPTURES: usize = 100;

/// `y = x + b`, then `y = y + b` 19 times: 20 adds, each into a new tensor.
pub(crate) fn chain(x: &Tensor<G>, b: &Tensor<G>) -> locus::Result<Tensor<G>> {
    let mut y = (x + b)?;
    for _ in 1..CHAIN {
        y = (&y + b)?;
    }
    Ok(y)
}

/// Microseconds per op (a batch's wall time over its `CHAIN * chains` ops).
fn per_op(t: Instant, chains: usize) -> f64 {
    t.elapsed().as_secs_f64() / (chains * CHAIN) as f64 * 1e6
}

pub(crate) fn chain20() {
    let stream = Stream::<G>::new().unwrap();
    let mut x = Tensor::<G>::rand([1024], 1).unwrap();
    let mut b = Tensor::<G>::rand([1024], 2).unwrap();
    {
        let mut g = Graph::capture(&stream, (&mut x, &mut b), |(x, b)| chain(x, b)).unwrap();
        // The same graph replayed on the default stream, where the bench's eager rows ran,
        // before any replay on the capture stream: one stream with work in the process, as in
        // the C++ baseline's graph rows (it destroys its eager rows' stream first) and
        // PyTorch's (replay() queues on the current stream). Session 48 found the raw chain
        // 3.2-3.7 us per replay slower on the device once locus's default stream, a second
        // stream, had run its seventh add (docs/BENCHMARKS.md). Timed first, printed second.
        let default = Stream::<G>::default_stream().unwrap();
        let on_default = samples(|| {
            default.synchronize().unwrap();
            let t = Instant::now();
            for _ in 0..REPLAYS {
                let _ = g.replay_on(&default).unwrap();
                default.synchronize().unwrap();
            }
            per_op(t, REPLAYS)
        });
        default.synchronize().unwrap();
        let replay = samples(|| {
            stream.synchronize().unwrap();
            let t = Instant::now();
            for _ in 0..REPLAYS {
                let _ = g.replay().unwrap(); // the view of the outputs, dropped here
                stream.synchronize().unwrap();
            }
            per_op(t, REPLAYS)
        });
        row(
            "graph_chain20_replay",
            &replay,
            "us/op",
            "Graph::replay of 20 captured adds on 1024 f32 (y = x + b, then y = y + b 19 times) + \
             Stream::synchronize, wall time per op (1/20 of a replay) in a batch of 1000 replays",
        );
        row(
            "graph_chain20_replay_on_default",
            &on_default,
            "us/op",
            "the same graph by Graph::replay_on(the default stream, where the eager rows ran) + its synchronize, \
             wall time per op in a batch of 1000 replays, timed before any replay on the capture stream",
        );
    }
    let eager = on_stream(&stream, || {
        samples(|| {
            stream.synchronize().unwrap();
            let t = Instant::now();
            for _ in 0..REPLAYS {
                drop(chain(&x, &b).unwrap());
                stream.synchronize().unwrap();
            }
            per_op(t, REPLAYS)
        })
    });
    row(
        "graph_chain20_eager",
        &eager,
        "us/op",
        "the same 20 adds as eager ops on the same stream + Stream::synchronize after the 20, wall time per op \
         in a batch of 1000 chains",
    );
    // Each capture of a batch gets its own inputs, and the graphs of a batch are dropped
    // only after its time is taken.
    let mut inputs: Vec<_> = (0..CAPTURES as u64)
        .map(|i| (Tensor::<G>::rand([1024], 2 * i + 1).unwrap(), Tensor::<G>::rand([1024], 2 * i + 2).unwrap()))
        .collect();
    let capture = samples(|| {
        stream.synchronize().unwrap();
        let t = Instant::now();
        let graphs: Vec<_> =
            inputs.iter_mut().map(|(x, b)| Graph::capture(&stream, (x, b), |(x, b)| chain(x, b)).unwrap()).collect();
        let us = t.elapsed().as_secs_f64() / CAPTURES as f64 * 1e6;
        drop(graphs);
        stream.synchronize().unwrap();
        us
    });
    row(
        "graph_chain20_capture",
        &capture,
        "us",
        "Graph::capture of the 20-add chain (capture + instantiate), wall time per capture in a batch of 100, \
         graphs dropped after the batch is timed",
    );
}
