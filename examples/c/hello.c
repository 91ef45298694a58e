/* hello.c: the runtime API's worked example. Adds two vectors on the GPU with the repository's
 * `vector_add` kernel and checks the result on the CPU.
 *
 *   make -C . example-c                      # builds examples/c/hello against target/release/libomega.a
 *   OMEGA_PLATFORM=sim ./build-c/hello       # on the simulator (everywhere)
 *   ./build-c/hello                          # on the GPU, where /dev/nvidiactl exists
 *
 * Every call that touches the device runs between omega_gpu_session_lock() and omega_gpu_session_unlock();
 * close takes the lock itself, so it comes after the unlock. Every failure prints the stage text that
 * omega_gpu_session_last_error() gives, read while the lock is still held. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "omega.h"

#define N 1000u

static int fail(const char *what) {
    fprintf(stderr, "hello: %s failed: %s\n", what, omega_gpu_session_last_error());
    omega_gpu_session_unlock();
    return 1;
}

int main(void) {
    if (omega_runtime_version() != OMEGA_RUNTIME_API_VERSION) {
        fprintf(stderr, "hello: library API %#x, headers %#x\n", omega_runtime_version(), OMEGA_RUNTIME_API_VERSION);
        return 1;
    }

    omega_gpu_session_lock();
    if (omega_gpu_session_open() == NULL) return fail("open");

    OmegaGpuDeviceInfo dev;
    if (omega_gpu_device_query(&dev) != 0) return fail("device query");
    printf("hello: platform %s, device %s, %u SMs\n", omega_gpu_session_platform(), dev.name, dev.sm_count);

    /* Three GPU-uncached data buffers. Zero them first, so that freeing one that was never allocated is a
     * no-op. */
    OmegaGpuMem a, b, c;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    memset(&c, 0, sizeof c);
    if (omega_gpu_session_alloc(N * sizeof(float), &a) != 0) return fail("alloc a");
    if (omega_gpu_session_alloc(N * sizeof(float), &b) != 0) return fail("alloc b");
    if (omega_gpu_session_alloc(N * sizeof(float), &c) != 0) return fail("alloc c");

    float *x = a.cpu, *y = b.cpu;
    for (uint32_t i = 0; i < N; i++) {
        x[i] = (float)i;
        y[i] = 0.5f * (float)i;
    }
    /* CPU writes reach the GPU only through a sync. */
    if (omega_gpu_session_sync_to_gpu(&a) != 0) return fail("sync a");
    if (omega_gpu_session_sync_to_gpu(&b) != 0) return fail("sync b");

    /* The kernel: its cubin on the GPU, the simulator's code image on sim. */
    OmegaGpuKernel k;
    if (omega_gpu_kernel_load("vector_add", &k) != 0) return fail("load vector_add");

    /* vector_add(a, b, c, n): three 64-bit addresses (low word first), then n. */
    uint32_t args[7];
    args[0] = (uint32_t)a.va;
    args[1] = (uint32_t)(a.va >> 32);
    args[2] = (uint32_t)b.va;
    args[3] = (uint32_t)(b.va >> 32);
    args[4] = (uint32_t)c.va;
    args[5] = (uint32_t)(c.va >> 32);
    args[6] = N;

    OmegaGpuLaunch L = {
        .code_va = k.entry_va,
        .gpr_count = k.gpr_count,
        .threads_x = 256,
        .threads_y = 1,
        .grid_x = (N + 255) / 256,
        .grid_y = 1,
        .args = args,
        .n_args = 7,
        .timeout_ms = 1000,
    };
    uint64_t elapsed_ns = 0; /* launch adds to it */
    uint32_t marker = 0;
    int rc = omega_gpu_session_launch(&L, &elapsed_ns, &marker);
    if (rc != 0) {
        /* A timeout latches the process: from here on nothing may close or reopen the device. */
        if (omega_gpu_session_is_blocked()) fprintf(stderr, "hello: the process is latched\n");
        return fail("launch");
    }

    if (omega_gpu_session_sync_to_cpu(&c) != 0) return fail("sync c");
    const float *z = c.cpu;
    uint32_t wrong = 0;
    for (uint32_t i = 0; i < N; i++) {
        if (z[i] != x[i] + y[i]) wrong++;
    }
    float last = z[N - 1]; /* read before the buffer goes back to the platform */

    omega_gpu_session_free(&a);
    omega_gpu_session_free(&b);
    omega_gpu_session_free(&c);
    omega_gpu_session_free(&k.code);
    omega_gpu_session_unlock();
    omega_gpu_session_close();

    if (wrong) {
        fprintf(stderr, "hello: %u of %u sums wrong\n", wrong, N);
        return 1;
    }
    /* On the simulator the launch time is its virtual clock's, not a GPU's: say so. */
    const char *platform = omega_gpu_session_platform();
    int simulated = platform != NULL && strcmp(platform, "sim") == 0;
    printf("hello: %u sums correct, c[%u] = %.1f, launch took %llu ns%s (marker %u)\n", N, N - 1, (double)last,
           (unsigned long long)elapsed_ns, simulated ? " of simulated time (the sim platform's virtual clock)" : "",
           marker);
    return 0;
}
