// y = a * x + y, one thread per element (tests/kernel.rs).
extern "C" __global__ void saxpy(float a, const float* __restrict__ x, float* y, size_t n) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = a * x[i] + y[i];
    }
}
