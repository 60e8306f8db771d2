"""PyTorch baseline for benches/gpu.rs: the same rows, the same sizes, the same method
(CUDA events, medians after warm-up). Prints `row<TAB>value<TAB>unit<TAB>note` lines."""
import statistics
import time

import torch

MIB = 1 << 20
GIB = 1 << 30
dev = torch.device("cuda:0")


def row(name, value, unit, note):
    print(f"{name}\t{value:.3f}\t{unit}\t{note}", flush=True)


def gpu_time(f, warm=3, reps=10):
    for _ in range(warm):
        f()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        f()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) / 1e3)
    return statistics.median(ts)


def wall_time(f, warm=3, reps=10):
    for _ in range(warm):
        f()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def copies():
    for size in (MIB, 16 * MIB, 256 * MIB):
        mb = size // MIB
        host = torch.ones(size, dtype=torch.uint8)
        t = wall_time(lambda: (host.to(dev), torch.cuda.synchronize()))
        row(f"h2d_pageable_{mb}MiB", size / t / 1e9, "GB/s", "tensor.to('cuda')")
        d = host.to(dev)
        t = wall_time(lambda: d.to("cpu"))
        row(f"d2h_pageable_{mb}MiB", size / t / 1e9, "GB/s", "tensor.to('cpu')")
        pinned = host.pin_memory()
        t = gpu_time(lambda: pinned.to(dev, non_blocking=True))
        row(f"h2d_pinned_{mb}MiB", size / t / 1e9, "GB/s", "pinned.to('cuda', non_blocking=True)")
        out = torch.empty(size, dtype=torch.uint8, pin_memory=True)
        t = gpu_time(lambda: out.copy_(d, non_blocking=True))
        row(f"d2h_pinned_{mb}MiB", size / t / 1e9, "GB/s", "pinned.copy_(cuda, non_blocking=True)")


def small_ops():
    a = torch.rand(1024, device=dev)
    b = torch.rand(1024, device=dev)
    n = 20000
    submit, synced = [], []
    for _ in range(5):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(n):
            a + b
        submit.append((time.perf_counter() - t) / n * 1e6)
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(n // 10):
            a + b
            torch.cuda.synchronize()
        synced.append((time.perf_counter() - t) / (n // 10) * 1e6)
    row("small_add_1k_submit", statistics.median(submit), "us/op", "a + b, 1024 elements, no sync")
    row("small_add_1k_sync", statistics.median(synced), "us/op", "a + b + synchronize")


def large_ops():
    n = GIB // 4
    a = torch.rand(n, device=dev)
    b = torch.rand(n, device=dev)
    by = n * 4
    row("large_add_1GiB", 3 * by / gpu_time(lambda: a + b) / 1e9, "GB/s", "a + b")
    row("large_mul_1GiB", 3 * by / gpu_time(lambda: a * b) / 1e9, "GB/s", "a * b")
    row("large_relu_1GiB", 2 * by / gpu_time(lambda: torch.relu(a)) / 1e9, "GB/s", "torch.relu(a)")
    row("sum_1GiB", by / gpu_time(lambda: a.sum()) / 1e9, "GB/s", "a.sum()")


def matmul():
    torch.backends.cuda.matmul.allow_tf32 = False
    n = 4096
    a = torch.rand(n, n, device=dev)
    b = torch.rand(n, n, device=dev)
    t = gpu_time(lambda: a @ b)
    row("matmul_4096_f32", 2 * n**3 / t / 1e12, "TFLOP/s", "a @ b, allow_tf32=False")


def guard():
    n = 200000
    ts = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(n):
            with torch.cuda.device(0):
                pass
        ts.append((time.perf_counter() - t) / n * 1e9)
    row("guard_enter_exit_same_device", statistics.median(ts), "ns", "with torch.cuda.device(0): pass")


def data_parallel():
    torch.backends.cuda.matmul.allow_tf32 = False
    layer = torch.nn.Sequential(torch.nn.Linear(1024, 1024, bias=False), torch.nn.ReLU()).to(dev)
    dp = torch.nn.DataParallel(layer)
    x = torch.rand(8192, 1024, device=dev)

    def step():
        with torch.no_grad():
            dp(x)
        torch.cuda.synchronize(dev)

    t = wall_time(step, reps=20)
    gpus = torch.cuda.device_count()
    row("data_parallel_forward", t * 1e3, "ms", f"nn.DataParallel(Linear(1024, 1024, bias=False) + ReLU) on [8192, 1024], {gpus} GPU(s)")


if __name__ == "__main__":
    print(f"# torch {torch.__version__}, cuda {torch.version.cuda}, {torch.cuda.get_device_name(0)}")
    torch.ones(1, device=dev).sum().item()
    copies()
    small_ops()
    large_ops()
    matmul()
    guard()
    data_parallel()
