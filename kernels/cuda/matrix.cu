// Matrix kernels: a batched tiled transpose, batched matmul for integer types (floats
// use cuBLAS), strided block copies (narrow, select, cat and stack along any dim), and
// the strided copy of a permutation of dims (transpose of any two dims).

#define TILE 32

// `batch` row-major [rows, cols] matrices, one after another, each written as its
// [cols, rows] transpose through a shared-memory tile. blockIdx.x walks the tiles along
// cols; blockIdx.y and blockIdx.z loop over the tiles along rows and over the batch, so
// that any count fits the grid's 65535 limit in y and z.
template <typename T>
__device__ void transpose(const T* __restrict__ x, T* __restrict__ out, u64 rows, u64 cols, u64 batch) {
    __shared__ T tile[TILE][TILE + 1];  // +1 avoids shared-memory bank conflicts
    const u64 bx = (u64)blockIdx.x * TILE, tiles_y = (rows + TILE - 1) / TILE;
    for (u64 z = blockIdx.z; z < batch; z += gridDim.z) {
        const T* xz = x + z * rows * cols;
        T* oz = out + z * rows * cols;
        for (u64 ty = blockIdx.y; ty < tiles_y; ty += gridDim.y) {
            const u64 by = ty * TILE;
            for (int j = threadIdx.y; j < TILE; j += blockDim.y) {
                const u64 r = by + j, c = bx + threadIdx.x;
                if (r < rows && c < cols) tile[j][threadIdx.x] = xz[r * cols + c];
            }
            __syncthreads();
            for (int j = threadIdx.y; j < TILE; j += blockDim.y) {
                const u64 r = bx + j, c = by + threadIdx.x;  // out is [cols, rows]
                if (r < cols && c < rows) oz[r * rows + c] = tile[threadIdx.x][j];
            }
            __syncthreads();  // the tile is read before the next one is written
        }
    }
}

#define MM_TILE 16

// out[z] = a[z] x b[z] for z in [0, batch): [m, k] x [k, n] each, wrapping integer
// arithmetic. a[z] starts at a + z * m * k, out[z] at out + z * m * n, and b[z] at
// b + z * rhs_stride (0: one rhs for the whole batch). blockIdx.z loops over the batch.
template <typename T>
__device__ void matmul(const T* a, const T* b, T* out, u64 m, u64 k, u64 n, u64 batch, u64 rhs_stride) {
    __shared__ T as[MM_TILE][MM_TILE];
    __shared__ T bs[MM_TILE][MM_TILE];
    const u64 row = (u64)blockIdx.y * MM_TILE + threadIdx.y, col = (u64)blockIdx.x * MM_TILE + threadIdx.x;
    for (u64 z = blockIdx.z; z < batch; z += gridDim.z) {
        const T* az = a + z * m * k;
        const T* bz = b + z * rhs_stride;
        T acc = 0;
        for (u64 t = 0; t < k; t += MM_TILE) {
            as[threadIdx.y][threadIdx.x] = (row < m && t + threadIdx.x < k) ? az[row * k + t + threadIdx.x] : (T)0;
            bs[threadIdx.y][threadIdx.x] = (col < n && t + threadIdx.y < k) ? bz[(t + threadIdx.y) * n + col] : (T)0;
            __syncthreads();
#pragma unroll
            for (int p = 0; p < MM_TILE; p++) acc = op_add(acc, op_mul(as[threadIdx.y][p], bs[p][threadIdx.x]));
            __syncthreads();
        }
        if (row < m && col < n) out[z * m * n + row * n + col] = acc;
    }
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

// A padded copy: block i of `block` elements from src + i * block to out + i * dst_stride
// + at, for i in [0, count), and zeros in every other element of the count * dst_stride
// of out (a narrow's gradient: the slice, zeros around it), in one pass.
template <typename T>
__device__ void pad_blocks(const T* __restrict__ src, T* __restrict__ out, u64 count, u64 block, u64 dst_stride,
                           u64 at) {
    GRID_LOOP(i, count * dst_stride) {
        const u64 b = i / dst_stride, j = i - b * dst_stride;
        out[i] = j >= at && j - at < block ? src[b * block + (j - at)] : (T)0.0f;
    }
}

// Up to 8 dims of a strided copy: the output's dims, outermost first, and how far one
// step along each moves in the source. Matches `Strided` in backend/cuda/permute.rs.
struct Strided {
    int rank;
    u64 shape[8];
    u64 stride[8];
};

// out[i] = the source element at output index i, for i in [0, n): a permutation of a
// row-major tensor's dims (transpose of any two dims). Writes are in order (coalesced).
template <typename T> __device__ void permute(const T* __restrict__ x, T* __restrict__ out, u64 n, const Strided& s) {
    GRID_LOOP(i, n) {
        u64 rest = i, src = 0;
        for (int d = s.rank - 1; d >= 0; d--) {
            const u64 idx = rest % s.shape[d];
            rest /= s.shape[d];
            src += idx * s.stride[d];
        }
        out[i] = x[src];
    }
}

#define MATRIX(T)                                                                                         \
    extern "C" __global__ void transpose_##T(const T* x, T* out, u64 rows, u64 cols, u64 batch) {         \
        transpose<T>(x, out, rows, cols, batch);                                                         \
    }                                                                                                     \
    extern "C" __global__ void matmul_##T(const T* a, const T* b, T* out, u64 m, u64 k, u64 n, u64 batch, \
                                          u64 rhs_stride) {                                              \
        matmul<T>(a, b, out, m, k, n, batch, rhs_stride);                                                \
    }                                                                                                     \
    extern "C" __global__ void permute_##T(const T* x, T* out, u64 n, Strided s) { permute<T>(x, out, n, s); } \
    extern "C" __global__ void copy_blocks_##T(const T* src, T* out, u64 count, u64 block, u64 src_stride, u64 dst_stride) { \
        copy_blocks<T>(src, out, count, block, src_stride, dst_stride);                                  \
    }                                                                                                     \
    extern "C" __global__ void pad_blocks_##T(const T* src, T* out, u64 count, u64 block, u64 dst_stride, u64 at) { \
        pad_blocks<T>(src, out, count, block, dst_stride, at);                                           \
    }

MATRIX(f32)
MATRIX(f64)
MATRIX(i32)
MATRIX(i64)
MATRIX(u8)
// The 16-bit types: transposes, permutations and block copies (their matmul is cuBLAS's).
#define MOVES(T)                                                                                          \
    extern "C" __global__ void transpose_##T(const T* x, T* out, u64 rows, u64 cols, u64 batch) {         \
        transpose<T>(x, out, rows, cols, batch);                                                         \
    }                                                                                                     \
    extern "C" __global__ void permute_##T(const T* x, T* out, u64 n, Strided s) { permute<T>(x, out, n, s); } \
    extern "C" __global__ void copy_blocks_##T(const T* src, T* out, u64 count, u64 block, u64 src_stride, u64 dst_stride) { \
        copy_blocks<T>(src, out, count, block, src_stride, dst_stride);                                  \
    }                                                                                                     \
    extern "C" __global__ void pad_blocks_##T(const T* src, T* out, u64 count, u64 block, u64 dst_stride, u64 at) { \
        pad_blocks<T>(src, out, count, block, dst_stride, at);                                           \
    }
MOVES(bf16)
MOVES(f16)
