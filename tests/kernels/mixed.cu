/* Every scalar type locus passes, and tensors of each element type (tests/kernel.rs). */
extern "C" {

// out[i] = x[i] * scale + offset + (flag ? bytes[i] : 0) + ints[i], in double.
__global__ void mix(const double* x, const unsigned char* bytes, const int* ints, double* out,
                    double scale, long long offset, bool flag, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = x[i] * scale + (double)offset + (flag ? (double)bytes[i] : 0.0) + (double)ints[i];
    }
}

// Two outputs: the sum and the count of positives of each row of a [rows, cols] matrix.
__global__ void row_stats(const float* m, float* sums, int* positives, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) {
        float s = 0.0f;
        int p = 0;
        for (int c = 0; c < cols; ++c) {
            float v = m[r * cols + c];
            s += v;
            p += v > 0.0f;
        }
        sums[r] = s;
        positives[r] = p;
    }
}

}
