/* Hostile input from C, on the simulator. One scenario per process (argv[1]):
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
    CHECK_ERROR_HAS("sm_90 allows at most 255");
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
    if (strcmp(s, "launch") == 0) return launch();
    fprintf(stderr, "usage: hostile launch\n");
    return 2;
}
