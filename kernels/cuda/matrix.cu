// Matrix kernels: a tiled transpose, matmul for integer types (floats use cuBLAS), and
// strided block copies (narrow, select, cat and stack along any dim).

#define TILE 32

template <typename T> __device__ void transpose(const T* __restrict__ x, T* __restrict__ out, u64 rows, u64 cols) {
    __shared__ T tile[TILE][TILE + 1];  // +1 avoids shared-memory bank conflicts
    const u64 bx = (u64)blockIdx.x * TILE, by = (u64)blockIdx.y * TILE;
    for (int j = threadIdx.y; j < TILE; j += blockDim.y) {
        const u64 r = by + j, c = bx + threadIdx.x;
        if (r < rows && c < cols) tile[j][threadIdx.x] = x[r * cols + c];
    }
    __syncthreads();
    for (int j = threadIdx.y; j < TILE; j += blockDim.y) {
        const u64 r = bx + j, c = by + threadIdx.x;  // out is [cols, rows]
        if (r < cols && c < rows) out[r * rows + c] = tile[threadIdx.x][j];
    }
}

#define MM_TILE 16

// out[m, n] = a[m, k] x b[k, n], wrapping integer arithmetic.
template <typename T> __device__ void matmul(const T* a, const T* b, T* out, u64 m, u64 k, u64 n) {
    __shared__ T as[MM_TILE][MM_TILE];
    __shared__ T bs[MM_TILE][MM_TILE];
    const u64 row = (u64)blockIdx.y * MM_TILE + threadIdx.y, col = (u64)blockIdx.x * MM_TILE + threadIdx.x;
    T acc = 0;
    for (u64 t = 0; t < k; t += MM_TILE) {
        as[threadIdx.y][threadIdx.x] = (row < m && t + threadIdx.x < k) ? a[row * k + t + threadIdx.x] : (T)0;
        bs[threadIdx.y][threadIdx.x] = (col < n && t + threadIdx.y < k) ? b[(t + threadIdx.y) * n + col] : (T)0;
        __syncthreads();
#pragma unroll
        for (int p = 0; p < MM_TILE; p++) acc = op_add(acc, op_mul(as[threadIdx.y][p], bs[p][threadIdx.x]));
        __syncthreads();
    }
    if (row < m && col < n) out[row * n + col] = acc;
}

// Block i of `block` elements from src + i * src_stride to out + i * dst_stride, for i
// in [0, count); the caller offsets both pointers.
template <typename T>
__device__ void copy_blocks(const T* __restrict__ src, T* __restrict__ out, u64 count, u64 block, u64 src_stride,
                            u64 dst_stride) {
    GRID_LOOP(i, count * block) {
        const u64 b = i / block, j = i - b * block;
        out[b * dst_stride + j] = src[b * src_stride + j];
    }
}

#define MATRIX(T)                                                                                         \
    extern "C" __global__ void transpose_##T(const T* x, T* out, u64 rows, u64 cols) { transpose<T>(x, out, rows, cols); } \
    extern "C" __global__ void matmul_##T(const T* a, const T* b, T* out, u64 m, u64 k, u64 n) { matmul<T>(a, b, out, m, k, n); } \
    extern "C" __global__ void copy_blocks_##T(const T* src, T* out, u64 count, u64 block, u64 src_stride, u64 dst_stride) { \
        copy_blocks<T>(src, out, count, block, src_stride, dst_stride);                                  \
    }

MATRIX(f32)
MATRIX(f64)
MATRIX(i32)
MATRIX(u8)
// The 16-bit types: transposes and block copies (their matmul is cuBLAS's).
#define MOVES(T)                                                                                          \
    extern "C" __global__ void transpose_##T(const T* x, T* out, u64 rows, u64 cols) { transpose<T>(x, out, rows, cols); } \
    extern "C" __global__ void copy_blocks_##T(const T* src, T* out, u64 count, u64 block, u64 src_stride, u64 dst_stride) { \
        copy_blocks<T>(src, out, count, block, src_stride, dst_stride);                                  \
    }
MOVES(bf16)
MOVES(f16)
