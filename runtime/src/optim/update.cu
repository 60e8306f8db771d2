// The optimizers' updates and gradient clipping as CUDA C, compiled by NVRTC (the path of
// `#[locus::kernel]`); optim/fused.rs and optim/multi.rs launch them and hold their host
// fallbacks. 16-bit types compute in f32 and round once, ties to even.

__device__ __forceinline__ float ld(const float* p, unsigned long long i) { return p[i]; }
__device__ __forceinline__ void st(float* p, unsigned long long i, float v) { p[i] = v; }
__device__ __forceinline__ double ld(const double* p, unsigned long long i) { return p[i]; }
__device__ __forceinline__ void st(double* p, unsigned long long i, double v) { p[i] = v; }
struct bf16 { unsigned short b; };
struct f16 { unsigned short b; };
__device__ __forceinline__ float ld(const bf16* p, unsigned long long i) { return __uint_as_float(((unsigned)p[i].b) << 16); }
__device__ __forceinline__ void st(bf16* p, unsigned long long i, float v) {
    unsigned u = __float_as_uint(v);
    unsigned short r = (v != v) ? (unsigned short)((u >> 16) | 0x40) : (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    p[i].b = r;
}
__device__ __forceinline__ float ld(const f16* p, unsigned long long i) {
    float f; unsigned short h = p[i].b; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f;
}
__device__ __forceinline__ void st(f16* p, unsigned long long i, float v) {
    unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v)); p[i].b = h;
}

// `v` rounded to T and back.
template <typename T, typename C>
__device__ __forceinline__ C rnd(C v) { T t; st(&t, 0, v); return ld(&t, 0); }

// ---- One parameter per launch (SGD; AdamW's element update, which the launches of many
// tensors below call) ----

template <typename T, typename C>
__device__ __forceinline__ void adamw_at(T* p, const T* g, T* m, T* v, C decay, C b1, C b2, C eps, C step, C bc2_sqrt, unsigned long long i) {
    C gi = ld(g, i);
    C mi = b1 * ld(m, i) + (C(1) - b1) * gi;
    C vi = b2 * ld(v, i) + (C(1) - b2) * gi * gi;
    st(m, i, mi);
    st(v, i, vi);
    C pi = ld(p, i) * decay;
    st(p, i, pi - step * mi / (sqrt(vi) / bc2_sqrt + eps));
}

template <typename T, typename C>
__device__ void sgd(T* p, const T* g, T* buf, C lr, C wd, C momentum, C dampening, int nesterov, int first, unsigned long long n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (; i < n; i += stride) {
        C pi = ld(p, i);
        C gi = ld(g, i) + wd * pi;
        if (momentum != C(0)) {
            C b = first ? gi : momentum * ld(buf, i) + (C(1) - dampening) * gi;
            st(buf, i, b);
            gi = nesterov ? gi + momentum * b : b;
        }
        st(p, i, pi - lr * gi);
    }
}

#define SGD(name, T, C) extern "C" __global__ void name(T* p, const T* g, T* buf, C lr, C wd, C momentum, C dampening, int nesterov, int first, unsigned long long n) { sgd<T, C>(p, g, buf, lr, wd, momentum, dampening, nesterov, first, n); }
SGD(locus_sgd_f32, float, float)
SGD(locus_sgd_f64, double, double)
SGD(locus_sgd_bf16, bf16, float)
SGD(locus_sgd_f16, f16, float)

// ---- Many tensors per launch (PyTorch's multi_tensor_apply) ----
//
// A launch takes up to 32 slots, each a group of tensors of one element count `n`; slots
// from `count` on are unused (their pointers 0, their counts 0). The block's threads copy
// the slots from the parameters into shared memory once, then each thread walks every
// slot with a grid-stride loop. The order of work is fixed by the geometry, so results
// are the same every run.

#define MULTI_SLOTS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15) \
    X(16) X(17) X(18) X(19) X(20) X(21) X(22) X(23) X(24) X(25) X(26) X(27) X(28) X(29) X(30) X(31)
#define MULTI 32

struct Slots4 { void* a[MULTI]; void* b[MULTI]; void* c[MULTI]; void* d[MULTI]; unsigned long long n[MULTI]; };
struct Slots1 { void* a[MULTI]; unsigned long long n[MULTI]; };

#define SLOT4_PARAM(i) , void* sa##i, const void* sb##i, void* sc##i, void* sd##i, unsigned long long sn##i
#define SLOT4_FILL(i) if (threadIdx.x == i) { s.a[i] = sa##i; s.b[i] = (void*)sb##i; s.c[i] = sc##i; s.d[i] = sd##i; s.n[i] = sn##i; }
#define SLOT1_PARAM(i) , void* sa##i, unsigned long long sn##i
#define SLOT1_CONST_PARAM(i) , const void* sa##i, unsigned long long sn##i
#define SLOT1_FILL(i) if (threadIdx.x == i) { s.a[i] = (void*)sa##i; s.n[i] = sn##i; }

// AdamW over `count` slots of (parameter, gradient, m, v).
template <typename T, typename C>
__device__ void adamw_multi(const Slots4& s, int count, C decay, C b1, C b2, C eps, C step, C bc2_sqrt) {
    unsigned long long start = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (int t = 0; t < count; ++t) {
        T* p = (T*)s.a[t];
        const T* g = (const T*)s.b[t];
        T* m = (T*)s.c[t];
        T* v = (T*)s.d[t];
        unsigned long long n = s.n[t];
        for (unsigned long long i = start; i < n; i += stride) adamw_at<T, C>(p, g, m, v, decay, b1, b2, eps, step, bc2_sqrt, i);
    }
}

// The values that change each step (decay, step size, sqrt(1 - b2^t)) come as arguments,
// or, in the _dev kernels, from a device tensor, so that a captured graph takes each
// replay's step from there.
#define ADAMW_MULTI(name, T, C) extern "C" __global__ void name(int count, C decay, C b1, C b2, C eps, C step, C bc2_sqrt MULTI_SLOTS(SLOT4_PARAM)) { \
    __shared__ Slots4 s; MULTI_SLOTS(SLOT4_FILL) __syncthreads(); adamw_multi<T, C>(s, count, decay, b1, b2, eps, step, bc2_sqrt); }
#define ADAMW_MULTI_DEV(name, T, C) extern "C" __global__ void name(int count, const double* hyper, C b1, C b2, C eps MULTI_SLOTS(SLOT4_PARAM)) { \
    __shared__ Slots4 s; MULTI_SLOTS(SLOT4_FILL) __syncthreads(); adamw_multi<T, C>(s, count, (C)hyper[0], b1, b2, eps, (C)hyper[1], (C)hyper[2]); }
ADAMW_MULTI(locus_adamw_multi_f32, float, float)
ADAMW_MULTI(locus_adamw_multi_f64, double, double)
ADAMW_MULTI(locus_adamw_multi_bf16, bf16, float)
ADAMW_MULTI(locus_adamw_multi_f16, f16, float)
ADAMW_MULTI_DEV(locus_adamw_multi_dev_f32, float, float)
ADAMW_MULTI_DEV(locus_adamw_multi_dev_f64, double, double)
ADAMW_MULTI_DEV(locus_adamw_multi_dev_bf16, bf16, float)
ADAMW_MULTI_DEV(locus_adamw_multi_dev_f16, f16, float)

// The sum of `v` over the block, in thread 0 (blockDim.x a multiple of 32, at most 1024).
template <typename C>
__device__ C block_sum(C v) {
    __shared__ C warps[32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    if (lane == 0) warps[w] = v;
    __syncthreads();
    if (w == 0) {
        v = threadIdx.x < (blockDim.x >> 5) ? warps[lane] : C(0);
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    }
    return v;
}

// Each block's sum of the squares of its share of `count` slots, into
// partials[base + blockIdx.x] (blocks < `blocks`).
template <typename T, typename C>
__device__ void sumsq_multi(const Slots1& s, int count, unsigned long long base, unsigned long long blocks, double* partials) {
    unsigned long long start = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    C acc = C(0);
    for (int t = 0; t < count; ++t) {
        const T* g = (const T*)s.a[t];
        unsigned long long n = s.n[t];
        for (unsigned long long i = start; i < n; i += stride) { C x = ld(g, i); acc += x * x; }
    }
    acc = block_sum<C>(acc);
    if (threadIdx.x == 0 && blockIdx.x < blocks) partials[base + blockIdx.x] = (double)acc;
}

// norm = sqrt(sum of partials); coef = min(1, max_norm / (norm + 1e-6)), each rounded to T
// as the ops `sqrt`, `shifted`, the division and `clamp` would.
template <typename T, typename C>
__device__ void clip_coef(const double* partials, unsigned long long len, C max_norm, T* norm, T* coef) {
    double acc = 0.0;
    for (unsigned long long i = threadIdx.x; i < len; i += blockDim.x) acc += partials[i];
    acc = block_sum<double>(acc);
    if (threadIdx.x == 0) {
        C nrm = rnd<T, C>(sqrt((C)rnd<T, C>((C)acc)));
        C c = rnd<T, C>(max_norm / rnd<T, C>(nrm + C(1e-6)));
        if (c > C(1)) c = C(1);
        if (c < C(0)) c = C(0);
        st(norm, 0, nrm);
        st(coef, 0, c);
    }
}

// Every element of `count` slots times coef[0], in place.
template <typename T, typename C>
__device__ void scale_multi(const Slots1& s, int count, const T* coef) {
    unsigned long long start = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    C k = ld(coef, 0);
    for (int t = 0; t < count; ++t) {
        T* g = (T*)s.a[t];
        unsigned long long n = s.n[t];
        for (unsigned long long i = start; i < n; i += stride) st(g, i, ld(g, i) * k);
    }
}

#define SUMSQ_MULTI(name, T, C) extern "C" __global__ void name(int count, unsigned long long base, unsigned long long blocks, double* partials MULTI_SLOTS(SLOT1_CONST_PARAM)) { \
    __shared__ Slots1 s; MULTI_SLOTS(SLOT1_FILL) __syncthreads(); sumsq_multi<T, C>(s, count, base, blocks, partials); }
#define CLIP_COEF(name, T, C) extern "C" __global__ void name(const double* partials, unsigned long long len, C max_norm, T* norm, T* coef) { \
    clip_coef<T, C>(partials, len, max_norm, norm, coef); }
#define SCALE_MULTI(name, T, C) extern "C" __global__ void name(int count, const T* coef MULTI_SLOTS(SLOT1_PARAM)) { \
    __shared__ Slots1 s; MULTI_SLOTS(SLOT1_FILL) __syncthreads(); scale_multi<T, C>(s, count, coef); }
SUMSQ_MULTI(locus_sumsq_multi_f32, float, float)
SUMSQ_MULTI(locus_sumsq_multi_f64, double, double)
SUMSQ_MULTI(locus_sumsq_multi_bf16, bf16, float)
SUMSQ_MULTI(locus_sumsq_multi_f16, f16, float)
CLIP_COEF(locus_clip_coef_f32, float, float)
CLIP_COEF(locus_clip_coef_f64, double, double)
CLIP_COEF(locus_clip_coef_bf16, bf16, float)
CLIP_COEF(locus_clip_coef_f16, f16, float)
SCALE_MULTI(locus_scale_multi_f32, float, float)
SCALE_MULTI(locus_scale_multi_f64, double, double)
SCALE_MULTI(locus_scale_multi_bf16, bf16, float)
SCALE_MULTI(locus_scale_multi_f16, f16, float)
