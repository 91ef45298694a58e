/* Threads taking turns on the one session lock, seen from C with pthreads: workers that each lock, open,
 * launch and unlock; a thread refused for calling without the lock; cancel and is_blocked from a thread
 * without it; close waiting for the holder. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "check.h"

#define WORKERS 4
#define ROUNDS 25

static int worker_ok[WORKERS];

static void *worker(void *arg) {
    int id = (int)(intptr_t)arg;
    for (int r = 0; r < ROUNDS; r++) {
        omega_gpu_session_lock();
        OmegaGpuMem out;
        OmegaGpuKernel k;
        if (omega_gpu_session_open() == NULL || omega_gpu_session_alloc(4, &out) != 0) {
            fprintf(stderr, "worker %d: %s\n", id, omega_gpu_session_last_error());
            omega_gpu_session_unlock();
            return NULL;
        }
        if (omega_gpu_kernel_load("store_to", &k) != 0) {
            fprintf(stderr, "worker %d: %s\n", id, omega_gpu_session_last_error());
            omega_gpu_session_free(&out);
            omega_gpu_session_unlock();
            return NULL;
        }
        uint32_t value = (uint32_t)(id * 1000 + r + 1);
        uint32_t args[3];
        put_va(args, out.va);
        args[2] = value;
        OmegaGpuLaunch L = {.code_va = k.entry_va, .gpr_count = k.gpr_count, .threads_x = 1, .grid_x = 1,
                            .grid_y = 1, .args = args, .n_args = 3, .timeout_ms = 1000};
        if (omega_gpu_session_launch(&L, NULL, NULL) == 0 && omega_gpu_session_sync_to_cpu(&out) == 0 &&
            *(uint32_t *)out.cpu == value) {
            worker_ok[id]++;
        } else {
            fprintf(stderr, "worker %d round %d: %s\n", id, r, omega_gpu_session_last_error());
        }
        omega_gpu_session_free(&out);
        omega_gpu_session_free(&k.code);
        omega_gpu_session_unlock();
    }
    return NULL;
}

struct refused {
    int alloc_rc;
    char alloc_error[128];
    int blocked;
};

/* Runs while the main thread holds the lock: everything that needs the lock is refused here. */
static void *intruder(void *arg) {
    struct refused *r = arg;
    OmegaGpuMem m;
    r->alloc_rc = omega_gpu_session_alloc(64, &m);
    /* Safe to read here only because the holder is idle, waiting for this thread. */
    snprintf(r->alloc_error, sizeof r->alloc_error, "%s", omega_gpu_session_last_error());
    omega_gpu_session_unlock(); /* refused: not the holder */
    omega_gpu_session_cancel(); /* any thread, no lock */
    r->blocked = omega_gpu_session_is_blocked();
    return NULL;
}

static void *closer(void *arg) {
    (void)arg;
    omega_gpu_session_close(); /* takes the lock itself: waits for the holder */
    return NULL;
}

int main(void) {
    pthread_t t[WORKERS];
    for (int i = 0; i < WORKERS; i++) pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i);
    for (int i = 0; i < WORKERS; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < WORKERS; i++) CHECK(worker_ok[i] == ROUNDS);
    CHECK(omega_gpu_session_open_count() == 1);

    omega_gpu_session_lock();
    CHECK(omega_gpu_session_open() != NULL);
    struct refused r;
    memset(&r, 0, sizeof r);
    pthread_t it;
    pthread_create(&it, NULL, intruder, &r);
    pthread_join(it, NULL);
    CHECK(r.alloc_rc == -1);
    CHECK(strncmp(r.alloc_error, "lock: ", 6) == 0);
    CHECK(r.blocked == 0);

    /* This thread still holds the lock (the intruder's unlock was refused) and sees the cancel. */
    OmegaGpuMem out;
    OmegaGpuKernel k;
    CHECK(omega_gpu_session_alloc(4, &out) == 0);
    CHECK(omega_gpu_kernel_load("store_to", &k) == 0);
    uint32_t args[3];
    put_va(args, out.va);
    args[2] = 9;
    OmegaGpuLaunch L = {.code_va = k.entry_va, .gpr_count = k.gpr_count, .threads_x = 1, .grid_x = 1,
                        .grid_y = 1, .args = args, .n_args = 3, .timeout_ms = 1000};
    CHECK(omega_gpu_session_launch(&L, NULL, NULL) == OMEGA_GPU_SESSION_CANCELLED);
    CHECK_ERROR("launch: cancelled before submit");
    CHECK(omega_gpu_session_is_blocked() == 0);
    CHECK(omega_gpu_session_launch(&L, NULL, NULL) == 0);
    omega_gpu_session_free(&out);
    omega_gpu_session_free(&k.code);

    /* close from another thread waits until the holder unlocks. */
    pthread_t ct;
    pthread_create(&ct, NULL, closer, NULL);
    struct timespec ms50 = {0, 50 * 1000 * 1000};
    nanosleep(&ms50, NULL);
    CHECK(omega_gpu_session_is_open());
    omega_gpu_session_unlock();
    pthread_join(ct, NULL);
    CHECK(!omega_gpu_session_is_open());
    return check_done("threads");
}
