/* Every documented return value and stage text of the session entries, seen from C, on the simulator.
 * One process, one thread; the order matters because the session is process-wide. */
#include <stdint.h>

#include "check.h"

static int hook_runs = 0;

static void count_hook(void *ctx) {
    (*(int *)ctx)++;
}

static OmegaGpuAllocStats stats(void) {
    OmegaGpuAllocStats s;
    omega_gpu_session_alloc_stats(&s);
    return s;
}

static uint32_t read_word(const OmegaGpuMem *m) {
    CHECK(omega_gpu_session_sync_to_cpu(m) == 0);
    return *(const uint32_t *)m->cpu;
}

int main(void) {
    /* ----- before anything ----- */
    CHECK(strcmp(omega_gpu_session_last_error(), "") == 0);
    CHECK(omega_runtime_version() == OMEGA_RUNTIME_API_VERSION);
    CHECK(OMEGA_RUNTIME_API_VERSION == ((OMEGA_RUNTIME_API_VERSION_MAJOR << 16) | OMEGA_RUNTIME_API_VERSION_MINOR));
    CHECK(strcmp(omega_gpu_session_platform(), "sim") == 0);
    CHECK(omega_gpu_session_is_blocked() == 0);
    CHECK(!omega_gpu_session_is_open());
    CHECK(omega_gpu_session_open_count() == 0);
    CHECK(omega_gpu_session_submit_prefix_words() == 0x210 / 4);
    CHECK(strcmp(omega_gpu_platform_refusal_name(OMEGA_GPU_PLAT_ZERO_LENGTH), "OMEGA_GPU_PLAT_ZERO_LENGTH") == 0);
    CHECK(strcmp(omega_gpu_platform_refusal_name(0), "unknown") == 0);

    /* ----- the lock is checked: no holder, no device calls ----- */
    OmegaGpuMem m;
    memset(&m, 0, sizeof m);
    CHECK(omega_gpu_session_open() == NULL);
    CHECK_ERROR("lock: ");
    CHECK(omega_gpu_session_alloc(64, &m) == -1);
    CHECK_ERROR("lock: ");
    omega_gpu_session_unlock();
    CHECK_ERROR("lock: unlock from a thread that does not hold the session lock");

    /* ----- the spin window ----- */
    CHECK(omega_gpu_session_spin_us() == 0);
    CHECK(omega_gpu_session_completion_mode() == OMEGA_GPU_COMPLETION_SLEEP_POLL);
    CHECK(omega_gpu_session_set_spin_us(OMEGA_GPU_SESSION_MAX_SPIN_US + 1) == -1);
    CHECK_ERROR("set spin: ");
    CHECK(omega_gpu_session_spin_us() == 0);
    CHECK(omega_gpu_session_set_spin_us(OMEGA_GPU_SESSION_MAX_SPIN_US) == 0);
    CHECK(omega_gpu_session_spin_us() == OMEGA_GPU_SESSION_MAX_SPIN_US);
    CHECK(omega_gpu_session_completion_mode() == OMEGA_GPU_COMPLETION_SPIN_POLL);
    CHECK(omega_gpu_session_set_spin_us(0) == 0);

    omega_gpu_session_lock();

    /* ----- before open ----- */
    CHECK(omega_gpu_session_alloc(64, &m) == -1);
    CHECK_ERROR("alloc: device not open");
    OmegaGpuDeviceInfo di;
    CHECK(omega_gpu_device_query(&di) == -1);
    CHECK_ERROR("device query: device not open");
    CHECK(omega_gpu_session_set_platform(NULL, NULL) == -1);
    CHECK_ERROR("set platform: name is NULL");
    CHECK(omega_gpu_session_set_platform("bogus", NULL) == -1);
    CHECK_ERROR("platform: unknown platform `bogus`");
    CHECK(omega_gpu_session_set_platform("sim", NULL) == 0);
    CHECK(omega_gpu_sim_inject(99) == -1);
    CHECK_ERROR("sim inject: unknown fault 99");

    /* A failed open carries the driver's text. */
    CHECK(omega_gpu_sim_inject(OMEGA_GPU_SIM_FAULT_FAIL_OPEN) == 0);
    CHECK(omega_gpu_session_open() == NULL);
    CHECK_ERROR("open: ");
    CHECK_ERROR_HAS("injected open failure");
    CHECK(omega_gpu_session_open_count() == 0);

    /* ----- open ----- */
    OmegaGpuSession *s = omega_gpu_session_open();
    CHECK(s != NULL);
    CHECK(omega_gpu_session_is_open());
    CHECK(omega_gpu_session_open_count() == 1);
    if (s) {
        CHECK(s->open_count == 1);
        CHECK(s->launch_buffer.kind == OMEGA_GPU_HANDLE_BUF_QUEUE);
        CHECK(s->launch_buffer.handle.generation != 0);
    }
    CHECK(omega_gpu_session_open() == s);
    CHECK(omega_gpu_session_open_count() == 1);

    /* The session's own launch buffer is not the caller's to free: refused, not counted, left as it was. */
    if (s) {
        OmegaGpuMem lb = s->launch_buffer;
        OmegaGpuAllocStats before = stats();
        omega_gpu_session_free(&s->launch_buffer);
        CHECK_ERROR("free: the buffer is the session's own launch buffer; nothing was released");
        CHECK(memcmp(&lb, &s->launch_buffer, sizeof lb) == 0);
        OmegaGpuAllocStats after = stats();
        CHECK(after.frees == before.frees && after.stale_refusals == before.stale_refusals);
        CHECK(omega_gpu_session_sync_to_cpu(&s->launch_buffer) == 0); /* still live */
    }
    CHECK(omega_gpu_session_set_platform("sim", NULL) == -1);
    CHECK_ERROR("set platform: close the device first");
    CHECK(omega_gpu_device_query(NULL) == -1);
    CHECK_ERROR("device query: out is NULL");
    CHECK(omega_gpu_device_query(&di) == 0);
    CHECK(di.name[0] != 0);
    CHECK(di.sm_count > 0);
    CHECK(di.memory_bytes > 0);
    uint64_t t0 = omega_gpu_session_now_ns();
    CHECK(omega_gpu_session_now_ns() > t0);

    /* ----- alloc ----- */
    OmegaGpuAllocStats st0 = stats();
    CHECK(omega_gpu_session_alloc(100, NULL) == -1);
    CHECK_ERROR("alloc: out is NULL");
    CHECK(omega_gpu_session_alloc(100, &m) == 0);
    CHECK(m.kind == OMEGA_GPU_HANDLE_BUF_DATA);
    CHECK(m.cpu != NULL && m.va != 0 && m.handle.generation != 0);
    CHECK(m.size == 4096);
    OmegaGpuAllocStats st1 = stats();
    CHECK(st1.allocs == st0.allocs + 1);
    CHECK(st1.alloc_bytes == st0.alloc_bytes + m.size);

    OmegaGpuMem z;
    CHECK(omega_gpu_session_alloc(0, &z) == 0);
    CHECK(z.size == 4096);

    OmegaGpuMem big;
    memset(&big, 0xff, sizeof big);
    CHECK(omega_gpu_session_alloc((size_t)1 << 60, &big) == -1);
    CHECK_ERROR("platform: OMEGA_GPU_PLAT_OVERFLOW");
    CHECK(big.handle.generation == 0 && big.cpu == NULL);

    /* Sizes whose code tail or page rounding overflows are refused, never wrapped, in every build. */
    st0 = stats();
    const size_t huge[] = {SIZE_MAX, SIZE_MAX - 2047, SIZE_MAX - 4096, (size_t)PTRDIFF_MAX + 1};
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
        memset(&big, 0xff, sizeof big);
        CHECK(omega_gpu_session_alloc_code(huge[i], &big) == -1);
        CHECK_ERROR("platform: OMEGA_GPU_PLAT_OVERFLOW");
        CHECK(big.handle.generation == 0 && big.cpu == NULL && big.va == 0 && big.size == 0);
        memset(&big, 0xff, sizeof big);
        CHECK(omega_gpu_session_alloc(huge[i], &big) == -1);
        CHECK_ERROR("platform: OMEGA_GPU_PLAT_OVERFLOW");
        CHECK(big.handle.generation == 0 && big.size == 0);
        memset(&big, 0xff, sizeof big);
        CHECK(omega_gpu_session_alloc_cached(huge[i], &big) == -1);
        CHECK_ERROR("platform: OMEGA_GPU_PLAT_OVERFLOW");
        CHECK(omega_gpu_code_alloc_bytes(huge[i]) == 0);
        CHECK_ERROR("code alloc: ");
    }
    st1 = stats();
    CHECK(st1.allocs == st0.allocs && st1.alloc_failures == st0.alloc_failures);

    /* A buffer past the largest carved size (2 MiB) is a platform allocation of its own, which the
       injected failure refuses. */
    st0 = stats();
    CHECK(omega_gpu_sim_inject(OMEGA_GPU_SIM_FAULT_FAIL_ALLOC) == 0);
    CHECK(omega_gpu_session_alloc(4u << 20, &big) == -1);
    CHECK_ERROR("alloc: ");
    st1 = stats();
    CHECK(st1.alloc_failures == st0.alloc_failures + 1);
    CHECK(st1.allocs == st0.allocs);

    /* ----- device-only buffers, write and read, the memory figures ----- */
    OmegaGpuMemInfo mi0, mi1;
    CHECK(omega_gpu_session_mem_info(NULL) == -1);
    CHECK_ERROR("mem info: out is NULL");
    CHECK(omega_gpu_session_mem_info(&mi0) == 0);
    CHECK(mi0.total_bytes == di.memory_bytes && mi0.free_bytes < mi0.total_bytes);
    OmegaGpuMem dev;
    CHECK(omega_gpu_session_alloc_device(10000, NULL) == -1);
    CHECK_ERROR("alloc: out is NULL");
    CHECK(omega_gpu_session_alloc_device(8u << 20, &dev) == 0);
    CHECK(dev.kind == OMEGA_GPU_HANDLE_BUF_DATA && dev.cpu == NULL && dev.va != 0 && dev.size == (8u << 20));
    CHECK(omega_gpu_session_mem_info(&mi1) == 0);
    CHECK(mi1.free_bytes == mi0.free_bytes - (8u << 20)); /* past 2 MiB: an allocation of its own */
    CHECK(omega_gpu_session_sync_to_gpu(&dev) == 0);    /* no CPU view: a no-op */
    static uint8_t pattern[10000], back[10000];
    for (size_t i = 0; i < sizeof pattern; i++) pattern[i] = (uint8_t)(i * 13 + 1);
    CHECK(omega_gpu_session_write(&dev, 4096, pattern, sizeof pattern) == 0);
    CHECK(omega_gpu_session_read(&dev, 4096, back, sizeof back) == 0);
    CHECK(memcmp(pattern, back, sizeof back) == 0);
    CHECK(omega_gpu_session_write(&dev, dev.size - 1, pattern, 2) == -1);
    CHECK_ERROR("write: range ");
    CHECK(omega_gpu_session_read(&dev, 0, NULL, 1) == -1);
    CHECK_ERROR("read: dst is NULL");
    CHECK(omega_gpu_session_write(NULL, 0, pattern, 1) == -1);
    CHECK_ERROR("write: m is NULL");
    CHECK(omega_gpu_session_write(&dev, 0, NULL, 0) == 0);
    /* write and read on a buffer with a CPU view go through the view. */
    CHECK(omega_gpu_session_write(&m, 10, pattern, 20) == 0);
    CHECK(memcmp((const uint8_t *)m.cpu + 10, pattern, 20) == 0);
    CHECK(omega_gpu_session_read(&m, 10, back, 20) == 0);
    CHECK(memcmp(back, pattern, 20) == 0);
    OmegaGpuMem stale_dev = dev;
    omega_gpu_session_free(&dev);
    CHECK(omega_gpu_session_read(&stale_dev, 0, back, 1) == -1);
    CHECK_ERROR("read: ");

    /* ----- code buffers ----- */
    OmegaGpuMem code0, code;
    CHECK(omega_gpu_session_alloc_code(0, &code0) == 0);
    CHECK(code0.kind == OMEGA_GPU_HANDLE_BUF_CODE);
    CHECK(code0.size == omega_gpu_code_alloc_bytes(0));
    CHECK(code0.size >= OMEGA_GPU_CODE_PREFETCH_TAIL);
    CHECK(omega_gpu_session_alloc_code(4000, &code) == 0);
    CHECK(code.size == omega_gpu_code_alloc_bytes(4000));
    CHECK(code.size >= 4000 + OMEGA_GPU_CODE_PREFETCH_TAIL);
    {
        const unsigned char *tail = (const unsigned char *)code.cpu + 4000;
        int nonzero = 0;
        for (size_t i = 0; i < code.size - 4000; i++) nonzero += tail[i] != 0;
        CHECK(nonzero == 0);
    }

    OmegaGpuMem cached;
    CHECK(omega_gpu_session_alloc_cached(64, &cached) == 0);
    CHECK(cached.kind == OMEGA_GPU_HANDLE_BUF_DATA);

    /* ----- sync ----- */
    CHECK(omega_gpu_session_sync_to_gpu(NULL) == -1);
    CHECK_ERROR("sync: m is NULL");
    CHECK(omega_gpu_session_sync_to_cpu(NULL) == -1);
    CHECK_ERROR("sync: m is NULL");
    CHECK(omega_gpu_session_sync_to_gpu(&m) == 0);
    CHECK(omega_gpu_session_sync_to_cpu(&m) == 0);
    CHECK(omega_gpu_sim_inject(OMEGA_GPU_SIM_FAULT_FAIL_SYNC) == 0);
    CHECK(omega_gpu_session_sync_to_gpu(&m) == -1);
    CHECK_ERROR("sync: ");

    /* ----- free: zeroes, refuses stale handles and counts them ----- */
    OmegaGpuMem stale = z;
    omega_gpu_session_free(&z);
    CHECK(z.handle.generation == 0 && z.cpu == NULL && z.va == 0 && z.size == 0);
    CHECK(omega_gpu_session_sync_to_gpu(&stale) == -1);
    CHECK_ERROR("sync: stale handle");
    st0 = stats();
    omega_gpu_session_free(&stale);
    CHECK_ERROR("free: stale handle");
    st1 = stats();
    CHECK(st1.stale_refusals == st0.stale_refusals + 1);
    CHECK(st1.frees == st0.frees);
    CHECK(stale.handle.generation == 0);
    omega_gpu_session_free(NULL);
    CHECK_ERROR("free: m is NULL");
    OmegaGpuMem none;
    memset(&none, 0, sizeof none);
    omega_gpu_session_set_error("test: marker");
    CHECK(strcmp(omega_gpu_session_last_error(), "test: marker") == 0);
    omega_gpu_session_free(&none);
    CHECK(strcmp(omega_gpu_session_last_error(), "test: marker") == 0);
    omega_gpu_session_set_error(NULL);
    CHECK(strcmp(omega_gpu_session_last_error(), "") == 0);

    /* ----- scratch ----- */
    OmegaGpuScratch sc;
    memset(&sc, 0, sizeof sc);
    CHECK(omega_gpu_session_scratch(NULL, 1) == -1);
    CHECK_ERROR("scratch: s is NULL");
    CHECK(omega_gpu_session_scratch(&sc, 10000) == 0);
    CHECK(sc.cap >= 10000 && sc.high_water == 10000 && sc.mem.cpu != NULL);
    OmegaGpuBufferHandle first = sc.mem.handle;
    CHECK(omega_gpu_session_scratch(&sc, 100) == 0);
    CHECK(sc.mem.handle.index == first.index && sc.mem.handle.generation == first.generation);
    CHECK(sc.high_water == 10000);
    CHECK(omega_gpu_session_scratch_reserve(&sc, 20000) == 0);
    CHECK(sc.reserved != 0 && sc.cap >= 20000);
    st0 = stats();
    CHECK(omega_gpu_session_scratch(&sc, 20000) == 0);
    CHECK(omega_gpu_session_scratch(&sc, sc.cap + 1) == OMEGA_GPU_SESSION_SCRATCH_RESERVED);
    CHECK_ERROR("scratch: ");
    st1 = stats();
    CHECK(st1.allocs == st0.allocs && st1.frees == st0.frees);
    omega_gpu_session_scratch_unreserve(&sc);
    CHECK(sc.reserved == 0);
    CHECK(omega_gpu_session_scratch(&sc, sc.cap + 1) == 0);
    omega_gpu_session_scratch_free(&sc);
    CHECK(sc.cap == 0 && sc.high_water == 0 && sc.mem.handle.generation == 0);

    /* A reservation bounds requests by the size reserved, not the page it rounds up to. */
    CHECK(omega_gpu_session_scratch_reserve(&sc, 1000) == 0);
    CHECK(sc.cap == 4096);
    CHECK(omega_gpu_session_scratch(&sc, 1000) == 0);
    CHECK(omega_gpu_session_scratch(&sc, 2000) == OMEGA_GPU_SESSION_SCRATCH_RESERVED);
    CHECK_ERROR("scratch: request of 2000 bytes past the reservation of 1000 bytes");
    /* Without the lock a fitting request and unreserve are refused, and a refused free keeps the scratch
     * (zeroing it would lose the buffer). */
    omega_gpu_session_unlock();
    OmegaGpuScratch kept = sc;
    CHECK(omega_gpu_session_scratch(&sc, 10) == -1);
    CHECK_ERROR("lock: ");
    omega_gpu_session_scratch_unreserve(&sc);
    CHECK_ERROR("lock: ");
    omega_gpu_session_scratch_free(&sc);
    CHECK_ERROR("lock: ");
    CHECK(memcmp(&kept, &sc, sizeof sc) == 0);
    omega_gpu_session_lock();
    omega_gpu_session_scratch_free(&sc);
    CHECK(sc.mem.handle.generation == 0 && sc.reserved == 0);

    /* ----- kernels and launch ----- */
    OmegaGpuKernel k;
    CHECK(omega_gpu_kernel_load("no_such_kernel", &k) == -1);
    CHECK_ERROR("load: no kernel `no_such_kernel`");
    CHECK(omega_gpu_kernel_load(NULL, &k) == -1);
    CHECK_ERROR("load: name is NULL");
    CHECK(omega_gpu_kernel_load("store_to", NULL) == -1);
    CHECK_ERROR("load: out is NULL");
    CHECK(omega_gpu_kernel_load("store_to", &k) == 0);
    CHECK(k.code.kind == OMEGA_GPU_HANDLE_BUF_CODE);
    CHECK(k.param_bytes == 12);
    CHECK(k.gpr_count % 8 == 0 && k.gpr_count >= 64);

    /* store_to(addr, value): one word stored at addr. */
    memset(m.cpu, 0, m.size);
    CHECK(omega_gpu_session_sync_to_gpu(&m) == 0);
    uint32_t args[3];
    put_va(args, m.va);
    args[2] = 0xC0FFEEu;
    OmegaGpuLaunch L = {
        .code_va = k.entry_va,
        .gpr_count = k.gpr_count,
        .threads_x = 1,
        .grid_x = 1,
        .grid_y = 1,
        .args = args,
        .n_args = 3,
        .timeout_ms = 1000,
    };
    uint64_t elapsed = 5;
    uint32_t marker = 0;

    CHECK(omega_gpu_session_launch(NULL, &elapsed, &marker) == -1);
    CHECK_ERROR("launch arguments: L is NULL");
    OmegaGpuLaunch bad = L;
    bad.args = NULL;
    CHECK(omega_gpu_session_launch(&bad, &elapsed, &marker) == -1);
    CHECK_ERROR("launch arguments: args is NULL");
    bad = L;
    bad.n_args = 0;
    CHECK(omega_gpu_session_launch(&bad, &elapsed, &marker) == -1);
    CHECK_ERROR("launch arguments: n_args 0");
    bad = L;
    bad.n_args = OMEGA_GPU_SESSION_MAX_ARGS + 1;
    CHECK(omega_gpu_session_launch(&bad, &elapsed, &marker) == -1);
    CHECK_ERROR("launch arguments: n_args 33");
    bad = L;
    bad.threads_x = 0;
    CHECK(omega_gpu_session_launch(&bad, &elapsed, &marker) == -1);
    CHECK_ERROR("launch arguments: threads_x is 0");
    bad = L;
    bad.grid_x = 0;
    CHECK(omega_gpu_session_launch(&bad, &elapsed, &marker) == -1);
    CHECK_ERROR("launch arguments: grid 0x1");
    bad = L;
    bad.grid_y = 0;
    CHECK(omega_gpu_session_launch(&bad, &elapsed, &marker) == -1);
    CHECK_ERROR("launch arguments: grid 1x0");
    bad = L;
    bad.threads_x = 2048;
    CHECK(omega_gpu_session_launch(&bad, &elapsed, &marker) == -1);
    CHECK_ERROR("launch arguments: 2048 threads per block");
    bad = L;
    bad.code_va = m.va;
    CHECK(omega_gpu_session_launch(&bad, &elapsed, &marker) == -1);
    CHECK_ERROR("launch arguments: code_va");
    bad = L;
    bad.n_args = 2;
    CHECK(omega_gpu_session_launch(&bad, &elapsed, &marker) == -1);
    CHECK_ERROR("launch arguments: 2 argument words, kernel `store_to`");
    CHECK(elapsed == 5 && marker == 0);
    CHECK(read_word(&m) == 0); /* nothing ran */

    CHECK(omega_gpu_session_launch(&L, &elapsed, &marker) == 0);
    CHECK(elapsed > 5); /* added to, not set */
    /* Added to: a start far above any launch time stays below the result (an overwrite would fall under it). */
    const uint64_t far = (uint64_t)1 << 60;
    elapsed = far;
    CHECK(omega_gpu_session_launch(&L, &elapsed, NULL) == 0);
    CHECK(elapsed > far && elapsed - far < 1000000000ull);
    CHECK(marker != 0);
    CHECK(read_word(&m) == 0xC0FFEEu);
    CHECK(omega_gpu_session_launch(&L, NULL, NULL) == 0);

    /* A cancel before submit: CANCELLED, nothing ran, no latch. */
    args[2] = 7;
    omega_gpu_session_cancel();
    CHECK(omega_gpu_session_launch(&L, NULL, NULL) == OMEGA_GPU_SESSION_CANCELLED);
    CHECK_ERROR("launch: cancelled before submit");
    CHECK(omega_gpu_session_is_blocked() == 0);
    CHECK(read_word(&m) == 0xC0FFEEu);
    CHECK(omega_gpu_session_launch(&L, NULL, NULL) == 0);
    CHECK(read_word(&m) == 7);

    /* A kernel fault: -1, no latch, and the channel refuses launches until it is reopened. */
    CHECK(omega_gpu_sim_inject(OMEGA_GPU_SIM_FAULT_KERNEL_FAULT) == 0);
    CHECK(omega_gpu_session_launch(&L, NULL, NULL) == -1);
    CHECK_ERROR("launch: kernel fault");
    CHECK(omega_gpu_session_is_blocked() == 0);
    CHECK(omega_gpu_session_launch(&L, NULL, NULL) == -1);
    CHECK_ERROR("launch: kernel fault");

    /* ----- counters and the latch report with no latch ----- */
    omega_gpu_session_alloc_stats(NULL);
    CHECK_ERROR("alloc stats: out is NULL");
    omega_gpu_session_parked(NULL);
    CHECK_ERROR("parked: out is NULL");
    OmegaGpuParkStats ps;
    omega_gpu_session_parked(&ps);
    CHECK(ps.buffers == 0 && ps.untracked == 0 && ps.bytes == 0);
    CHECK(omega_gpu_session_is_parked(m.handle) == 0);

    /* ----- close hooks (INTERNAL) ----- */
    CHECK(omega_gpu_session_on_close(NULL, NULL) == -1);
    CHECK_ERROR("on close: hook is NULL");
    for (int i = 0; i < OMEGA_GPU_SESSION_ON_CLOSE_MAX; i++) CHECK(omega_gpu_session_on_close(count_hook, &hook_runs) == 0);
    CHECK(omega_gpu_session_on_close(count_hook, &hook_runs) == -1);
    CHECK_ERROR("on close: ");

    /* ----- close: takes the lock itself ----- */
    omega_gpu_session_close();
    CHECK_ERROR("lock: close takes the session lock itself");
    CHECK(omega_gpu_session_is_open());
    CHECK(hook_runs == 0);
    omega_gpu_session_unlock();
    omega_gpu_session_close();
    CHECK(!omega_gpu_session_is_open());
    CHECK(hook_runs == OMEGA_GPU_SESSION_ON_CLOSE_MAX);

    /* ----- after close: old handles are refused and counted ----- */
    omega_gpu_session_lock();
    st0 = stats();
    omega_gpu_session_free(&cached);
    CHECK_ERROR("free: device not open");
    CHECK(cached.handle.generation == 0);
    st1 = stats();
    CHECK(st1.stale_refusals == st0.stale_refusals + 1);

    s = omega_gpu_session_open();
    CHECK(s != NULL);
    CHECK(omega_gpu_session_open_count() == 2);
    if (s) CHECK(s->open_count == 2);
    st0 = stats();
    omega_gpu_session_free(&code);
    CHECK_ERROR("free: ");
    st1 = stats();
    CHECK(st1.stale_refusals == st0.stale_refusals + 1);
    CHECK(omega_gpu_session_sync_to_gpu(&m) == -1);
    CHECK_ERROR("sync: ");

    /* The reopened channel runs again. */
    OmegaGpuMem out;
    CHECK(omega_gpu_session_alloc(4, &out) == 0);
    CHECK(omega_gpu_kernel_load("store_to", &k) == 0);
    put_va(args, out.va);
    args[2] = 42;
    L.code_va = k.entry_va;
    CHECK(omega_gpu_session_launch(&L, NULL, NULL) == 0);
    CHECK(read_word(&out) == 42);
    omega_gpu_session_free(&out);
    omega_gpu_session_free(&k.code);

    /* ----- host memory ----- */
    unsigned char *p = omega_gpu_host_alloc(64);
    CHECK(p != NULL);
    if (p) memset(p, 0xab, 64);
    omega_gpu_host_free(p);
    uint32_t *q = omega_gpu_host_calloc(16, sizeof(uint32_t));
    CHECK(q != NULL);
    if (q) {
        int nonzero = 0;
        for (int i = 0; i < 16; i++) nonzero += q[i] != 0;
        CHECK(nonzero == 0);
    }
    omega_gpu_host_free(q);
    CHECK(omega_gpu_host_calloc(SIZE_MAX, 2) == NULL);
    CHECK_ERROR("host alloc: ");
    omega_gpu_host_free(NULL);

    omega_gpu_session_unlock();
    omega_gpu_session_close();
    CHECK(!omega_gpu_session_is_open());
    CHECK(omega_gpu_session_is_blocked() == 0);
    return check_done("session_api");
}
