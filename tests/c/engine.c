/* The job engine seen from C, on the simulator. One scenario per process (argv[1]), because the engine's
 * block and the session's latch last for the rest of it:
 *   run   every failure, state, step and wait name; the VECTOR_1D job on the session backend against a CPU
 *         reference; refusals; the clock; a backend given as a C function table, its uncertain completion
 *         blocking the engine; the INTERNAL test hooks
 *   hang  a job whose completion never comes on the session backend: COMPLETION_TIMEOUT, then every later
 *         run is UNCERTAIN_COMPLETION_BLOCKED
 *   clock_reset  a clock function that calls omega_gpu_engine_set_clock inside omega_gpu_execute: it must
 *         not wait for the run (an alarm ends the process if it does)
 */
#define _POSIX_C_SOURCE 200809L
#include <unistd.h>
#include <math.h>
#include <stdint.h>

#include "check.h"

#define N 1000u
/* Elements of a job whose buffers (4 MiB each) are past the largest size the session carves from chunks. */
#define BIG_N (1u << 20)

typedef struct {
    uint32_t code;
    const char *name;
} Named;

#define SELF(c) {c, #c}

static const Named failures[] = {
    SELF(OMEGA_GPU_ENGINE_OK),
    SELF(OMEGA_GPU_ENGINE_INVALID_JOB),
    SELF(OMEGA_GPU_ENGINE_UNSUPPORTED_LAYOUT),
    SELF(OMEGA_GPU_ENGINE_DEVICE_UNAVAILABLE),
    SELF(OMEGA_GPU_ENGINE_ALLOC_FAILED),
    SELF(OMEGA_GPU_ENGINE_UPLOAD_FAILED),
    SELF(OMEGA_GPU_ENGINE_LAUNCH_REFUSED),
    SELF(OMEGA_GPU_ENGINE_COMPLETION_TIMEOUT),
    SELF(OMEGA_GPU_ENGINE_POLL_REFUSED),
    SELF(OMEGA_GPU_ENGINE_COMPLETION_CANCELLED),
    SELF(OMEGA_GPU_ENGINE_KERNEL_FAULT),
    SELF(OMEGA_GPU_ENGINE_READBACK_FAILED),
    SELF(OMEGA_GPU_ENGINE_UNCERTAIN_COMPLETION_BLOCKED),
};
static const Named states[] = {
    {OMEGA_GPU_ENGINE_STATE_INITIAL, "INITIAL"},        {OMEGA_GPU_ENGINE_STATE_VALIDATED, "VALIDATED"},
    {OMEGA_GPU_ENGINE_STATE_DEVICE_READY, "DEVICE_READY"}, {OMEGA_GPU_ENGINE_STATE_ALLOCATED, "ALLOCATED"},
    {OMEGA_GPU_ENGINE_STATE_UPLOADED, "UPLOADED"},      {OMEGA_GPU_ENGINE_STATE_SUBMITTED, "SUBMITTED"},
    {OMEGA_GPU_ENGINE_STATE_KERNEL_DONE, "KERNEL_DONE"}, {OMEGA_GPU_ENGINE_STATE_IDLE, "IDLE"},
    {OMEGA_GPU_ENGINE_STATE_READ_BACK, "READ_BACK"},    {OMEGA_GPU_ENGINE_STATE_SUCCESS, "SUCCESS"},
    {OMEGA_GPU_ENGINE_STATE_FAILED, "FAILED"},
};
static const Named steps[] = {
    {OMEGA_GPU_ENGINE_STEP_NONE, "NONE"},       {OMEGA_GPU_ENGINE_STEP_GATE, "GATE"},
    {OMEGA_GPU_ENGINE_STEP_VALIDATE, "VALIDATE"}, {OMEGA_GPU_ENGINE_STEP_PREPARE, "PREPARE"},
    {OMEGA_GPU_ENGINE_STEP_ALLOC, "ALLOC"},     {OMEGA_GPU_ENGINE_STEP_UPLOAD, "UPLOAD"},
    {OMEGA_GPU_ENGINE_STEP_LAUNCH, "LAUNCH"},   {OMEGA_GPU_ENGINE_STEP_WAIT, "WAIT"},
    {OMEGA_GPU_ENGINE_STEP_READBACK, "READBACK"},
};
static const Named waits[] = {
    {OMEGA_GPU_ENGINE_WAIT_NONE, "NONE"},
    {OMEGA_GPU_ENGINE_WAIT_KERNEL_DONE, "KERNEL_DONE"},
    {OMEGA_GPU_ENGINE_WAIT_ENGINE_IDLE, "ENGINE_IDLE"},
};

#define COUNT(t) ((uint32_t)(sizeof(t) / sizeof((t)[0])))

/* Each table holds every code 0..count-1 in order, and `name_of` returns its name, the same pointer each time. */
static void check_names(const Named *t, uint32_t n, uint32_t count, const char *(*name_of)(uint32_t),
                        const char *unknown) {
    CHECK(n == count);
    for (uint32_t i = 0; i < n; i++) {
        CHECK(t[i].code == i);
        const char *got = name_of(t[i].code);
        if (got == NULL || strcmp(got, t[i].name) != 0) {
            fprintf(stderr, "code %u: name \"%s\", want \"%s\"\n", t[i].code, got ? got : "(null)", t[i].name);
            check_failures++;
        }
        CHECK(name_of(t[i].code) == got);
    }
    CHECK(strcmp(name_of(count), unknown) == 0);
    CHECK(strcmp(name_of(UINT32_MAX), unknown) == 0);
}

static float a_host[N], b_host[N], out[N], want[N];

static void fill_inputs(uint32_t seed) {
    uint32_t x = seed;
    for (uint32_t i = 0; i < N; i++) {
        x = x * 1664525u + 1013904223u;
        a_host[i] = (float)(x >> 8) / 4096.0f - 2048.0f;
        x = x * 1664525u + 1013904223u;
        b_host[i] = (float)(x >> 8) / 8192.0f;
        want[i] = a_host[i] + b_host[i];
        out[i] = NAN;
    }
}

static int out_is(const float *w) {
    for (uint32_t i = 0; i < N; i++) {
        if (out[i] != w[i]) {
            fprintf(stderr, "out[%u] = %g, want %g\n", i, (double)out[i], (double)w[i]);
            return 0;
        }
    }
    return 1;
}

static int out_untouched(void) {
    for (uint32_t i = 0; i < N; i++)
        if (!isnan(out[i])) return 0;
    return 1;
}

static OmegaGpuJob vector_job(void) {
    OmegaGpuJob job = {.layout = OMEGA_GPU_LAYOUT_VECTOR_1D, .n = N, .a = a_host, .b = b_host, .out = out};
    return job;
}

static int entered(const OmegaGpuResult *r, uint32_t state) {
    return (r->states >> state) & 1u;
}

/* The result of a run that failed with exactly `failure` at `step` in `wait`, last reaching `reached`. */
static int failed_as(const OmegaGpuResult *r, uint32_t failure, uint32_t step, uint32_t wait, uint32_t reached) {
    int ok = r->failure == failure && r->state == OMEGA_GPU_ENGINE_STATE_FAILED && r->step == step &&
             r->wait == wait && r->reached == reached && entered(r, OMEGA_GPU_ENGINE_STATE_FAILED) &&
             !entered(r, OMEGA_GPU_ENGINE_STATE_SUCCESS) && r->detail[0] != 0;
    if (!ok) {
        fprintf(stderr, "result %s at %s (wait %s, reached %s): %s; want %s at %s (wait %s, reached %s)\n",
                omega_gpu_engine_failure_name(r->failure), omega_gpu_engine_step_name(r->step),
                omega_gpu_engine_wait_name(r->wait), omega_gpu_engine_state_name(r->reached),
                (const char *)r->detail, omega_gpu_engine_failure_name(failure), omega_gpu_engine_step_name(step),
                omega_gpu_engine_wait_name(wait), omega_gpu_engine_state_name(reached));
    }
    return ok;
}

/* Every state but FAILED entered, in order, at non-decreasing times. */
static int succeeded(const OmegaGpuResult *r) {
    uint32_t all = (1u << OMEGA_GPU_ENGINE_STATE_COUNT) - 1u;
    int ok = r->failure == OMEGA_GPU_ENGINE_OK && r->state == OMEGA_GPU_ENGINE_STATE_SUCCESS &&
             r->reached == OMEGA_GPU_ENGINE_STATE_SUCCESS && r->step == OMEGA_GPU_ENGINE_STEP_NONE &&
             r->wait == OMEGA_GPU_ENGINE_WAIT_NONE && r->states == (all & ~(1u << OMEGA_GPU_ENGINE_STATE_FAILED)) &&
             r->detail[0] == 0 && r->started_ns <= r->entered_ns[OMEGA_GPU_ENGINE_STATE_INITIAL] &&
             r->entered_ns[OMEGA_GPU_ENGINE_STATE_SUCCESS] <= r->finished_ns;
    for (uint32_t s = 1; s <= OMEGA_GPU_ENGINE_STATE_SUCCESS; s++)
        if (r->entered_ns[s] < r->entered_ns[s - 1]) ok = 0;
    if (!ok) fprintf(stderr, "not a success: %s: %s\n", omega_gpu_engine_failure_name(r->failure),
                     (const char *)r->detail);
    return ok;
}

/* ----- a backend given as a C function table: a CPU vector add that can be told to fail ----- */

typedef struct {
    float *dev; /* a, b, out: 3 * n */
    uint32_t n;
    uint32_t lose_wait;   /* a wait code whose marker never arrives; 0: none */
    int prepare_rc;       /* what prepare returns */
    int runs, released;
} CpuBackend;

static uint64_t cpu_now(void *ctx) {
    (void)ctx;
    return 777;
}
static int32_t cpu_prepare(void *ctx) {
    CpuBackend *c = ctx;
    c->runs++;
    return c->prepare_rc;
}
static int32_t cpu_alloc(void *ctx, uint32_t n) {
    CpuBackend *c = ctx;
    c->dev = calloc(3u * n, sizeof(float));
    c->n = n;
    return c->dev ? OMEGA_GPU_BACKEND_STEP_OK : OMEGA_GPU_BACKEND_STEP_FAILED;
}
static int32_t cpu_upload(void *ctx, const float *a, const float *b, uint32_t n) {
    CpuBackend *c = ctx;
    memcpy(c->dev, a, n * sizeof(float));
    memcpy(c->dev + n, b, n * sizeof(float));
    for (uint32_t i = 0; i < n; i++) c->dev[2 * n + i] = NAN;
    return OMEGA_GPU_BACKEND_STEP_OK;
}
static uint32_t cpu_launch(void *ctx, uint32_t n, const OmegaGpuTimeouts *t, OmegaGpuLaunchReport *report) {
    CpuBackend *c = ctx;
    (void)t;
    for (uint32_t i = 0; i < n; i++) c->dev[2 * n + i] = c->dev[i] + c->dev[n + i];
    report->marker = 5;
    if (c->lose_wait != 0) {
        report->wait = c->lose_wait;
        return OMEGA_GPU_BACKEND_LAUNCH_TIMEOUT;
    }
    report->kernel_ns = 123;
    return OMEGA_GPU_BACKEND_LAUNCH_DONE;
}
static int32_t cpu_readback(void *ctx, float *o, uint32_t n) {
    CpuBackend *c = ctx;
    memcpy(o, c->dev + 2 * n, n * sizeof(float));
    return OMEGA_GPU_BACKEND_STEP_OK;
}
static void cpu_release(void *ctx) {
    CpuBackend *c = ctx;
    free(c->dev);
    c->dev = NULL;
    c->released++;
}

static uint64_t ticks = 1000;
static uint64_t counting_clock(void) {
    ticks += 10;
    return ticks;
}

static int run(void) {
    /* ----- names: every value, and unknown codes name themselves ----- */
    check_names(failures, COUNT(failures), OMEGA_GPU_ENGINE_FAILURE_COUNT, omega_gpu_engine_failure_name,
                "OMEGA_GPU_ENGINE_UNKNOWN_FAILURE");
    check_names(states, COUNT(states), OMEGA_GPU_ENGINE_STATE_COUNT, omega_gpu_engine_state_name, "UNKNOWN_STATE");
    check_names(steps, COUNT(steps), OMEGA_GPU_ENGINE_STEP_COUNT, omega_gpu_engine_step_name, "UNKNOWN_STEP");
    check_names(waits, COUNT(waits), OMEGA_GPU_ENGINE_WAIT_COUNT, omega_gpu_engine_wait_name, "UNKNOWN_WAIT");
    CHECK(omega_gpu_engine_is_blocked() == 0);

    /* ----- refusals before anything runs ----- */
    fill_inputs(7);
    OmegaGpuJob job = vector_job();
    OmegaGpuResult r;
    CHECK(omega_gpu_execute(&job, NULL) == -1);
    CHECK_ERROR("execute: result is NULL");
    memset(&r, 0, sizeof r);
    CHECK(omega_gpu_execute(NULL, &r) == -1);
    CHECK_ERROR("execute: job is NULL");
    CHECK(failed_as(&r, OMEGA_GPU_ENGINE_INVALID_JOB, OMEGA_GPU_ENGINE_STEP_VALIDATE, OMEGA_GPU_ENGINE_WAIT_NONE,
                    OMEGA_GPU_ENGINE_STATE_INITIAL));

    /* The session backend needs the caller to hold the session lock. */
    CHECK(omega_gpu_execute(&job, &r) == -1);
    CHECK(failed_as(&r, OMEGA_GPU_ENGINE_DEVICE_UNAVAILABLE, OMEGA_GPU_ENGINE_STEP_PREPARE,
                    OMEGA_GPU_ENGINE_WAIT_NONE, OMEGA_GPU_ENGINE_STATE_VALIDATED));
    CHECK_ERROR("engine prepare: OMEGA_GPU_ENGINE_DEVICE_UNAVAILABLE: ");
    CHECK(out_untouched());

    omega_gpu_session_lock();

    /* ----- the VECTOR_1D job on the session backend (it opens the device), output poisoned ----- */
    CHECK(omega_gpu_execute(&job, &r) == 0);
    CHECK(succeeded(&r));
    CHECK(out_is(want));
    CHECK(r.diag.backend == OMEGA_GPU_ENGINE_BACKEND_SESSION);
    CHECK(r.diag.buffers == 4); /* a, b, out and the kernel's code */
    CHECK(r.diag.marker != 0 && r.diag.kernel_ns > 0 && r.diag.xid == 0);
    CHECK(omega_gpu_session_is_open());
    /* Again with other inputs: every buffer of the last run was released, none reused stale. */
    fill_inputs(99);
    CHECK(omega_gpu_execute(&job, &r) == 0);
    CHECK(succeeded(&r));
    CHECK(out_is(want));

    /* ----- certain failures, each named, none blocking ----- */
    fill_inputs(3);
    job.layout = OMEGA_GPU_LAYOUT_VECTOR_1D + 1;
    CHECK(omega_gpu_execute(&job, &r) == -1);
    CHECK(failed_as(&r, OMEGA_GPU_ENGINE_UNSUPPORTED_LAYOUT, OMEGA_GPU_ENGINE_STEP_VALIDATE,
                    OMEGA_GPU_ENGINE_WAIT_NONE, OMEGA_GPU_ENGINE_STATE_INITIAL));
    CHECK_ERROR("engine validate: OMEGA_GPU_ENGINE_UNSUPPORTED_LAYOUT: layout 2");
    job = vector_job();
    job.n = 0;
    CHECK(omega_gpu_execute(&job, &r) == -1);
    CHECK(failed_as(&r, OMEGA_GPU_ENGINE_INVALID_JOB, OMEGA_GPU_ENGINE_STEP_VALIDATE, OMEGA_GPU_ENGINE_WAIT_NONE,
                    OMEGA_GPU_ENGINE_STATE_INITIAL));
    job = vector_job();
    job.b = NULL;
    CHECK(omega_gpu_execute(&job, &r) == -1);
    CHECK(failed_as(&r, OMEGA_GPU_ENGINE_INVALID_JOB, OMEGA_GPU_ENGINE_STEP_VALIDATE, OMEGA_GPU_ENGINE_WAIT_NONE,
                    OMEGA_GPU_ENGINE_STATE_INITIAL));
    CHECK_ERROR("engine validate: OMEGA_GPU_ENGINE_INVALID_JOB: b is NULL");
    job = vector_job();
    job.n = OMEGA_GPU_ENGINE_JOB_MAX_ELEMENTS + 1;
    CHECK(omega_gpu_execute(&job, &r) == -1);
    CHECK(r.failure == OMEGA_GPU_ENGINE_INVALID_JOB);
    /* Buffers past the largest carved size (2 MiB) are platform allocations of their own: the injected
       failures meet the first of them. Two, because an allocation the device refuses is tried once more
       after the memory manager hands back its spare chunk (the earlier jobs left one). */
    static float big_a[BIG_N], big_b[BIG_N], big_out[BIG_N];
    OmegaGpuJob big = {.layout = OMEGA_GPU_LAYOUT_VECTOR_1D, .n = BIG_N, .a = big_a, .b = big_b, .out = big_out};
    CHECK(omega_gpu_sim_inject(OMEGA_GPU_SIM_FAULT_FAIL_ALLOC) == 0);
    CHECK(omega_gpu_sim_inject(OMEGA_GPU_SIM_FAULT_FAIL_ALLOC) == 0);
    CHECK(omega_gpu_execute(&big, &r) == -1);
    CHECK(failed_as(&r, OMEGA_GPU_ENGINE_ALLOC_FAILED, OMEGA_GPU_ENGINE_STEP_ALLOC, OMEGA_GPU_ENGINE_WAIT_NONE,
                    OMEGA_GPU_ENGINE_STATE_DEVICE_READY));
    job = vector_job();
    CHECK(omega_gpu_sim_inject(OMEGA_GPU_SIM_FAULT_FAIL_SYNC) == 0);
    CHECK(omega_gpu_execute(&job, &r) == -1);
    CHECK(failed_as(&r, OMEGA_GPU_ENGINE_UPLOAD_FAILED, OMEGA_GPU_ENGINE_STEP_UPLOAD, OMEGA_GPU_ENGINE_WAIT_NONE,
                    OMEGA_GPU_ENGINE_STATE_ALLOCATED));
    CHECK(out_untouched());
    CHECK(omega_gpu_engine_is_blocked() == 0);
    CHECK(omega_gpu_execute(&job, &r) == 0);
    CHECK(out_is(want));

    /* ----- the clock: installed, pinned (INTERNAL hook), back to the backend's ----- */
    omega_gpu_engine_set_clock(counting_clock);
    CHECK(omega_gpu_execute(&job, &r) == 0);
    CHECK(r.entered_ns[OMEGA_GPU_ENGINE_STATE_INITIAL] == r.started_ns + 10);
    for (uint32_t s = 1; s <= OMEGA_GPU_ENGINE_STATE_SUCCESS; s++)
        CHECK(r.entered_ns[s] == r.entered_ns[s - 1] + 10);
    omega_gpu_engine_test_set_clock(42);
    CHECK(omega_gpu_execute(&job, &r) == 0);
    CHECK(r.started_ns == 42 && r.finished_ns == 42);
    for (uint32_t s = 0; s <= OMEGA_GPU_ENGINE_STATE_SUCCESS; s++) CHECK(r.entered_ns[s] == 42);
    omega_gpu_engine_set_clock(NULL);
    CHECK(omega_gpu_execute(&job, &r) == 0);
    CHECK(r.started_ns > 0 && r.finished_ns > r.started_ns);
    omega_gpu_session_unlock();

    /* ----- a backend given as a C function table ----- */
    CpuBackend cpu;
    memset(&cpu, 0, sizeof cpu);
    OmegaGpuBackend table = {.ctx = &cpu, .now_ns = cpu_now, .prepare = cpu_prepare, .alloc = cpu_alloc,
                             .upload = cpu_upload, .launch = cpu_launch, .readback = cpu_readback,
                             .release = cpu_release};
    CHECK(omega_gpu_engine_set_backend(&table) == 0);
    fill_inputs(11);
    CHECK(omega_gpu_execute(&job, &r) == 0); /* no session lock needed: this backend has no device */
    CHECK(succeeded(&r));
    CHECK(out_is(want));
    CHECK(r.diag.backend == OMEGA_GPU_ENGINE_BACKEND_CUSTOM && r.diag.kernel_ns == 123 && r.diag.marker == 5);
    CHECK(r.started_ns == 777 && r.finished_ns == 777);
    CHECK(cpu.runs == 1 && cpu.released == 1);

    /* Its ENGINE_IDLE marker is lost: uncertain, so the engine blocks (the session is not involved). */
    fill_inputs(12);
    cpu.lose_wait = OMEGA_GPU_ENGINE_WAIT_ENGINE_IDLE;
    CHECK(omega_gpu_execute(&job, &r) == -1);
    CHECK(failed_as(&r, OMEGA_GPU_ENGINE_COMPLETION_TIMEOUT, OMEGA_GPU_ENGINE_STEP_WAIT,
                    OMEGA_GPU_ENGINE_WAIT_ENGINE_IDLE, OMEGA_GPU_ENGINE_STATE_KERNEL_DONE));
    CHECK_ERROR("engine wait: OMEGA_GPU_ENGINE_COMPLETION_TIMEOUT: ");
    CHECK(out_untouched());
    CHECK(omega_gpu_engine_is_blocked() == 1);
    CHECK(omega_gpu_session_is_blocked() == 0);
    cpu.lose_wait = 0;
    CHECK(omega_gpu_execute(&job, &r) == -1);
    CHECK(failed_as(&r, OMEGA_GPU_ENGINE_UNCERTAIN_COMPLETION_BLOCKED, OMEGA_GPU_ENGINE_STEP_GATE,
                    OMEGA_GPU_ENGINE_WAIT_NONE, OMEGA_GPU_ENGINE_STATE_INITIAL));
    CHECK_ERROR("engine gate: OMEGA_GPU_ENGINE_UNCERTAIN_COMPLETION_BLOCKED: ");
    CHECK(cpu.runs == 2 && cpu.released == 2); /* the blocked run never reached the backend */
    CHECK(out_untouched());

    /* The INTERNAL test hooks: clear the block, force it. */
    omega_gpu_engine_test_reset_block();
    CHECK(omega_gpu_engine_is_blocked() == 0);
    CHECK(omega_gpu_execute(&job, &r) == 0);
    CHECK(out_is(want));
    omega_gpu_engine_test_force_block();
    CHECK(omega_gpu_engine_is_blocked() == 1);
    CHECK(omega_gpu_execute(&job, &r) == -1);
    CHECK(r.failure == OMEGA_GPU_ENGINE_UNCERTAIN_COMPLETION_BLOCKED && r.step == OMEGA_GPU_ENGINE_STEP_GATE);
    omega_gpu_engine_test_reset_block();

    /* A backend whose device is latched blocks the engine from PREPARE. */
    cpu.prepare_rc = OMEGA_GPU_BACKEND_STEP_LATCHED;
    CHECK(omega_gpu_execute(&job, &r) == -1);
    CHECK(failed_as(&r, OMEGA_GPU_ENGINE_UNCERTAIN_COMPLETION_BLOCKED, OMEGA_GPU_ENGINE_STEP_PREPARE,
                    OMEGA_GPU_ENGINE_WAIT_NONE, OMEGA_GPU_ENGINE_STATE_VALIDATED));
    CHECK(omega_gpu_engine_is_blocked() == 1);
    omega_gpu_engine_test_reset_block();
    cpu.prepare_rc = OMEGA_GPU_BACKEND_STEP_FAILED;
    CHECK(omega_gpu_execute(&job, &r) == -1);
    CHECK(failed_as(&r, OMEGA_GPU_ENGINE_DEVICE_UNAVAILABLE, OMEGA_GPU_ENGINE_STEP_PREPARE,
                    OMEGA_GPU_ENGINE_WAIT_NONE, OMEGA_GPU_ENGINE_STATE_VALIDATED));
    CHECK(omega_gpu_engine_is_blocked() == 0);

    /* A table without a launch function fails that step by name. */
    cpu.prepare_rc = OMEGA_GPU_BACKEND_STEP_OK;
    table.launch = NULL;
    CHECK(omega_gpu_engine_set_backend(&table) == 0);
    CHECK(omega_gpu_execute(&job, &r) == -1);
    CHECK(failed_as(&r, OMEGA_GPU_ENGINE_LAUNCH_REFUSED, OMEGA_GPU_ENGINE_STEP_LAUNCH, OMEGA_GPU_ENGINE_WAIT_NONE,
                    OMEGA_GPU_ENGINE_STATE_UPLOADED));
    CHECK_ERROR_HAS("no `launch` function");
    CHECK(cpu.dev == NULL); /* released after every run that allocated */

    /* ----- NULL goes back to the session backend ----- */
    CHECK(omega_gpu_engine_set_backend(NULL) == 0);
    fill_inputs(13);
    omega_gpu_session_lock();
    CHECK(omega_gpu_execute(&job, &r) == 0);
    CHECK(r.diag.backend == OMEGA_GPU_ENGINE_BACKEND_SESSION);
    CHECK(out_is(want));
    omega_gpu_session_unlock();
    omega_gpu_session_close();
    CHECK(omega_gpu_engine_is_blocked() == 0 && omega_gpu_session_is_blocked() == 0);
    return check_done("engine run");
}

static int hang(void) {
    fill_inputs(5);
    OmegaGpuJob job = vector_job();
    job.timeouts.kernel_done_ms = 100;
    job.timeouts.engine_idle_ms = 100;
    OmegaGpuResult r;
    omega_gpu_session_lock();
    CHECK(omega_gpu_session_open() != NULL);
    CHECK(omega_gpu_execute(&job, &r) == 0);
    CHECK(out_is(want));

    fill_inputs(6);
    CHECK(omega_gpu_sim_inject(OMEGA_GPU_SIM_FAULT_HANG) == 0);
    CHECK(omega_gpu_execute(&job, &r) == -1);
    CHECK(failed_as(&r, OMEGA_GPU_ENGINE_COMPLETION_TIMEOUT, OMEGA_GPU_ENGINE_STEP_WAIT,
                    OMEGA_GPU_ENGINE_WAIT_KERNEL_DONE, OMEGA_GPU_ENGINE_STATE_SUBMITTED));
    CHECK_ERROR("engine wait: OMEGA_GPU_ENGINE_COMPLETION_TIMEOUT: the KERNEL_DONE marker");
    CHECK(out_untouched());
    /* The engine blocked, and the session latched under it. */
    CHECK(omega_gpu_engine_is_blocked() == 1);
    CHECK(omega_gpu_session_is_blocked() == 1);
    /* The run's buffers were parked, not released: a, b, out, the code, and the session's launch buffer. */
    OmegaGpuParkStats ps;
    omega_gpu_session_parked(&ps);
    CHECK(ps.buffers == 5);

    /* Every later run is refused at the gate, whatever the inputs. */
    CHECK(omega_gpu_execute(&job, &r) == -1);
    CHECK(failed_as(&r, OMEGA_GPU_ENGINE_UNCERTAIN_COMPLETION_BLOCKED, OMEGA_GPU_ENGINE_STEP_GATE,
                    OMEGA_GPU_ENGINE_WAIT_NONE, OMEGA_GPU_ENGINE_STATE_INITIAL));
    CHECK_ERROR("engine gate: OMEGA_GPU_ENGINE_UNCERTAIN_COMPLETION_BLOCKED: ");
    CHECK(out_untouched());

    /* Even with the engine's own block cleared (TEST ONLY), the latched session blocks it again. */
    omega_gpu_engine_test_reset_block();
    CHECK(omega_gpu_execute(&job, &r) == -1);
    CHECK(failed_as(&r, OMEGA_GPU_ENGINE_UNCERTAIN_COMPLETION_BLOCKED, OMEGA_GPU_ENGINE_STEP_PREPARE,
                    OMEGA_GPU_ENGINE_WAIT_NONE, OMEGA_GPU_ENGINE_STATE_VALIDATED));
    CHECK(omega_gpu_engine_is_blocked() == 1);
    omega_gpu_session_parked(&ps);
    CHECK(ps.buffers == 5); /* nothing more was allocated */
    omega_gpu_session_unlock();
    return check_done("engine hang");
}

static uint64_t fixed_clock(void) { return 5; }

/* Sets the clock from inside the run that reads it. */
static uint64_t resetting_clock(void) {
    omega_gpu_engine_set_clock(fixed_clock);
    return 7;
}

static int clock_reset(void) {
    alarm(30); /* a set_clock that waited for the run would wait forever */
    fill_inputs(3);
    OmegaGpuJob job = vector_job();
    OmegaGpuResult r;
    omega_gpu_session_lock();
    omega_gpu_engine_set_clock(resetting_clock);
    CHECK(omega_gpu_execute(&job, &r) == 0);
    CHECK(succeeded(&r));
    CHECK(r.started_ns == 7 && r.finished_ns == 7); /* a run keeps the clock it started with */
    CHECK(omega_gpu_execute(&job, &r) == 0);
    CHECK(r.started_ns == 5 && r.finished_ns == 5); /* the next run reads the one set during the first */
    omega_gpu_engine_set_clock(NULL);
    omega_gpu_session_unlock();
    return check_done("engine clock_reset");
}

int main(int argc, char **argv) {
    (void)put_va; /* check.h's launch-argument helper: no launch is built by hand here */
    if (argc == 2 && strcmp(argv[1], "clock_reset") == 0) return clock_reset();
    if (argc == 2 && strcmp(argv[1], "run") == 0) return run();
    if (argc == 2 && strcmp(argv[1], "hang") == 0) return hang();
    fprintf(stderr, "usage: engine run|hang|clock_reset\n");
    return 2;
}
