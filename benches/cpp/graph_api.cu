// Where the C++ runtime's graph replay is faster than the driver API's (issue 35): the same
// 20-add chain, one process, replayed + synchronized four ways, and its device time.
//
//     nvcc -O3 -arch=sm_90 -o graph_api benches/cpp/graph_api.cu -lcuda -lnvrtc && ./graph_api
//
// rt:     captured with <<<>>>, cudaGraphLaunch + cudaStreamSynchronize (baseline.cu's row)
// drv:    the same executable graph, cuGraphLaunch + cuStreamSynchronize
// drvcap: the nvcc kernel (cudaGetFuncBySymbol) captured with cuLaunchKernel from
//         cuStreamBeginCapture, cuGraphInstantiate, cuGraphLaunch + cuStreamSynchronize
// nvrtc:  as drvcap, the kernel compiled by NVRTC to PTX and loaded with cuModuleLoadData
//         (what cudarc and locus do)
// spread: as drvcap, each buffer at the start of its own 64 MiB allocation
// pool:   as drvcap, the buffers from cuMemAllocAsync (the device's default pool), as in cudarc
// Each: replay + synchronize wall per replay (batch of 1000), device time per replay (100
// back to back between two events), host time of the launch call alone. 11 samples each,
// median [min, max].
#include <cuda.h>
#include <cuda_runtime.h>
#include <nvrtc.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#define RT(call)                                                                             \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess) {                                                             \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)
#define DRV(call)                                                           \
    do {                                                                    \
        CUresult e_ = (call);                                               \
        if (e_ != CUDA_SUCCESS) {                                           \
            fprintf(stderr, "%s:%d %s: %d\n", __FILE__, __LINE__, #call, (int)e_); \
            exit(1);                                                        \
        }                                                                   \
    } while (0)

static const char* SRC =
    "extern \"C\" __global__ void add_f32(const float* __restrict__ a, const float* __restrict__ b, "
    "float* __restrict__ out, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) out[i] = a[i] + b[i]; }";

extern "C" __global__ void add_f32(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ out,
                                   int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}

static double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static void report(const char* name, std::vector<double> v) {
    std::sort(v.begin(), v.end());
    printf("%-28s %8.3f  [%.3f, %.3f] us\n", name, v[v.size() / 2], v.front(), v.back());
    fflush(stdout);
}

static std::vector<double> samples(const std::function<double()>& f) {
    for (int i = 0; i < 3; i++) f();
    std::vector<double> v;
    for (int i = 0; i < 11; i++) v.push_back(f());
    return v;
}

const int N = 1024, CHAIN = 20;

static void measure(const char* tag, CUstream s, const std::function<void()>& launch, const std::function<void()>& sync) {
    char name[64];
    snprintf(name, sizeof name, "%s replay+sync", tag);
    report(name, samples([&] {
               sync();
               double t = now_s();
               for (int i = 0; i < 1000; i++) {
                   launch();
                   sync();
               }
               return (now_s() - t) / 1000 * 1e6;
           }));
    CUevent a, b;
    DRV(cuEventCreate(&a, CU_EVENT_DEFAULT));
    DRV(cuEventCreate(&b, CU_EVENT_DEFAULT));
    snprintf(name, sizeof name, "%s gpu", tag);
    report(name, samples([&] {
               DRV(cuEventRecord(a, s));
               for (int i = 0; i < 100; i++) launch();
               DRV(cuEventRecord(b, s));
               DRV(cuEventSynchronize(b));
               float ms = 0;
               DRV(cuEventElapsedTime(&ms, a, b));
               return ms * 1e3 / 100;
           }));
    snprintf(name, sizeof name, "%s launch", tag);
    report(name, samples([&] {
               double timed = 0;
               for (int k = 0; k < 100; k++) {
                   sync();
                   double t = now_s();
                   for (int i = 0; i < 8; i++) launch();
                   timed += now_s() - t;
               }
               sync();
               return timed / 800 * 1e6;
           }));
    DRV(cuEventDestroy(a));
    DRV(cuEventDestroy(b));
}

static CUgraphExec capture_driver(CUstream s, CUfunction f, float* x, float* b, float** y) {
    DRV(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    for (int i = 0; i < CHAIN; i++) {
        const float* in = i == 0 ? x : y[i - 1];
        float* out = y[i];
        int n = N;
        void* args[] = {&in, &b, &out, &n};
        DRV(cuLaunchKernel(f, (N + 255) / 256, 1, 1, 256, 1, 1, 0, s, args, nullptr));
    }
    CUgraph g;
    DRV(cuStreamEndCapture(s, &g));
    CUgraphExec e;
    DRV(cuGraphInstantiate(&e, g, 0));
    return e;
}

int main() {
    RT(cudaSetDevice(0));
    float *x, *b, *y[CHAIN];
    RT(cudaMalloc(&x, N * 4));
    RT(cudaMalloc(&b, N * 4));
    for (int i = 0; i < CHAIN; i++) RT(cudaMalloc(&y[i], N * 4));
    RT(cudaMemset(x, 0, N * 4));
    RT(cudaMemset(b, 0, N * 4));
    cudaStream_t s;
    RT(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    RT(cudaDeviceSynchronize());

    // rt: the runtime capture of baseline.cu.
    cudaGraph_t graph;
    RT(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < CHAIN; i++) add_f32<<<(N + 255) / 256, 256, 0, s>>>(i == 0 ? x : y[i - 1], b, y[i], N);
    RT(cudaStreamEndCapture(s, &graph));
    cudaGraphExec_t exec;
    RT(cudaGraphInstantiate(&exec, graph, 0));
    measure("rt", s, [&] { RT(cudaGraphLaunch(exec, s)); }, [&] { RT(cudaStreamSynchronize(s)); });
    measure("drv", s, [&] { DRV(cuGraphLaunch(exec, s)); }, [&] { DRV(cuStreamSynchronize(s)); });

    // drvcap: the nvcc kernel through the driver API.
    cudaFunction_t fn;
    RT(cudaGetFuncBySymbol(&fn, (const void*)add_f32));
    CUgraphExec e1 = capture_driver(s, (CUfunction)fn, x, b, y);
    measure("drvcap", s, [&] { DRV(cuGraphLaunch(e1, s)); }, [&] { DRV(cuStreamSynchronize(s)); });

    // nvrtc: PTX from NVRTC, loaded as a module.
    int maj = 0, min = 0;
    RT(cudaDeviceGetAttribute(&maj, cudaDevAttrComputeCapabilityMajor, 0));
    RT(cudaDeviceGetAttribute(&min, cudaDevAttrComputeCapabilityMinor, 0));
    int nv_major = 0, nv_minor = 0, drv = 0;
    nvrtcVersion(&nv_major, &nv_minor);
    DRV(cuDriverGetVersion(&drv));
    printf("# nvrtc %d.%d, driver API %d\n", nv_major, nv_minor, drv);
    nvrtcProgram prog;
    if (nvrtcCreateProgram(&prog, SRC, "add.cu", 0, nullptr, nullptr) != NVRTC_SUCCESS) return 2;
    char arch[64];
    snprintf(arch, sizeof arch, "--gpu-architecture=compute_%d%d", maj, min);
    const char* opts[] = {arch};
    if (nvrtcCompileProgram(prog, 1, opts) != NVRTC_SUCCESS) return 3;
    size_t len = 0;
    nvrtcGetPTXSize(prog, &len);
    std::vector<char> ptx(len);
    nvrtcGetPTX(prog, ptx.data());
    for (const char* line = ptx.data(); line && *line;) {
        const char* end = strchr(line, '\n');
        if (!strncmp(line, ".version", 8) || !strncmp(line, ".target", 7))
            printf("# PTX: %.*s\n", (int)(end ? end - line : strlen(line)), line);
        line = end ? end + 1 : nullptr;
    }
    CUmodule m;
    DRV(cuModuleLoadData(&m, ptx.data()));
    CUfunction f2;
    DRV(cuModuleGetFunction(&f2, m, "add_f32"));
    CUgraphExec e2 = capture_driver(s, f2, x, b, y);
    measure("nvrtc", s, [&] { DRV(cuGraphLaunch(e2, s)); }, [&] { DRV(cuStreamSynchronize(s)); });
    // spread: the nvcc kernel through the runtime, each buffer at the start of an
    // allocation of its own of 64 MiB, so that no two share a page of the GPU's TLB.
    float *sx, *sb, *sy[CHAIN];
    RT(cudaMalloc(&sx, 64 << 20));
    RT(cudaMalloc(&sb, 64 << 20));
    for (int i = 0; i < CHAIN; i++) RT(cudaMalloc(&sy[i], 64 << 20));
    RT(cudaMemset(sx, 0, N * 4));
    RT(cudaMemset(sb, 0, N * 4));
    CUgraphExec e3 = capture_driver(s, (CUfunction)fn, sx, sb, sy);
    measure("spread", s, [&] { DRV(cuGraphLaunch(e3, s)); }, [&] { DRV(cuStreamSynchronize(s)); });
    // pool: as drvcap, the buffers from the stream-ordered allocator (cuMemAllocAsync from
    // the device's default pool), where cudarc and locus allocate, not cudaMalloc.
    CUdeviceptr px, pb, py[CHAIN];
    DRV(cuMemAllocAsync(&px, N * 4, s));
    DRV(cuMemAllocAsync(&pb, N * 4, s));
    for (int i = 0; i < CHAIN; i++) DRV(cuMemAllocAsync(&py[i], N * 4, s));
    DRV(cuMemsetD8Async(px, 0, N * 4, s));
    DRV(cuMemsetD8Async(pb, 0, N * 4, s));
    DRV(cuStreamSynchronize(s));
    float* pyf[CHAIN];
    for (int i = 0; i < CHAIN; i++) pyf[i] = (float*)py[i];
    CUgraphExec e4 = capture_driver(s, (CUfunction)fn, (float*)px, (float*)pb, pyf);
    measure("pool", s, [&] { DRV(cuGraphLaunch(e4, s)); }, [&] { DRV(cuStreamSynchronize(s)); });
    // rt again, last: the order is not what differs.
    measure("rt-again", s, [&] { RT(cudaGraphLaunch(exec, s)); }, [&] { RT(cudaStreamSynchronize(s)); });
    return 0;
}
