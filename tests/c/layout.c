/* Prints what a C compiler makes of the headers' structs and constants: `NAME size`, `NAME.field offset`
 * and `CONSTANT value`, one per line. tests/c_api.rs compares every line with Rust's size_of, offset_of
 * and constants, so the C and Rust views of one struct cannot drift apart. */
#include <stddef.h>
#include <stdio.h>

#include "omega.h"

#define SIZE(T) printf(#T " %zu\n", sizeof(T))
#define OFF(T, f) printf(#T "." #f " %zu\n", offsetof(T, f))
#define CONST(c) printf(#c " %lld\n", (long long)(c))

int main(void) {
    SIZE(OmegaGpuBufferHandle);
    OFF(OmegaGpuBufferHandle, index);
    OFF(OmegaGpuBufferHandle, generation);
    SIZE(OmegaGpuDeviceHandle);
    SIZE(OmegaGpuQueueHandle);
    SIZE(OmegaGpuMem);
    OFF(OmegaGpuMem, handle);
    OFF(OmegaGpuMem, kind);
    OFF(OmegaGpuMem, cpu);
    OFF(OmegaGpuMem, va);
    OFF(OmegaGpuMem, size);
    SIZE(OmegaGpuScratch);
    OFF(OmegaGpuScratch, mem);
    OFF(OmegaGpuScratch, cap);
    OFF(OmegaGpuScratch, high_water);
    OFF(OmegaGpuScratch, reserved);
    SIZE(OmegaGpuAllocStats);
    OFF(OmegaGpuAllocStats, allocs);
    OFF(OmegaGpuAllocStats, alloc_bytes);
    OFF(OmegaGpuAllocStats, alloc_failures);
    OFF(OmegaGpuAllocStats, frees);
    OFF(OmegaGpuAllocStats, stale_refusals);
    SIZE(OmegaGpuParkStats);
    OFF(OmegaGpuParkStats, buffers);
    OFF(OmegaGpuParkStats, untracked);
    OFF(OmegaGpuParkStats, bytes);
    SIZE(OmegaGpuLaunch);
    OFF(OmegaGpuLaunch, code_va);
    OFF(OmegaGpuLaunch, gpr_count);
    OFF(OmegaGpuLaunch, threads_x);
    OFF(OmegaGpuLaunch, threads_y);
    OFF(OmegaGpuLaunch, grid_x);
    OFF(OmegaGpuLaunch, grid_y);
    OFF(OmegaGpuLaunch, num_elements);
    OFF(OmegaGpuLaunch, args);
    OFF(OmegaGpuLaunch, n_args);
    OFF(OmegaGpuLaunch, timeout_ms);
    OFF(OmegaGpuLaunch, shared_bytes);
    OFF(OmegaGpuLaunch, spin_us);
    SIZE(OmegaGpuSession);
    OFF(OmegaGpuSession, launch_buffer);
    OFF(OmegaGpuSession, open_count);
    SIZE(OmegaGpuDeviceInfo);
    OFF(OmegaGpuDeviceInfo, name);
    OFF(OmegaGpuDeviceInfo, driver_version);
    OFF(OmegaGpuDeviceInfo, pci);
    OFF(OmegaGpuDeviceInfo, sm_count);
    OFF(OmegaGpuDeviceInfo, memory_bytes);
    SIZE(OmegaGpuKernel);
    OFF(OmegaGpuKernel, code);
    OFF(OmegaGpuKernel, entry_va);
    OFF(OmegaGpuKernel, gpr_count);
    OFF(OmegaGpuKernel, param_bytes);
    SIZE(OmegaGpuCmdListOpts);
    OFF(OmegaGpuCmdListOpts, barrier);
    OFF(OmegaGpuCmdListOpts, skip_launch);
    OFF(OmegaGpuCmdListOpts, timeout_ms);
    OFF(OmegaGpuCmdListOpts, spin_us);
    SIZE(OmegaGpuCmdListStats);
    OFF(OmegaGpuCmdListStats, launches);
    OFF(OmegaGpuCmdListStats, last_submit_ns);
    OFF(OmegaGpuCmdListStats, refusals);
    SIZE(OmegaGpuJob);
    OFF(OmegaGpuJob, timeouts);
    SIZE(OmegaGpuTimeouts);
    OFF(OmegaGpuTimeouts, kernel_done_ms);
    OFF(OmegaGpuTimeouts, engine_idle_ms);
    OFF(OmegaGpuTimeouts, spin_us);
    SIZE(OmegaGpuResult);
    OFF(OmegaGpuResult, failure);
    OFF(OmegaGpuResult, states);
    OFF(OmegaGpuResult, entered_ns);
    OFF(OmegaGpuResult, started_ns);
    OFF(OmegaGpuResult, finished_ns);
    OFF(OmegaGpuResult, diag);
    OFF(OmegaGpuResult, detail);
    SIZE(OmegaGpuBackendDiag);
    OFF(OmegaGpuBackendDiag, kernel_ns);
    SIZE(OmegaGpuLaunchReport);
    OFF(OmegaGpuLaunchReport, kernel_ns);
    SIZE(OmegaGpuBackend);
    OFF(OmegaGpuBackend, ctx);
    OFF(OmegaGpuBackend, now_ns);
    OFF(OmegaGpuBackend, launch);
    OFF(OmegaGpuBackend, release);
    CONST(OMEGA_GPU_CMDLIST_MAX_LAUNCHES);
    CONST(OMEGA_GPU_CMDLIST_BARRIER_DEFAULT);
    CONST(OMEGA_GPU_CMDLIST_BARRIER_NONE);
    CONST(OMEGA_GPU_LAYOUT_VECTOR_1D);
    CONST(OMEGA_GPU_ENGINE_JOB_MAX_ELEMENTS);
    CONST(OMEGA_GPU_ENGINE_DETAIL_BYTES);
    CONST(OMEGA_GPU_ENGINE_FAILURE_COUNT);
    CONST(OMEGA_GPU_ENGINE_STATE_COUNT);
    CONST(OMEGA_GPU_ENGINE_STEP_COUNT);
    CONST(OMEGA_GPU_ENGINE_WAIT_COUNT);
    CONST(OMEGA_GPU_ENGINE_UNCERTAIN_COMPLETION_BLOCKED);
    CONST(OMEGA_GPU_ENGINE_STATE_FAILED);
    CONST(OMEGA_GPU_ENGINE_STEP_READBACK);
    CONST(OMEGA_GPU_ENGINE_WAIT_ENGINE_IDLE);
    CONST(OMEGA_GPU_BACKEND_STEP_LATCHED);
    CONST(OMEGA_GPU_BACKEND_LAUNCH_FAULT);
    CONST(OMEGA_GPU_SESSION_LOCK_ID);
    CONST(OMEGA_GPU_SESSION_MAX_ARGS);
    CONST(OMEGA_GPU_SESSION_MAX_SPIN_US);
    CONST(OMEGA_GPU_SESSION_PARK_MAX);
    CONST(OMEGA_GPU_SESSION_SCRATCH_RESERVED);
    CONST(OMEGA_GPU_SESSION_CANCELLED);
    CONST(OMEGA_GPU_SESSION_DEFAULT_SHARED_BYTES);
    CONST(OMEGA_GPU_SESSION_ON_CLOSE_MAX);
    CONST(OMEGA_GPU_HANDLE_BUF_DATA);
    CONST(OMEGA_GPU_HANDLE_BUF_CODE);
    CONST(OMEGA_GPU_HANDLE_BUF_QUEUE);
    CONST(OMEGA_GPU_CODE_PREFETCH_TAIL);
    CONST(OMEGA_GPU_PLATFORM_ABI_MAJOR);
    CONST(OMEGA_GPU_PLATFORM_ABI_MINOR);
    CONST(OMEGA_RUNTIME_API_VERSION_MAJOR);
    CONST(OMEGA_RUNTIME_API_VERSION_MINOR);
    return 0;
}
