// mixed: one module with each kind of kernel nvcc emits that Omega loads, and module data they share.
//
// - mixed_plain       an extern "C" kernel reading __constant__ and initialised __device__ data, and
//                     counting the elements it wrote in an uninitialised __device__ counter
// - mixed_counter     reads that counter back: module data is shared by the module's kernels
// - mixed_printf      calls printf (the module's undefined `vprintf`, which Omega provides)
// - mixed_scale<T>    a template kernel, explicitly instantiated (GLOBAL, mangled names)
// - mixed_fill<N>     a `static` template kernel (LOCAL FUNC entries, mangled names)
//
// The host references in src/kernels/cuda.rs mirror each kernel; the module data below is repeated there
// (MIXED_TABLE, MIXED_INIT) and checked against the cubin's images by the tests.
#include <cstdio>

__constant__ float mixed_table[8] = {1.0f, -2.0f, 0.5f, 4.0f, 0.25f, -8.0f, 3.0f, 10.0f};
__device__ int mixed_init[4] = {3, 1, 4, 1};
__device__ unsigned int mixed_count;

// out[i] = mixed_table[i % 8] * mixed_init[i % 4] for i < n; mixed_count += the elements written.
extern "C" __global__ void mixed_plain(float* out, unsigned int n) {
  unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    out[i] = mixed_table[i & 7] * (float)mixed_init[i & 3];
    atomicAdd(&mixed_count, 1u);
  }
}

// out[0] = mixed_count, then mixed_count = 0.
extern "C" __global__ void mixed_counter(unsigned int* out) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    out[0] = mixed_count;
    mixed_count = 0;
  }
}

// Every thread prints `lines` lines, j = 0 .. lines-1, each with every common conversion.
extern "C" __global__ void mixed_printf(int base, double scale, unsigned int lines) {
  unsigned int t = blockIdx.x * blockDim.x + threadIdx.x;
  for (unsigned int j = 0; j < lines; ++j) {
    printf("t=%u j=%u d=%d i=%+i x=%#x X=%08X o=%o c=%c s=%s|%-6.3s| f=%.3f e=%e g=%g ll=%lld llu=%llu p=%p %5d%%\n",
           t, j, base + (int)t, -(int)j, t * 16u, t ^ 0xbeefu, j, 'A' + (int)(t % 26u), "omega", "kernel",
           scale * j, scale * (double)(t + 1), scale / (double)(j + 1), (long long)t * -1000000007LL,
           (unsigned long long)j << 40, (void*)(unsigned long long)(t * 256u), (int)(t + j));
  }
}

// a * b + c, fused for float (one rounding, as the host reference's mul_add), exact for int.
__device__ __forceinline__ float mixed_madd(float a, float b, float c) { return __fmaf_rn(a, b, c); }
__device__ __forceinline__ int mixed_madd(int a, int b, int c) { return a * b + c; }

// data[i] = data[i] * factor + mixed_init[i % 4] for i < n.
template <typename T>
__global__ void mixed_scale(T* data, T factor, unsigned int n) {
  unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] = mixed_madd(data[i], factor, (T)mixed_init[i & 3]);
}
template __global__ void mixed_scale<float>(float*, float, unsigned int);
template __global__ void mixed_scale<int>(int*, int, unsigned int);

// out[i] = N * i for i < n. Internal linkage: nvcc emits LOCAL entry symbols.
template <int N>
static __global__ void mixed_fill(int* out, unsigned int n) {
  unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = N * (int)i;
}

// Instantiates mixed_fill<7> and <-3> (nvcc -cubin compiles device code only; this host function is the
// use that makes them exist).
void mixed_instantiate(int* out, unsigned int n) {
  mixed_fill<7><<<1, 1>>>(out, n);
  mixed_fill<-3><<<1, 1>>>(out, n);
}
