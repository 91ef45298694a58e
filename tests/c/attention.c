/* The attention library's C entries (omega_gpu_attention_api.h) on the simulator, every entry called:
 * the dense GQA entries (whole and rows form, causal and not) and the paged decode entries (one sequence,
 * a ragged batch over a shuffled pool) against a double reference, the pool's life, the device-buffer
 * twins with the append on the GPU, and every refusal with its code, stage and text, the lock rule (LD-4)
 * among them (scenario `run`); and (scenario `latch`) an uncertain completion inside a call: ERR_UNCERTAIN,
 * then every later call ERR_BLOCKED. Tolerances as examples/suite/attention_ref.rs argues: 1e-4 of max|v| for the f32 kernel,
 * 2^-7 of it for the paged bf16 kernels (their softmax weights go through bf16).
 */
#include <math.h>
#include <stdint.h>

#include "check.h"

_Static_assert(sizeof(OmegaGpuAttnInfo) == 176, "OmegaGpuAttnInfo is 176 bytes");
_Static_assert(sizeof(OmegaGpuKvLayout) == 64, "OmegaGpuKvLayout is 64 bytes");

/* `rc` is `want`; otherwise says where, with the library's text. */
static void expect_rc(int line, const char *call, int rc, int want) {
    if (rc == want) return;
    fprintf(stderr, "attention.c:%d: %s returned %s, want %s (library error: \"%s\")\n", line, call,
            omega_gpu_attention_rc_name(rc), omega_gpu_attention_rc_name(want), omega_gpu_attention_last_error());
    check_failures++;
}
#define EXPECT(call, want) expect_rc(__LINE__, #call, (call), (want))

/* The library's last error starts with `prefix`. */
static void expect_text(int line, const char *prefix) {
    const char *e = omega_gpu_attention_last_error();
    if (strncmp(e, prefix, strlen(prefix)) == 0) return;
    fprintf(stderr, "attention.c:%d: library error \"%s\" does not start with \"%s\"\n", line, e, prefix);
    check_failures++;
}
#define EXPECT_TEXT(prefix) expect_text(__LINE__, prefix)

/* A 64-bit LCG (Knuth's MMIX constants): its top 24 bits scaled to [-1, 1). */
static uint64_t lcg = 0x853c49e6748fea9bull;
static float rand_unit(void) {
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (float)(lcg >> 40) / 8388608.0f - 1.0f;
}

static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static float from_bf16(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* One attention row in double: q . k_i * scale, softmax, the weighted values. */
static void attend(const float *q, const float *k, const float *v, size_t stride, uint32_t n, uint32_t d,
                   double scale, double *out) {
    double m = -INFINITY, sum = 0;
    for (uint32_t i = 0; i < n; i++) {
        double s = 0;
        for (uint32_t e = 0; e < d; e++) s += (double)q[e] * k[i * stride + e];
        if (s * scale > m) m = s * scale;
    }
    for (uint32_t e = 0; e < d; e++) out[e] = 0;
    for (uint32_t i = 0; i < n; i++) {
        double s = 0;
        for (uint32_t e = 0; e < d; e++) s += (double)q[e] * k[i * stride + e];
        double p = exp(s * scale - m);
        sum += p;
        for (uint32_t e = 0; e < d; e++) out[e] += p * v[i * stride + e];
    }
    for (uint32_t e = 0; e < d; e++) out[e] = n ? out[e] / sum : 0;
}

static void expect_close(int line, const float *got, const double *want, size_t n, double tol) {
    for (size_t i = 0; i < n; i++) {
        if (fabs(got[i] - want[i]) <= tol) continue;
        fprintf(stderr, "attention.c:%d: element %zu is %g, want %g (tolerance %g)\n", line, i, got[i], want[i], tol);
        check_failures++;
        return;
    }
}

/* Dense GQA: 4 query heads over 2 KV heads of 24, 9 rows; the rows form's last 3 rows. */
static void dense(void) {
    enum { QH = 4, KVH = 2, D = 24, S = 9, ROWS = 3 };
    float q[S * QH * D], k[S * KVH * D], v[S * KVH * D], out[S * QH * D];
    double want[S * QH * D];
    for (size_t i = 0; i < sizeof q / sizeof *q; i++) q[i] = rand_unit();
    for (size_t i = 0; i < sizeof k / sizeof *k; i++) k[i] = rand_unit(), v[i] = rand_unit();
    for (int causal = 0; causal < 2; causal++) {
        for (uint32_t r = 0; r < S; r++)
            for (uint32_t h = 0; h < QH; h++)
                attend(&q[(r * QH + h) * D], &k[(h / 2) * D], &v[(h / 2) * D], KVH * D, causal ? r + 1 : S, D,
                       1.0 / sqrt(D), &want[(r * QH + h) * D]);
        uint32_t flags = S | (causal ? OMEGA_GPU_ATTN_CAUSAL : 0);
        OmegaGpuAttnInfo info;
        memset(out, 0xff, sizeof out);
        EXPECT(omega_gpu_gqa_attention_f32(q, k, v, QH, KVH, D, flags, out, &info), OMEGA_GPU_ATTN_OK);
        CHECK(info.kind == OMEGA_GPU_ATTN_KIND_GQA && (info.flags & OMEGA_GPU_ATTN_INFO_HOST_POINTERS));
        expect_close(__LINE__, out, want, S * QH * D, 1e-4);
        memset(out, 0xff, sizeof out);
        const float *qs = &q[(S - ROWS) * QH * D];
        EXPECT(omega_gpu_gqa_attention_rows_f32(qs, k, v, QH, KVH, D, flags, ROWS, out, &info), OMEGA_GPU_ATTN_OK);
        expect_close(__LINE__, out, &want[(S - ROWS) * QH * D], ROWS * QH * D, 1e-4);
    }
    OmegaGpuAttnInfo info;
    EXPECT(omega_gpu_gqa_attention_f32(NULL, k, v, QH, KVH, D, S, out, &info), OMEGA_GPU_ATTN_ERR_ARGS);
    EXPECT_TEXT("attention args: q is NULL");
    CHECK(info.stage == OMEGA_GPU_ATTN_STAGE_ARGS && info.rc == OMEGA_GPU_ATTN_ERR_ARGS);
    EXPECT(omega_gpu_gqa_attention_f32(q, k, v, 3, KVH, D, S, out, &info), OMEGA_GPU_ATTN_ERR_SHAPE);
    EXPECT_TEXT("attention shape: ");
    EXPECT(omega_gpu_gqa_attention_rows_f32(q, k, v, QH, KVH, D, S, S + 1, out, NULL), OMEGA_GPU_ATTN_ERR_SHAPE);
}

enum { PT = 16, KV = 2, HD = 32, QH = 6, PAGES = 12 };

/* The reference of sequence rows `q` over the host copy of the pool. */
static void paged_reference(const uint16_t *pool, const OmegaGpuKvLayout *l, const int32_t *table, int32_t len,
                            const float *q, double *out) {
    static float k[PAGES * PT * HD], v[PAGES * PT * HD];
    for (uint32_t h = 0; h < KV; h++) {
        for (int32_t t = 0; t < len; t++) {
            size_t at = table[t / PT] * l->page_stride + h * l->head_stride + (size_t)(t % PT) * HD;
            for (uint32_t e = 0; e < HD; e++) {
                k[t * HD + e] = from_bf16(pool[at + e]);
                v[t * HD + e] = from_bf16(pool[at + l->v_offset + e]);
            }
        }
        for (uint32_t r = 0; r < QH / KV; r++) {
            float qb[HD];
            const float *qr = &q[(h * (QH / KV) + r) * HD];
            for (uint32_t e = 0; e < HD; e++) qb[e] = from_bf16(to_bf16(qr[e]));
            attend(qb, k, v, HD, (uint32_t)len, HD, 1.0 / sqrt(HD), &out[(h * (QH / KV) + r) * HD]);
        }
    }
}

static void paged(void) {
    OmegaGpuKvLayout l;
    size_t bytes = omega_gpu_attention_kv_layout(PT, KV, HD, PAGES, &l);
    CHECK(bytes == (size_t)PAGES * 2 * KV * PT * HD * 2 && l.dtype == OMEGA_GPU_ATTN_DTYPE_BF16);
    CHECK(omega_gpu_attention_kv_layout(8, KV, HD, PAGES, &l) == 0);
    void *pool = NULL;
    EXPECT(omega_gpu_attention_pool_alloc(bytes, NULL), OMEGA_GPU_ATTN_ERR_ARGS);
    EXPECT(omega_gpu_attention_pool_alloc(3, &pool), OMEGA_GPU_ATTN_ERR_POOL);
    float q[3 * QH * HD], out[3 * QH * HD];
    double want[3 * QH * HD];
    int32_t table[3 * 4] = {7, 2, 11, -1, 0, -1, -1, -1, 5, 9, 1, 3};
    int32_t lens[3] = {37, 16, 64};
    EXPECT(omega_gpu_paged_attention_batch_bf16(q, pool, &l, table, lens, 3, QH, 4, 0, 0, 0, out, NULL), OMEGA_GPU_ATTN_ERR_POOL);
    EXPECT_TEXT("attention pool: no pool is allocated");
    EXPECT(omega_gpu_attention_pool_alloc(bytes, &pool), OMEGA_GPU_ATTN_OK);
    void *again = NULL;
    EXPECT(omega_gpu_attention_pool_alloc(bytes, &again), OMEGA_GPU_ATTN_ERR_POOL);
    static uint16_t host[PAGES * 2 * KV * PT * HD];
    for (size_t i = 0; i < bytes / 2; i++) host[i] = to_bf16(rand_unit());
    EXPECT(omega_gpu_attention_pool_write(pool, 0, host, bytes), OMEGA_GPU_ATTN_OK);
    EXPECT(omega_gpu_attention_pool_write(pool, 2, host, bytes), OMEGA_GPU_ATTN_ERR_POOL);
    EXPECT_TEXT("attention pool: bytes 2");
    for (size_t i = 0; i < sizeof q / sizeof *q; i++) q[i] = rand_unit();
    double tol = 1.0 / 128; /* the values are bf16 in [-1, 1] */

    /* One sequence: the single entry's uint32_t table. */
    uint32_t one[4] = {7, 2, 11, 4};
    OmegaGpuAttnInfo info;
    memset(out, 0xff, sizeof out);
    EXPECT(omega_gpu_paged_attention_bf16(q, pool, &l, one, QH, 37, 4, 0, 0, 0, out, &info), OMEGA_GPU_ATTN_OK);
    paged_reference(host, &l, table, 37, q, want);
    expect_close(__LINE__, out, want, QH * HD, tol);
    /* 37 tokens: few enough tiles that the splits merge in their cluster, one launch. */
    CHECK(info.kind == OMEGA_GPU_ATTN_KIND_DECODE && info.launches == 1 && info.kv_bytes == 37ull * 2 * 2 * KV * HD);

    /* A ragged batch, unused slots -1. */
    memset(out, 0xff, sizeof out);
    EXPECT(omega_gpu_paged_attention_batch_bf16(q, pool, &l, table, lens, 3, QH, 4, 0, 0, 0, out, &info), OMEGA_GPU_ATTN_OK);
    for (int b = 0; b < 3; b++) paged_reference(host, &l, &table[b * 4], lens[b], &q[b * QH * HD], &want[b * QH * HD]);
    expect_close(__LINE__, out, want, 3 * QH * HD, tol);
    EXPECT(omega_gpu_paged_attention_batch_bf16(q, pool, &l, table, lens, 3, QH, 4, 3, 0, 0, out, &info), OMEGA_GPU_ATTN_OK);
    CHECK(info.splits <= 3);
    expect_close(__LINE__, out, want, 3 * QH * HD, tol);

    /* Refusals, each before anything runs. */
    int32_t bad_table[3 * 4];
    memcpy(bad_table, table, sizeof table);
    bad_table[9] = PAGES;
    EXPECT(omega_gpu_paged_attention_batch_bf16(q, pool, &l, bad_table, lens, 3, QH, 4, 0, 0, 0, out, &info), OMEGA_GPU_ATTN_ERR_TABLE);
    EXPECT_TEXT("attention table: sequence 2's table slot 1 names page 12");
    CHECK(info.stage == OMEGA_GPU_ATTN_STAGE_TABLE && info.launches == 0);
    int32_t long_lens[3] = {37, 65, 1};
    EXPECT(omega_gpu_paged_attention_batch_bf16(q, pool, &l, table, long_lens, 3, QH, 4, 0, 0, 0, out, &info), OMEGA_GPU_ATTN_ERR_TABLE);
    EXPECT(omega_gpu_paged_attention_bf16(q, pool, &l, one, QH, 65, 4, 0, 0, 0, out, &info), OMEGA_GPU_ATTN_ERR_TABLE);
    OmegaGpuKvLayout bad = l;
    bad.page_tokens = 8;
    EXPECT(omega_gpu_paged_attention_bf16(q, pool, &bad, one, QH, 37, 4, 0, 0, 0, out, &info), OMEGA_GPU_ATTN_ERR_LAYOUT);
    EXPECT_TEXT("attention layout: pages of 8 tokens");
    bad = l;
    bad.dtype = 2;
    EXPECT(omega_gpu_paged_attention_bf16(q, pool, &bad, one, QH, 37, 4, 0, 0, 0, out, &info), OMEGA_GPU_ATTN_ERR_LAYOUT);
    EXPECT(omega_gpu_paged_attention_bf16(q, (void *)0x1000, &l, one, QH, 37, 4, 0, 0, 0, out, &info), OMEGA_GPU_ATTN_ERR_POOL);
    EXPECT(omega_gpu_paged_attention_bf16(q, pool, &l, one, 5, 37, 4, 0, 0, 0, out, &info), OMEGA_GPU_ATTN_ERR_SHAPE);
    EXPECT(omega_gpu_paged_attention_bf16(q, pool, &l, one, QH, 37, 4, 0, 0, 1, out, &info), OMEGA_GPU_ATTN_ERR_ARGS);
    EXPECT(omega_gpu_paged_attention_bf16(q, pool, NULL, one, QH, 37, 4, 0, 0, 0, out, &info), OMEGA_GPU_ATTN_ERR_ARGS);
    EXPECT(omega_gpu_paged_attention_bf16(q, pool, &l, NULL, QH, 37, 4, 0, 0, 0, out, &info), OMEGA_GPU_ATTN_ERR_ARGS);

    /* The lock rule: a caller that holds the lock is refused, nothing done. */
    omega_gpu_session_lock();
    EXPECT(omega_gpu_paged_attention_bf16(q, pool, &l, one, QH, 37, 4, 0, 0, 0, out, &info), OMEGA_GPU_ATTN_ERR_LOCK_HELD);
    CHECK(info.stage == OMEGA_GPU_ATTN_STAGE_LOCK);
    omega_gpu_session_unlock();

    omega_gpu_attention_pool_free();
    EXPECT(omega_gpu_attention_pool_write(pool, 0, host, 2), OMEGA_GPU_ATTN_ERR_POOL);
    omega_gpu_attention_pool_free();
}

/* A device-only buffer of the session (opened if need be), `src`'s bytes in it when not NULL; the lock is
 * taken for it and let go, since the library's entries take it themselves. */
static OmegaGpuMem buffer(const void *src, size_t bytes) {
    OmegaGpuMem m = {0};
    omega_gpu_session_lock();
    int ok = omega_gpu_session_open() != NULL && omega_gpu_session_alloc_device(bytes, &m) == 0 &&
             (src == NULL || omega_gpu_session_write(&m, 0, src, bytes) == 0);
    omega_gpu_session_unlock();
    CHECK(ok);
    return m;
}

static void fetch(const OmegaGpuMem *m, void *dst, size_t bytes) {
    omega_gpu_session_lock();
    CHECK(omega_gpu_session_read(m, 0, dst, bytes) == 0);
    omega_gpu_session_free((OmegaGpuMem *)m);
    omega_gpu_session_unlock();
}

/* The device-buffer twins: a step appended on the GPU (lengths advanced there), then decoded. */
static void device_buffers(void) {
    OmegaGpuKvLayout l;
    size_t bytes = omega_gpu_attention_kv_layout(PT, KV, HD, PAGES, &l);
    static uint16_t host[PAGES * 2 * KV * PT * HD];
    for (size_t i = 0; i < bytes / 2; i++) host[i] = to_bf16(rand_unit());
    int32_t table[2 * 2] = {3, 8, 10, 0};
    int32_t lens[2] = {16, 5};
    float knew[2 * KV * HD], vnew[2 * KV * HD], q[2 * QH * HD], out[2 * QH * HD];
    double want[2 * QH * HD];
    for (size_t i = 0; i < sizeof knew / sizeof *knew; i++) knew[i] = rand_unit(), vnew[i] = rand_unit();
    for (size_t i = 0; i < sizeof q / sizeof *q; i++) q[i] = rand_unit();
    OmegaGpuMem pool = buffer(host, bytes), tm = buffer(table, sizeof table), lm = buffer(lens, sizeof lens);
    OmegaGpuMem km = buffer(knew, sizeof knew), vm = buffer(vnew, sizeof vnew), qm = buffer(q, sizeof q);
    OmegaGpuMem om = buffer(NULL, sizeof out);
    OmegaGpuAttnInfo info;
    uint32_t flags = OMEGA_GPU_ATTN_APPEND_F32 | OMEGA_GPU_ATTN_APPEND_ADVANCE;
    EXPECT(omega_gpu_kv_append_bf16_mem(&pool, &l, &km, &vm, &tm, &lm, 2, 2, flags, &info), OMEGA_GPU_ATTN_OK);
    CHECK(info.kind == OMEGA_GPU_ATTN_KIND_APPEND && info.status == 0);
    EXPECT(omega_gpu_paged_attention_bf16_mem(&qm, &pool, &l, &tm, &lm, 2, QH, 2, 0, 0, 0, &om, &info), OMEGA_GPU_ATTN_OK);
    for (int b = 0; b < 2; b++) {
        int32_t pos = lens[b];
        for (uint32_t h = 0; h < KV; h++) {
            size_t at = table[b * 2 + pos / PT] * l.page_stride + h * l.head_stride + (size_t)(pos % PT) * HD;
            for (uint32_t e = 0; e < HD; e++) {
                host[at + e] = to_bf16(knew[(b * KV + h) * HD + e]);
                host[at + l.v_offset + e] = to_bf16(vnew[(b * KV + h) * HD + e]);
            }
        }
        paged_reference(host, &l, &table[b * 2], pos + 1, &q[b * QH * HD], &want[b * QH * HD]);
    }
    fetch(&om, out, sizeof out);
    expect_close(__LINE__, out, want, 2 * QH * HD, 1.0 / 128);
    int32_t after[2];
    /* A device table is the kernels' to clamp: a length past it is flagged after the run. */
    int32_t spoiled[2] = {40, 5};
    OmegaGpuMem sm = buffer(spoiled, sizeof spoiled);
    EXPECT(omega_gpu_paged_attention_bf16_mem(&qm, &pool, &l, &tm, &sm, 2, QH, 2, 0, 0, 0, &qm, &info), OMEGA_GPU_ATTN_ERR_TABLE);
    CHECK(info.status == 2 && info.launches == 1);
    EXPECT_TEXT("attention table: the kernels flagged status 0x2");
    EXPECT(omega_gpu_kv_append_bf16_mem(&pool, &l, &km, &vm, &tm, &lm, 2, 2, 4, &info), OMEGA_GPU_ATTN_ERR_ARGS);
    EXPECT(omega_gpu_paged_attention_bf16_mem(&qm, NULL, &l, &tm, &lm, 2, QH, 2, 0, 0, 0, &om, &info), OMEGA_GPU_ATTN_ERR_ARGS);
    fetch(&lm, after, sizeof after);
    CHECK(after[0] == 17 && after[1] == 6);
    OmegaGpuMem *rest[] = {&pool, &tm, &km, &vm, &qm, &sm};
    omega_gpu_session_lock();
    for (size_t i = 0; i < sizeof rest / sizeof *rest; i++) omega_gpu_session_free(rest[i]);
    omega_gpu_session_unlock();
}

/* A hang injected into the next launch: the call that meets it latches the process. */
static int latch(void) {
    enum { H = 2, D = 8, S = 3 };
    float q[S * H * D], k[S * H * D], v[S * H * D], out[S * H * D];
    for (size_t i = 0; i < sizeof q / sizeof *q; i++) q[i] = rand_unit(), k[i] = rand_unit(), v[i] = rand_unit();
    OmegaGpuAttnInfo info;
    EXPECT(omega_gpu_gqa_attention_f32(q, k, v, H, H, D, S, out, &info), OMEGA_GPU_ATTN_OK);
    CHECK(omega_gpu_sim_inject(OMEGA_GPU_SIM_FAULT_HANG) == 0);
    EXPECT(omega_gpu_gqa_attention_f32(q, k, v, H, H, D, S, out, &info), OMEGA_GPU_ATTN_ERR_UNCERTAIN);
    EXPECT_TEXT("launch: completion timeout");
    CHECK(info.stage == OMEGA_GPU_ATTN_STAGE_LAUNCH && info.rc == OMEGA_GPU_ATTN_ERR_UNCERTAIN);
    CHECK(omega_gpu_session_is_blocked() == 1);
    EXPECT(omega_gpu_gqa_attention_f32(q, k, v, H, H, D, S, out, &info), OMEGA_GPU_ATTN_ERR_BLOCKED);
    EXPECT_TEXT("attention: ");
    CHECK(info.stage == OMEGA_GPU_ATTN_STAGE_ATTENTION);
    void *pool = NULL;
    EXPECT(omega_gpu_attention_pool_alloc(64, &pool), OMEGA_GPU_ATTN_ERR_BLOCKED);
    return check_done("attention latch");
}

int main(int argc, char **argv) {
    (void)put_va;
    const char *scenario = argc > 1 ? argv[1] : "run";
    if (strcmp(scenario, "latch") == 0) return latch();
    CHECK(strcmp(omega_gpu_attention_rc_name(OMEGA_GPU_ATTN_ERR_TABLE), "OMEGA_GPU_ATTN_ERR_TABLE") == 0);
    CHECK(strcmp(omega_gpu_attention_rc_name(-99), "OMEGA_GPU_ATTN_ERR_UNKNOWN") == 0);
    CHECK(strcmp(omega_gpu_attention_last_error(), "") == 0);
    dense();
    paged();
    device_buffers();
    return check_done("attention run");
}
