// Initialisers: fill, arange and seeded uniform and normal random values.

template <typename T> __device__ void fill(T* out, u64 n, T v) {
    GRID_LOOP(i, n) out[i] = v;
}

// start + i * step in f64 without contraction to an FMA, so the value is the same as
// the host backend's.
template <typename T> __device__ void arange(T* out, u64 n, f64 start, f64 step) {
    GRID_LOOP(i, n) out[i] = (T)__dadd_rn(start, __dmul_rn((f64)i, step));
}

// SplitMix64 of a counter: the same bits as the host backend's rand_bits.
__device__ __forceinline__ u64 rand_bits(u64 seed, u64 i) {
    u64 z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

extern "C" __global__ void rand_f32(f32* out, u64 n, u64 seed) {
    GRID_LOOP(i, n) out[i] = (f32)(rand_bits(seed, i) >> 40) * (1.0f / 16777216.0f);
}
extern "C" __global__ void rand_f64(f64* out, u64 n, u64 seed) {
    GRID_LOOP(i, n) out[i] = (f64)(rand_bits(seed, i) >> 11) * (1.0 / 9007199254740992.0);
}

#define INIT(T)                                                                                      \
    extern "C" __global__ void fill_##T(T* out, u64 n, T v) { fill<T>(out, n, v); }                  \
    extern "C" __global__ void arange_##T(T* out, u64 n, f64 start, f64 step) { arange<T>(out, n, start, step); }

INIT(f32)
INIT(f64)
INIT(i32)
INIT(i64)
INIT(u8)
INIT(bf16)
INIT(f16)

// The top 8 (bf16) or 11 (f16) random bits, scaled into [0, 1): exact, as on the host.
extern "C" __global__ void rand_bf16(bf16* out, u64 n, u64 seed) {
    GRID_LOOP(i, n) out[i] = bf16((f32)(rand_bits(seed, i) >> 56) * (1.0f / 256.0f));
}
extern "C" __global__ void rand_f16(f16* out, u64 n, u64 seed) {
    GRID_LOOP(i, n) out[i] = f16((f32)(rand_bits(seed, i) >> 53) * (1.0f / 2048.0f));
}

// Box-Muller in f64, the host's `normal` (runtime/src/backend/api/rand.rs) term for term:
// elements 2k and 2k + 1 are the cosine and sine halves of the pair made of rand_bits 2k
// (u1 in (0, 1]) and 2k + 1 (u2 in [0, 1)). `seed` is already the normal stream's.
// No sum to contract into an FMA; the GPU's log, cos and sin are within 2 ulp of the
// host's, so the values agree to f64's last bits and, after rounding, almost always exactly.
__device__ __forceinline__ f64 normal(u64 seed, u64 i) {
    const u64 k = i & ~1ull;
    const f64 u1 = (f64)((rand_bits(seed, k) >> 11) + 1) * (1.0 / 9007199254740992.0);
    const f64 u2 = (f64)(rand_bits(seed, k + 1) >> 11) * (1.0 / 9007199254740992.0);
    const f64 r = sqrt(-2.0 * log(u1));
    const f64 t = 6.283185307179586 * u2;
    return r * ((i & 1) ? sin(t) : cos(t));
}

#define RANDN(T) \
    extern "C" __global__ void randn_##T(T* out, u64 n, u64 seed) { GRID_LOOP(i, n) out[i] = T(normal(seed, i)); }
RANDN(f32)
RANDN(f64)
RANDN(bf16)
RANDN(f16)
