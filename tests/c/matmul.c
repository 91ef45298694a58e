/* The matmul library's C entries (omega_gpu_matmul_api.h) on the simulator, every entry called. One
 * scenario per process (argv[1]):
 *   run    the host-pointer, resident and device-buffer products against a double reference, the grouped
 *          GEMM's routing, the CTA budget, the tensors, every refusal with its code and stage, the lock
 *          rule (LD-4), who opens and who closes the device, and a close by the caller making what the
 *          library kept stale
 *   latch  an uncertain completion inside a library call: ERR_UNCERTAIN, then is_blocked and ERR_BLOCKED
 */
#include <math.h>
#include <stdint.h>

#include "check.h"

_Static_assert(sizeof(OmegaGpuMatmulInfo) == 160, "OmegaGpuMatmulInfo is 160 bytes");

#define CHECK_RC(call, want)                                                                             \
    do {                                                                                                 \
        int rc_ = (call);                                                                                \
        if (rc_ != (want)) {                                                                             \
            fprintf(stderr, "%s:%d: %s returned %d (%s), want %s (library error: \"%s\")\n", __FILE__,   \
                    __LINE__, #call, rc_, omega_gpu_matmul_rc_name(rc_), #want, omega_gpu_matmul_last_error()); \
            check_failures++;                                                                            \
        }                                                                                                \
    } while (0)

/* The library's last error starts with `prefix`. */
#define CHECK_LIB_ERROR(prefix)                                                                          \
    do {                                                                                                 \
        const char *e_ = omega_gpu_matmul_last_error();                                                  \
        if (strncmp(e_, (prefix), strlen(prefix)) != 0) {                                                \
            fprintf(stderr, "%s:%d: library error \"%s\" does not start with \"%s\"\n", __FILE__, __LINE__, \
                    e_, (prefix));                                                                       \
            check_failures++;                                                                            \
        }                                                                                                \
    } while (0)

#define CHECK_LIB_ERROR_HAS(part)                                                                        \
    do {                                                                                                 \
        const char *e_ = omega_gpu_matmul_last_error();                                                  \
        if (strstr(e_, (part)) == NULL) {                                                                \
            fprintf(stderr, "%s:%d: library error \"%s\" does not contain \"%s\"\n", __FILE__, __LINE__,  \
                    e_, (part));                                                                         \
            check_failures++;                                                                            \
        }                                                                                                \
    } while (0)

static uint32_t seed = 2463534242u;

static uint32_t next(void) {
    seed ^= seed << 13;
    seed ^= seed >> 17;
    seed ^= seed << 5;
    return seed;
}

/* A random bf16 bit pattern of magnitude in [2^-7, 2^-3), either sign. */
static uint16_t rand_bf16(void) {
    uint32_t r = next();
    return (uint16_t)((r & 0x81ffu) | 0x3c00u);
}

static float bf16_value(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static float rand_f32(void) {
    return (float)(next() >> 8) / 8388608.0f - 1.0f;
}

static void fill_bf16(uint16_t *v, size_t n) {
    for (size_t i = 0; i < n; i++) v[i] = rand_bf16();
}

static void fill_f32(float *v, size_t n) {
    for (size_t i = 0; i < n; i++) v[i] = rand_f32();
}

/* y[m, n] against the double product of x[m, k] and w[n, k] (each given as floats), within
 * K * 2^-22 * sum |x w| (tests/matmul_lib.rs argues the bound). Returns 1 when every element is. */
static int matches(const float *y, const float *x, const float *w, uint32_t m, uint32_t n, uint32_t k) {
    for (uint32_t r = 0; r < m; r++) {
        for (uint32_t c = 0; c < n; c++) {
            double sum = 0, mag = 0;
            for (uint32_t i = 0; i < k; i++) {
                double p = (double)x[(size_t)r * k + i] * (double)w[(size_t)c * k + i];
                sum += p;
                mag += fabs(p);
            }
            double bound = (double)k * ldexp(1.0, -22) * mag;
            double got = (double)y[(size_t)r * n + c];
            if (!(fabs(got - sum) <= bound)) {
                fprintf(stderr, "y[%u, %u] = %g, want %g within %g (%ux%ux%u)\n", r, c, got, sum, bound, m, n, k);
                return 0;
            }
        }
    }
    return 1;
}

static float *widen_all(const uint16_t *b, size_t n) {
    float *f = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) f[i] = bf16_value(b[i]);
    return f;
}

static void poison(float *y, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = NAN;
}

/* bf16 of f, round to nearest even (the library's conversion). */
static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* A device-only buffer holding `bytes` of `src` (NULL: left as allocated). Takes the lock for it. */
static OmegaGpuMem device_buffer(const void *src, size_t bytes) {
    OmegaGpuMem m;
    memset(&m, 0, sizeof m);
    omega_gpu_session_lock();
    CHECK(omega_gpu_session_open() != NULL);
    CHECK(omega_gpu_session_alloc_device(bytes, &m) == 0);
    if (src) CHECK(omega_gpu_session_write(&m, 0, src, bytes) == 0);
    omega_gpu_session_unlock();
    return m;
}

static void read_back(const OmegaGpuMem *m, void *dst, size_t bytes) {
    omega_gpu_session_lock();
    CHECK(omega_gpu_session_read(m, 0, dst, bytes) == 0);
    omega_gpu_session_unlock();
}

static void free_buffer(OmegaGpuMem *m) {
    omega_gpu_session_lock();
    omega_gpu_session_free(m);
    omega_gpu_session_unlock();
}

static void names_and_budget(void) {
    CHECK(strcmp(omega_gpu_matmul_rc_name(OMEGA_GPU_MATMUL_OK), "OMEGA_GPU_MATMUL_OK") == 0);
    CHECK(strcmp(omega_gpu_matmul_rc_name(OMEGA_GPU_MATMUL_ERR_SHAPE), "OMEGA_GPU_MATMUL_ERR_SHAPE") == 0);
    CHECK(strcmp(omega_gpu_matmul_rc_name(OMEGA_GPU_MATMUL_ERR_LOCK_HELD), "OMEGA_GPU_MATMUL_ERR_LOCK_HELD") == 0);
    CHECK(strcmp(omega_gpu_matmul_rc_name(-1000), "OMEGA_GPU_MATMUL_ERR_UNKNOWN") == 0);
    for (int rc = OMEGA_GPU_MATMUL_ERR_INTERNAL; rc <= OMEGA_GPU_MATMUL_OK; rc++)
        CHECK(strcmp(omega_gpu_matmul_rc_name(rc), "OMEGA_GPU_MATMUL_ERR_UNKNOWN") != 0);
    CHECK(omega_gpu_matmul_cta_budget() == OMEGA_GPU_MATMUL_MAX_CTAS);
    CHECK(OMEGA_GPU_MATMUL_MAX_CTAS == 1024);
    omega_gpu_matmul_set_cta_budget(7);
    CHECK(omega_gpu_matmul_cta_budget() == 7);
    omega_gpu_matmul_set_cta_budget(5000);
    CHECK(omega_gpu_matmul_cta_budget() == OMEGA_GPU_MATMUL_MAX_CTAS);
    omega_gpu_matmul_set_cta_budget(0);
    CHECK(omega_gpu_matmul_cta_budget() == OMEGA_GPU_MATMUL_MAX_CTAS);
    CHECK(omega_gpu_matmul_is_blocked() == 0);
    CHECK(strcmp(omega_gpu_matmul_last_error(), "") == 0);
    /* offsets[6], rows[6], pairs[6], the drop count, the touched count, room for min(5, 6) experts. */
    CHECK(omega_gpu_matmul_routing_words(3, 2, 5) == 6 + 2 * 6 + 2 + 5);
}

/* The host-pointer products: the first opens the device. */
static void host_products(void) {
    enum { M = 3, N = 70, K = 64 };
    uint16_t xb[M * K], wb[N * K];
    float y[M * N];
    fill_bf16(xb, M * K);
    fill_bf16(wb, N * K);
    poison(y, M * N);
    CHECK(!omega_gpu_session_is_open());
    OmegaGpuMatmulInfo info;
    memset(&info, 0xff, sizeof info);
    CHECK_RC(omega_gpu_matmul_bf16(M, N, K, xb, wb, y, &info), OMEGA_GPU_MATMUL_OK);
    CHECK(omega_gpu_session_is_open());
    CHECK(info.path == OMEGA_GPU_MATMUL_PATH_GEMV);
    CHECK(info.flags == (OMEGA_GPU_MATMUL_FLAG_HOST_POINTERS | OMEGA_GPU_MATMUL_FLAG_OPENED));
    CHECK(info.m == M && info.n == N && info.k == K && info.rc == 0 && info.stage == OMEGA_GPU_MATMUL_STAGE_NONE);
    CHECK(info.launches >= 1 && info.ctas >= 1 && info.ctas <= info.cta_budget && info.total_ctas >= info.ctas);
    CHECK(info.h2d_bytes >= sizeof xb + sizeof wb && info.d2h_bytes == sizeof y);
    CHECK(info.weight_bytes == (uint64_t)N * K * 2);
    CHECK(info.device_ns > 0 && info.host_ns > 0 && info.split >= 1);
    for (int i = 0; i < 14; i++) CHECK(info.reserved[i] == 0);
    float *xf = widen_all(xb, M * K), *wf = widen_all(wb, N * K);
    CHECK(matches(y, xf, wf, M, N, K));
    /* NULL info is allowed; the second call opens nothing. */
    poison(y, M * N);
    CHECK_RC(omega_gpu_matmul_bf16(M, N, K, xb, wb, y, NULL), OMEGA_GPU_MATMUL_OK);
    CHECK(matches(y, xf, wf, M, N, K));
    CHECK_RC(omega_gpu_matmul_bf16(M, N, K, xb, wb, y, &info), OMEGA_GPU_MATMUL_OK);
    CHECK((info.flags & OMEGA_GPU_MATMUL_FLAG_OPENED) == 0);
    free(xf);
    free(wf);

    enum { FM = 5, FN = 9, FK = 13 };
    float xs[FM * FK], ws[FN * FK], ys[FM * FN];
    fill_f32(xs, FM * FK);
    fill_f32(ws, FN * FK);
    poison(ys, FM * FN);
    CHECK_RC(omega_gpu_matmul_f32(FM, FN, FK, xs, ws, ys, &info), OMEGA_GPU_MATMUL_OK);
    CHECK(info.path == OMEGA_GPU_MATMUL_PATH_SIMT_F32);
    CHECK(matches(ys, xs, ws, FM, FN, FK));

    /* The refusals, each with its code, stage text and info stage. */
    CHECK_RC(omega_gpu_matmul_bf16(M, N, K, NULL, wb, y, &info), OMEGA_GPU_MATMUL_ERR_ARGS);
    CHECK_LIB_ERROR("matmul args: x is NULL");
    CHECK_ERROR("matmul args: x is NULL");
    CHECK(info.stage == OMEGA_GPU_MATMUL_STAGE_ARGS && info.rc == OMEGA_GPU_MATMUL_ERR_ARGS);
    CHECK(info.path == OMEGA_GPU_MATMUL_PATH_NONE);
    CHECK_RC(omega_gpu_matmul_f32(FM, FN, FK, xs, ws, NULL, &info), OMEGA_GPU_MATMUL_ERR_ARGS);
    CHECK_LIB_ERROR("matmul args: y is NULL");
    CHECK_RC(omega_gpu_matmul_f32(FM, FN, FK, (const float *)((const char *)xs + 1), ws, ys, &info),
             OMEGA_GPU_MATMUL_ERR_ARGS);
    CHECK_LIB_ERROR_HAS("is not aligned to its 4-byte elements");
    CHECK_RC(omega_gpu_matmul_bf16(0, N, K, xb, wb, y, &info), OMEGA_GPU_MATMUL_ERR_SHAPE);
    CHECK_LIB_ERROR("matmul shape: M=0 N=70 K=64: every side must be at least 1");
    CHECK(info.stage == OMEGA_GPU_MATMUL_STAGE_SHAPE);
    CHECK_RC(omega_gpu_matmul_bf16(UINT32_MAX, UINT32_MAX, UINT32_MAX, xb, wb, y, &info), OMEGA_GPU_MATMUL_ERR_SHAPE);
    CHECK_LIB_ERROR_HAS("is more than any buffer can hold");
}

/* Entries that take the lock themselves refuse a caller that holds it (LD-4). */
static void lock_rule(void) {
    uint16_t x[8] = {0}, w[8] = {0};
    float y[1];
    OmegaGpuTensor *t = NULL;
    omega_gpu_session_lock();
    CHECK_RC(omega_gpu_matmul_bf16(1, 1, 8, x, w, y, NULL), OMEGA_GPU_MATMUL_ERR_LOCK_HELD);
    CHECK_LIB_ERROR("lock: the matmul library's entries take the session lock themselves");
    CHECK_LIB_ERROR_HAS("(LD-4)");
    CHECK_RC(omega_gpu_tensor_upload_bf16(1, 8, w, &t), OMEGA_GPU_MATMUL_ERR_LOCK_HELD);
    CHECK(t == NULL);
    omega_gpu_matmul_cache_clear();
    CHECK_LIB_ERROR("lock:");
    omega_gpu_device_close();
    CHECK_LIB_ERROR("lock:");
    omega_gpu_session_unlock();
    CHECK(omega_gpu_session_is_open());
}

static void tensors(void) {
    enum { M = 2, N = 40, K = 96 };
    uint16_t xb[M * K], wb[N * K];
    float y[M * N];
    fill_bf16(xb, M * K);
    fill_bf16(wb, N * K);
    OmegaGpuTensor *t = NULL, *tf = NULL;
    CHECK_RC(omega_gpu_tensor_upload_bf16(N, K, wb, &t), OMEGA_GPU_MATMUL_OK);
    CHECK(t != NULL);
    uint32_t rows = 0, cols = 0;
    omega_gpu_tensor_shape(t, &rows, &cols);
    CHECK(rows == N && cols == K);
    omega_gpu_tensor_shape(t, NULL, &cols);
    omega_gpu_tensor_shape(NULL, &rows, &cols);
    CHECK(rows == 0 && cols == 0);
    CHECK_LIB_ERROR("matmul args: tensor is NULL");
    OmegaGpuMatmulInfo info;
    poison(y, M * N);
    CHECK_RC(omega_gpu_matmul_resident_bf16(M, xb, t, y, &info), OMEGA_GPU_MATMUL_OK);
    CHECK(info.flags & OMEGA_GPU_MATMUL_FLAG_RESIDENT);
    CHECK(info.n == N && info.k == K && info.h2d_bytes >= sizeof xb && info.h2d_bytes < sizeof xb + sizeof wb);
    float *xf = widen_all(xb, M * K), *wf = widen_all(wb, N * K);
    CHECK(matches(y, xf, wf, M, N, K));
    free(xf);
    free(wf);

    float xs[M * 7], ws[3 * 7], ys[M * 3];
    fill_f32(xs, M * 7);
    fill_f32(ws, 3 * 7);
    CHECK_RC(omega_gpu_tensor_upload_f32(3, 7, ws, &tf), OMEGA_GPU_MATMUL_OK);
    CHECK_RC(omega_gpu_matmul_resident_f32(M, xs, tf, ys, &info), OMEGA_GPU_MATMUL_OK);
    CHECK(matches(ys, xs, ws, M, 3, 7));
    CHECK_RC(omega_gpu_matmul_resident_bf16(M, xb, tf, y, &info), OMEGA_GPU_MATMUL_ERR_TENSOR);
    CHECK_LIB_ERROR("matmul tensor: the tensor holds f32 elements, the entry takes bf16");
    CHECK(info.stage == OMEGA_GPU_MATMUL_STAGE_TENSOR);
    CHECK_RC(omega_gpu_matmul_resident_f32(M, xs, (const OmegaGpuTensor *)(uintptr_t)0x10, ys, &info),
             OMEGA_GPU_MATMUL_ERR_TENSOR);
    CHECK_LIB_ERROR_HAS("is not a live tensor");
    CHECK_RC(omega_gpu_matmul_resident_f32(M, xs, NULL, ys, &info), OMEGA_GPU_MATMUL_ERR_ARGS);
    CHECK_RC(omega_gpu_tensor_upload_f32(3, 7, ws, NULL), OMEGA_GPU_MATMUL_ERR_ARGS);
    OmegaGpuTensor *refused = tf;
    CHECK_RC(omega_gpu_tensor_upload_f32(0, 7, ws, &refused), OMEGA_GPU_MATMUL_ERR_SHAPE);
    CHECK(refused == NULL);
    CHECK_RC(omega_gpu_tensor_upload_f32(3, 7, NULL, &refused), OMEGA_GPU_MATMUL_ERR_ARGS);
    omega_gpu_tensor_free(tf);

    /* device_close with a tensor alive: the device stays open until the last free. */
    CHECK_RC(omega_gpu_tensor_upload_f32(3, 7, ws, &tf), OMEGA_GPU_MATMUL_OK);
    omega_gpu_device_close();
    CHECK(omega_gpu_session_is_open());
    CHECK_RC(omega_gpu_matmul_resident_f32(M, xs, tf, ys, &info), OMEGA_GPU_MATMUL_OK);
    omega_gpu_tensor_free(tf);
    CHECK(omega_gpu_session_is_open());
    omega_gpu_tensor_free(t);
    CHECK(!omega_gpu_session_is_open());
    omega_gpu_tensor_free(t);
    CHECK_LIB_ERROR_HAS("is not a live tensor");
    omega_gpu_tensor_free(NULL);
}

/* The device-buffer entries and the grouped GEMM. */
static void device_products(void) {
    enum { M = 4, N = 300, K = 64 };
    uint16_t xb[M * K], wb[N * K], y16[M * N];
    float y[M * N];
    fill_bf16(xb, M * K);
    fill_bf16(wb, N * K);
    OmegaGpuMem x = device_buffer(xb, sizeof xb), w = device_buffer(wb, sizeof wb);
    OmegaGpuMem ym = device_buffer(NULL, sizeof y), y16m = device_buffer(NULL, sizeof y16);
    OmegaGpuMatmulInfo info;
    CHECK_RC(omega_gpu_matmul_bf16_mem(M, N, K, &x, &w, &ym, &info), OMEGA_GPU_MATMUL_OK);
    CHECK(info.flags == 0 && info.h2d_bytes < sizeof xb && info.d2h_bytes == 0);
    read_back(&ym, y, sizeof y);
    float *xf = widen_all(xb, M * K), *wf = widen_all(wb, N * K);
    CHECK(matches(y, xf, wf, M, N, K));
    CHECK_RC(omega_gpu_matmul_bf16_to_bf16_mem(M, N, K, &x, &w, &y16m, &info), OMEGA_GPU_MATMUL_OK);
    CHECK(info.flags == OMEGA_GPU_MATMUL_FLAG_BF16_OUT);
    read_back(&y16m, y16, sizeof y16);
    int same = 1;
    for (int i = 0; i < M * N; i++) same &= y16[i] == to_bf16(y[i]);
    CHECK(same);
    /* A buffer shorter than its operand, one that is not live, and NULL. */
    CHECK_RC(omega_gpu_matmul_bf16_mem(M, N + 2000, K, &x, &w, &ym, &info), OMEGA_GPU_MATMUL_ERR_SHAPE);
    CHECK_LIB_ERROR("matmul shape: w is a buffer of ");
    CHECK_LIB_ERROR_HAS("needs w [2300, 64]");
    CHECK_RC(omega_gpu_matmul_bf16_mem(M, N, K, &x, NULL, &ym, &info), OMEGA_GPU_MATMUL_ERR_ARGS);
    CHECK_LIB_ERROR("matmul args: w is NULL");
    OmegaGpuMem stale = ym;
    stale.va += 4096;
    CHECK_RC(omega_gpu_matmul_bf16_mem(M, N, K, &x, &w, &stale, &info), OMEGA_GPU_MATMUL_ERR_ARGS);
    CHECK_LIB_ERROR("matmul args: handle");

    /* SwiGLU over the same W read as the fused [2 * 148, K] weight (its first 296 rows): y[i, j] =
       silu(g) * u of the product's columns j and 148 + j; the bf16 form at 144 columns is that f32 value
       rounded. N = 150 is no multiple of 4 (and 148 none of 8): refused by name, nothing runs. */
    enum { SN = 148, SN16 = 144 };
    float ysw[M * SN], ysw16[M * SN16];
    uint16_t ysw_b[M * SN16];
    OmegaGpuMem swm = device_buffer(NULL, sizeof ysw), sw16m = device_buffer(NULL, sizeof ysw_b);
    CHECK_RC(omega_gpu_matmul_swiglu_bf16_mem(M, SN, K, &x, &w, &swm, &info), OMEGA_GPU_MATMUL_OK);
    CHECK(info.path == OMEGA_GPU_MATMUL_PATH_GEMM && info.n == SN && info.flags == 0);
    read_back(&swm, ysw, sizeof ysw);
    int close = 1;
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < SN; j++) {
            float g = y[i * N + j], u = y[i * N + SN + j];
            float want = g / (1.0f + expf(-g)) * u;
            close &= fabsf(ysw[i * SN + j] - want) <= 1e-4f * (1.0f + fabsf(want));
        }
    }
    CHECK(close);
    CHECK_RC(omega_gpu_matmul_swiglu_bf16_mem(M, SN16, K, &x, &w, &swm, &info), OMEGA_GPU_MATMUL_OK);
    read_back(&swm, ysw16, sizeof ysw16);
    CHECK_RC(omega_gpu_matmul_swiglu_bf16_to_bf16_mem(M, SN16, K, &x, &w, &sw16m, &info), OMEGA_GPU_MATMUL_OK);
    CHECK(info.flags == OMEGA_GPU_MATMUL_FLAG_BF16_OUT);
    read_back(&sw16m, ysw_b, sizeof ysw_b);
    same = 1;
    for (int i = 0; i < M * SN16; i++) same &= ysw_b[i] == to_bf16(ysw16[i]);
    CHECK(same);
    CHECK_RC(omega_gpu_matmul_swiglu_bf16_mem(M, 150, K, &x, &w, &swm, &info), OMEGA_GPU_MATMUL_ERR_PLAN);
    CHECK_LIB_ERROR("matmul plan: SwiGLU M=4 N=150 K=64: the gate+up GEMM with SwiGLU in its epilogue cannot run it");
    CHECK_LIB_ERROR_HAS("N is not a multiple of 4");
    CHECK_RC(omega_gpu_matmul_swiglu_bf16_to_bf16_mem(M, SN, K, &x, &w, &swm, &info), OMEGA_GPU_MATMUL_ERR_PLAN);
    CHECK_LIB_ERROR_HAS("N is not a multiple of 8");
    /* A fused weight of more rows than W's buffer holds (its 300 rows rounded up to whole pages): refused
       as any short buffer, naming the [2N, K] it needs. */
    uint32_t held = (uint32_t)(w.size / (K * 2)), short_n = (held / 2 + 4) & ~3u;
    char needs[64];
    snprintf(needs, sizeof needs, "needs w [%u, %d]", 2 * short_n, K);
    CHECK_RC(omega_gpu_matmul_swiglu_bf16_mem(M, short_n, K, &x, &w, &swm, &info), OMEGA_GPU_MATMUL_ERR_SHAPE);
    CHECK_LIB_ERROR_HAS(needs);

    enum { FM = 6, FN = 5, FK = 11 };
    float xs[FM * FK], ws[FN * FK], ys[FM * FN];
    fill_f32(xs, FM * FK);
    fill_f32(ws, FN * FK);
    OmegaGpuMem xm = device_buffer(xs, sizeof xs), wm = device_buffer(ws, sizeof ws), ysm = device_buffer(NULL, sizeof ys);
    CHECK_RC(omega_gpu_matmul_f32_mem(FM, FN, FK, &xm, &wm, &ysm, &info), OMEGA_GPU_MATMUL_OK);
    read_back(&ysm, ys, sizeof ys);
    CHECK(matches(ys, xs, ws, FM, FN, FK));

    /* Grouped: 3 tokens, 2 choices each of 4 experts, one naming no expert. */
    enum { T = 3, TOPK = 2, E = 4, GN = 33, GK = 64 };
    uint16_t gx[T * GK], gw[E * GN * GK];
    uint32_t topk[T * TOPK] = {2, 0, 2, 9, 1, 2};
    fill_bf16(gx, T * GK);
    fill_bf16(gw, E * GN * GK);
    size_t words = omega_gpu_matmul_routing_words(T, TOPK, E);
    uint32_t routing[32];
    float gy[T * TOPK * GN];
    CHECK(words <= 32);
    OmegaGpuMem gxm = device_buffer(gx, sizeof gx), gwm = device_buffer(gw, sizeof gw);
    OmegaGpuMem tkm = device_buffer(topk, sizeof topk), rm = device_buffer(NULL, words * 4);
    OmegaGpuMem gym = device_buffer(NULL, sizeof gy);
    CHECK_RC(omega_gpu_matmul_grouped_bf16_mem(T, TOPK, E, GN, GK, &gxm, &gwm, &tkm, &rm, &gym, &info),
             OMEGA_GPU_MATMUL_OK);
    CHECK(info.path == OMEGA_GPU_MATMUL_PATH_GROUPED && info.experts == E && info.top_k == TOPK && info.tokens == T);
    read_back(&rm, routing, words * 4);
    read_back(&gym, gy, sizeof gy);
    /* Expert 0: choice 1 (token 0); 1: choice 4 (token 2); 2: choices 0, 2, 5 (tokens 0, 1, 2); 3: none. */
    uint32_t want_offsets[E + 1] = {0, 1, 2, 5, 5}, want_rows[5] = {0, 2, 0, 1, 2}, want_pairs[5] = {1, 4, 0, 2, 5};
    for (int i = 0; i <= E; i++) CHECK(routing[i] == want_offsets[i]);
    for (int i = 0; i < 5; i++) CHECK(routing[E + 1 + i] == want_rows[i] && routing[E + 1 + T * TOPK + i] == want_pairs[i]);
    CHECK(routing[E + 1 + 2 * T * TOPK] == 1);
    /* The touched experts: 0, 1 and 2, in increasing order. */
    CHECK(routing[E + 2 + 2 * T * TOPK] == 3);
    for (int i = 0; i < 3; i++) CHECK(routing[E + 3 + 2 * T * TOPK + i] == (uint32_t)i);
    uint32_t expert_of_slot[5] = {0, 1, 2, 2, 2};
    for (int s = 0; s < 5; s++) {
        float *xr = widen_all(gx + want_rows[s] * GK, GK);
        float *wr = widen_all(gw + (size_t)expert_of_slot[s] * GN * GK, (size_t)GN * GK);
        CHECK(matches(gy + s * GN, xr, wr, 1, GN, GK));
        free(xr);
        free(wr);
    }
    CHECK_RC(omega_gpu_matmul_grouped_bf16_mem(T, TOPK, E, GN, 48, &gxm, &gwm, &tkm, &rm, &gym, &info),
             OMEGA_GPU_MATMUL_ERR_SHAPE);
    CHECK_LIB_ERROR_HAS("the grouped GEMM needs K % 32 == 0");
    omega_gpu_matmul_set_cta_budget(1);
    CHECK_RC(omega_gpu_matmul_grouped_bf16_mem(T, TOPK, E, 65, GK, &gxm, &gwm, &tkm, &rm, &gym, &info),
             OMEGA_GPU_MATMUL_ERR_SHAPE);
    CHECK_RC(omega_gpu_matmul_grouped_bf16_mem(1, 1, 1, 65, GK, &gxm, &gwm, &tkm, &rm, &gym, &info),
             OMEGA_GPU_MATMUL_ERR_PLAN);
    CHECK_LIB_ERROR("matmul plan: one expert's 2 blocks of 64 rows are past the CTA budget of 1");
    CHECK(info.stage == OMEGA_GPU_MATMUL_STAGE_PLAN);
    /* A budget of one CTA: every launch of a dense product still runs, one CTA each. */
    CHECK_RC(omega_gpu_matmul_bf16_mem(M, N, K, &x, &w, &ym, &info), OMEGA_GPU_MATMUL_OK);
    CHECK(info.ctas == 1 && info.cta_budget == 1);
    read_back(&ym, y, sizeof y);
    CHECK(matches(y, xf, wf, M, N, K));
    omega_gpu_matmul_set_cta_budget(0);
    free(xf);
    free(wf);

    omega_gpu_matmul_cache_clear();
    CHECK_RC(omega_gpu_matmul_f32_mem(FM, FN, FK, &xm, &wm, &ysm, &info), OMEGA_GPU_MATMUL_OK);
    OmegaGpuMem *all[] = {&x, &w, &ym, &y16m, &xm, &wm, &ysm, &gxm, &gwm, &tkm, &rm, &gym};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free_buffer(all[i]);
}

/* The caller's open and close: the library closes only what it opened, and a close by the caller makes
 * what the library kept stale. */
static void callers_device(void) {
    omega_gpu_session_lock();
    CHECK(omega_gpu_session_open() != NULL);
    omega_gpu_session_unlock();
    float x[4] = {1, 2, 3, 4}, w[8] = {1, 0, 0, 0, 0, 1, 0, 0}, y[2];
    OmegaGpuMatmulInfo info;
    CHECK_RC(omega_gpu_matmul_f32(1, 2, 4, x, w, y, &info), OMEGA_GPU_MATMUL_OK);
    CHECK((info.flags & OMEGA_GPU_MATMUL_FLAG_OPENED) == 0);
    CHECK(y[0] == 1 && y[1] == 2);
    OmegaGpuTensor *t = NULL;
    CHECK_RC(omega_gpu_tensor_upload_f32(2, 4, w, &t), OMEGA_GPU_MATMUL_OK);
    omega_gpu_device_close();
    CHECK(omega_gpu_session_is_open());
    omega_gpu_session_close();
    CHECK(!omega_gpu_session_is_open());
    CHECK_RC(omega_gpu_matmul_resident_f32(1, x, t, y, &info), OMEGA_GPU_MATMUL_ERR_TENSOR);
    CHECK_LIB_ERROR("matmul tensor: the tensor's device was closed since it was uploaded");
    CHECK(info.flags & OMEGA_GPU_MATMUL_FLAG_OPENED);
    /* The library reopened the device for that call; its module and workspace load again. */
    CHECK_RC(omega_gpu_matmul_f32(1, 2, 4, x, w, y, &info), OMEGA_GPU_MATMUL_OK);
    CHECK(y[0] == 1 && y[1] == 2);
    omega_gpu_tensor_free(t);
    omega_gpu_device_close();
    CHECK(!omega_gpu_session_is_open());
}

static int run(void) {
    names_and_budget();
    host_products();
    lock_rule();
    tensors();
    device_products();
    callers_device();
    return check_done("matmul run");
}

static int latch(void) {
    uint16_t x[64], w[64 * 64];
    float y[64];
    fill_bf16(x, 64);
    fill_bf16(w, 64 * 64);
    OmegaGpuMatmulInfo info;
    CHECK_RC(omega_gpu_matmul_bf16(1, 64, 64, x, w, y, &info), OMEGA_GPU_MATMUL_OK);
    CHECK(omega_gpu_sim_inject(OMEGA_GPU_SIM_FAULT_HANG) == 0);
    CHECK_RC(omega_gpu_matmul_bf16(1, 64, 64, x, w, y, &info), OMEGA_GPU_MATMUL_ERR_UNCERTAIN);
    CHECK_LIB_ERROR("launch: completion timeout");
    CHECK(info.stage == OMEGA_GPU_MATMUL_STAGE_LAUNCH && info.rc == OMEGA_GPU_MATMUL_ERR_UNCERTAIN);
    CHECK(omega_gpu_matmul_is_blocked() == 1);
    CHECK(omega_gpu_session_is_blocked() == 1);
    CHECK_RC(omega_gpu_matmul_bf16(1, 64, 64, x, w, y, &info), OMEGA_GPU_MATMUL_ERR_BLOCKED);
    CHECK_LIB_ERROR("matmul: refused, the process is latched after an uncertain completion");
    CHECK(info.stage == OMEGA_GPU_MATMUL_STAGE_MATMUL);
    OmegaGpuTensor *t = NULL;
    CHECK_RC(omega_gpu_tensor_upload_bf16(64, 64, w, &t), OMEGA_GPU_MATMUL_ERR_BLOCKED);
    omega_gpu_device_close();
    CHECK(omega_gpu_session_is_open());
    return check_done("matmul latch");
}

int main(int argc, char **argv) {
    (void)put_va; /* check.h's helper for launch words; no launch is written here */
    const char *scenario = argc > 1 ? argv[1] : "run";
    if (strcmp(scenario, "run") == 0) return run();
    if (strcmp(scenario, "latch") == 0) return latch();
    fprintf(stderr, "unknown scenario %s\n", scenario);
    return 2;
}
