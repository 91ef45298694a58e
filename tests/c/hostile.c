/* Hostile input from C, on the simulator. One scenario per process (argv[1]):
 *   handles  made-up and foreign command-list pointers, a reset without the lock, a live handle with a
 *            forged address: each refused by name, nothing else disturbed
 *   launch   launch descriptors past the architecture refused by name; grids and element counts that no
 *            buffer holds fault (Xid 31) instead of aborting the process; a kernel far longer than its
 *            timeout is stopped by it and latches the process
 */
#include <stdint.h>

#include "check.h"

static OmegaGpuLaunch empty_launch(const OmegaGpuKernel *k, const uint32_t *words) {
    OmegaGpuLaunch L = {.code_va = k->entry_va, .gpr_count = k->gpr_count, .threads_x = 32, .grid_x = 1,
                        .grid_y = 1, .num_elements = 32, .args = words, .n_args = 1, .timeout_ms = 1000};
    return L;
}

/* Every list call refuses `p` by name and leaves the last error naming it. */
static void refused_everywhere(OmegaGpuCmdList *p, const OmegaGpuLaunch *L) {
    char want[64];
    snprintf(want, sizeof want, "%p is not a live command list", (void *)p);
    CHECK(omega_gpu_cmdlist_count(p) == 0);
    CHECK_ERROR("cmdlist count: ");
    CHECK_ERROR_HAS(want);
    CHECK(omega_gpu_cmdlist_reset(p) == -1);
    CHECK_ERROR("cmdlist reset: ");
    CHECK(omega_gpu_cmdlist_add(p, L, NULL) == -1);
    CHECK_ERROR("cmdlist add: ");
    CHECK(omega_gpu_cmdlist_mark_independent(p, 0) == -1);
    CHECK_ERROR("cmdlist mark independent: ");
    CHECK(omega_gpu_cmdlist_is_latched(p) == -1);
    CHECK_ERROR("cmdlist is latched: ");
    uint64_t stamps[4];
    CHECK(omega_gpu_cmdlist_stamps(p, stamps, 4) == 0);
    CHECK_ERROR("cmdlist stamps: ");
    CHECK(omega_gpu_cmdlist_submit(p, NULL) == -1);
    CHECK_ERROR("cmdlist submit: ");
}

static int handles(void) {
    omega_gpu_session_lock();
    CHECK(omega_gpu_session_open() != NULL);
    OmegaGpuKernel k;
    CHECK(omega_gpu_kernel_load("empty", &k) == 0);
    uint32_t words[1] = {0};
    OmegaGpuLaunch L = empty_launch(&k, words);
    omega_gpu_session_unlock();

    /* ----- the process's first list, then pointers nobody was given ----- */
    OmegaGpuCmdList *list = NULL;
    CHECK(omega_gpu_cmdlist_create(NULL, &list) == 0);
    omega_gpu_session_lock();
    CHECK(omega_gpu_cmdlist_add(list, &L, NULL) == 0);
    CHECK(omega_gpu_cmdlist_add(list, &L, NULL) == 0);
    int local = 0;
    OmegaGpuCmdList *made_up[] = {
        (OmegaGpuCmdList *)(uintptr_t)0x10,                   /* a small made-up number */
        (OmegaGpuCmdList *)(uintptr_t)0x20,
        (OmegaGpuCmdList *)(void *)&local,                    /* a pointer to a foreign object */
        (OmegaGpuCmdList *)(void *)&k,
        (OmegaGpuCmdList *)((uintptr_t)list + 16),            /* the key after the live one */
        (OmegaGpuCmdList *)((uintptr_t)list - 16),
    };
    for (size_t i = 0; i < sizeof made_up / sizeof made_up[0]; i++) refused_everywhere(made_up[i], &L);
    CHECK(omega_gpu_cmdlist_count(list) == 2); /* the live list was not touched by any of that */

    /* ----- reset needs the lock, as add does ----- */
    omega_gpu_session_unlock();
    CHECK(omega_gpu_cmdlist_reset(list) == -1);
    CHECK_ERROR("lock: ");
    CHECK(omega_gpu_cmdlist_count(list) == 2);
    for (size_t i = 0; i < sizeof made_up / sizeof made_up[0]; i++) {
        CHECK(omega_gpu_cmdlist_free(made_up[i]) == -1);
        CHECK_ERROR("cmdlist free: ");
    }
    CHECK(omega_gpu_cmdlist_count(list) == 2);
    omega_gpu_session_lock();
    CHECK(omega_gpu_cmdlist_reset(list) == 0);
    CHECK(omega_gpu_cmdlist_count(list) == 0);
    omega_gpu_session_unlock();
    CHECK(omega_gpu_cmdlist_free(list) == 0);
    CHECK(omega_gpu_cmdlist_free(list) == -1);
    CHECK_ERROR("cmdlist free: ");

    /* ----- a live handle with another address: its own refusal, not "handle is zero" ----- */
    omega_gpu_session_lock();
    OmegaGpuMem m;
    CHECK(omega_gpu_session_alloc(4096, &m) == 0);
    OmegaGpuMem forged = m;
    forged.va += 4096;
    omega_gpu_session_free(&forged);
    CHECK_ERROR("free: handle ");
    CHECK_ERROR_HAS("is live but names the buffer at");
    CHECK(forged.va == 0 && forged.handle.generation == 0);
    omega_gpu_session_free(&m);
    CHECK(m.va == 0); /* the real buffer was untouched and frees */
    omega_gpu_session_unlock();
    return check_done("hostile handles");
}

static void reopen(void) {
    omega_gpu_session_unlock();
    omega_gpu_session_close();
    omega_gpu_session_lock();
    CHECK(omega_gpu_session_open() != NULL);
}

static int launch(void) {
    omega_gpu_session_lock();
    CHECK(omega_gpu_session_open() != NULL);
    OmegaGpuKernel k;
    CHECK(omega_gpu_kernel_load("empty", &k) == 0);
    uint32_t words[8] = {0};
    OmegaGpuLaunch ok = empty_launch(&k, words);
    CHECK(omega_gpu_session_launch(&ok, NULL, NULL) == 0);

    /* ----- past the architecture: refused before submit, the limit named ----- */
    OmegaGpuLaunch L = ok;
    L.gpr_count = UINT32_MAX;
    CHECK(omega_gpu_session_launch(&L, NULL, NULL) == -1);
    CHECK_ERROR("launch arguments: gpr_count 4294967295");
    CHECK_ERROR_HAS("sm_90 allows at most 256");
    /* A kernel using all 255 registers a thread has is declared as 256 and runs; 257 rounds to 264. */
    L = ok;
    L.gpr_count = 255;
    CHECK(omega_gpu_session_launch(&L, NULL, NULL) == 0);
    L.gpr_count = 257;
    CHECK(omega_gpu_session_launch(&L, NULL, NULL) == -1);
    CHECK_ERROR("launch arguments: gpr_count 264");
    CHECK_ERROR_HAS("264 registers per thread, sm_90 allows at most 256");
    L = ok;
    L.spin_us = OMEGA_GPU_SESSION_MAX_SPIN_US + 1;
    CHECK(omega_gpu_session_launch(&L, NULL, NULL) == -1);
    CHECK_ERROR("launch arguments: spin_us 100001 is above the maximum of 100000 us");
    L = ok;
    L.shared_bytes = 233473;
    CHECK(omega_gpu_session_launch(&L, NULL, NULL) == -1);
    CHECK_ERROR("launch arguments: 233473 bytes of shared memory per block, sm_90 allows at most 233472");
    L = ok;
    L.grid_x = UINT32_MAX;
    CHECK(omega_gpu_session_launch(&L, NULL, NULL) == -1);
    CHECK_ERROR("launch arguments: grid x of 4294967295 is not in 1..=2147483647");
    CHECK(omega_gpu_session_is_blocked() == 0);

    /* ----- n = UINT32_MAX over 2^32 threads: an MMU fault at the end of the buffers, no abort ----- */
    OmegaGpuKernel vadd;
    CHECK(omega_gpu_kernel_load("vector_add", &vadd) == 0);
    OmegaGpuMem a, b, c;
    CHECK(omega_gpu_session_alloc(4096, &a) == 0);
    CHECK(omega_gpu_session_alloc(4096, &b) == 0);
    CHECK(omega_gpu_session_alloc(4096, &c) == 0);
    put_va(words, a.va);
    put_va(words + 2, b.va);
    put_va(words + 4, c.va);
    words[6] = UINT32_MAX;
    L = (OmegaGpuLaunch){.code_va = vadd.entry_va, .gpr_count = vadd.gpr_count, .threads_x = 1024,
                         .grid_x = 4194304, .grid_y = 1, .num_elements = UINT32_MAX, .args = words, .n_args = 7,
                         .timeout_ms = 1000};
    CHECK(omega_gpu_session_launch(&L, NULL, NULL) == -1);
    CHECK_ERROR("launch: kernel fault: channel error Xid 31 (MMU fault)");
    CHECK(omega_gpu_session_is_blocked() == 0);
    reopen();

    /* ----- a kernel far longer than its 5 ms: the timeout stops it and the process latches ----- */
    OmegaGpuKernel la;
    CHECK(omega_gpu_kernel_load("local_array", &la) == 0);
    OmegaGpuMem out;
    CHECK(omega_gpu_session_alloc(64u << 20, &out) == 0);
    put_va(words, out.va);
    words[2] = 7;
    L = (OmegaGpuLaunch){.code_va = la.entry_va, .gpr_count = la.gpr_count, .threads_x = 1024,
                         .grid_x = 0x7fffffff, .grid_y = 1, .num_elements = UINT32_MAX, .args = words, .n_args = 3,
                         .timeout_ms = 5};
    CHECK(omega_gpu_session_launch(&L, NULL, NULL) == -1);
    CHECK_ERROR("launch: completion timeout: marker 0 not released within 5 ms; process latched");
    CHECK(omega_gpu_session_is_blocked() == 1);
    omega_gpu_session_unlock();
    return check_done("hostile launch");
}

int main(int argc, char **argv) {
    const char *s = argc > 1 ? argv[1] : "";
    if (strcmp(s, "handles") == 0) return handles();
    if (strcmp(s, "launch") == 0) return launch();
    fprintf(stderr, "usage: hostile handles|launch\n");
    return 2;
}
