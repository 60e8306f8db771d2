"""PyTorch baseline for benches/gpu/main.rs: the same rows, the same sizes, the same method
(benches/gpu/method.rs): per row 3 untimed samples then 11 timed ones (1 and 5 with
--quick); a sample is an event pair around GPU work, the wall time of a host-visible
operation, or the per-operation average over one batch. Prints
`row<TAB>median<TAB>unit<TAB>note<TAB>min<TAB>max` lines.

    python3 benches/torch_baseline.py [--quick] [--pageable-only | --copies-only | --checkpoint-only | --train-only | --profile-tiny-gpt | --graph-profile-tiny-gpt | --tiny-gpt-only]

--pageable-only prints the pageable copy rows alone; run with THP_MEM_ALLOC_ENABLE=1 in
the environment (read by PyTorch at startup: host tensors of 2 MiB and more then get
transparent huge pages, as locus's do), their names end in `_thp`. --copies-only prints
every copy row (pageable, pinned, `item_roundtrip`), the rows of `gpu copies`.
"""
import os
import sys
import time

import torch

MIB = 1 << 20
GIB = 1 << 30
dev = torch.device("cuda:0")
QUICK = "--quick" in sys.argv
WARM = 1 if QUICK else 3
REPS = 5 if QUICK else 11
# Ops per submit batch of the small-op rows, as in gpu/main.rs; the synchronized batch is a tenth.
LAUNCHES = 20000
# The graph rows (gpu/graph.rs): adds per chain, chains per batch (20000 ops, as the
# small-op rows), captures per batch.
CHAIN = 20
REPLAYS = LAUNCHES // CHAIN
CAPTURES = 100


def row(name, samples, unit, note):
    """Median (the upper middle value of an even count, as in method.rs), min and max."""
    v = sorted(samples)
    print(f"{name}\t{v[len(v) // 2]:.3f}\t{unit}\t{note}\t{v[0]:.3f}\t{v[-1]:.3f}", flush=True)


def row_na(name, unit, note):
    print(f"{name}\tn/a\t{unit}\t{note}\tn/a\tn/a", flush=True)


def samples(sample):
    """WARM untimed calls of `sample`, then the results of REPS timed ones."""
    for _ in range(WARM):
        sample()
    return [sample() for _ in range(REPS)]


def gpu_time(f):
    """Seconds per sample of the work `f` queues on the current stream, between two events."""
    torch.cuda.synchronize()

    def sample():
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        f()
        b.record()
        b.synchronize()
        return a.elapsed_time(b) / 1e3

    return samples(sample)


def wall_time(f):
    """Wall seconds per sample of `f`, which waits for its own work."""

    def sample():
        t = time.perf_counter()
        f()
        return time.perf_counter() - t

    return samples(sample)


def gbs(nbytes, secs):
    return [nbytes / t / 1e9 for t in secs]


def copies(pageable_only=False):
    thp = os.environ.get("THP_MEM_ALLOC_ENABLE") == "1"
    suffix = "_thp" if thp else ""
    pages = ", THP_MEM_ALLOC_ENABLE=1" if thp else ""
    for size in (4 << 10, 64 << 10):
        name = f"{size >> 10}KiB"
        host = torch.ones(size, dtype=torch.uint8)
        t = wall_time(lambda: (host.to(dev), torch.cuda.synchronize()))
        row(f"h2d_pageable_{name}{suffix}", gbs(size, t), "GB/s", f"tensor.to('cuda') + synchronize{pages}")
        d = host.to(dev)
        t = wall_time(lambda: d.to("cpu"))
        row(f"d2h_pageable_{name}{suffix}", gbs(size, t), "GB/s", f"tensor.to('cpu'){pages}")
    if not pageable_only:
        x = torch.ones((), device=dev)
        torch.cuda.synchronize()

        def items():
            for _ in range(100):
                x.item()

        t = wall_time(items)
        row("item_roundtrip", [s * 1e6 / 100 for s in t], "us", "x.item() of a 0-d float32 on cuda:0 (ready), wall time per call")
    for size in (MIB, 16 * MIB, 256 * MIB):
        mb = size // MIB
        host = torch.ones(size, dtype=torch.uint8)
        t = wall_time(lambda: (host.to(dev), torch.cuda.synchronize()))
        row(f"h2d_pageable_{mb}MiB{suffix}", gbs(size, t), "GB/s", f"tensor.to('cuda') + synchronize{pages}")
        d = host.to(dev)
        t = wall_time(lambda: d.to("cpu"))
        row(f"d2h_pageable_{mb}MiB{suffix}", gbs(size, t), "GB/s", f"tensor.to('cpu'){pages}")
        # Like for like with locus's rows (issue 35): fresh memory each time, and one
        # pageable destination reused.
        row(f"d2h_fresh_{mb}MiB{suffix}", gbs(size, t), "GB/s", f"tensor.to('cpu') (new memory each time){pages}")
        out = torch.empty(size, dtype=torch.uint8)
        t = wall_time(lambda: out.copy_(d))
        row(f"d2h_reused_{mb}MiB{suffix}", gbs(size, t), "GB/s", f"out.copy_(tensor) into one pageable tensor reused{pages}")
        if pageable_only:
            continue
        pinned = host.pin_memory()
        t = gpu_time(lambda: pinned.to(dev, non_blocking=True))
        row(f"h2d_pinned_{mb}MiB", gbs(size, t), "GB/s", "pinned.to('cuda', non_blocking=True)")
        out = torch.empty(size, dtype=torch.uint8, pin_memory=True)
        t = gpu_time(lambda: out.copy_(d, non_blocking=True))
        row(f"d2h_pinned_{mb}MiB", gbs(size, t), "GB/s", "pinned.copy_(cuda, non_blocking=True)")


def small_ops():
    a = torch.rand(1024, device=dev)
    b = torch.rand(1024, device=dev)
    n = LAUNCHES

    def submit():
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(n):
            a + b
        us = (time.perf_counter() - t) / n * 1e6
        torch.cuda.synchronize()
        return us

    def synced():
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(n // 10):
            a + b
            torch.cuda.synchronize()
        return (time.perf_counter() - t) / (n // 10) * 1e6

    row("small_add_1k_submit", samples(submit), "us/op", "a + b, 1024 elements, per op in a batch of 20000, no sync")
    row("small_add_1k_sync", samples(synced), "us/op", "a + b + synchronize, per op in a batch of 2000")


def chain(x, b):
    """y = x + b, then y = y + b 19 times: 20 adds, each into a new tensor (gpu/graph.rs)."""
    y = x + b
    for _ in range(CHAIN - 1):
        y = y + b
    return y


def graph_chain20():
    x = torch.rand(1024, device=dev)
    b = torch.rand(1024, device=dev)
    # Warm up on a side stream, then capture, as the torch.cuda.graphs documentation does.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            chain(x, b)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_y = chain(x, b)  # noqa: F841 (the graph's output, which each replay writes)

    def per_op(t):
        return (time.perf_counter() - t) / (REPLAYS * CHAIN) * 1e6

    # One rule on every side (issue 35): wait for the stream the work was queued on
    # (cudaStreamSynchronize), as gpu/graph.rs and the C++ baseline do, not the device.
    stream = torch.cuda.current_stream()

    def replay():
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(REPLAYS):
            g.replay()
            stream.synchronize()
        return per_op(t)

    def eager():
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(REPLAYS):
            chain(x, b)
            stream.synchronize()
        return per_op(t)

    def capture():
        # The capture that torch.cuda.graph does, without what its __enter__ runs first
        # (torch.cuda.synchronize(), torch.cuda.empty_cache(), gc.collect() when
        # torch.compiler.config.force_cudagraph_gc is set); each graph gets its own memory
        # pool, as there. The graphs of a batch are freed after it is timed, then their pools.
        torch.cuda.synchronize()
        graphs = []
        t = time.perf_counter()
        for _ in range(CAPTURES):
            cg = torch.cuda.CUDAGraph()
            with torch.cuda.stream(side):
                cg.capture_begin()
                out = chain(x, b)
                cg.capture_end()
            graphs.append((cg, out))
        us = (time.perf_counter() - t) / CAPTURES * 1e6
        del graphs, cg, out
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        return us

    note = (
        "torch.cuda.CUDAGraph of 20 adds on 1024 floats (y = x + b, then y = y + b 19 times), captured on a side "
        "stream after warm-up: g.replay() + a synchronize of the current stream, wall time per op (1/20 of a replay) "
        "in a batch of 1000 replays"
    )
    row("graph_chain20_replay", samples(replay), "us/op", note)
    note = "the same 20 adds eagerly + a synchronize of the current stream after the 20, wall time per op in a batch of 1000 chains"
    row("graph_chain20_eager", samples(eager), "us/op", note)
    note = (
        "CUDAGraph() + capture_begin() + the 20 adds + capture_end() (capture + instantiate) on a side stream, "
        "wall time per capture in a batch of 100, graphs freed after the batch is timed"
    )
    row("graph_chain20_capture", samples(capture), "us", note)


def large_ops():
    n = GIB // 4
    a = torch.rand(n, device=dev)
    b = torch.rand(n, device=dev)
    by = n * 4
    row("large_add_1GiB", gbs(3 * by, gpu_time(lambda: a + b)), "GB/s", "a + b")
    row("large_mul_1GiB", gbs(3 * by, gpu_time(lambda: a * b)), "GB/s", "a * b")
    row("large_relu_1GiB", gbs(2 * by, gpu_time(lambda: torch.relu(a))), "GB/s", "torch.relu(a)")
    row("sum_1GiB", gbs(by, gpu_time(lambda: a.sum())), "GB/s", "a.sum()")
    del a, b
    a = torch.rand(GIB // 2, device=dev, dtype=torch.bfloat16)
    b = torch.rand(GIB // 2, device=dev, dtype=torch.bfloat16)
    row("large_add_1GiB_bf16", gbs(3 * by, gpu_time(lambda: a + b)), "GB/s", "a + b, bfloat16")


def softmax():
    n = 8192
    x = torch.rand(n, n, device=dev)
    t = gpu_time(lambda: torch.softmax(x, dim=-1))
    row("softmax_8192x8192_f32", gbs(2 * n * n * 4, t), "GB/s", "torch.softmax(x, dim=-1)")
    x = torch.rand(n, n, device=dev, dtype=torch.bfloat16)
    t = gpu_time(lambda: torch.softmax(x, dim=-1))
    row("softmax_8192x8192_bf16", gbs(2 * n * n * 2, t), "GB/s", "torch.softmax(x, dim=-1), bfloat16")


def matmul():
    torch.backends.cuda.matmul.allow_tf32 = False
    n = 4096
    a = torch.rand(n, n, device=dev)
    b = torch.rand(n, n, device=dev)
    t = gpu_time(lambda: a @ b)
    row("matmul_4096_f32", [2 * n**3 / s / 1e12 for s in t], "TFLOP/s", "a @ b, allow_tf32=False")
    n = 8192
    a = torch.rand(n, n, device=dev)
    b = torch.rand(n, n, device=dev)
    torch.backends.cuda.matmul.allow_tf32 = True
    t = gpu_time(lambda: a @ b)
    torch.backends.cuda.matmul.allow_tf32 = False
    row("matmul_8192_tf32", [2 * n**3 / s / 1e12 for s in t], "TFLOP/s", "a @ b, float32, allow_tf32=True")
    a, b = a.bfloat16(), b.bfloat16()
    t = gpu_time(lambda: a @ b)
    row("matmul_8192_bf16", [2 * n**3 / s / 1e12 for s in t], "TFLOP/s", "a @ b, bfloat16")


def guard_pairs(device, rounds):
    """Nanoseconds per `with torch.cuda.device(device): pass` from cuda:0, over a batch."""
    torch.cuda.set_device(0)

    def sample():
        t = time.perf_counter()
        for _ in range(rounds):
            with torch.cuda.device(device):
                pass
        return (time.perf_counter() - t) / rounds * 1e9

    return samples(sample)


def guard():
    note = "with torch.cuda.device(0): pass, cuda:0 current, per pair in a batch of 200000"
    row("guard_enter_exit_same_device", guard_pairs(0, 200000), "ns", note)
    if torch.cuda.device_count() >= 2:
        torch.ones(1, device="cuda:1").sum().item()
        note = "with torch.cuda.device(1): pass, from cuda:0, per pair in a batch of 100000"
        row("guard_enter_exit_switch_device", guard_pairs(1, 100000), "ns", note)
    else:
        row_na("guard_enter_exit_switch_device", "ns", "one GPU: no other device to switch to")


class Layer(torch.nn.Module):
    """relu(x @ w), the product locus's Layer computes (nn.Linear would compute x @ w.T)."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.rand(1024, 1024))

    def forward(self, x):
        return torch.relu(x @ self.w)


def mlp(width, dtype):
    """4 x Linear(width) + ReLU between, on the GPU in `dtype`: as gpu/train.rs mlp."""
    torch.backends.cuda.matmul.allow_tf32 = False
    layers = []
    for i in range(4):
        layers.append(torch.nn.Linear(width, width))
        if i < 3:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers).to(dev, dtype)


def steps_per_second(steps, step):
    """One sample of a training row: `steps` calls of `step`, then a synchronize."""
    start = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize(dev)
    return steps / (time.perf_counter() - start)


def step_rows(name, steps, note, step):
    """One untimed `step`, then samples of `steps` steps + synchronize (steps per second)
    and the peak of max_memory_allocated over them: as gpu/train.rs step_rows."""
    step()
    torch.cuda.synchronize(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    per_sample = samples(lambda: steps_per_second(steps, step))
    peak = torch.cuda.max_memory_allocated(dev) / MIB
    row(f"{name}_steps", per_sample, "steps/s", note)
    row(f"{name}_peak", [peak], "MiB", "max_memory_allocated over the timed samples")


def train_rows(name, width, batch, steps, dtype):
    """4 x Linear(width) + ReLU, MSE, backward, AdamW(foreach=True): as gpu/train.rs."""
    model = mlp(width, dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    x = torch.rand(batch, width, device=dev).to(dtype)
    t = torch.rand(batch, width, device=dev).to(dtype)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = (model(x) - t).square().mean()
        loss.backward()
        opt.step()

    short = {torch.float32: "f32", torch.bfloat16: "bf16"}[dtype]
    note = f"4 x Linear({width}) + ReLU, MSE, backward, AdamW(foreach), {batch} rows, {short}, {steps} steps + synchronize per sample, wall"
    step_rows(name, steps, note, step)


def train_graphed_rows(name, width, batch, steps, dtype):
    """The step of train_rows as one CUDA graph: PyTorch's whole-network capture
    (torch.cuda.graph around forward, backward and AdamW(capturable=True, foreach=True),
    warmed up on a side stream as its documentation does). Each step copies the batch into
    the static inputs and replays: as gpu/train.rs graphed_rows."""
    model = mlp(width, dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True, capturable=True)
    x = torch.rand(batch, width, device=dev).to(dtype)
    t = torch.rand(batch, width, device=dev).to(dtype)
    static_x, static_t = torch.zeros_like(x), torch.zeros_like(t)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            (model(static_x) - static_t).square().mean().backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        static_loss = (model(static_x) - static_t).square().mean()
        static_loss.backward()
        opt.step()

    def step():
        static_x.copy_(x)
        static_t.copy_(t)
        g.replay()

    short = {torch.float32: "f32", torch.bfloat16: "bf16"}[dtype]
    note = f"torch.cuda.graph: 4 x Linear({width}) + ReLU, MSE, backward, AdamW(capturable, foreach) as one graph, {batch} rows, {short}, batch copied in + replay per step, {steps} steps + synchronize per sample, wall"
    step_rows(name, steps, note, step)


def profile_steps(step, steps):
    """The CUDA kernels of `steps` calls of `step` (after 3 untimed), from torch.profiler:
    per kernel name, launches and device microseconds per step, largest first; the
    PyTorch side of benches/trace_summary.py."""
    from torch.profiler import ProfilerActivity, profile
    for _ in range(3):
        step()
    torch.cuda.synchronize(dev)
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(steps):
            step()
        torch.cuda.synchronize(dev)
    kernels = [(e.key, e.count, e.device_time_total) for e in p.key_averages()
               if e.device_type == torch.autograd.DeviceType.CUDA]
    n, t = sum(k[1] for k in kernels), sum(k[2] for k in kernels)
    print(f"# per step of {steps}: {n / steps:.0f} kernels, {t / steps:.1f} us")
    print("# kernel\tlaunches/step\tus/step\tus/launch")
    for key, count, total in sorted(kernels, key=lambda k: -k[2]):
        print(f"{key[:90]}\t{count / steps:.1f}\t{total / steps:.1f}\t{total / count:.2f}")


def tiny_gpt(steps=20, graphed=False, profile=False):
    """examples/tiny_gpt's model and step on one GPU (gpu/train.rs tiny_gpt): token and
    position embeddings, 2 blocks of (LayerNorm, 4-head causal attention from batched
    matmuls and an additive -inf mask, LayerNorm, GELU MLP), LayerNorm, a head over 256
    bytes; cross_entropy, backward, clip_grad_norm_(1), AdamW(foreach) lr 3e-3 wd 0.01;
    16 x 32 fixed bytes. A sample is `steps` steps + synchronize; the row is tokens/s.

    With `graphed`, the step is PyTorch's whole-network capture (gpu/train.rs
    tiny_gpt_graphed): torch.cuda.graph around forward, backward, clipping and
    AdamW(capturable=True, foreach=True), warmed up on a side stream as its documentation
    does; each step copies the bytes and targets into the static inputs and replays."""
    torch.backends.cuda.matmul.allow_tf32 = False
    context, width, heads, layers, batch, vocab = 32, 64, 4, 2, 16, 256
    hd = width // heads

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = torch.nn.LayerNorm(width)
            self.qkv = torch.nn.Linear(width, 3 * width)
            self.out = torch.nn.Linear(width, width)
            self.ln2 = torch.nn.LayerNorm(width)
            self.fc = torch.nn.Linear(width, 4 * width)
            self.proj = torch.nn.Linear(4 * width, width)

        def attn(self, x, mask):
            b, t, _ = x.shape
            qkv = self.qkv(x)

            def split(i):
                return qkv[:, :, i * width:(i + 1) * width].reshape(b, t, heads, hd).transpose(1, 2).reshape(b * heads, t, hd)

            q, k, v = split(0), split(1), split(2)
            scores = q @ k.transpose(1, 2) * (1.0 / hd ** 0.5) + mask
            mixed = scores.softmax(2) @ v
            return self.out(mixed.reshape(b, heads, t, hd).transpose(1, 2).reshape(b, t, width))

        def forward(self, x, mask):
            x = x + self.attn(self.ln1(x), mask)
            return x + self.proj(torch.nn.functional.gelu(self.fc(self.ln2(x))))

    class Gpt(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.tokens = torch.nn.Embedding(vocab, width)
            self.positions = torch.nn.Parameter(torch.randn(context, width) * 0.02)
            self.blocks = torch.nn.ModuleList([Block() for _ in range(layers)])
            self.ln = torch.nn.LayerNorm(width)
            self.head = torch.nn.Linear(width, vocab)
            self.register_buffer("mask", torch.full((context, context), float("-inf")).triu(1))

        def forward(self, byte_values):
            t = byte_values.shape[1]
            x = self.tokens(byte_values.long()) + self.positions[:t]
            mask = self.mask[:t, :t]
            for block in self.blocks:
                x = block(x, mask)
            return self.head(self.ln(x))

    model = Gpt().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01, foreach=True, capturable=graphed)
    n = batch * context
    byte_values = torch.tensor([float((i * 37 + 11) % 256) for i in range(n)], device=dev).reshape(batch, context)
    following = torch.tensor([(i * 37 + 48) % 256 for i in range(n)], device=dev)

    def eager_step(x, t):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x).reshape(n, vocab), t)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        opt.step()

    if not graphed:
        def step():
            eager_step(byte_values, following)

        step()
        torch.cuda.synchronize(dev)
        if profile:
            profile_steps(step, 5)
            return
        note = f"examples/tiny_gpt's model, {batch} x {context} bytes: forward, cross_entropy, backward, clip_grad_norm_(1), AdamW(foreach), one GPU, {steps} steps + synchronize per sample, wall"
        row("tiny_gpt_tokens", samples(lambda: n * steps_per_second(steps, step)), "tokens/s", note)
        return
    static_x, static_t = torch.zeros_like(byte_values), torch.zeros_like(following)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            eager_step(static_x, static_t)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        static_loss = torch.nn.functional.cross_entropy(model(static_x).reshape(n, vocab), static_t)
        static_loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        opt.step()

    def step():
        static_x.copy_(byte_values)
        static_t.copy_(following)
        g.replay()

    step()
    torch.cuda.synchronize(dev)
    if profile:
        # Two replays alone, each in an NVTX range `replay` (ncu --nvtx --nvtx-include replay/).
        for _ in range(2):
            torch.cuda.nvtx.range_push("replay")
            g.replay()
            torch.cuda.nvtx.range_pop()
        torch.cuda.synchronize(dev)
        return
    note = f"torch.cuda.graph: examples/tiny_gpt's model, {batch} x {context} bytes: forward, cross_entropy, backward, clip_grad_norm_(1), AdamW(capturable, foreach) as one graph, bytes/targets copied in + replay per step, {steps} steps + synchronize per sample, wall"
    row("tiny_gpt_graphed_tokens", samples(lambda: n * steps_per_second(steps, step)), "tokens/s", note)


def train():
    train_rows("train_mlp_f32_w4096_b512", 4096, 512, 10, torch.float32)
    train_rows("train_mlp_bf16_w4096_b512", 4096, 512, 10, torch.bfloat16)
    train_rows("train_mlp_f32_w256_b32", 256, 32, 100, torch.float32)
    train_graphed_rows("train_mlp_f32_w256_b32_graphed", 256, 32, 100, torch.float32)
    train_graphed_rows("train_mlp_f32_w4096_b512_graphed", 4096, 512, 10, torch.float32)
    tiny_gpt()
    tiny_gpt(graphed=True)


def data_parallel():
    torch.backends.cuda.matmul.allow_tf32 = False
    layer = Layer().to(dev)
    dp = torch.nn.DataParallel(layer)
    x = torch.rand(8192, 1024, device=dev)

    def step(module):
        with torch.no_grad():
            module(x)
        torch.cuda.synchronize(dev)

    gpus = torch.cuda.device_count()
    note = f"nn.DataParallel(relu(x @ w)), x [8192, 1024], w [1024, 1024], {gpus} GPU(s), + synchronize, wall time"
    row("data_parallel_forward", [t * 1e3 for t in wall_time(lambda: step(dp))], "ms", note)
    note = "the same module without DataParallel, + synchronize, wall time"
    row("data_parallel_plain_forward", [t * 1e3 for t in wall_time(lambda: step(layer))], "ms", note)


def checkpoint():
    """Loading the safetensors file of gpu/checkpoint.rs (written there, or here if it is
    missing) to cuda:0 with the page cache warm: safetensors' own loader, and what it
    does by hand (torch.frombuffer of the mapped bytes + .to("cuda") per tensor)."""
    import json
    import mmap
    import struct
    import warnings

    gib = int(os.environ.get("LOCUS_BENCH_CHECKPOINT_GIB", "4"))
    path = os.environ.get("LOCUS_BENCH_CHECKPOINT", f"/tmp/locus-bench-{gib}GiB.safetensors")
    name = f"checkpoint_load_{gib}GiB"
    try:
        from safetensors.torch import load_file, save_file
    except ImportError:
        load_file = save_file = None
    if not os.path.exists(path) or os.path.getsize(path) < gib * GIB:
        if save_file is None:
            row_na(name, "ms", f"{path} is missing and the safetensors package is not installed")
            row_na(f"{name}_frombuffer", "ms", f"{path} is missing")
            return
        layers = gib * GIB // (128 * MIB)
        tensors = {}
        for i in range(layers):
            tensors[f"layer.{i:02d}.weight"] = torch.rand(8192, 4096)
            tensors[f"layer.{i:02d}.bias"] = torch.rand(4096)
        save_file(tensors, path)
        del tensors
    size = os.path.getsize(path)
    dtypes = {"F32": torch.float32, "F64": torch.float64, "I32": torch.int32, "U8": torch.uint8}

    def frombuffer():
        with open(path, "rb") as f:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        n = struct.unpack("<Q", mm[:8])[0]
        header = json.loads(mm[8 : 8 + n])
        base, out = 8 + n, {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a read-only buffer: torch warns, nothing writes it
            for k, info in header.items():
                if k == "__metadata__":
                    continue
                s, e = info["data_offsets"]
                dt = dtypes[info["dtype"]]
                count = (e - s) // torch.tensor([], dtype=dt).element_size()
                t = torch.frombuffer(mm, dtype=dt, count=count, offset=base + s).reshape(info["shape"])
                out[k] = t.to(dev)
        torch.cuda.synchronize(dev)
        return out

    def timed(load):
        def sample():
            torch.cuda.synchronize(dev)
            t = time.perf_counter()
            out = load()
            secs = time.perf_counter() - t
            del out
            return secs

        return samples(sample)

    def note(what, secs):
        med = sorted(secs)[len(secs) // 2]
        return f"{what}, page cache warm, wall time ({size / med / 1e9:.1f} GB/s at the median)"

    if load_file is None:
        row_na(name, "ms", "the safetensors package is not installed")
    else:

        def st():
            out = load_file(path, device="cuda:0")
            torch.cuda.synchronize(dev)
            return out

        secs = timed(st)
        row(name, [t * 1e3 for t in secs], "ms", note('safetensors.torch.load_file(path, device="cuda:0") + synchronize', secs))
    secs = timed(frombuffer)
    row(f"{name}_frombuffer", [t * 1e3 for t in secs], "ms", note("torch.frombuffer(mmap) + .to(cuda:0) per tensor + synchronize", secs))


if __name__ == "__main__":
    print(f"# torch {torch.__version__}, cuda {torch.version.cuda}, {torch.cuda.get_device_name(0)}")
    print("# row\tmedian\tunit\tnote\tmin\tmax")
    print(f"# method: {WARM} untimed then {REPS} timed samples per row; median, min, max")
    torch.ones(1, device=dev).sum().item()
    if "--pageable-only" in sys.argv:
        copies(pageable_only=True)
        sys.exit(0)
    if "--copies-only" in sys.argv:
        copies()
        sys.exit(0)
    if "--train-only" in sys.argv:
        train()
        sys.exit(0)
    if "--profile-tiny-gpt" in sys.argv:
        tiny_gpt(profile=True)
        sys.exit(0)
    if "--tiny-gpt-only" in sys.argv:
        tiny_gpt()
        tiny_gpt(graphed=True)
        sys.exit(0)
    if "--graph-profile-tiny-gpt" in sys.argv:
        tiny_gpt(graphed=True, profile=True)
        sys.exit(0)
    if "--checkpoint-only" in sys.argv:
        checkpoint()
        sys.exit(0)
    copies()
    small_ops()
    graph_chain20()
    large_ops()
    softmax()
    matmul()
    guard()
    data_parallel()
    train()
    checkpoint()
