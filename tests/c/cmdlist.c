/* Command lists seen from C, on the simulator. One scenario per process (argv[1]):
 *   run   a dependent chain of vector_add launches against a CPU reference, marks, stamps, barrier names,
 *         2048 accepted and the 2049th refused, the lock rules of create and free, and every handle refusal
 *   hang  a list whose completion never comes: the list latches, then the process
 *   count_free  threads asking a list's count while another frees it and a third holds the session lock:
 *         the counts, which need no lock, never wait for it (an alarm ends the process if they do)
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

#define N 1000u
#define CHAIN 4

static float a_host[N], b_host[N];

/* A vector_add launch c = a + b over n elements; `words` (7) must live until the add has copied them. */
static OmegaGpuLaunch vadd(const OmegaGpuKernel *k, uint32_t *words, const OmegaGpuMem *a, const OmegaGpuMem *b,
                           const OmegaGpuMem *c, uint32_t n) {
    put_va(words, a->va);
    put_va(words + 2, b->va);
    put_va(words + 4, c->va);
    words[6] = n;
    OmegaGpuLaunch L = {.code_va = k->entry_va, .gpr_count = k->gpr_count, .threads_x = 256,
                        .grid_x = (n + 255) / 256, .grid_y = 1, .num_elements = n, .args = words, .n_args = 7,
                        .timeout_ms = 1000};
    return L;
}

static void put(const OmegaGpuMem *m, const float *v, uint32_t n) {
    memcpy(m->cpu, v, n * sizeof(float));
    CHECK(omega_gpu_session_sync_to_gpu(m) == 0);
}

static void poison(const OmegaGpuMem *m, uint32_t n) {
    float *p = (float *)m->cpu;
    for (uint32_t i = 0; i < n; i++) p[i] = NAN;
    CHECK(omega_gpu_session_sync_to_gpu(m) == 0);
}

/* Every element of `m` equals `want` exactly (the simulator adds in f32, as C does). */
static int matches(const OmegaGpuMem *m, const float *want, uint32_t n) {
    CHECK(omega_gpu_session_sync_to_cpu(m) == 0);
    const float *p = (const float *)m->cpu;
    for (uint32_t i = 0; i < n; i++) {
        if (p[i] != want[i]) {
            fprintf(stderr, "element %u: %g, want %g\n", i, (double)p[i], (double)want[i]);
            return 0;
        }
    }
    return 1;
}

static int increasing(const uint64_t *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (s[i] == 0 || (i > 0 && s[i] <= s[i - 1])) {
            fprintf(stderr, "stamp %zu: %llu after %llu\n", i, (unsigned long long)s[i],
                    (unsigned long long)(i ? s[i - 1] : 0));
            return 0;
        }
    }
    return 1;
}

static void fill_inputs(void) {
    uint32_t x = 12345;
    for (uint32_t i = 0; i < N; i++) {
        x = x * 1664525u + 1013904223u;
        a_host[i] = (float)(x >> 8) / 65536.0f - 128.0f;
        x = x * 1664525u + 1013904223u;
        b_host[i] = (float)(x >> 8) / 131072.0f;
    }
}

static int run(void) {
    fill_inputs();
    omega_gpu_session_lock();
    CHECK(omega_gpu_session_open() != NULL);
    OmegaGpuKernel k;
    CHECK(omega_gpu_kernel_load("vector_add", &k) == 0);
    OmegaGpuMem a, b, c[CHAIN];
    CHECK(omega_gpu_session_alloc(N * sizeof(float), &a) == 0);
    CHECK(omega_gpu_session_alloc(N * sizeof(float), &b) == 0);
    for (int i = 0; i < CHAIN; i++) CHECK(omega_gpu_session_alloc(N * sizeof(float), &c[i]) == 0);
    put(&a, a_host, N);
    put(&b, b_host, N);

    /* ----- barrier names, no list needed ----- */
    CHECK(strcmp(omega_gpu_cmdlist_barrier_name(OMEGA_GPU_CMDLIST_BARRIER_DEFAULT),
                 "OMEGA_GPU_CMDLIST_BARRIER_DEFAULT") == 0);
    CHECK(strcmp(omega_gpu_cmdlist_barrier_name(OMEGA_GPU_CMDLIST_BARRIER_NONE), "OMEGA_GPU_CMDLIST_BARRIER_NONE") ==
          0);
    CHECK(strcmp(omega_gpu_cmdlist_barrier_name(7), "OMEGA_GPU_CMDLIST_BARRIER_UNKNOWN") == 0);
    CHECK(omega_gpu_cmdlist_barrier_name(7) == omega_gpu_cmdlist_barrier_name(7));

    /* ----- create takes the lock itself: with it held, refused by name instead of a deadlock ----- */
    OmegaGpuCmdList *list = (OmegaGpuCmdList *)(uintptr_t)16;
    CHECK(omega_gpu_cmdlist_create(NULL, &list) == -1);
    CHECK_ERROR("lock: cmdlist create takes the session lock itself");
    CHECK(list == NULL);
    omega_gpu_session_unlock();

    CHECK(omega_gpu_cmdlist_create(NULL, NULL) == -1);
    CHECK_ERROR("cmdlist create: out is NULL");
    OmegaGpuCmdListOpts bad = {.barrier = 7};
    CHECK(omega_gpu_cmdlist_create(&bad, &list) == -1);
    CHECK_ERROR("cmdlist create: barrier mode 7");
    CHECK(list == NULL);
    CHECK(omega_gpu_cmdlist_create(NULL, &list) == 0);
    CHECK(list != NULL);
    CHECK(omega_gpu_cmdlist_count(list) == 0);
    CHECK(omega_gpu_cmdlist_is_latched(list) == 0);

    uint32_t words[CHAIN][7];
    OmegaGpuLaunch L = vadd(&k, words[0], &a, &b, &c[0], N);
    CHECK(omega_gpu_cmdlist_add(list, &L, NULL) == -1); /* add needs the lock */
    CHECK_ERROR("lock: ");
    CHECK(omega_gpu_cmdlist_count(list) == 0);

    omega_gpu_session_lock();

    /* ----- a dependent chain, one submission, against the CPU reference; outputs poisoned first ----- */
    for (int i = 0; i < CHAIN; i++) poison(&c[i], N);
    /* c0 = a + b; c1 = c0 + b; c2 = c1 + c0; c3 = c2 + a: each launch reads what the one before wrote. */
    const OmegaGpuMem *lhs[CHAIN] = {&a, &c[0], &c[1], &c[2]};
    const OmegaGpuMem *rhs[CHAIN] = {&b, &b, &c[0], &a};
    for (uint32_t i = 0; i < CHAIN; i++) {
        L = vadd(&k, words[i], lhs[i], rhs[i], &c[i], N);
        uint32_t index = 99;
        CHECK(omega_gpu_cmdlist_add(list, &L, &index) == 0);
        CHECK(index == i);
    }
    CHECK(omega_gpu_cmdlist_count(list) == CHAIN);
    uint64_t stamps[2 * CHAIN];
    CHECK(omega_gpu_cmdlist_stamps(list, stamps, 2 * CHAIN) == 0); /* nothing submitted yet */
    OmegaGpuCmdListStats st;
    memset(&st, 0xff, sizeof st);
    CHECK(omega_gpu_cmdlist_submit(list, &st) == 0);
    CHECK(st.submits == 1 && st.launches == CHAIN && st.failed_submits == 0);
    CHECK(st.barriers == CHAIN - 1 && st.independent == 0 && st.unordered == 0 && st.skipped == 0);
    CHECK(st.last_submit_ns > 0 && st.total_submit_ns == st.last_submit_ns);
    static float want[CHAIN][N];
    for (uint32_t i = 0; i < N; i++) {
        want[0][i] = a_host[i] + b_host[i];
        want[1][i] = want[0][i] + b_host[i];
        want[2][i] = want[1][i] + want[0][i];
        want[3][i] = want[2][i] + a_host[i];
    }
    for (int i = 0; i < CHAIN; i++) CHECK(matches(&c[i], want[i], N));

    /* ----- stamps: one per launch, increasing ----- */
    CHECK(omega_gpu_cmdlist_stamps(list, stamps, 2 * CHAIN) == CHAIN);
    CHECK(increasing(stamps, CHAIN));
    uint64_t first_two[2];
    CHECK(omega_gpu_cmdlist_stamps(list, first_two, 2) == 2);
    CHECK(first_two[0] == stamps[0] && first_two[1] == stamps[1]);
    CHECK(omega_gpu_cmdlist_stamps(list, NULL, 0) == 0);
    CHECK(omega_gpu_cmdlist_stamps(list, NULL, 4) == 0);
    CHECK_ERROR("cmdlist stamps: out is NULL");
    /* A second submission of the same list is stamped later. */
    CHECK(omega_gpu_cmdlist_submit(list, NULL) == 0);
    uint64_t again[CHAIN];
    CHECK(omega_gpu_cmdlist_stamps(list, again, CHAIN) == CHAIN);
    CHECK(increasing(again, CHAIN) && again[0] > stamps[CHAIN - 1]);

    /* ----- reset, then independent launches ----- */
    CHECK(omega_gpu_cmdlist_reset(list) == 0);
    CHECK(omega_gpu_cmdlist_count(list) == 0);
    CHECK(omega_gpu_cmdlist_stamps(list, stamps, CHAIN) == 0);
    CHECK(omega_gpu_cmdlist_submit(list, NULL) == -1);
    CHECK_ERROR("cmdlist submit: the list is empty");
    for (int i = 0; i < 3; i++) poison(&c[i], N);
    /* c0 = a + b, c1 = b + b, c2 = a + a: none reads another's output, so 1 and 2 may overlap. */
    const OmegaGpuMem *ind_l[3] = {&a, &b, &a};
    const OmegaGpuMem *ind_r[3] = {&b, &b, &a};
    for (uint32_t i = 0; i < 3; i++) {
        L = vadd(&k, words[i], ind_l[i], ind_r[i], &c[i], N);
        CHECK(omega_gpu_cmdlist_add(list, &L, NULL) == 0);
    }
    CHECK(omega_gpu_cmdlist_mark_independent(list, 1) == 0);
    CHECK(omega_gpu_cmdlist_mark_independent(list, 2) == 0);
    CHECK(omega_gpu_cmdlist_mark_independent(list, 3) == -1);
    CHECK_ERROR("cmdlist mark independent: launch 3 is not in the list (3 launches)");
    CHECK(omega_gpu_cmdlist_submit(list, &st) == 0);
    /* Statistics are the list's since create: the chain submitted twice, then these three. */
    CHECK(st.submits == 3 && st.launches == 2 * CHAIN + 3);
    CHECK(st.independent == 2 && st.barriers == 2 * (CHAIN - 1));
    for (uint32_t i = 0; i < N; i++) {
        want[0][i] = a_host[i] + b_host[i];
        want[1][i] = b_host[i] + b_host[i];
        want[2][i] = a_host[i] + a_host[i];
    }
    for (int i = 0; i < 3; i++) CHECK(matches(&c[i], want[i], N));

    /* ----- add refusals: the launch checks, named ----- */
    uint64_t refusals = st.refusals;
    CHECK(omega_gpu_cmdlist_add(list, NULL, NULL) == -1);
    CHECK_ERROR("launch arguments: L is NULL");
    OmegaGpuLaunch bad_launch = vadd(&k, words[0], &a, &b, &c[0], N);
    bad_launch.n_args = 0;
    CHECK(omega_gpu_cmdlist_add(list, &bad_launch, NULL) == -1);
    CHECK_ERROR("launch arguments: ");
    bad_launch = vadd(&k, words[0], &a, &b, &c[0], N);
    bad_launch.grid_x = 0;
    CHECK(omega_gpu_cmdlist_add(list, &bad_launch, NULL) == -1);
    CHECK_ERROR("launch arguments: ");
    CHECK(omega_gpu_cmdlist_count(list) == 3);
    CHECK(omega_gpu_cmdlist_add(NULL, &L, NULL) == -1);
    CHECK_ERROR("cmdlist add: list is NULL");

    /* ----- 2048 launches accepted, the 2049th refused by name, all in one submission ----- */
    CHECK(omega_gpu_cmdlist_reset(list) == 0);
    uint32_t tiny[7];
    OmegaGpuLaunch one = vadd(&k, tiny, &a, &b, &c[3], 1);
    int all_added = 1;
    for (uint32_t i = 0; i < OMEGA_GPU_CMDLIST_MAX_LAUNCHES; i++) {
        uint32_t index = 0;
        if (omega_gpu_cmdlist_add(list, &one, &index) != 0 || index != i) all_added = 0;
    }
    CHECK(all_added);
    CHECK(omega_gpu_cmdlist_count(list) == 2048);
    CHECK(omega_gpu_cmdlist_add(list, &one, NULL) == -1);
    CHECK_ERROR("cmdlist add: OMEGA_GPU_CMDLIST_FULL");
    CHECK(omega_gpu_cmdlist_count(list) == OMEGA_GPU_CMDLIST_MAX_LAUNCHES);
    CHECK(omega_gpu_cmdlist_submit(list, &st) == 0);
    CHECK(st.refusals == refusals + 3); /* the two descriptors refused by the launch checks, and the 2049th */
    static uint64_t many[OMEGA_GPU_CMDLIST_MAX_LAUNCHES + 1];
    CHECK(omega_gpu_cmdlist_stamps(list, many, OMEGA_GPU_CMDLIST_MAX_LAUNCHES + 1) == OMEGA_GPU_CMDLIST_MAX_LAUNCHES);
    CHECK(increasing(many, OMEGA_GPU_CMDLIST_MAX_LAUNCHES));

    /* ----- free takes the lock itself: with it held, refused and the list kept ----- */
    CHECK(omega_gpu_cmdlist_free(list) == -1);
    CHECK_ERROR("lock: cmdlist free takes the session lock itself");
    CHECK(omega_gpu_cmdlist_count(list) == OMEGA_GPU_CMDLIST_MAX_LAUNCHES);
    omega_gpu_session_unlock();

    /* ----- a test-only unordered list ----- */
    OmegaGpuCmdListOpts unordered = {.barrier = OMEGA_GPU_CMDLIST_BARRIER_NONE};
    OmegaGpuCmdList *none = NULL;
    CHECK(omega_gpu_cmdlist_create(&unordered, &none) == 0);
    omega_gpu_session_lock();
    CHECK(omega_gpu_cmdlist_add(none, &one, NULL) == 0);
    CHECK(omega_gpu_cmdlist_add(none, &one, NULL) == 0);
    CHECK(omega_gpu_cmdlist_submit(none, &st) == 0);
    CHECK(st.unordered == 2 && st.barriers == 0 && st.independent == 0);
    omega_gpu_session_unlock();
    CHECK(omega_gpu_cmdlist_free(none) == 0);

    /* ----- after free the handle is dead: every call refuses it by name, a double free included ----- */
    CHECK(omega_gpu_cmdlist_free(list) == 0);
    CHECK(omega_gpu_cmdlist_free(list) == -1);
    CHECK_ERROR("cmdlist free: ");
    CHECK_ERROR_HAS("is not a live command list");
    CHECK(omega_gpu_cmdlist_count(list) == 0);
    CHECK_ERROR("cmdlist count: ");
    CHECK(omega_gpu_cmdlist_is_latched(list) == -1);
    CHECK_ERROR("cmdlist is latched: ");
    CHECK(omega_gpu_cmdlist_reset(list) == -1);
    CHECK_ERROR("cmdlist reset: ");
    CHECK(omega_gpu_cmdlist_mark_independent(list, 0) == -1);
    CHECK_ERROR("cmdlist mark independent: ");
    CHECK(omega_gpu_cmdlist_stamps(list, stamps, 1) == 0);
    CHECK_ERROR("cmdlist stamps: ");
    omega_gpu_session_lock();
    CHECK(omega_gpu_cmdlist_add(list, &one, NULL) == -1);
    CHECK_ERROR("cmdlist add: ");
    CHECK(omega_gpu_cmdlist_submit(list, &st) == -1);
    CHECK_ERROR("cmdlist submit: ");
    CHECK_ERROR_HAS("is not a live command list");
    omega_gpu_session_unlock();
    /* A later list never gets the dead handle back, and a pointer that never was a list is refused too. */
    OmegaGpuCmdList *later = NULL;
    CHECK(omega_gpu_cmdlist_create(NULL, &later) == 0);
    CHECK(later != NULL && later != list && later != none);
    CHECK(omega_gpu_cmdlist_is_latched(list) == -1);
    CHECK(omega_gpu_cmdlist_is_latched(later) == 0);
    CHECK(omega_gpu_cmdlist_is_latched((const OmegaGpuCmdList *)&k) == -1);
    CHECK_ERROR_HAS("is not a live command list");
    CHECK(omega_gpu_cmdlist_is_latched(NULL) == -1);
    CHECK_ERROR("cmdlist is latched: list is NULL");
    CHECK(omega_gpu_cmdlist_free(later) == 0);
    CHECK(omega_gpu_cmdlist_free(NULL) == 0);

    omega_gpu_session_lock();
    omega_gpu_session_free(&a);
    omega_gpu_session_free(&b);
    for (int i = 0; i < CHAIN; i++) omega_gpu_session_free(&c[i]);
    omega_gpu_session_free(&k.code);
    omega_gpu_session_unlock();
    omega_gpu_session_close();
    CHECK(!omega_gpu_session_is_open());
    CHECK(omega_gpu_session_is_blocked() == 0);
    return check_done("cmdlist run");
}

static int hang(void) {
    omega_gpu_session_lock();
    CHECK(omega_gpu_session_open() != NULL);
    OmegaGpuKernel k;
    CHECK(omega_gpu_kernel_load("vector_add", &k) == 0);
    OmegaGpuMem a, c;
    CHECK(omega_gpu_session_alloc(N * sizeof(float), &a) == 0);
    CHECK(omega_gpu_session_alloc(N * sizeof(float), &c) == 0);
    omega_gpu_session_unlock();
    OmegaGpuCmdList *list = NULL;
    CHECK(omega_gpu_cmdlist_create(NULL, &list) == 0);
    omega_gpu_session_lock();
    uint32_t words[7];
    OmegaGpuLaunch L = vadd(&k, words, &a, &a, &c, N);
    L.timeout_ms = 100;
    for (int i = 0; i < 3; i++) CHECK(omega_gpu_cmdlist_add(list, &L, NULL) == 0);

    CHECK(omega_gpu_sim_inject(OMEGA_GPU_SIM_FAULT_HANG) == 0);
    OmegaGpuCmdListStats st;
    CHECK(omega_gpu_cmdlist_submit(list, &st) == -1);
    CHECK_ERROR("launch: completion timeout");
    CHECK_ERROR_HAS("within 300 ms"); /* the list's limit: the sum of its launches' own */
    CHECK(st.failed_submits == 1 && st.submits == 0 && st.launches == 0);

    /* The list latched, then the process. */
    CHECK(omega_gpu_cmdlist_is_latched(list) == 1);
    CHECK(omega_gpu_session_is_blocked() == 1);

    /* A latched list refuses everything but free and the queries, and keeps what it held. */
    CHECK(omega_gpu_cmdlist_add(list, &L, NULL) == -1);
    CHECK_ERROR("cmdlist add: refused, the list is latched");
    CHECK(omega_gpu_cmdlist_submit(list, NULL) == -1);
    CHECK_ERROR("cmdlist submit: refused, the list is latched");
    CHECK(omega_gpu_cmdlist_reset(list) == -1);
    CHECK_ERROR("cmdlist reset: refused, the list is latched");
    CHECK(omega_gpu_cmdlist_mark_independent(list, 0) == -1);
    CHECK_ERROR("cmdlist mark independent: refused, the list is latched");
    CHECK(omega_gpu_cmdlist_count(list) == 3);
    uint64_t stamps[3];
    CHECK(omega_gpu_cmdlist_stamps(list, stamps, 3) == 0);

    /* The latch parked what the device may still write: the session's launch buffer and the stamp area
     * of the submission that latched (the simulator keeps no buffers of its own). */
    OmegaGpuParkStats before, after;
    omega_gpu_session_parked(&before);
    CHECK(before.buffers == 2 && before.untracked == 0);
    CHECK(before.bytes == 4096 + OMEGA_GPU_CMDLIST_MAX_LAUNCHES * 16);
    /* Free keeps it parked (counted once) and is not refused. */
    omega_gpu_session_unlock();
    CHECK(omega_gpu_cmdlist_free(list) == 0);
    omega_gpu_session_parked(&after);
    CHECK(after.buffers == before.buffers && after.bytes == before.bytes);
    CHECK(omega_gpu_cmdlist_is_latched(list) == -1);

    /* No new list in a latched process. */
    OmegaGpuCmdList *next = (OmegaGpuCmdList *)(uintptr_t)16;
    CHECK(omega_gpu_cmdlist_create(NULL, &next) == -1);
    CHECK_ERROR("cmdlist create: refused, the process is latched");
    CHECK(next == NULL);
    CHECK(omega_gpu_session_is_blocked() == 1);
    return check_done("cmdlist hang");
}

#define COUNTERS 4

static OmegaGpuCmdList *shared_list;
static int counters_done;
static pthread_mutex_t done_mu = PTHREAD_MUTEX_INITIALIZER;

/* Asks the count until the list is gone (the count of a live list here is 1; of a freed one, 0). */
static void *counter(void *arg) {
    (void)arg;
    while (omega_gpu_cmdlist_count(shared_list) != 0) {
    }
    pthread_mutex_lock(&done_mu);
    counters_done++;
    pthread_mutex_unlock(&done_mu);
    return NULL;
}

static void *freer(void *arg) {
    *(int *)arg = omega_gpu_cmdlist_free(shared_list);
    return NULL;
}

static int count_free(void) {
    alarm(60);
    omega_gpu_session_lock();
    CHECK(omega_gpu_session_open() != NULL);
    OmegaGpuKernel k;
    CHECK(omega_gpu_kernel_load("vector_add", &k) == 0);
    OmegaGpuMem a;
    CHECK(omega_gpu_session_alloc(N * sizeof(float), &a) == 0);
    omega_gpu_session_unlock();
    CHECK(omega_gpu_cmdlist_create(NULL, &shared_list) == 0);
    omega_gpu_session_lock();
    uint32_t words[7];
    OmegaGpuLaunch L = vadd(&k, words, &a, &a, &a, N);
    CHECK(omega_gpu_cmdlist_add(shared_list, &L, NULL) == 0);

    /* This thread keeps the session lock throughout; the free waits for it, the counts must not. */
    pthread_t c[COUNTERS], f;
    for (int i = 0; i < COUNTERS; i++) pthread_create(&c[i], NULL, counter, NULL);
    struct timespec ms1 = {0, 1000 * 1000};
    nanosleep(&ms1, NULL);
    int freed = -2;
    pthread_create(&f, NULL, freer, &freed);
    int done = 0;
    for (int waited = 0; waited < 20000 && done < COUNTERS; waited++) {
        nanosleep(&ms1, NULL);
        pthread_mutex_lock(&done_mu);
        done = counters_done;
        pthread_mutex_unlock(&done_mu);
    }
    CHECK(done == COUNTERS); /* every count returned while the lock was held elsewhere */
    CHECK(freed == -2);      /* and the free is still waiting for the lock */
    omega_gpu_session_unlock();
    pthread_join(f, NULL);
    for (int i = 0; i < COUNTERS; i++) pthread_join(c[i], NULL);
    CHECK(freed == 0);
    CHECK(omega_gpu_cmdlist_count(shared_list) == 0);
    CHECK_ERROR("cmdlist count: ");
    CHECK_ERROR_HAS("is not a live command list");
    return check_done("cmdlist count_free");
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "count_free") == 0) return count_free();
    if (argc == 2 && strcmp(argv[1], "run") == 0) return run();
    if (argc == 2 && strcmp(argv[1], "hang") == 0) return hang();
    fprintf(stderr, "usage: cmdlist run|hang|count_free\n");
    return 2;
}
