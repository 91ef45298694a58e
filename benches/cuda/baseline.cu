// CUDA runtime baseline for Omega's GPU benchmarks, built with nvcc on the GPU machine and run in the same
// job as examples/gpu_bench, so both sides' figures come from one machine on one day.
// Prints `cuda.<metric> <value>` lines with the same names as gpu_bench's `omega.` lines.
#include <algorithm>
#include <cstring>
#include <string>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1); } } while (0)

__global__ void empty() {}

static double now_us() {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static double pct(std::vector<double> v, double p) {
    std::sort(v.begin(), v.end());
    return v[(size_t)((v.size() - 1) * p + 0.5)];
}

// `--copy-timeline`: every 1 GiB pinned copy to the GPU timed on its own from the start of the process, to see
// whether CUDA's first copies run cold as well (diagnosis only; the figures below do not use it).
static int copy_timeline() {
    size_t big = 1ull << 30;
    void *h, *d;
    CK(cudaMallocHost(&h, big));
    CK(cudaMalloc(&d, big));
    memset(h, 0x5a, big);
    printf("cuda.copy_timeline_to_gpu");
    for (int i = 0; i < 14; i++) {
        double t = now_us();
        CK(cudaMemcpy(d, h, big, cudaMemcpyHostToDevice));
        printf(" %.1f", big / (now_us() - t) / 1e3);
    }
    printf("\n");
    CK(cudaFreeHost(h));
    CK(cudaFree(d));
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && std::string(argv[1]) == "--copy-timeline") return copy_timeline();
    bool quick = argc > 1 && std::string(argv[1]) == "--quick";
    int warm = quick ? 10 : 1000, iters = quick ? 200 : 10000;
    size_t big = quick ? (64ull << 20) : (1ull << 30);
    CK(cudaSetDeviceFlags(cudaDeviceScheduleSpin));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("# cuda baseline device=\"%s\" quick=%d\n", prop.name, quick);
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));

    // Launch + synchronize round trip of an empty kernel.
    for (int i = 0; i < warm; i++) { empty<<<1, 1, 0, st>>>(); CK(cudaStreamSynchronize(st)); }
    std::vector<double> rt;
    for (int i = 0; i < iters; i++) {
        double t = now_us();
        empty<<<1, 1, 0, st>>>();
        CK(cudaStreamSynchronize(st));
        rt.push_back(now_us() - t);
    }
    printf("cuda.roundtrip_p10_us %.2f\ncuda.roundtrip_p50_us %.2f\ncuda.roundtrip_p99_us %.2f\n",
           pct(rt, 0.10), pct(rt, 0.50), pct(rt, 0.99));

    // Pinned 1 GiB copies, best of 5.
    void *h, *d;
    CK(cudaMallocHost(&h, big));
    CK(cudaMalloc(&d, big));
    memset(h, 0x5a, big);
    for (int dir = 0; dir < 2; dir++) {
        double best = 1e30;
        for (int i = 0; i < 5; i++) {
            double t = now_us();
            if (dir == 0) CK(cudaMemcpy(d, h, big, cudaMemcpyHostToDevice));
            else CK(cudaMemcpy(h, d, big, cudaMemcpyDeviceToHost));
            best = std::min(best, now_us() - t);
        }
        printf("cuda.sync_%s_%s_gbps %.2f\n", quick ? "64m" : "1g", dir == 0 ? "to_gpu" : "to_cpu", big / best / 1e3);
    }
    // 4 KiB copies.
    for (int dir = 0; dir < 2; dir++) {
        std::vector<double> lat;
        for (int i = 0; i < iters + warm; i++) {
            double t = now_us();
            if (dir == 0) CK(cudaMemcpy(d, h, 4096, cudaMemcpyHostToDevice));
            else CK(cudaMemcpy(h, d, 4096, cudaMemcpyDeviceToHost));
            if (i >= warm) lat.push_back(now_us() - t);
        }
        printf("cuda.sync_4k_%s_p50_us %.2f\n", dir == 0 ? "to_gpu" : "to_cpu", pct(lat, 0.5));
    }

    // 1000 dependent launches on one stream, then one sync; and the same chain as a CUDA graph.
    const int chain = 1000;
    for (int rep = 0; rep < 3; rep++) {
        double t = now_us();
        for (int i = 0; i < chain; i++) empty<<<1, 1, 0, st>>>();
        CK(cudaStreamSynchronize(st));
        if (rep == 2) printf("cuda.stream_1000_per_launch_us %.3f\n", (now_us() - t) / chain);
    }
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < chain; i++) empty<<<1, 1, 0, st>>>();
    CK(cudaStreamEndCapture(st, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    std::vector<double> per;
    for (int rep = 0; rep < 20; rep++) {
        double t = now_us();
        CK(cudaGraphLaunch(ge, st));
        CK(cudaStreamSynchronize(st));
        if (rep >= 3) per.push_back((now_us() - t) / chain);
    }
    // The graph is Omega's dependent command list's counterpart: same metric name, so the table pairs them.
    printf("cuda.graph_1000_per_node_us %.3f\n", pct(per, 0.5));
    printf("cuda.cmdlist_1000_dependent_per_launch_us %.3f\n", pct(per, 0.5));
    return 0;
}
