// C++ baseline for benches/gpu/main.rs: the work of a device guard, of a small op and of
// a CUDA graph of 20 small ops (the floor of the graph replay row), written directly
// against the CUDA runtime API, so that the locus rows are compared with the
// same work in C++ and not only with Python. Built and run by benches/compare.sh:
//
//     nvcc -O3 -arch=sm_90 -o baseline benches/cpp/baseline.cu && ./baseline [--quick]
//
// The method is the one of benches/gpu/method.rs: per row, 3 untimed samples then 11
// timed ones (1 and 5 with --quick); a sample is the per-operation average over one
// batch. Prints `row  median  unit  note  min  max`, tab-separated; `n/a` where a row
// cannot be measured here.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CHECK(call)                                                                       \
    do {                                                                                  \
        cudaError_t err_ = (call);                                                        \
        if (err_ != cudaSuccess) {                                                        \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                 \
                    cudaGetErrorString(err_));                                            \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

static int g_warm = 3;
static int g_reps = 11;

static double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// g_warm untimed calls of `sample`, then the results of g_reps timed ones.
template <typename F>
static std::vector<double> samples(F sample) {
    for (int i = 0; i < g_warm; i++) sample();
    std::vector<double> v;
    for (int i = 0; i < g_reps; i++) v.push_back(sample());
    return v;
}

// Median (the upper middle value of an even count), min and max, as in method.rs.
static void row(const char* name, std::vector<double> v, const char* unit, const char* note) {
    std::sort(v.begin(), v.end());
    printf("%s\t%.3f\t%s\t%s\t%.3f\t%.3f\n", name, v[v.size() / 2], unit, note, v.front(), v.back());
    fflush(stdout);
}

static void row_na(const char* name, const char* unit, const char* note) {
    printf("%s\tn/a\t%s\t%s\tn/a\tn/a\n", name, unit, note);
    fflush(stdout);
}

// The work of c10's CUDAGuard around a scope, as c10 does it (issue 35): entering is
// c10::cuda::ExchangeDevice(target), which reads the current device and sets the target
// only when it differs; leaving is c10::cuda::SetDevice(prev), which reads the current
// device again and sets `prev` only when it differs. On one device that is two
// cudaGetDevice calls and no cudaSetDevice. Nanoseconds per pair, averaged over a batch
// of `rounds`.
static std::vector<double> guard_pairs(int target, long rounds) {
    CHECK(cudaSetDevice(0));
    return samples([&] {
        int failed = 0;
        double t = now_s();
        for (long i = 0; i < rounds; i++) {
            int prev = -1;
            failed |= cudaGetDevice(&prev) != cudaSuccess;
            if (prev != target) failed |= cudaSetDevice(target) != cudaSuccess;
            int cur = -1;
            failed |= cudaGetDevice(&cur) != cudaSuccess;
            if (cur != prev) failed |= cudaSetDevice(prev) != cudaSuccess;
        }
        double ns = (now_s() - t) / rounds * 1e9;
        if (failed) {
            fprintf(stderr, "baseline: cudaGetDevice/cudaSetDevice failed in the guard batch\n");
            exit(1);
        }
        return ns;
    });
}

__global__ void add_f32(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}

// Launches per submit batch, as in the locus small-op rows and the launch floor; the
// synchronized batch is a tenth of it.
static const int LAUNCHES = 20000;

// With --keep-eager-stream the small-op rows' stream lives to the end of the process, as a
// framework's default stream does, instead of being destroyed before the graph rows.
static cudaStream_t g_eager_kept = nullptr;
static bool g_keep_eager = false;

static void small_add() {
    const int n = 1024;
    float *a, *b, *out;
    CHECK(cudaSetDevice(0));
    CHECK(cudaMalloc(&a, n * sizeof(float)));
    CHECK(cudaMalloc(&b, n * sizeof(float)));
    CHECK(cudaMalloc(&out, n * sizeof(float)));
    CHECK(cudaMemset(a, 0, n * sizeof(float)));
    CHECK(cudaMemset(b, 0, n * sizeof(float)));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    // Submit only: after a device synchronize, host time from the first launch until the
    // last launch returns, per launch; the synchronize after the batch is not timed.
    std::vector<double> submit = samples([&] {
        CHECK(cudaDeviceSynchronize());
        double t = now_s();
        for (int i = 0; i < LAUNCHES; i++) add_f32<<<(n + 255) / 256, 256, 0, s>>>(a, b, out, n);
        double us = (now_s() - t) / LAUNCHES * 1e6;
        CHECK(cudaGetLastError());
        CHECK(cudaDeviceSynchronize());
        return us;
    });
    row("cpp_launch_1k_add_submit", submit, "us/op",
        "add kernel on 1024 floats into a preallocated output, <<<>>> on a non-blocking stream, per launch in a "
        "batch of 20000, no sync");
    // Submit + synchronize: each launch followed by cudaDeviceSynchronize, per op.
    std::vector<double> synced = samples([&] {
        CHECK(cudaDeviceSynchronize());
        double t = now_s();
        for (int i = 0; i < LAUNCHES / 10; i++) {
            add_f32<<<(n + 255) / 256, 256, 0, s>>>(a, b, out, n);
            CHECK(cudaDeviceSynchronize());
        }
        double us = (now_s() - t) / (LAUNCHES / 10) * 1e6;
        CHECK(cudaGetLastError());
        return us;
    });
    row("cpp_launch_1k_add_sync", synced, "us/op",
        "the same launch + cudaDeviceSynchronize, per op in a batch of 2000");
    if (g_keep_eager) {
        g_eager_kept = s;
    } else {
        CHECK(cudaStreamDestroy(s));
    }
    CHECK(cudaFree(a));
    CHECK(cudaFree(b));
    CHECK(cudaFree(out));
}

// The chain of benches/gpu/graph.rs: y[0] = x + b, then y[i] = y[i-1] + b, 20 adds, each
// into its own preallocated buffer (the graph's static buffers).
static const int CHAIN = 20;
// Chains per batch of the graph replay and eager rows: 20000 ops per batch, as the
// small-op rows. Captures per batch of the capture row.
static const int REPLAYS = LAUNCHES / CHAIN;
static const int CAPTURES = 100;

static void chain20(cudaStream_t s, const float* x, const float* b, float* const* y, int n) {
    add_f32<<<(n + 255) / 256, 256, 0, s>>>(x, b, y[0], n);
    for (int i = 1; i < CHAIN; i++) add_f32<<<(n + 255) / 256, 256, 0, s>>>(y[i - 1], b, y[i], n);
}

// The chain captured from `s` and instantiated: cudaStreamBeginCapture, the 20 launches,
// cudaStreamEndCapture, cudaGraphInstantiate. The graph itself is left to the caller.
static cudaGraphExec_t capture_chain20(cudaStream_t s, const float* x, const float* b, float* const* y, int n,
                                       cudaGraph_t* graph) {
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    chain20(s, x, b, y, n);
    CHECK(cudaGetLastError());
    CHECK(cudaStreamEndCapture(s, graph));
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, *graph, 0));
    return exec;
}

// The replay row's samples: cudaGraphLaunch + cudaStreamSynchronize, wall time per op (1/20
// of a replay) in a batch of REPLAYS.
static std::vector<double> replay_per_op(cudaStream_t s, cudaGraphExec_t exec) {
    return samples([&] {
        CHECK(cudaStreamSynchronize(s));
        double t = now_s();
        for (int r = 0; r < REPLAYS; r++) {
            CHECK(cudaGraphLaunch(exec, s));
            CHECK(cudaStreamSynchronize(s));
        }
        return (now_s() - t) / (REPLAYS * CHAIN) * 1e6;
    });
}

// Device time per replay: 100 replays back to back between two events, us.
static std::vector<double> replay_gpu(cudaStream_t s, cudaGraphExec_t exec) {
    const int GPU_REPLAYS = 100;
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    CHECK(cudaStreamSynchronize(s));
    std::vector<double> gpu = samples([&] {
        CHECK(cudaEventRecord(a, s));
        for (int i = 0; i < GPU_REPLAYS; i++) CHECK(cudaGraphLaunch(exec, s));
        CHECK(cudaEventRecord(b, s));
        CHECK(cudaEventSynchronize(b));
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, a, b));
        return ms * 1e3 / GPU_REPLAYS;
    });
    CHECK(cudaEventDestroy(a));
    CHECK(cudaEventDestroy(b));
    return gpu;
}

// The parts of one replay of the chain, each timed as benches/gpu/graph_breakdown.rs times
// them for locus's Graph and for the raw cudarc graph of the same launches (issue 35): the
// host time of cudaGraphLaunch (batches of 8, each after a synchronize); the device time
// per replay (100 back to back between two events); cudaStreamSynchronize of the idle
// stream; a replay + synchronize, wall. Units: us per replay (per call for the sync).
static void graph_breakdown(cudaStream_t s, cudaGraphExec_t exec) {
    const int BATCH = 8, BATCHES = 100, SYNCS = 2000, SYNCED = 1000;
    std::vector<double> launch = samples([&] {
        double timed = 0;
        for (int k = 0; k < BATCHES; k++) {
            CHECK(cudaStreamSynchronize(s));
            double t = now_s();
            for (int i = 0; i < BATCH; i++) CHECK(cudaGraphLaunch(exec, s));
            timed += now_s() - t;
        }
        CHECK(cudaStreamSynchronize(s));
        return timed / (BATCHES * BATCH) * 1e6;
    });
    row("cpp_graph_breakdown_launch", launch, "us",
        "C++ runtime graph of the 20 add_f32 launches: host time of one cudaGraphLaunch, in 100 batches of 8, each "
        "after a synchronize");
    row("cpp_graph_breakdown_gpu", replay_gpu(s, exec), "us",
        "C++ runtime graph of the 20 add_f32 launches: device time per replay, 100 replays back to back between two "
        "events");
    std::vector<double> idle = samples([&] {
        double t = now_s();
        for (int i = 0; i < SYNCS; i++) CHECK(cudaStreamSynchronize(s));
        return (now_s() - t) / SYNCS * 1e6;
    });
    row("cpp_graph_breakdown_sync", idle, "us",
        "C++ runtime: cudaStreamSynchronize of the idle stream, per call in a batch of 2000");
    std::vector<double> replay_sync = samples([&] {
        CHECK(cudaStreamSynchronize(s));
        double t = now_s();
        for (int i = 0; i < SYNCED; i++) {
            CHECK(cudaGraphLaunch(exec, s));
            CHECK(cudaStreamSynchronize(s));
        }
        return (now_s() - t) / SYNCED * 1e6;
    });
    row("cpp_graph_breakdown_replay_sync", replay_sync, "us",
        "C++ runtime graph of the 20 add_f32 launches: one cudaGraphLaunch + cudaStreamSynchronize, wall time per "
        "replay in a batch of 1000");
}

static void graph_chain20() {
    const int n = 1024;
    float *x, *b, *y[CHAIN];
    CHECK(cudaSetDevice(0));
    CHECK(cudaMalloc(&x, n * sizeof(float)));
    CHECK(cudaMalloc(&b, n * sizeof(float)));
    for (int i = 0; i < CHAIN; i++) CHECK(cudaMalloc(&y[i], n * sizeof(float)));
    CHECK(cudaMemset(x, 0, n * sizeof(float)));
    CHECK(cudaMemset(b, 0, n * sizeof(float)));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaDeviceSynchronize());
    // Replay: cudaGraphLaunch + cudaStreamSynchronize, per op (1/20 of a replay).
    cudaGraph_t graph;
    cudaGraphExec_t exec = capture_chain20(s, x, b, y, n, &graph);
    row("cpp_graph_chain20_replay", replay_per_op(s, exec), "us/op",
        "raw CUDA graph of 20 add launches on 1024 floats (y0 = x + b, yi = yi-1 + b), captured from a stream: "
        "cudaGraphLaunch + cudaStreamSynchronize, wall time per op (1/20 of a replay) in a batch of 1000 replays");
    graph_breakdown(s, exec);
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
    // Eager: the same 20 launches + cudaStreamSynchronize, per op.
    std::vector<double> eager = samples([&] {
        CHECK(cudaStreamSynchronize(s));
        double t = now_s();
        for (int r = 0; r < REPLAYS; r++) {
            chain20(s, x, b, y, n);
            CHECK(cudaStreamSynchronize(s));
        }
        double us = (now_s() - t) / (REPLAYS * CHAIN) * 1e6;
        CHECK(cudaGetLastError());
        return us;
    });
    row("cpp_graph_chain20_eager", eager, "us/op",
        "the same 20 launches on the stream, no graph, + cudaStreamSynchronize after the 20, wall time per op in a "
        "batch of 1000 chains");
    // Capture + instantiate, per capture; the graphs of a batch are destroyed after it is timed.
    std::vector<cudaGraph_t> graphs(CAPTURES);
    std::vector<cudaGraphExec_t> execs(CAPTURES);
    std::vector<double> capture = samples([&] {
        CHECK(cudaStreamSynchronize(s));
        double t = now_s();
        for (int i = 0; i < CAPTURES; i++) execs[i] = capture_chain20(s, x, b, y, n, &graphs[i]);
        double us = (now_s() - t) / CAPTURES * 1e6;
        for (int i = 0; i < CAPTURES; i++) {
            CHECK(cudaGraphExecDestroy(execs[i]));
            CHECK(cudaGraphDestroy(graphs[i]));
        }
        return us;
    });
    row("cpp_graph_chain20_capture", capture, "us",
        "cudaStreamBeginCapture + the 20 launches + cudaStreamEndCapture + cudaGraphInstantiate, wall time per "
        "capture in a batch of 100, graphs destroyed after the batch is timed");
    // Last, the replay once a second stream, alive beside the graph's, has run 20 launches:
    // the state of a framework's process, whose default stream (with the eager ops on it)
    // lives beside the stream a graph replays on. Session 49 saw a raw graph's device time
    // step by about 3.4 us per replay after the eighth launch on a second stream, and stay.
    cudaStream_t other;
    CHECK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
    for (int i = 0; i < CHAIN; i++) add_f32<<<(n + 255) / 256, 256, 0, other>>>(x, b, y[0], n);
    CHECK(cudaStreamSynchronize(other));
    exec = capture_chain20(s, x, b, y, n, &graph);
    row("cpp_graph_chain20_replay_second_stream", replay_per_op(s, exec), "us/op",
        "the replay row's graph, captured again after a second stream (kept alive) ran 20 add launches: "
        "cudaGraphLaunch + cudaStreamSynchronize, wall time per op in a batch of 1000 replays");
    row("cpp_graph_breakdown_gpu_second_stream", replay_gpu(s, exec), "us",
        "the same graph's device time per replay after the second stream's launches, 100 replays back to back "
        "between two events");
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
    CHECK(cudaStreamDestroy(other));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(x));
    CHECK(cudaFree(b));
    for (int i = 0; i < CHAIN; i++) CHECK(cudaFree(y[i]));
}

int main(int argc, char** argv) {
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            g_warm = 1;
            g_reps = 5;
        }
        if (strcmp(argv[i], "--keep-eager-stream") == 0) g_keep_eager = true;
    }
    int count = 0;
    CHECK(cudaGetDeviceCount(&count));
    int runtime = 0;
    CHECK(cudaRuntimeGetVersion(&runtime));
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("# cpp baseline: CUDA runtime %d.%d, %s, %d GPU(s)\n", runtime / 1000, (runtime % 1000) / 10, prop.name,
           count);
    printf("# row\tmedian\tunit\tnote\tmin\tmax\n");
    printf("# method: %d untimed then %d timed samples per row; median, min, max\n", g_warm, g_reps);
    // Start the contexts the guard rows touch, so that no sample pays for it.
    for (int d = 0; d < std::min(count, 2); d++) {
        CHECK(cudaSetDevice(d));
        CHECK(cudaFree(0));
    }
    CHECK(cudaSetDevice(0));
    row("cpp_guard_pair_same_device", guard_pairs(0, 1000000), "ns",
        "c10's guard pair: cudaGetDevice twice, no cudaSetDevice (device 0 current), per pair in a batch of 1000000");
    if (count >= 2) {
        row("cpp_guard_pair_switch_device", guard_pairs(1, 100000), "ns",
            "c10's guard pair: cudaGetDevice + cudaSetDevice(1) + cudaGetDevice + cudaSetDevice(0), from device 0, per pair in a batch of 100000");
    } else {
        row_na("cpp_guard_pair_switch_device", "ns", "one GPU: no other device to switch to");
    }
    small_add();
    graph_chain20();
    if (g_eager_kept) CHECK(cudaStreamDestroy(g_eager_kept));
    return 0;
}
