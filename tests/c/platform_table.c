/* A platform installed from C: a service table whose every function forwards to the simulator's own table
 * (omega_gpu_platform_sim), counting the calls, installed through omega_gpu_session_set_platform; then a
 * vector add end to end through it, the checks that refuse a broken table by the name of what is missing,
 * the release of the table once it is replaced, the buffer check and the handle table.
 *
 *   platform_table run      all of the above; prints "platform_table run: ok"
 *   platform_table layout   `NAME size`, `NAME.field offset` lines of the table's structs, which
 *                           tests/c_api.rs compares with Rust's */
#include <stddef.h>
#include <stdint.h>

#include "check.h"

#define SIZE(T) printf(#T " %zu\n", sizeof(T))
#define OFF(T, f) printf(#T "." #f " %zu\n", offsetof(T, f))

/* ----- the forwarding table ----- */

typedef struct {
    OmegaGpuPlatform inner; /* the simulator's table */
    unsigned clock, lock, memory, submit, poll, host, sync, device, released;
    unsigned launches; /* launch descriptors seen in submissions */
} Forward;

#define INNER(ctx) (&((Forward *)(ctx))->inner)
#define COUNT(ctx, svc) (((Forward *)(ctx))->svc++)

static uint64_t fw_now_ns(void *ctx) {
    COUNT(ctx, clock);
    return INNER(ctx)->clock.now_ns(INNER(ctx)->ctx);
}
static void fw_sleep_us(void *ctx, uint32_t us) {
    COUNT(ctx, clock);
    INNER(ctx)->clock.sleep_us(INNER(ctx)->ctx, us);
}
static void fw_lock(void *ctx, uint32_t id) {
    COUNT(ctx, lock);
    INNER(ctx)->lock.lock(INNER(ctx)->ctx, id);
}
static int fw_try_lock(void *ctx, uint32_t id) {
    COUNT(ctx, lock);
    return INNER(ctx)->lock.try_lock(INNER(ctx)->ctx, id);
}
static void fw_unlock(void *ctx, uint32_t id) {
    COUNT(ctx, lock);
    INNER(ctx)->lock.unlock(INNER(ctx)->ctx, id);
}
static int fw_alloc(void *ctx, const OmegaGpuBufferDesc *d, OmegaGpuAllocation *out, OmegaGpuPlatformError *err) {
    COUNT(ctx, memory);
    return INNER(ctx)->memory.alloc(INNER(ctx)->ctx, d, out, err);
}
static void fw_free(void *ctx, const OmegaGpuAllocation *a) {
    COUNT(ctx, memory);
    INNER(ctx)->memory.free(INNER(ctx)->ctx, a);
}
static int fw_submit(void *ctx, const OmegaGpuSubmission *s, OmegaGpuPlatformError *err) {
    COUNT(ctx, submit);
    ((Forward *)ctx)->launches += (unsigned)s->n_launches;
    return INNER(ctx)->submit.submit(INNER(ctx)->ctx, s, err);
}
static size_t fw_in_flight_buffers(void *ctx, OmegaGpuQueueBuffer *out, size_t max) {
    COUNT(ctx, submit);
    return INNER(ctx)->submit.in_flight_buffers(INNER(ctx)->ctx, out, max);
}
static int fw_poll(void *ctx, const OmegaGpuMarker *m, uint32_t *word, OmegaGpuPlatformError *err) {
    COUNT(ctx, poll);
    return INNER(ctx)->poll.poll(INNER(ctx)->ctx, m, word, err);
}
static uint64_t fw_timestamp(void *ctx, const OmegaGpuMarker *m) {
    COUNT(ctx, poll);
    return INNER(ctx)->poll.timestamp(INNER(ctx)->ctx, m);
}
static int fw_channel_fault(void *ctx, OmegaGpuChannelFault *out) {
    COUNT(ctx, poll);
    return INNER(ctx)->poll.channel_fault(INNER(ctx)->ctx, out);
}
static void *fw_host_alloc(void *ctx, size_t bytes) {
    COUNT(ctx, host);
    return INNER(ctx)->host.alloc(INNER(ctx)->ctx, bytes);
}
static void *fw_host_calloc(void *ctx, size_t bytes) {
    COUNT(ctx, host);
    return INNER(ctx)->host.calloc(INNER(ctx)->ctx, bytes);
}
static void fw_host_free(void *ctx, void *p) {
    COUNT(ctx, host);
    INNER(ctx)->host.free(INNER(ctx)->ctx, p);
}
static int fw_to_gpu(void *ctx, const OmegaGpuAllocation *a, uint64_t off, uint64_t len, OmegaGpuPlatformError *err) {
    COUNT(ctx, sync);
    return INNER(ctx)->sync.to_gpu(INNER(ctx)->ctx, a, off, len, err);
}
static int fw_to_cpu(void *ctx, const OmegaGpuAllocation *a, uint64_t off, uint64_t len, OmegaGpuPlatformError *err) {
    COUNT(ctx, sync);
    return INNER(ctx)->sync.to_cpu(INNER(ctx)->ctx, a, off, len, err);
}
static int fw_open(void *ctx, OmegaGpuDeviceInfo *out, OmegaGpuPlatformError *err) {
    COUNT(ctx, device);
    return INNER(ctx)->device.open(INNER(ctx)->ctx, out, err);
}
static void fw_close(void *ctx) {
    COUNT(ctx, device);
    INNER(ctx)->device.close(INNER(ctx)->ctx);
}
static void fw_release(void *ctx) {
    COUNT(ctx, released);
    INNER(ctx)->release(INNER(ctx)->ctx); /* the simulator's table is this table's to release */
}

static OmegaGpuPlatform forwarding(Forward *f) {
    OmegaGpuPlatform t = f->inner; /* the same ABI numbers and caps */
    t.ctx = f;
    t.clock.now_ns = fw_now_ns;
    t.clock.sleep_us = fw_sleep_us;
    t.lock.lock = fw_lock;
    t.lock.try_lock = fw_try_lock;
    t.lock.unlock = fw_unlock;
    t.memory.alloc = fw_alloc;
    t.memory.free = fw_free;
    t.submit.submit = fw_submit;
    t.submit.in_flight_buffers = fw_in_flight_buffers;
    t.poll.poll = fw_poll;
    t.poll.timestamp = fw_timestamp;
    t.poll.channel_fault = fw_channel_fault;
    t.host.alloc = fw_host_alloc;
    t.host.calloc = fw_host_calloc;
    t.host.free = fw_host_free;
    t.sync.to_gpu = fw_to_gpu;
    t.sync.to_cpu = fw_to_cpu;
    t.device.open = fw_open;
    t.device.close = fw_close;
    t.release = fw_release;
    return t;
}

/* ----- the checks a table goes through ----- */

static void broken_tables_are_refused_by_name(const OmegaGpuPlatform *good) {
    OmegaGpuPlatform t = *good;
    t.caps.services &= ~(uint32_t)OMEGA_GPU_SVC_POLL;
    CHECK(omega_gpu_platform_check(&t) == OMEGA_GPU_PLAT_MISSING_SERVICE);
    CHECK_ERROR("platform: OMEGA_GPU_PLAT_MISSING_SERVICE: OMEGA_GPU_SVC_POLL");
    CHECK(omega_gpu_session_set_platform("no-poll", &t) == -1);
    CHECK_ERROR("platform: OMEGA_GPU_PLAT_MISSING_SERVICE: OMEGA_GPU_SVC_POLL");
    /* A service the session does not need may be missing; one asked for by name may not. */
    t = *good;
    t.caps.services &= ~(uint32_t)OMEGA_GPU_SVC_HOST_MEM;
    CHECK(omega_gpu_platform_check(&t) == 0);
    CHECK(omega_gpu_platform_negotiate(&t, OMEGA_GPU_SVC_HOST_MEM) == OMEGA_GPU_PLAT_MISSING_SERVICE);
    CHECK_ERROR("platform: OMEGA_GPU_PLAT_MISSING_SERVICE: OMEGA_GPU_SVC_HOST_MEM");

    t = *good;
    t.submit.submit = NULL; /* declared, but a function is missing */
    CHECK(omega_gpu_platform_check(&t) == OMEGA_GPU_PLAT_MISSING_SERVICE);
    CHECK_ERROR("platform: OMEGA_GPU_PLAT_MISSING_SERVICE: OMEGA_GPU_SVC_SUBMIT (OmegaGpuSubmitService.submit is NULL)");
    CHECK(omega_gpu_session_set_platform("no-submit", &t) == -1);
    CHECK_ERROR_HAS("OmegaGpuSubmitService.submit is NULL");

    t = *good;
    t.abi_major = OMEGA_GPU_PLATFORM_ABI_MAJOR + 1;
    CHECK(omega_gpu_platform_check(&t) == OMEGA_GPU_PLAT_ABI_MAJOR);
    t = *good;
    t.abi_minor = OMEGA_GPU_PLATFORM_ABI_MINOR - 1;
    CHECK(omega_gpu_platform_check(&t) == OMEGA_GPU_PLAT_ABI_MINOR);
    t = *good;
    t.caps.page_bytes = 3000;
    CHECK(omega_gpu_platform_check(&t) == OMEGA_GPU_PLAT_BAD_VALUE);
    CHECK_ERROR("platform: OMEGA_GPU_PLAT_BAD_VALUE: caps.page_bytes");
    t = *good;
    t.caps.launch.max_threads_per_block = 0;
    CHECK(omega_gpu_platform_check(&t) == OMEGA_GPU_PLAT_BAD_VALUE);
    CHECK_ERROR("platform: OMEGA_GPU_PLAT_BAD_VALUE: caps.launch");
    t = *good;
    t.submit.in_flight_buffers = NULL;
    CHECK(omega_gpu_platform_check(&t) == OMEGA_GPU_PLAT_MISSING_SERVICE);
    CHECK_ERROR_HAS("OmegaGpuSubmitService.in_flight_buffers is NULL");
    t = *good;
    t.caps.code_format = 7;
    CHECK(omega_gpu_platform_check(&t) == OMEGA_GPU_PLAT_BAD_VALUE);
    CHECK(omega_gpu_platform_check_for(good, 1u << 12) == OMEGA_GPU_PLAT_BAD_VALUE);
    CHECK(omega_gpu_platform_check(NULL) == -1);
    CHECK(strcmp(omega_gpu_platform_refusal_name(OMEGA_GPU_PLAT_BAD_VALUE), "OMEGA_GPU_PLAT_BAD_VALUE") == 0);

    /* The built-in names are not a table's. */
    CHECK(omega_gpu_session_set_platform("sim", good) == -1);
    CHECK_ERROR("set platform: `sim` is a built-in platform's name");
    CHECK(omega_gpu_session_set_platform("two words", good) == -1);
    CHECK_ERROR("set platform: a table's name");
}

static void the_buffer_rules_are_checked(void) {
    OmegaGpuBufferDesc d = {.bytes = 4096,
                            .rights = OMEGA_GPU_RIGHT_CPU_WRITE | OMEGA_GPU_RIGHT_GPU_READ,
                            .cache = OMEGA_GPU_CACHE_UNCACHED,
                            .kind = OMEGA_GPU_HANDLE_BUF_DATA};
    CHECK(omega_gpu_platform_check_buffer(&d) == 0);
    OmegaGpuBufferDesc bad = d;
    bad.bytes = 0;
    CHECK(omega_gpu_platform_check_buffer(&bad) == OMEGA_GPU_PLAT_ZERO_LENGTH);
    CHECK_ERROR("platform: OMEGA_GPU_PLAT_ZERO_LENGTH");
    bad = d;
    bad.rights = OMEGA_GPU_RIGHT_GPU_EXEC | OMEGA_GPU_RIGHT_GPU_WRITE;
    CHECK(omega_gpu_platform_check_buffer(&bad) == OMEGA_GPU_PLAT_EXEC_WRITABLE);
    bad = d;
    bad.rights = OMEGA_GPU_RIGHT_HOST_POLLED;
    bad.cache = OMEGA_GPU_CACHE_CACHED;
    CHECK(omega_gpu_platform_check_buffer(&bad) == OMEGA_GPU_PLAT_POLLED_CACHED);
    bad = d;
    bad.cache = 7;
    CHECK(omega_gpu_platform_check_buffer(&bad) == OMEGA_GPU_PLAT_BAD_VALUE);
    CHECK_ERROR("platform: OMEGA_GPU_PLAT_BAD_VALUE: OmegaGpuBufferDesc.cache");
    CHECK(omega_gpu_platform_check_buffer(NULL) == -1);
}

static void the_handle_table_issues_generations(void) {
    uint32_t gens[2];
    void *vals[2];
    int a = 1, b = 2;
    OmegaGpuHandleTable t;
    CHECK(omega_gpu_handles_init(&t, gens, vals, 2) == 0);
    CHECK(omega_gpu_handles_init(&t, gens, vals, 0) == OMEGA_GPU_HANDLE_ERR_NULL);
    CHECK(omega_gpu_handles_init(&t, gens, vals, 2) == 0);
    OmegaGpuBufferHandle ha, hb, hc;
    CHECK(omega_gpu_handles_open(&t, &a, &ha) == 0);
    CHECK(ha.generation != 0);
    CHECK(omega_gpu_handles_open(&t, &b, &hb) == 0);
    CHECK(omega_gpu_handles_open(&t, &a, &hc) == OMEGA_GPU_HANDLE_ERR_FULL);
    CHECK(hc.generation == 0);
    CHECK(omega_gpu_handles_open(&t, NULL, &hc) == OMEGA_GPU_HANDLE_ERR_NULL);
    void *v = NULL;
    CHECK(omega_gpu_handles_check(&t, ha, &v) == 0 && v == &a);
    CHECK(omega_gpu_handles_close(&t, ha, &v) == 0 && v == &a);
    CHECK(omega_gpu_handles_check(&t, ha, &v) == OMEGA_GPU_HANDLE_ERR_STALE && v == NULL);
    CHECK(omega_gpu_handles_close(&t, ha, NULL) == OMEGA_GPU_HANDLE_ERR_STALE);
    CHECK(omega_gpu_handles_open(&t, &b, &hc) == 0);
    CHECK(hc.index == ha.index && hc.generation != ha.generation);
    CHECK(omega_gpu_handles_check(&t, OmegaGpuBufferHandle_NONE, NULL) == OMEGA_GPU_HANDLE_ERR_ZERO);
    OmegaGpuBufferHandle far = {.index = 9, .generation = 1};
    CHECK(omega_gpu_handles_check(&t, far, NULL) == OMEGA_GPU_HANDLE_ERR_OUT_OF_RANGE);
    CHECK(t.live == 2);
    CHECK(omega_gpu_handles_check(&t, hb, &v) == 0 && v == &b);
}

/* ----- a vector add through the forwarding table ----- */

#define N 1000u

static int vector_add_through(Forward *f) {
    omega_gpu_session_lock();
    OmegaGpuSession *s = omega_gpu_session_open();
    CHECK(s != NULL);
    if (s == NULL) {
        omega_gpu_session_unlock();
        return 1;
    }
    CHECK(f->device == 1);
    CHECK(strcmp(omega_gpu_session_platform(), "sim-forward") == 0);
    OmegaGpuDeviceInfo dev;
    CHECK(omega_gpu_device_query(&dev) == 0);
    CHECK(strstr(dev.name, "simulated") != NULL);

    OmegaGpuMem a, b, c;
    CHECK(omega_gpu_session_alloc(N * sizeof(float), &a) == 0);
    CHECK(omega_gpu_session_alloc(N * sizeof(float), &b) == 0);
    CHECK(omega_gpu_session_alloc(N * sizeof(float), &c) == 0);
    float *x = a.cpu, *y = b.cpu, *z = c.cpu;
    for (uint32_t i = 0; i < N; i++) {
        x[i] = (float)i;
        y[i] = 0.25f * (float)i;
        z[i] = -1.0f;
    }
    CHECK(omega_gpu_session_sync_to_gpu(&a) == 0);
    CHECK(omega_gpu_session_sync_to_gpu(&b) == 0);
    CHECK(omega_gpu_session_sync_to_gpu(&c) == 0);
    OmegaGpuKernel k;
    CHECK(omega_gpu_kernel_load("vector_add", &k) == 0);

    uint32_t args[7];
    put_va(&args[0], a.va);
    put_va(&args[2], b.va);
    put_va(&args[4], c.va);
    args[6] = N;
    OmegaGpuLaunch L = {.code_va = k.entry_va, .gpr_count = k.gpr_count, .threads_x = 256, .grid_x = (N + 255) / 256,
                        .grid_y = 1, .args = args, .n_args = 7, .timeout_ms = 1000};
    uint64_t elapsed_ns = 0;
    unsigned submits = f->submit;
    CHECK(omega_gpu_session_launch(&L, &elapsed_ns, NULL) == 0);
    CHECK(f->submit == submits + 1);
    CHECK(f->launches >= 1);
    CHECK(f->poll > 0);
    CHECK(elapsed_ns > 0);
    CHECK(omega_gpu_session_sync_to_cpu(&c) == 0);
    uint32_t wrong = 0;
    for (uint32_t i = 0; i < N; i++) {
        if (z[i] != x[i] + y[i]) wrong++;
    }
    CHECK(wrong == 0);

    /* Host memory goes through the table's HOST_MEM service. */
    unsigned host = f->host;
    void *p = omega_gpu_host_calloc(4, 16);
    CHECK(p != NULL && ((char *)p)[63] == 0);
    omega_gpu_host_free(p);
    CHECK(f->host == host + 2);

    omega_gpu_session_free(&a);
    omega_gpu_session_free(&b);
    omega_gpu_session_free(&c);
    omega_gpu_session_free(&k.code);
    omega_gpu_session_unlock();
    omega_gpu_session_close();
    CHECK(f->device == 2); /* open and close */
    CHECK(!omega_gpu_session_is_open());
    /* 3 platform allocations and their frees: one chunk for the three data buffers, the code, the launch
       buffer. */
    CHECK(f->memory >= 6);
    CHECK(f->sync >= 5);
    CHECK(f->clock > 0);
    CHECK(f->lock >= 4);
    return 0;
}

static int run(void) {
    OmegaGpuPlatform sim = omega_gpu_platform_sim();
    CHECK(sim.abi_major == OMEGA_GPU_PLATFORM_ABI_MAJOR);
    CHECK(sim.abi_minor == OMEGA_GPU_PLATFORM_ABI_MINOR);
    CHECK(sim.caps.services == (OMEGA_GPU_SVC_SESSION | OMEGA_GPU_SVC_HOST_MEM));
    CHECK(sim.caps.code_format == OMEGA_GPU_CODE_SIM_IMAGE);
    CHECK(sim.caps.param_base == 4 * omega_gpu_session_submit_prefix_words());
    CHECK(sim.release != NULL);
    CHECK(sim.caps.launch.max_threads_per_block == 1024);
    CHECK(sim.caps.launch.sm_major == 9);
    CHECK(omega_gpu_platform_check(&sim) == 0);

    static Forward f; /* lives as long as the runtime may call it */
    memset(&f, 0, sizeof f);
    f.inner = sim;
    OmegaGpuPlatform table = forwarding(&f);
    CHECK(omega_gpu_platform_check(&table) == 0);
    broken_tables_are_refused_by_name(&table);
    the_buffer_rules_are_checked();
    the_handle_table_issues_generations();
    CHECK(f.released == 0); /* a refused table is not released */

    /* Installing needs the lock, like every platform change. */
    CHECK(omega_gpu_session_set_platform("sim-forward", &table) == -1);
    CHECK_ERROR("lock: ");
    CHECK(f.released == 0);

    omega_gpu_session_lock(); /* the environment's platform (sim) */
    CHECK(omega_gpu_session_set_platform("sim-forward", &table) == 0);
    CHECK(strcmp(omega_gpu_session_platform(), "sim-forward") == 0);
    CHECK(omega_gpu_session_completion_mode() == OMEGA_GPU_COMPLETION_SLEEP_POLL);
    omega_gpu_session_unlock();
    if (vector_add_through(&f) != 0) return check_done("platform_table run");

    /* Replacing the table: the runtime is done with it once the lock it holds of it is released. */
    omega_gpu_session_lock();
    CHECK(omega_gpu_session_set_platform("sim", NULL) == 0);
    CHECK(strcmp(omega_gpu_session_platform(), "sim") == 0);
    CHECK(f.released == 0);
    omega_gpu_session_unlock();
    CHECK(f.released == 1);
    return check_done("platform_table run");
}

static int layout(void) {
    SIZE(OmegaGpuPlatform);
    OFF(OmegaGpuPlatform, caps);
    OFF(OmegaGpuPlatform, ctx);
    OFF(OmegaGpuPlatform, clock);
    OFF(OmegaGpuPlatform, lock);
    OFF(OmegaGpuPlatform, memory);
    OFF(OmegaGpuPlatform, submit);
    OFF(OmegaGpuPlatform, poll);
    OFF(OmegaGpuPlatform, host);
    OFF(OmegaGpuPlatform, sync);
    OFF(OmegaGpuPlatform, device);
    OFF(OmegaGpuPlatform, release);
    SIZE(OmegaGpuPlatformCaps);
    OFF(OmegaGpuPlatformCaps, page_bytes);
    OFF(OmegaGpuPlatformCaps, code_prefetch_tail);
    OFF(OmegaGpuPlatformCaps, launch);
    SIZE(OmegaGpuLaunchLimits);
    OFF(OmegaGpuLaunchLimits, max_grid);
    OFF(OmegaGpuLaunchLimits, reserved_shared_bytes);
    SIZE(OmegaGpuQueueBuffer);
    OFF(OmegaGpuQueueBuffer, what);
    SIZE(OmegaGpuPlatformError);
    OFF(OmegaGpuPlatformError, text);
    SIZE(OmegaGpuBufferDesc);
    OFF(OmegaGpuBufferDesc, kind);
    SIZE(OmegaGpuAllocation);
    OFF(OmegaGpuAllocation, bus);
    SIZE(OmegaGpuMarker);
    SIZE(OmegaGpuConstBank);
    OFF(OmegaGpuConstBank, va);
    SIZE(OmegaGpuLaunchDesc);
    OFF(OmegaGpuLaunchDesc, grid);
    OFF(OmegaGpuLaunchDesc, order);
    OFF(OmegaGpuLaunchDesc, args);
    OFF(OmegaGpuLaunchDesc, n_const_banks);
    SIZE(OmegaGpuSubmission);
    OFF(OmegaGpuSubmission, markers);
    OFF(OmegaGpuSubmission, stamps);
    OFF(OmegaGpuSubmission, sequence);
    SIZE(OmegaGpuChannelFault);
    OFF(OmegaGpuChannelFault, text);
    SIZE(OmegaGpuDeviceInfo);
    OFF(OmegaGpuDeviceInfo, memory_bytes);
    SIZE(OmegaGpuHandleTable);
    OFF(OmegaGpuHandleTable, capacity);
    OFF(OmegaGpuHandleTable, live);
    SIZE(OmegaGpuClockService);
    SIZE(OmegaGpuLockService);
    SIZE(OmegaGpuDeviceMemService);
    SIZE(OmegaGpuSubmitService);
    SIZE(OmegaGpuPollService);
    SIZE(OmegaGpuHostMemService);
    SIZE(OmegaGpuSyncService);
    SIZE(OmegaGpuDeviceService);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "run") == 0) return run();
    if (argc == 2 && strcmp(argv[1], "layout") == 0) return layout();
    fprintf(stderr, "usage: platform_table run|layout\n");
    return 2;
}
