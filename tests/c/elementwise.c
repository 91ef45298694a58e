/* The elementwise library's C entries (omega_gpu_elementwise_api.h) on the simulator, every entry called.
 * One scenario per process (argv[1]):
 *   run    the contract's host-pointer entries and the _mem entries against double references (RoPE at
 *          positions near 40960 with theta 1e6, tables built in double), the names, every refusal with
 *          its code, stage and text, and the lock rule (LD-4)
 *   latch  an uncertain completion inside a library call: ERR_UNCERTAIN, then ERR_BLOCKED
 * Bounds: f32 results within 2^-16 of the reference relative to the magnitudes involved (the library's
 * f32 error is below 2^-20 at these widths, docs/elementwise.md); bf16 outputs within 2^-7.
 */
#include <math.h>
#include <stdint.h>

#include "check.h"

_Static_assert(sizeof(OmegaGpuEwInfo) == 120, "OmegaGpuEwInfo is 120 bytes");

#define EXPECT(call, want)                                                                                \
    do {                                                                                                  \
        int got_ = (call);                                                                                \
        if (got_ != (want)) {                                                                             \
            fprintf(stderr, "%s:%d: %s gave %s, want %s (\"%s\")\n", __FILE__, __LINE__, #call,           \
                    omega_gpu_elementwise_rc_name(got_), #want, omega_gpu_elementwise_last_error());     \
            check_failures++;                                                                             \
        }                                                                                                 \
    } while (0)

/* The library's last error begins with `text`. */
static void said(const char *text, int line) {
    const char *e = omega_gpu_elementwise_last_error();
    if (strncmp(e, text, strlen(text)) != 0) {
        fprintf(stderr, "%s:%d: the library said \"%s\", want it to begin \"%s\"\n", __FILE__, line, e, text);
        check_failures++;
    }
}
#define SAID(text) said((text), __LINE__)

static uint64_t state = 0x9e3779b97f4a7c15ull;

/* Uniform in [-scale, scale). */
static float uniform(float scale) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return scale * ((float)(state >> 40) / (float)(1u << 23) - 1.0f);
}

static uint16_t bf16_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static float f32_of(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* |got - want| <= rel * scale for every element; reports the first miss. */
static int close_all(const char *what, const float *got, const double *want, const double *scale, int n, double rel) {
    for (int i = 0; i < n; i++) {
        if (!(fabs((double)got[i] - want[i]) <= rel * scale[i] + 1e-30)) {
            fprintf(stderr, "%s: element %d is %g, want %g\n", what, i, got[i], want[i]);
            return 0;
        }
    }
    return 1;
}

/* RMSNorm of `rows` rows of `cols` in double; `scale` the magnitude each value's error is relative to. */
static void rmsnorm_ref(const float *x, const float *w, int rows, int cols, double *want, double *scale) {
    for (int r = 0; r < rows; r++) {
        double ss = 0;
        for (int c = 0; c < cols; c++) ss += (double)x[r * cols + c] * x[r * cols + c];
        double inv = 1.0 / sqrt(ss / cols + 1e-6);
        for (int c = 0; c < cols; c++) {
            want[r * cols + c] = x[r * cols + c] * inv * w[c];
            scale[r * cols + c] = fabs(want[r * cols + c]);
        }
    }
}

static void host_entries(void) {
    enum { R = 5, C = 33, D = 128, T = 3, N = 1000 };
    static float x[R * C], w[C], y[R * C], q[T * D], cs[T * D / 2], sn[T * D / 2], yq[T * D];
    static float g[N], u[N], ys[N];
    static double want[T * D], scale[T * D];
    for (int i = 0; i < R * C; i++) x[i] = uniform(1), y[i] = NAN;
    for (int i = 0; i < C; i++) w[i] = uniform(2);
    OmegaGpuEwInfo info;
    EXPECT(omega_gpu_rmsnorm_f32(R, C, x, w, 1e-6f, y, &info), OMEGA_GPU_EW_OK);
    CHECK(info.op == OMEGA_GPU_EW_OP_RMSNORM && info.rows == R && info.cols == C && info.launches == 1);
    CHECK((info.flags & OMEGA_GPU_EW_FLAG_HOST_POINTERS) && info.d2h_bytes == sizeof y && info.rc == 0);
    rmsnorm_ref(x, w, R, C, want, scale);
    CHECK(close_all("rmsnorm", y, want, scale, R * C, 0x1p-16));

    /* RoPE at positions near 40960, theta 1e6: the tables' angles in double. */
    const uint32_t pos[T] = {40959, 40000, 12};
    for (int t = 0; t < T; t++)
        for (int i = 0; i < D / 2; i++) {
            double angle = pos[t] * pow(1e6, -2.0 * i / D);
            cs[t * D / 2 + i] = (float)cos(angle);
            sn[t * D / 2 + i] = (float)sin(angle);
        }
    for (int i = 0; i < T * D; i++) q[i] = uniform(1), yq[i] = NAN;
    EXPECT(omega_gpu_rope_f32(T, D, q, cs, sn, yq, &info), OMEGA_GPU_EW_OK);
    CHECK(info.op == OMEGA_GPU_EW_OP_ROPE && (info.flags & OMEGA_GPU_EW_FLAG_VECTORIZED));
    for (int t = 0; t < T; t++)
        for (int i = 0; i < D / 2; i++) {
            const float *r = q + t * D;
            double c = cs[t * D / 2 + i], s = sn[t * D / 2 + i], a = r[i], b = r[i + D / 2];
            want[t * D + i] = a * c - b * s;
            want[t * D + D / 2 + i] = b * c + a * s;
            scale[t * D + i] = scale[t * D + D / 2 + i] = fabs(a) + fabs(b);
        }
    CHECK(close_all("rope", yq, want, scale, T * D, 0x1p-16));

    for (int i = 0; i < N; i++) g[i] = uniform(8), u[i] = uniform(1), ys[i] = NAN;
    EXPECT(omega_gpu_swiglu_f32(N, g, u, ys, NULL), OMEGA_GPU_EW_OK);
    static double sw[N], ss[N];
    for (int i = 0; i < N; i++) sw[i] = g[i] / (1.0 + exp(-(double)g[i])) * u[i], ss[i] = fabs(sw[i]);
    CHECK(close_all("swiglu", ys, sw, ss, N, 0x1p-16));

    /* Refusals, each with its code, stage and text. */
    EXPECT(omega_gpu_rmsnorm_f32(R, C, NULL, w, 1e-6f, y, &info), OMEGA_GPU_EW_ERR_ARGS);
    SAID("elementwise args: x is NULL");
    CHECK(info.stage == OMEGA_GPU_EW_STAGE_ARGS && info.rc == OMEGA_GPU_EW_ERR_ARGS);
    EXPECT(omega_gpu_rmsnorm_f32(0, C, x, w, 1e-6f, y, &info), OMEGA_GPU_EW_ERR_SHAPE);
    SAID("elementwise shape: rows=0 cols=33: every side must be at least 1");
    CHECK(info.stage == OMEGA_GPU_EW_STAGE_SHAPE);
    EXPECT(omega_gpu_rope_f32(T, 7, q, cs, sn, yq, &info), OMEGA_GPU_EW_ERR_SHAPE);
    SAID("elementwise shape: tokens=3 heads=1 dim=7: RoPE needs an even head dim");
    EXPECT(omega_gpu_swiglu_f32(N, g, u, (float *)((char *)ys + 1), &info), OMEGA_GPU_EW_ERR_ARGS);
    SAID("elementwise args: y (");

    /* LD-4: a caller holding the lock is refused and nothing runs. */
    omega_gpu_session_lock();
    EXPECT(omega_gpu_swiglu_f32(N, g, u, ys, &info), OMEGA_GPU_EW_ERR_LOCK_HELD);
    omega_gpu_session_unlock();
    CHECK(info.stage == OMEGA_GPU_EW_STAGE_LOCK);
    SAID("lock: the elementwise library's entries take the session lock themselves");
}

/* A device buffer of the open session holding `bytes` of `src` (or unwritten). */
static OmegaGpuMem buffer_of(const void *src, size_t bytes) {
    OmegaGpuMem m;
    memset(&m, 0, sizeof m);
    omega_gpu_session_lock();
    int ok = omega_gpu_session_open() != NULL && omega_gpu_session_alloc_device(bytes, &m) == 0 &&
             (src == NULL || omega_gpu_session_write(&m, 0, src, bytes) == 0);
    omega_gpu_session_unlock();
    CHECK(ok);
    return m;
}

/* Reads `bytes` of `m` back, and (when `release`) frees it. */
static void fetch(OmegaGpuMem *m, void *dst, size_t bytes, int release) {
    omega_gpu_session_lock();
    if (dst) CHECK(omega_gpu_session_read(m, 0, dst, bytes) == 0);
    if (release) omega_gpu_session_free(m);
    omega_gpu_session_unlock();
}

static void mem_entries(void) {
    enum { R = 3, C = 2048 };
    static uint16_t x[R * C], h[R * C], w[C], y[R * C], h_after[R * C];
    static float hv[R * C], wv[C], yv[R * C];
    static double want[R * C], scale[R * C];
    for (int i = 0; i < R * C; i++) x[i] = bf16_of(uniform(1)), h[i] = bf16_of(uniform(1));
    for (int i = 0; i < C; i++) w[i] = bf16_of(uniform(2)), wv[i] = f32_of(w[i]);
    OmegaGpuMem xm = buffer_of(x, sizeof x), hm = buffer_of(h, sizeof h), wm = buffer_of(w, sizeof w);
    OmegaGpuMem ym = buffer_of(NULL, sizeof y);
    OmegaGpuEwInfo info;
    EXPECT(omega_gpu_add_rmsnorm_mem(OMEGA_GPU_EW_DTYPE_BF16, R, C, &xm, &hm, &wm, 1e-6f, &ym, &info), OMEGA_GPU_EW_OK);
    CHECK(info.op == OMEGA_GPU_EW_OP_ADD_RMSNORM && (info.flags & OMEGA_GPU_EW_FLAG_BF16));
    CHECK(info.bytes == (uint64_t)(4 * R * C + C) * 2 && info.h2d_bytes == 0);
    fetch(&hm, h_after, sizeof h_after, 0);
    fetch(&ym, y, sizeof y, 0);
    int same = 1;
    for (int i = 0; i < R * C; i++) {
        uint16_t sum = bf16_of(f32_of(x[i]) + f32_of(h[i]));
        same &= h_after[i] == sum;
        hv[i] = f32_of(sum);
        yv[i] = f32_of(y[i]);
    }
    CHECK(same);
    rmsnorm_ref(hv, wv, R, C, want, scale);
    CHECK(close_all("add_rmsnorm bf16", yv, want, scale, R * C, 0x1p-7));

    /* The fused gate+up SwiGLU in f32 over [1, 2 * 8]: gate first, then up. */
    float gu[16], ys[8];
    for (int i = 0; i < 16; i++) gu[i] = uniform(4);
    OmegaGpuMem gum = buffer_of(gu, sizeof gu), ysm = buffer_of(NULL, sizeof ys);
    EXPECT(omega_gpu_swiglu_mem(OMEGA_GPU_EW_DTYPE_F32, 1, 8, &gum, NULL, &ysm, &info), OMEGA_GPU_EW_OK);
    CHECK(info.op == OMEGA_GPU_EW_OP_SWIGLU_FUSED);
    fetch(&ysm, ys, sizeof ys, 0);
    double sw[8], ss[8];
    for (int i = 0; i < 8; i++) sw[i] = gu[i] / (1.0 + exp(-(double)gu[i])) * gu[8 + i], ss[i] = fabs(sw[i]);
    CHECK(close_all("swiglu fused", ys, sw, ss, 8, 0x1p-16));

    /* Refusals: an unknown dtype, NULL, a buffer shorter than its operand. */
    EXPECT(omega_gpu_rmsnorm_mem(9, R, C, &xm, &wm, 1e-6f, &ym, &info), OMEGA_GPU_EW_ERR_ARGS);
    SAID("elementwise args: dtype 9");
    EXPECT(omega_gpu_rope_mem(OMEGA_GPU_EW_DTYPE_F32, 1, 1, 8, &gum, NULL, 0, NULL, &wm, &ysm, &info), OMEGA_GPU_EW_ERR_ARGS);
    SAID("elementwise args: cos is NULL");
    /* (A buffer holds what its allocation holds, which is rounded up: the shape is far past it.) */
    EXPECT(omega_gpu_swiglu_mem(OMEGA_GPU_EW_DTYPE_F32, 100000, 8, &gum, NULL, &ysm, &info), OMEGA_GPU_EW_ERR_SHAPE);
    SAID("elementwise shape: gate_up is a buffer of ");
    CHECK(strstr(omega_gpu_elementwise_last_error(), "rows=100000 cols=8 needs gate_up of 1600000 elements") != NULL);
    CHECK(info.stage == OMEGA_GPU_EW_STAGE_SHAPE);
    fetch(&xm, NULL, 0, 1), fetch(&hm, NULL, 0, 1), fetch(&wm, NULL, 0, 1), fetch(&ym, NULL, 0, 1);
    fetch(&gum, NULL, 0, 1), fetch(&ysm, NULL, 0, 1);
}

static int run(void) {
    CHECK(strcmp(omega_gpu_elementwise_rc_name(OMEGA_GPU_EW_OK), "OMEGA_GPU_EW_OK") == 0);
    CHECK(strcmp(omega_gpu_elementwise_rc_name(OMEGA_GPU_EW_ERR_UNCERTAIN), "OMEGA_GPU_EW_ERR_UNCERTAIN") == 0);
    CHECK(strcmp(omega_gpu_elementwise_rc_name(-77), "OMEGA_GPU_EW_ERR_UNKNOWN") == 0);
    host_entries();
    mem_entries();
    return check_done("elementwise run");
}

static int latch(void) {
    float g[64], u[64], y[64];
    for (int i = 0; i < 64; i++) g[i] = uniform(1), u[i] = uniform(1);
    OmegaGpuEwInfo info;
    EXPECT(omega_gpu_swiglu_f32(64, g, u, y, &info), OMEGA_GPU_EW_OK);
    CHECK(omega_gpu_sim_inject(OMEGA_GPU_SIM_FAULT_HANG) == 0);
    EXPECT(omega_gpu_swiglu_f32(64, g, u, y, &info), OMEGA_GPU_EW_ERR_UNCERTAIN);
    SAID("launch: completion timeout");
    CHECK(info.stage == OMEGA_GPU_EW_STAGE_LAUNCH && info.rc == OMEGA_GPU_EW_ERR_UNCERTAIN);
    CHECK(omega_gpu_session_is_blocked() == 1);
    EXPECT(omega_gpu_swiglu_f32(64, g, u, y, &info), OMEGA_GPU_EW_ERR_BLOCKED);
    SAID("elementwise: refused, the process is latched after an uncertain completion");
    CHECK(info.stage == OMEGA_GPU_EW_STAGE_ELEMENTWISE);
    return check_done("elementwise latch");
}

int main(int argc, char **argv) {
    (void)put_va; /* check.h's helper for launch words; no launch is written here */
    const char *scenario = argc > 1 ? argv[1] : "run";
    if (strcmp(scenario, "run") == 0) return run();
    if (strcmp(scenario, "latch") == 0) return latch();
    fprintf(stderr, "unknown scenario %s\n", scenario);
    return 2;
}
