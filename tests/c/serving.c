/* The serving entries (omega_gpu_serving.h) on the simulator: the refusals with their codes, then reserve,
 * prepare, seal, 200 products at prepared shapes with the session's allocation counters unchanged and a
 * checked result, a product that would need a larger buffer refused by the seal, a prepare refused while
 * sealed, and release back to normal. */
#include <math.h>
#include <stdint.h>

#include "check.h"

_Static_assert(sizeof(OmegaGpuServingBounds) == 44, "OmegaGpuServingBounds is 44 bytes");
_Static_assert(sizeof(OmegaGpuDriverStats) == 32, "OmegaGpuDriverStats is 32 bytes");

#define CHECK_HAS(part)                                                                                  \
    do {                                                                                                 \
        const char *e_ = omega_gpu_matmul_last_error();                                                  \
        if (strstr(e_, (part)) == NULL) {                                                                \
            fprintf(stderr, "%s:%d: library error \"%s\" lacks \"%s\"\n", __FILE__, __LINE__, e_, (part)); \
            check_failures++;                                                                            \
        }                                                                                                \
    } while (0)

static uint32_t seed = 88172645u;

/* A bf16 of magnitude in [2^-7, 2^-3), either sign. */
static uint16_t rand_bf16(void) {
    seed ^= seed << 13;
    seed ^= seed >> 17;
    seed ^= seed << 5;
    return (uint16_t)((seed & 0x81ffu) | 0x3c00u);
}

static double bf16_value(uint16_t b) {
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

enum { M = 4, N = 64, K = 128 };

int main(void) {
    static uint16_t x[M * 1024], w[N * K];
    static float y[M * N];
    CHECK(omega_gpu_matmul_prepare(1, 1, 1) == OMEGA_GPU_SERVING_ERR_NOT_RESERVED);
    CHECK_HAS("serving: prepare with no reservation");
    CHECK(omega_gpu_reserve_serving(NULL) == OMEGA_GPU_SERVING_ERR_BOUNDS);
    OmegaGpuServingBounds b = {.max_m = M, .max_n = N, .max_k = K, .max_seq = 64, .max_batch = 1};
    OmegaGpuServingBounds bad = b;
    bad.flags = 1;
    CHECK(omega_gpu_reserve_serving(&bad) == OMEGA_GPU_SERVING_ERR_BOUNDS);
    CHECK_HAS("flags");

    CHECK(omega_gpu_reserve_serving(&b) == OMEGA_GPU_SERVING_OK);
    CHECK(omega_gpu_matmul_prepare(M, N, K) == OMEGA_GPU_SERVING_OK);
    CHECK(omega_gpu_matmul_prepare(1, N, K) == OMEGA_GPU_SERVING_OK);
    CHECK(omega_gpu_matmul_prepare(M + 1, N, K) == OMEGA_GPU_SERVING_ERR_BOUNDS);
    for (int i = 0; i < M * K; i++) x[i] = rand_bf16();
    for (int i = 0; i < N * K; i++) w[i] = rand_bf16();
    OmegaGpuAllocStats before, after;
    OmegaGpuDriverStats driver_before, driver_after;
    CHECK(omega_gpu_serving_driver_stats(NULL) == OMEGA_GPU_SERVING_ERR_NOT_COUNTED);
    CHECK(omega_gpu_serving_driver_stats(&driver_before) == OMEGA_GPU_SERVING_OK);
    CHECK(driver_before.ioctls > 0); /* the reservation allocated */
    omega_gpu_session_alloc_stats(&before);
    omega_gpu_serving_seal();
    for (int i = 0; i < 200; i++) {
        uint32_t m = i % 2 ? 1 : M;
        for (int j = 0; j < M * N; j++) y[j] = NAN;
        CHECK(omega_gpu_matmul_bf16(m, N, K, x, w, y, NULL) == OMEGA_GPU_MATMUL_OK);
    }
    for (int r = 0; r < 1; r++) {
        for (int c = 0; c < N; c++) {
            double want = 0, mag = 0;
            for (int i = 0; i < K; i++) {
                double p = bf16_value(x[r * K + i]) * bf16_value(w[c * K + i]);
                want += p;
                mag += fabs(p);
            }
            /* K * 2^-22 * sum|x*w| (tests/matmul_lib.rs argues the bound). */
            CHECK(fabs(y[r * N + c] - want) <= K * ldexp(mag, -22));
        }
    }
    omega_gpu_session_alloc_stats(&after);
    CHECK(memcmp(&before, &after, sizeof before) == 0);
    CHECK(omega_gpu_serving_driver_stats(&driver_after) == OMEGA_GPU_SERVING_OK);
    CHECK(memcmp(&driver_before, &driver_after, sizeof driver_before) == 0);
    /* A W past the staging and past what a held chunk can carve (84 MB) needs a driver allocation: the
     * seal refuses it by name. A smaller one is carved from a held chunk, which asks the driver nothing. */
    enum { BIG_N = 40960, BIG_K = 1024 };
    uint16_t *big_w = calloc((size_t)BIG_N * BIG_K, sizeof *big_w);
    float *big_y = calloc(BIG_N, sizeof *big_y);
    CHECK(big_w != NULL && big_y != NULL);
    CHECK(omega_gpu_matmul_bf16(1, BIG_N, BIG_K, x, big_w, big_y, NULL) == OMEGA_GPU_MATMUL_ERR_ALLOC);
    CHECK_HAS("serving sealed: allocation of");
    CHECK(omega_gpu_matmul_prepare(1, N, K) == OMEGA_GPU_SERVING_ERR_SEALED);
    CHECK(omega_gpu_reserve_serving(&b) == OMEGA_GPU_SERVING_ERR_SEALED);

    omega_gpu_serving_release();
    CHECK(omega_gpu_matmul_bf16(1, BIG_N, BIG_K, x, big_w, big_y, NULL) == OMEGA_GPU_MATMUL_OK);
    free(big_w);
    free(big_y);
    CHECK(omega_gpu_matmul_prepare(1, N, K) == OMEGA_GPU_SERVING_ERR_NOT_RESERVED);
    omega_gpu_device_close();
    uint32_t va[2];
    put_va(va, 0); /* check.h's helpers are static: each test program uses them all */
    return check_done("serving") + (int)va[0];
}
