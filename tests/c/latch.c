/* The latch seen from C. One scenario per process (argv[1]), because a latch lasts for the rest of it:
 *   hang         a kernel that never ends: the marker wait runs out
 *   refuse_poll  the completion poll is refused
 *   cancel       a cancel from another thread after submit
 *   zero_timeout a launch with timeout_ms 0: it runs out at once
 *   park_max     hang, then more frees than OMEGA_GPU_SESSION_PARK_MAX: listed, then counted untracked
 *   hang_recover hang, then omega_gpu_session_recover: the latch lifted, parked buffers released, the
 *                device reopened and a launch checked
 * Each must: fail the launch with its stage, set is_blocked, park every later free (counted, listed,
 * never released), refuse launch, alloc, sync, close and open. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "check.h"

static uint64_t cancel_after_ns;

/* Cancels once the platform clock is well past the launch's start: by then the launch has been submitted
 * and is polling (the simulator's clock only moves while something reads it or sleeps on it). */
static void *canceller(void *arg) {
    (void)arg;
    struct timespec us100 = {0, 100 * 1000};
    while (omega_gpu_session_now_ns() < cancel_after_ns) nanosleep(&us100, NULL);
    omega_gpu_session_cancel();
    return NULL;
}

static void *blocked_reader(void *arg) {
    *(int *)arg = omega_gpu_session_is_blocked();
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: latch hang|refuse_poll|cancel|zero_timeout|park_max|hang_recover\n");
        return 2;
    }
    const char *scenario = argv[1];

    omega_gpu_session_lock();
    CHECK(omega_gpu_session_open() != NULL);
    OmegaGpuMem out, spare;
    OmegaGpuKernel k;
    CHECK(omega_gpu_session_alloc(4, &out) == 0);
    CHECK(omega_gpu_session_alloc(8192, &spare) == 0);
    CHECK(omega_gpu_kernel_load("store_to", &k) == 0);
    uint32_t args[3];
    put_va(args, out.va);
    args[2] = 1;
    OmegaGpuLaunch L = {.code_va = k.entry_va, .gpr_count = k.gpr_count, .threads_x = 1, .grid_x = 1,
                        .grid_y = 1, .args = args, .n_args = 3, .timeout_ms = 100};
    CHECK(omega_gpu_session_launch(&L, NULL, NULL) == 0);
    CHECK(omega_gpu_session_is_blocked() == 0);
    /* park_max: buffers to free after the latch, more than are listed. */
    enum { EXTRA = OMEGA_GPU_SESSION_PARK_MAX + 3 };
    static OmegaGpuMem extra[EXTRA];
    int park_max = strcmp(scenario, "park_max") == 0;
    int recover = strcmp(scenario, "hang_recover") == 0;
    for (int i = 0; park_max && i < EXTRA; i++) CHECK(omega_gpu_session_alloc(100, &extra[i]) == 0);
    OmegaGpuAllocStats before;
    omega_gpu_session_alloc_stats(&before);

    int rc;
    if (strcmp(scenario, "hang") == 0 || park_max || recover) {
        CHECK(omega_gpu_sim_inject(OMEGA_GPU_SIM_FAULT_HANG) == 0);
        rc = omega_gpu_session_launch(&L, NULL, NULL);
        CHECK(rc == -1);
        CHECK_ERROR("launch: completion timeout");
        CHECK_ERROR_HAS("process latched");
    } else if (strcmp(scenario, "zero_timeout") == 0) {
        L.timeout_ms = 0; /* the kernel itself would complete: 0 still runs out at once */
        rc = omega_gpu_session_launch(&L, NULL, NULL);
        CHECK(rc == -1);
        CHECK_ERROR("launch: completion timeout: marker 0 not released within 0 ms; process latched");
        L.timeout_ms = 100;
    } else if (strcmp(scenario, "refuse_poll") == 0) {
        CHECK(omega_gpu_sim_inject(OMEGA_GPU_SIM_FAULT_REFUSE_POLL) == 0);
        rc = omega_gpu_session_launch(&L, NULL, NULL);
        CHECK(rc == -1);
        CHECK_ERROR("launch: completion poll refused");
    } else if (strcmp(scenario, "cancel") == 0) {
        CHECK(omega_gpu_sim_inject(OMEGA_GPU_SIM_FAULT_HANG) == 0);
        L.timeout_ms = 10000;
        cancel_after_ns = omega_gpu_session_now_ns() + 50ull * 1000 * 1000;
        pthread_t c;
        pthread_create(&c, NULL, canceller, NULL);
        rc = omega_gpu_session_launch(&L, NULL, NULL);
        pthread_join(c, NULL);
        CHECK(rc == OMEGA_GPU_SESSION_CANCELLED);
        CHECK_ERROR("launch: cancelled after submit");
    } else {
        fprintf(stderr, "unknown scenario %s\n", scenario);
        return 2;
    }

    /* Latched, seen from this thread and from one without the lock. */
    CHECK(omega_gpu_session_is_blocked() == 1);
    int other = -1;
    pthread_t r;
    pthread_create(&r, NULL, blocked_reader, &other);
    pthread_join(r, NULL);
    CHECK(other == 1);

    /* The session's launch buffer was parked at the latch. */
    OmegaGpuParkStats ps;
    omega_gpu_session_parked(&ps);
    CHECK(ps.buffers == 1 && ps.untracked == 0 && ps.bytes == 4096);

    /* Every free parks: counted, listed, handle kept for inspection, nothing released. */
    OmegaGpuBufferHandle h = spare.handle;
    omega_gpu_session_free(&spare);
    CHECK(spare.handle.index == h.index && spare.handle.generation == h.generation);
    CHECK(omega_gpu_session_is_parked(spare.handle) == 1);
    CHECK(omega_gpu_session_is_parked(out.handle) == 0);
    omega_gpu_session_parked(&ps);
    CHECK(ps.buffers == 2 && ps.bytes == 4096 + 8192);
    omega_gpu_session_free(&spare); /* a second free parks nothing more */
    omega_gpu_session_free(&out);
    omega_gpu_session_free(&k.code);
    omega_gpu_session_parked(&ps);
    CHECK(ps.buffers == 4);
    CHECK(omega_gpu_session_is_parked(out.handle) == 1);
    CHECK(omega_gpu_session_is_parked(k.code.handle) == 1);
    if (park_max) {
        /* 4 parked so far; the first PARK_MAX are listed by handle, the rest only counted. */
        for (int i = 0; i < EXTRA; i++) omega_gpu_session_free(&extra[i]);
        omega_gpu_session_parked(&ps);
        CHECK(ps.buffers == 4 + EXTRA);
        CHECK(ps.untracked == 4 + EXTRA - OMEGA_GPU_SESSION_PARK_MAX);
        CHECK(ps.bytes == 4096 + 4096 + 8192 + k.code.size + (uint64_t)EXTRA * 4096);
        int listed = 0;
        for (int i = 0; i < EXTRA; i++) listed += omega_gpu_session_is_parked(extra[i].handle);
        CHECK(listed == OMEGA_GPU_SESSION_PARK_MAX - 4);
        CHECK(omega_gpu_session_is_parked(extra[0].handle) == 1);
        CHECK(omega_gpu_session_is_parked(extra[EXTRA - 1].handle) == 0);
        CHECK(extra[EXTRA - 1].handle.generation != 0); /* kept, though not listed */
    }
    OmegaGpuAllocStats after;
    omega_gpu_session_alloc_stats(&after);
    CHECK(after.frees == before.frees);

    /* Everything that could touch the device is refused. */
    CHECK(omega_gpu_session_launch(&L, NULL, NULL) == -1);
    CHECK_ERROR("launch: refused, the process is latched");
    OmegaGpuMem m;
    CHECK(omega_gpu_session_alloc(4, &m) == -1);
    CHECK_ERROR("alloc: refused, the process is latched");
    CHECK(omega_gpu_session_sync_to_cpu(&out) == -1);
    CHECK_ERROR("sync: refused, the process is latched");
    CHECK(omega_gpu_session_set_platform("sim", NULL) == -1);
    CHECK_ERROR("set platform: refused, the process is latched");
    omega_gpu_session_unlock();

    omega_gpu_session_close();
    CHECK_ERROR("close: refused, the process is latched");
    CHECK(omega_gpu_session_is_open());

    omega_gpu_session_lock();
    CHECK(omega_gpu_session_open() == NULL);
    CHECK_ERROR("open: refused, the process is latched");
    CHECK(omega_gpu_session_open_count() == 1);
    omega_gpu_session_unlock();
    CHECK(omega_gpu_session_is_blocked() == 1);

    if (recover) {
        /* It takes the lock itself: a holder is refused, and stays latched. */
        omega_gpu_session_lock();
        CHECK(omega_gpu_session_recover() == -1);
        CHECK_ERROR("lock: recover takes the session lock itself");
        omega_gpu_session_unlock();
        CHECK(omega_gpu_session_is_blocked() == 1);
        CHECK(omega_gpu_session_recover() == 0);
        CHECK(omega_gpu_session_is_blocked() == 0);
        omega_gpu_session_parked(&ps);
        CHECK(ps.buffers == 0 && ps.untracked == 0 && ps.bytes == 0);
        CHECK(omega_gpu_session_is_parked(spare.handle) == 0);
        CHECK(!omega_gpu_session_is_open());
        CHECK(omega_gpu_session_recover() == -1);
        CHECK_ERROR("recover: the process is not latched; nothing to recover from");
        /* The same process reopens and runs a launch whose store is checked. */
        omega_gpu_session_lock();
        CHECK(omega_gpu_session_open() != NULL);
        CHECK(omega_gpu_session_open_count() == 2);
        CHECK(omega_gpu_session_alloc(4, &out) == 0);
        CHECK(omega_gpu_kernel_load("store_to", &k) == 0);
        *(volatile uint32_t *)out.cpu = 0;
        CHECK(omega_gpu_session_sync_to_gpu(&out) == 0);
        put_va(args, out.va);
        args[2] = 0x5eed1234u;
        L.code_va = k.entry_va;
        L.gpr_count = k.gpr_count;
        CHECK(omega_gpu_session_launch(&L, NULL, NULL) == 0);
        CHECK(omega_gpu_session_sync_to_cpu(&out) == 0);
        CHECK(*(volatile uint32_t *)out.cpu == 0x5eed1234u);
        omega_gpu_session_free(&out);
        omega_gpu_session_free(&k.code);
        omega_gpu_session_unlock();
        omega_gpu_session_close();
        CHECK(!omega_gpu_session_is_open());
    }

    char name[64];
    snprintf(name, sizeof name, "latch %s", scenario);
    return check_done(name);
}
