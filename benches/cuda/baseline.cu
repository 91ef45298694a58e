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
#include <cuda.h>
#include <cuda_runtime.h>
#include <sys/resource.h>

#define CKD(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { \
    fprintf(stderr, "%s:%d %s: CUresult %d\n", __FILE__, __LINE__, #x, (int)r_); exit(1); } } while (0)

// A repository kernel's PTX (kernels/<name>.ptx, read from the repository root this runs in), loaded by the
// driver: the same kernel Omega launches from its ptxas-built cubin.
static CUfunction repo_kernel(const char *name) {
    std::string path = std::string("kernels/") + name + ".ptx";
    FILE *f = fopen(path.c_str(), "rb");
    if (!f) { fprintf(stderr, "cannot open %s (run from the repository root)\n", path.c_str()); exit(1); }
    std::string ptx;
    char buf[4096];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) ptx.append(buf, got);
    fclose(f);
    CUmodule m;
    CKD(cuModuleLoadData(&m, ptx.c_str()));
    CUfunction fn;
    CKD(cuModuleGetFunction(&fn, m, name));
    return fn;
}

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1); } } while (0)

__global__ void empty() {}

// Spins until %globaltimer has advanced `ns` (the peer of kernels/timestamps.ptx with one block).
__global__ void spin_for(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
}

// CPU time of the calling thread, seconds.
static double thread_cpu_s() {
    struct rusage u;
    if (getrusage(RUSAGE_THREAD, &u) != 0) { perror("getrusage"); exit(1); }
    return u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6 + u.ru_stime.tv_sec + u.ru_stime.tv_usec * 1e-6;
}

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

// `--default-wait`: a context with CUDA's default flags (cudaDeviceScheduleAuto, which yields or blocks
// as CUDA decides), the peer of Omega's default wait: empty launch + cudaStreamSynchronize on a default
// stream, and the CPU time of the thread waiting on a 100 ms kernel. A process of its own, because the
// main run sets cudaDeviceScheduleSpin before its context exists.
// Launch + synchronize round trips of an empty kernel on `st`, `iters` timed after `warm`, in microseconds.
static std::vector<double> empty_round_trips(cudaStream_t st, int warm, int iters) {
    for (int i = 0; i < warm; i++) { empty<<<1, 1, 0, st>>>(); CK(cudaStreamSynchronize(st)); }
    std::vector<double> rt;
    for (int i = 0; i < iters; i++) {
        double t = now_us();
        empty<<<1, 1, 0, st>>>();
        CK(cudaStreamSynchronize(st));
        rt.push_back(now_us() - t);
    }
    return rt;
}

static int default_wait(bool quick) {
    int warm = quick ? 10 : 1000, iters = quick ? 200 : 10000;
    cudaStream_t st;
    CK(cudaStreamCreate(&st));
    std::vector<double> rt = empty_round_trips(st, warm, iters);
    printf("cuda.default_wait_roundtrip_p10_us %.2f\ncuda.default_wait_roundtrip_p50_us %.2f\n"
           "cuda.default_wait_roundtrip_p99_us %.2f\n", pct(rt, 0.10), pct(rt, 0.50), pct(rt, 0.99));
    std::vector<double> share;
    for (int i = 0; i < 5; i++) {
        double c0 = thread_cpu_s(), t = now_us();
        spin_for<<<1, 1, 0, st>>>(100000000ull);
        CK(cudaStreamSynchronize(st));
        double wall = (now_us() - t) * 1e-6, cpu = thread_cpu_s() - c0;
        printf("# 100 ms kernel: waited %.1f ms, %.3f ms of CPU\n", wall * 1e3, cpu * 1e3);
        share.push_back(cpu / wall * 100.0);
    }
    printf("cuda.wait_100ms_cpu_pct %.2f\n", pct(share, 0.5));
    return 0;
}

// cudaMalloc + cudaFree at each size gpu_bench measures, p50 after warm-up (warm: CUDA's own pools may
// serve a repeated size).
static void alloc_free(bool quick) {
    struct { const char *name; size_t bytes; int iters; } sizes[] = {
        {"4b", 4, 2000}, {"64k", 64 << 10, 2000}, {"1m", 1 << 20, 1000}, {"64m", 64 << 20, 100},
        {"1g", 1ull << 30, 20}, {"16g", 16ull << 30, 5}, {"64g", 64ull << 30, 3},
    };
    for (auto &sz : sizes) {
        int iters = quick ? std::min(sz.iters, 20) : sz.iters;
        std::vector<double> lat;
        bool ok = true;
        for (int i = 0; i < iters + iters / 10 + 1; i++) {
            void *p;
            double t = now_us();
            cudaError_t e = cudaMalloc(&p, sz.bytes);
            if (e != cudaSuccess) {
                printf("# alloc_free_%s: cudaMalloc: %s\n", sz.name, cudaGetErrorString(e));
                ok = false;
                break;
            }
            CK(cudaFree(p));
            if (i > iters / 10) lat.push_back(now_us() - t);
        }
        if (ok) printf("cuda.alloc_free_%s_us %.2f\n", sz.name, pct(lat, 0.5));
    }
}

int main(int argc, char **argv) {
    if (argc > 1 && std::string(argv[1]) == "--copy-timeline") return copy_timeline();
    if (argc > 1 && std::string(argv[1]) == "--default-wait")
        return default_wait(argc > 2 && std::string(argv[2]) == "--quick");
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
    std::vector<double> rt = empty_round_trips(st, warm, iters);
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
        // Omega's device-only write/read is the same copy from the host's side: same figure, its own name.
        printf("cuda.devonly_%s_%s_gbps %.2f\n", dir == 0 ? "write" : "read", quick ? "64m" : "1g", big / best / 1e3);
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
        printf("cuda.devonly_%s_4k_p50_us %.2f\n", dir == 0 ? "write" : "read", pct(lat, 0.5));
    }
    CK(cudaFreeHost(h));
    CK(cudaFree(d));
    alloc_free(quick);

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

    // hello_gpu's figure: the first launch of vector_add (just loaded) on fresh 4 MiB buffers, launch to
    // completion.
    {
        unsigned n = 1u << 20;
        float *a, *b, *c;
        CK(cudaMalloc(&a, n * 4));
        CK(cudaMalloc(&b, n * 4));
        CK(cudaMalloc(&c, n * 4));
        std::vector<float> ha(n, 1.0f), hb(n, 2.0f);
        CK(cudaMemcpy(a, ha.data(), n * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(b, hb.data(), n * 4, cudaMemcpyHostToDevice));
        CUfunction va = repo_kernel("vector_add");
        void *args[] = {&a, &b, &c, &n};
        double t = now_us();
        CKD(cuLaunchKernel(va, n / 256, 1, 1, 256, 1, 1, 0, st, args, nullptr));
        CK(cudaStreamSynchronize(st));
        printf("cuda.hello_vector_add_us %.2f\n", now_us() - t);
        CK(cudaFree(a));
        CK(cudaFree(b));
        CK(cudaFree(c));
    }

    // The bandwidth kernel: scale_copy over `big` bytes, 8 blocks of 256 per SM, best of 20 launches
    // (launch to completion) after 3.
    {
        unsigned n = (unsigned)(big / 4);
        float *src, *dst, alpha = 1.0f;
        CK(cudaMalloc(&src, big));
        CK(cudaMalloc(&dst, big));
        CUfunction sc = repo_kernel("scale_copy");
        void *args[] = {&src, &dst, &alpha, &n};
        double best = 1e30;
        for (int rep = 0; rep < 23; rep++) {
            double t = now_us();
            CKD(cuLaunchKernel(sc, prop.multiProcessorCount * 8, 1, 1, 256, 1, 1, 0, st, args, nullptr));
            CK(cudaStreamSynchronize(st));
            if (rep >= 3) best = std::min(best, now_us() - t);
        }
        printf("cuda.bandwidth_scale_copy_%s_gbps %.1f\n", quick ? "64m" : "1g", 8.0 * n / best / 1e3);
        // The copy engine's device-to-device copy of the same bytes, as the ceiling (read + write).
        best = 1e30;
        for (int rep = 0; rep < 13; rep++) {
            double t = now_us();
            CK(cudaMemcpyAsync(dst, src, big, cudaMemcpyDeviceToDevice, st));
            CK(cudaStreamSynchronize(st));
            if (rep >= 3) best = std::min(best, now_us() - t);
        }
        printf("cuda.memcpy_d2d_%s_gbps %.1f\n", quick ? "64m" : "1g", 2.0 * big / best / 1e3);
        CK(cudaFree(src));
        CK(cudaFree(dst));
    }
    return 0;
}
