/* Coverage-guided fuzz target over Omega's C layer on the simulator (docs/testing.md, "Fuzzing the C
 * layer"; issue 9 item 19).
 *
 * An input is decoded into a sequence of calls of every exported function: the session (lock, open,
 * close, memory, scratch, launch, cancel, errors, the latch and its parked buffers, platforms, host
 * memory, close hooks), code allocation, kernels, command lists, the job engine (the session backend and
 * a scripted C backend, clocks, the block), the platform table (the sim's table, installed whole or
 * broken one field at a time; negotiate and the checks), the handle table, and injected simulator
 * faults. Arguments are NULL, zero, huge, garbage handles, freed and made-up list pointers, double frees,
 * calls without the lock or without open. Pointers to caller objects are always valid or NULL: the
 * contract makes anything else undefined behaviour, so a crash there would be the harness's fault.
 * Handles and list pointers, which the library promises to check, are fuzzed freely.
 *
 * A shadow model (`M`, below) predicts every return code and the stage that begins every error text;
 * after every call the harness compares the library's state with it: open or not, the latch, the open
 * count, every OmegaGpuAllocStats and OmegaGpuParkStats counter, the spin setting and the engine's
 * block. A call whose error is not predicted, a counter that moves when it should not, a crash, an ASan
 * report or a hang is a finding: the harness prints what differed and aborts.
 *
 * The latch lasts for the rest of a process, so the harness never latches the process libFuzzer runs
 * inputs in. Where the model predicts that a call may latch (a timeout of 0, an injected hang or poll
 * refusal, a cancel after submit) or cannot predict its outcome (a launch of a descriptor the simulator
 * will run with arguments the model does not follow), the rest of the input runs in a forked child: the
 * child makes the call and every call after it, with the model in its latched mode (frees park, close
 * and launches are refused, the parked counters grow), and exits; the parent waits, folds the child's
 * coverage counters into its own so libFuzzer still sees what the latched calls reached, and fails if
 * the child did. Every input therefore starts from the same state: between inputs the parent closes the
 * device, frees what the input left and installs a fresh simulator (so no injected fault, simulated
 * memory or launch record is carried over).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "omega.h"
#include "harness.h"

int fuzz_trace = 0;

/* ----- findings ---------------------------------------------------------------------------------------- */

static int op_index;          /* the call being made, for messages */
static const char *op_name = "setup";

__attribute__((noreturn, format(printf, 2, 3))) static void finding(int line, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "\n==omega-fuzz== FINDING (harness.c:%d) in op %d `%s`%s: ", line, op_index, op_name,
            getpid() != getpgrp() ? "" : "");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n==omega-fuzz== last error: \"%s\"\n", omega_gpu_session_last_error());
    fflush(stderr);
    abort();
}
#define FAIL(...) finding(__LINE__, __VA_ARGS__)
#define REQUIRE(cond, ...)                                                                                  \
    do {                                                                                                    \
        if (!(cond)) FAIL(__VA_ARGS__);                                                                     \
    } while (0)

static void trace(const char *fmt, ...) {
    if (!fuzz_trace) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "[%d %s] ", op_index, op_name);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* ----- the input ---------------------------------------------------------------------------------------- */

static const uint8_t *in_p;
static size_t in_n, in_i;

static uint8_t b8(void) { return in_i < in_n ? in_p[in_i++] : 0; }
static uint32_t b32(void) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)b8() << (8 * i);
    return v;
}
static uint64_t b64(void) { return (uint64_t)b32() | (uint64_t)b32() << 32; }
/* A choice among `n`. */
static uint32_t pick(uint32_t n) { return n ? b8() % n : 0; }
static bool coin(void) { return b8() & 1; }

/* A size: mostly small, sometimes at a page edge, sometimes one the contract must refuse. No size between
 * 8 MiB and 4 GiB: those would really be allocated (twice, device and CPU copies), and the model keeps
 * nothing large live. */
static size_t pick_size(void) {
    static const uint64_t table[] = {
        0, 1, 4, 16, 100, 2047, 2048, 2049, 4095, 4096, 4097, 8192, 65536, 1 << 20, 8 << 20,
        (4ull << 30) + 1, 1ull << 40, 1ull << 48, (1ull << 48) + 1, (uint64_t)INT64_MAX - 4095,
        (uint64_t)INT64_MAX, (uint64_t)INT64_MAX + 1, SIZE_MAX - 2047, SIZE_MAX - 2048, SIZE_MAX - 4095, SIZE_MAX,
    };
    uint8_t c = b8();
    if (c < 200) return table[c % (sizeof table / sizeof table[0])];
    return b32() % (64 * 1024);
}

static uint32_t pick_u32(void) {
    static const uint32_t table[] = {0, 1, 2, 3, 7, 8, 31, 32, 33, 63, 64, 255, 256, 1023, 1024, 1025, 65535,
                                     65536, 0x7fffffff, 0x80000000u, 0xfffffffeu, 0xffffffffu};
    uint8_t c = b8();
    if (c < 220) return table[c % (sizeof table / sizeof table[0])];
    return b32();
}

/* ----- the model --------------------------------------------------------------------------------------- */

enum { NBUF = 24, NLIST = 4, NSCR = 2, NHOOK = 8, NKERN = 4, NDEAD = 8 };
enum { MAX_LIST = OMEGA_GPU_CMDLIST_MAX_LAUNCHES };
enum { KIND_DATA, KIND_CODE, KIND_CACHED };
#define PAGE 4096ull
#define SIM_MEMORY (4ull << 30)
/* The session's memory manager (src/core/session/suballoc.rs): data and cached buffers of at most
 * LARGEST_CARVED bytes are carved from chunks of CHUNK_BYTES, one pool of chunks per kind. The model holds
 * at most NBUF + NSCR + 3 carved buffers in a pool, fewer than the 32 largest blocks of a chunk, so a
 * pool never needs a second chunk: its one chunk, once made, serves every carved allocation, and stays
 * (as the pool's spare) when its last buffer goes, until close or an allocation the device refuses. */
#define CHUNK_BYTES (64ull << 20)
#define LARGEST_CARVED (2ull << 20)
enum { POOL_DATA, POOL_CACHED, NPOOL };
#define MAX_SHARED (228u * 1024u)
/* What sm_90's QMD declares at most: a thread's 255 registers, rounded up to the launch's multiple of 8
 * (include/omega_gpu_session.h); 257 and up are refused at launch arguments. */
#define MAX_GPR 256u

/* A session buffer the caller owns: an allocation, a kernel's code, a scratch buffer. */
typedef struct {
    OmegaGpuMem m;   /* as the library returned it */
    bool live;       /* the session still has it */
    bool parked;     /* freed after the latch */
    int kind;        /* KIND_* */
    int kernel;      /* the kernel whose code it holds (entry at its start), or -1 */
    bool reserved;   /* a scratch reservation is recorded on it */
    size_t bound;    /* the reserved size */
    uint64_t serial; /* which allocation this slot holds now */
    int pool;        /* the memory manager's pool it is carved from (POOL_*), or -1: its own allocation */
} MBuf;

/* What a recorded or single launch will do once submitted. */
enum { RUN_CLEAN, RUN_FAULT, RUN_UNKNOWN };

typedef struct {
    int cls;
    int code_buf;
    uint64_t code_serial;
    int data[3];
    uint64_t data_serial[3];
    uint32_t timeout_ms, spin_us;
    bool independent;
} MLaunch;

typedef struct {
    OmegaGpuCmdList *p;
    bool live;
    int epoch;
    uint32_t barrier, skip, timeout_ms, spin_us;
    bool latched;
    uint32_t n;
    uint32_t submitted;
    OmegaGpuCmdListStats st; /* the counters the model predicts exactly */
    MLaunch l[MAX_LIST];
} MList;

typedef struct {
    int action;   /* HOOK_* */
    int target;   /* a buffer or scratch index */
    bool ran;
} HookCtx;

enum { HOOK_NOTHING, HOOK_FREE, HOOK_SCRATCH_FREE, HOOK_ALLOC, HOOK_LAUNCH, HOOK_LOCK, HOOK_UNLOCK, HOOK_CLOSE,
       HOOK_OPEN, HOOK_CMDLIST_CREATE, HOOK_KINDS };

enum { F_HANG = 1, F_REFUSE_POLL, F_FAIL_ALLOC, F_KERNEL_FAULT, F_FAIL_OPEN, F_FAIL_SYNC, F_COUNT };

static struct {
    bool in_child;      /* this process may latch */
    bool lock;          /* the harness's thread holds the session lock */
    bool open;
    bool latched;
    bool chan_dead;     /* a kernel fault: launches refused until close and reopen */
    bool cancel;        /* a cancel request is pending */
    bool in_hook;       /* an on-close hook is running */
    int epoch;          /* device opens in this input: buffers of an older epoch are stale */
    uint32_t open_count;
    uint32_t spin_us;
    bool table;         /* the installed platform is a C table (no fault injection) */
    bool table_no_host; /* ... without the HOST_MEM service */
    char platform[64];
    int faults[F_COUNT];
    uint64_t dev_bytes; /* live simulated device memory: chunks and buffers of their own */
    bool chunk[NPOOL];  /* the pool holds its chunk */
    int chunk_live[NPOOL]; /* buffers carved from it, parked ones included */
    int placed;         /* where the last allocation predicted to succeed lies: a POOL_*, or -1 */
    OmegaGpuAllocStats st;
    OmegaGpuParkStats park;
    uint64_t park_listed;
    OmegaGpuMem lb;     /* the session's launch buffer while open */
    int64_t sequence;   /* the last marker word seen, -1 while unknown */
    uint64_t serial;
    MBuf buf[NBUF];
    OmegaGpuKernel kern[NKERN];
    int kern_buf[NKERN];
    int kern_name[NKERN];
    OmegaGpuScratch scr[NSCR];
    int scr_buf[NSCR];
    bool scr_res[NSCR];
    size_t scr_hw[NSCR];
    MList list[NLIST];
    OmegaGpuCmdList *dead[NDEAD];
    int ndead;
    int nhooks;         /* hooks registered in the process and not yet run */
    HookCtx hooks[NHOOK];
    bool engine_blocked;
    int backend;        /* 0: the session backend; 1: the scripted C backend */
    int clock_mode;     /* 0: the backend's; 1: the counter function; 2: pinned */
    uint64_t clock_pinned;
    void *host[8];
    int nhost;
    uint64_t now_ns;    /* the last platform clock reading */
} M;

static const char *const KERNEL_NAMES[] = {"vector_add", "empty", "store_to", "grid_index", "scale_copy",
                                           "shared_reverse", "timestamps", "module_data", "local_array", "spin"};
enum { N_KERNEL_NAMES = sizeof KERNEL_NAMES / sizeof KERNEL_NAMES[0] };
static bool have_nvidia_device;

/* ----- expectations -------------------------------------------------------------------------------------- */

static char want_buf[512];

/* The expected error: "" for none, else the text the last error must start with. */
__attribute__((format(printf, 1, 2))) static const char *want(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(want_buf, sizeof want_buf, fmt, ap);
    va_end(ap);
    return want_buf;
}

static void clear_error(void) { omega_gpu_session_set_error(NULL); }

/* The last error is `prefix...` ("" expects no error at all). */
static void check_error_at(int line, const char *prefix) {
    const char *e = omega_gpu_session_last_error();
    REQUIRE(e != NULL, "last_error returned NULL");
    if (prefix[0] == 0) {
        if (e[0] != 0) finding(line, "an error was recorded where none was expected: \"%s\"", e);
        return;
    }
    /* `a|b`: either prefix. */
    bool match = false;
    for (const char *p = prefix; *p && !match;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        match = strncmp(e, p, len) == 0;
        p += len + (bar != NULL);
    }
    if (!match) finding(line, "expected an error starting \"%s\", got \"%s\"", prefix, e);
    if (strstr(e, "internal: panic") != NULL) finding(line, "a panic: \"%s\"", e);
}
#define CHECK_ERROR(p) check_error_at(__LINE__, (p))
#define CHECK_RC(got, exp)                                                                                  \
    do {                                                                                                    \
        long long g_ = (long long)(got), e_ = (long long)(exp);                                             \
        if (g_ != e_) FAIL("returned %lld, expected %lld", g_, e_);                                         \
    } while (0)

static void check_globals(void) {
    REQUIRE(omega_gpu_session_is_open() == M.open, "is_open %d, model %d", omega_gpu_session_is_open(), M.open);
    REQUIRE(omega_gpu_session_is_blocked() == (int)M.latched, "is_blocked %d, model %d",
            omega_gpu_session_is_blocked(), M.latched);
    REQUIRE(omega_gpu_session_open_count() == M.open_count, "open_count %u, model %u",
            omega_gpu_session_open_count(), M.open_count);
    OmegaGpuAllocStats s;
    memset(&s, 0xa5, sizeof s);
    omega_gpu_session_alloc_stats(&s);
    if (memcmp(&s, &M.st, sizeof s) != 0)
        FAIL("alloc_stats {allocs %llu, bytes %llu, failures %llu, frees %llu, stale %llu}, model {%llu, %llu, "
             "%llu, %llu, %llu}",
             (unsigned long long)s.allocs, (unsigned long long)s.alloc_bytes, (unsigned long long)s.alloc_failures,
             (unsigned long long)s.frees, (unsigned long long)s.stale_refusals, (unsigned long long)M.st.allocs,
             (unsigned long long)M.st.alloc_bytes, (unsigned long long)M.st.alloc_failures,
             (unsigned long long)M.st.frees, (unsigned long long)M.st.stale_refusals);
    OmegaGpuParkStats p;
    memset(&p, 0xa5, sizeof p);
    omega_gpu_session_parked(&p);
    if (memcmp(&p, &M.park, sizeof p) != 0)
        FAIL("parked {buffers %llu, untracked %llu, bytes %llu}, model {%llu, %llu, %llu}",
             (unsigned long long)p.buffers, (unsigned long long)p.untracked, (unsigned long long)p.bytes,
             (unsigned long long)M.park.buffers, (unsigned long long)M.park.untracked,
             (unsigned long long)M.park.bytes);
    REQUIRE(omega_gpu_session_spin_us() == M.spin_us, "spin_us %u, model %u", omega_gpu_session_spin_us(), M.spin_us);
    REQUIRE(omega_gpu_engine_is_blocked() == (int)M.engine_blocked, "engine_is_blocked %d, model %d",
            omega_gpu_engine_is_blocked(), M.engine_blocked);
}

/* ----- the latch and the child ----------------------------------------------------------------------------- */

#ifdef OMEGA_FUZZ_LIBFUZZER
/* The coverage counters of every instrumented module (the harness and libomega.a; fuzz/counters.c): a
 * child's hits are copied back into the parent's, so libFuzzer sees the latched paths too. */
uint8_t *fuzz_counters(size_t *len);
static uint8_t *counters;
#endif
static __attribute__((unused)) uint8_t *child_counters; /* shared with the child */
static bool parent_done;         /* the parent handed the rest of this input to a child */

/* What the runs did, shared with the children and printed at exit: how much of the latched mode ran. */
static struct Tally {
    uint64_t inputs, ops, forks, child_ops, latched_children, latched_ops;
} *tally, tally_local;
static __attribute__((unused)) size_t counters_len;

static void print_tally(void) {
    if (M.in_child) return;
    fprintf(stderr,
            "omega-fuzz: %llu inputs, %llu calls; %llu children took the rest of an input (%llu calls), %llu of them "
            "latched and made %llu calls latched\n",
            (unsigned long long)tally->inputs, (unsigned long long)tally->ops, (unsigned long long)tally->forks,
            (unsigned long long)tally->child_ops, (unsigned long long)tally->latched_children,
            (unsigned long long)tally->latched_ops);
}

static void setup_counter_sharing(void) {
    tally = mmap(NULL, sizeof *tally, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (tally == MAP_FAILED) tally = &tally_local;
    atexit(print_tally);
#ifdef OMEGA_FUZZ_LIBFUZZER
    counters = fuzz_counters(&counters_len);
    if (counters) {
        child_counters = mmap(NULL, counters_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (child_counters == MAP_FAILED) child_counters = NULL;
    }
#endif
}

/* Where the rest of the input runs once a call may latch: in a child. Returns true in the child (which
 * goes on) and false in the parent, after the child ended (the parent stops the input there). */
static bool fork_for_latch(void) {
    if (M.in_child) return true;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        M.in_child = true;
        tally->forks++;
        trace("child %d takes the rest of the input", getpid());
        return true;
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
#ifdef OMEGA_FUZZ_LIBFUZZER
    if (child_counters) {
        for (size_t i = 0; i < counters_len; i++) {
            uint8_t c = child_counters[i];
            if (c > counters[i]) counters[i] = c;
        }
    }
#endif
    parent_done = true;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        FAIL("the child running the latched rest of the input failed (%s %d)",
             WIFSIGNALED(status) ? "signal" : "exit status", WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    }
    return false;
}

/* The child's end: its coverage to the parent, then exit without running anything of the parent's. */
static void child_exit(void) {
    if (M.latched) tally->latched_children++;
#ifdef OMEGA_FUZZ_LIBFUZZER
    if (child_counters) memcpy(child_counters, counters, counters_len);
#endif
    fflush(stdout);
    fflush(stderr);
    _exit(0);
}

/* The process latched (in the child): the session's launch buffer is parked and listed at once. */
static void model_latch(uint64_t extra_listed_bytes) {
    REQUIRE(M.in_child, "the model latched outside the child");
    if (M.latched) return;
    M.latched = true;
    uint64_t parked[2] = {M.lb.size, extra_listed_bytes};
    for (int i = 0; i < 2; i++) {
        if (parked[i] == 0) continue;
        M.park.buffers++;
        M.park.bytes += parked[i];
        if (M.park_listed < OMEGA_GPU_SESSION_PARK_MAX) M.park_listed++;
        else M.park.untracked++;
    }
}

static void park_one(uint64_t bytes) {
    M.park.buffers++;
    M.park.bytes += bytes;
    if (M.park_listed < OMEGA_GPU_SESSION_PARK_MAX) M.park_listed++;
    else M.park.untracked++;
}

/* ----- model helpers -------------------------------------------------------------------------------------- */

static uint64_t round_page(uint64_t b) { return (b + PAGE - 1) / PAGE * PAGE; }

/* Bytes a buffer of `bytes` of `kind` takes, or 0 where the contract refuses the size (overflow, or past
 * PTRDIFF_MAX). */
static uint64_t buffer_bytes(size_t bytes, int kind) {
    uint64_t want = bytes;
    if (kind == KIND_CODE) {
        if (bytes > SIZE_MAX - OMEGA_GPU_CODE_PREFETCH_TAIL) return 0;
        want = (uint64_t)bytes + OMEGA_GPU_CODE_PREFETCH_TAIL;
    }
    if (want == 0) want = 1;
    if (want > UINT64_MAX - (PAGE - 1)) return 0;
    uint64_t r = round_page(want);
    return r <= (uint64_t)INT64_MAX ? r : 0;
}

/* The gate of a call that touches the device: the lock, and not inside a hook. NULL when it passes. */
static const char *gate(const char *stage) {
    if (!M.lock) return want("lock: the calling thread does not hold the session lock");
    if (M.in_hook) return want("on close: `%s` refused inside an on-close hook", stage);
    return NULL;
}

static bool buf_live(int i) { return i >= 0 && i < NBUF && M.buf[i].live; }

/* The model buffer a handle names (live), or -1. */
static int find_handle(OmegaGpuBufferHandle h) {
    for (int i = 0; i < NBUF; i++)
        if (M.buf[i].live && M.buf[i].m.handle.index == h.index && M.buf[i].m.handle.generation == h.generation)
            return i;
    return -1;
}

static bool is_launch_buffer(OmegaGpuBufferHandle h) {
    return M.open && M.lb.handle.generation != 0 && M.lb.handle.index == h.index &&
           M.lb.handle.generation == h.generation;
}

static int new_buf_slot(void) {
    for (int i = 0; i < NBUF; i++)
        if (!M.buf[i].live && M.buf[i].m.handle.generation == 0) return i;
    for (int i = 0; i < NBUF; i++)
        if (!M.buf[i].live) return i;
    return -1;
}

/* Releases model buffer `b` (freed, or its device closed). */
static void drop_buf(int b) {
    MBuf *x = &M.buf[b];
    if (!x->live) return;
    x->live = false;
    x->reserved = false;
    if (x->kernel >= 0) {
        M.kern_buf[x->kernel] = -1;
        x->kernel = -1;
    }
}

static int take_fault(int f) {
    if (M.faults[f] > 0) {
        M.faults[f]--;
        return 1;
    }
    return 0;
}

/* ----- allocation ----------------------------------------------------------------------------------------- */

/* One platform allocation of `bytes` as the session makes it (Session::platform_alloc): when the device
 * refuses (an injected failure, or too little memory) and a pool's chunk holds no buffer, the empty chunks
 * go back to the platform and the allocation is tried once more. True when it succeeds. */
static bool platform_alloc(uint64_t bytes) {
    if (!take_fault(F_FAIL_ALLOC) && bytes <= SIM_MEMORY - M.dev_bytes) {
        M.dev_bytes += bytes;
        return true;
    }
    bool returned = false;
    for (int p = 0; p < NPOOL; p++)
        if (M.chunk[p] && M.chunk_live[p] == 0) {
            M.chunk[p] = false;
            M.dev_bytes -= CHUNK_BYTES;
            returned = true;
        }
    if (returned && !take_fault(F_FAIL_ALLOC) && bytes <= SIM_MEMORY - M.dev_bytes) {
        M.dev_bytes += bytes;
        return true;
    }
    return false;
}

/* Where the session puts a buffer of `r` page-rounded bytes of `kind`: carved from its pool's chunk (made
 * now if the pool has none), else (code, a large buffer, or no chunk to be had) an allocation of its own.
 * The pool, -1 for its own allocation, or -2 when it fails. */
static int place(uint64_t r, int kind) {
    if (kind != KIND_CODE && r <= LARGEST_CARVED) {
        int p = kind == KIND_CACHED ? POOL_CACHED : POOL_DATA;
        if (M.chunk[p] || platform_alloc(CHUNK_BYTES)) {
            M.chunk[p] = true;
            M.chunk_live[p]++;
            return p;
        }
    }
    return platform_alloc(r) ? -1 : -2;
}

/* Model buffer `b` given back: to its chunk (which stays), or its own allocation to the platform. */
static void give_back(int b) {
    if (M.buf[b].pool >= 0) M.chunk_live[M.buf[b].pool]--;
    else M.dev_bytes -= M.buf[b].m.size;
}

/* What an allocation through the session will do: the expected error ("" on success), counting it; on
 * success M.placed says where it lies. */
static const char *predict_alloc(size_t bytes, int kind, uint64_t *rounded) {
    const char *g = gate("alloc");
    if (g) return g;
    if (!M.open) return want("alloc: device not open");
    if (M.latched) return want("alloc: refused, the process is latched");
    uint64_t r = buffer_bytes(bytes, kind);
    if (r == 0 || r > (1ull << 48)) return want("platform: ");
    int at = place(r, kind);
    if (at == -2) {
        M.st.alloc_failures++;
        return want("alloc: ");
    }
    M.placed = at;
    M.st.allocs++;
    M.st.alloc_bytes += r;
    *rounded = r;
    return "";
}

static int record_buf(const OmegaGpuMem *m, int kind) {
    int b = new_buf_slot();
    if (b < 0) return -1;
    MBuf *x = &M.buf[b];
    memset(x, 0, sizeof *x);
    x->m = *m;
    x->live = true;
    x->kind = kind;
    x->kernel = -1;
    x->serial = ++M.serial;
    x->pool = M.placed; /* recorded right after its predict_alloc */
    return b;
}

static void op_alloc(void) {
    int kind = pick(3);
    size_t bytes = pick_size();
    bool null_out = pick(16) == 0;
    if (new_buf_slot() < 0 && !null_out) return;
    op_name = kind == KIND_CODE ? "alloc_code" : kind == KIND_CACHED ? "alloc_cached" : "alloc";
    trace("bytes %zu", bytes);
    OmegaGpuMem m;
    memset(&m, 0x5a, sizeof m);
    clear_error();
    if (null_out) {
        int rc = kind == KIND_CODE ? omega_gpu_session_alloc_code(bytes, NULL)
                 : kind == KIND_CACHED ? omega_gpu_session_alloc_cached(bytes, NULL)
                                       : omega_gpu_session_alloc(bytes, NULL);
        CHECK_RC(rc, -1);
        CHECK_ERROR("alloc: out is NULL");
        return;
    }
    uint64_t rounded = 0;
    const char *w = predict_alloc(bytes, kind, &rounded);
    int rc = kind == KIND_CODE ? omega_gpu_session_alloc_code(bytes, &m)
             : kind == KIND_CACHED ? omega_gpu_session_alloc_cached(bytes, &m)
                                   : omega_gpu_session_alloc(bytes, &m);
    CHECK_ERROR(w);
    if (w[0]) {
        CHECK_RC(rc, -1);
        REQUIRE(m.handle.index == 0 && m.handle.generation == 0 && m.kind == 0 && m.cpu == NULL && m.va == 0 && m.size == 0,
                "a refused allocation left *out non-zero");
        return;
    }
    CHECK_RC(rc, 0);
    REQUIRE(m.size == rounded, "size %zu, expected %llu", m.size, (unsigned long long)rounded);
    REQUIRE(m.handle.generation != 0 && m.va != 0 && m.cpu != NULL, "an allocation without handle, va or view");
    REQUIRE(m.kind == (kind == KIND_CODE ? OMEGA_GPU_HANDLE_BUF_CODE : OMEGA_GPU_HANDLE_BUF_DATA), "kind %u", m.kind);
    REQUIRE(((uintptr_t)m.cpu & (PAGE - 1)) == 0, "a CPU view that is not page-aligned");
    if (kind == KIND_CODE) {
        /* The prefetch tail reads as zeros. */
        const uint8_t *p = m.cpu;
        for (size_t i = bytes; i < m.size; i += 509) REQUIRE(p[i] == 0, "code buffer byte %zu is not zero", i);
    }
    /* The CPU view is writable for its whole size. */
    ((volatile uint8_t *)m.cpu)[0] = 1;
    ((volatile uint8_t *)m.cpu)[m.size - 1] = 1;
    record_buf(&m, kind);
}

/* ----- free and sync ---------------------------------------------------------------------------------------- */

/* A GpuMem to hand to free or sync: a live buffer, a stale copy, a live handle with another address, the
 * launch buffer, a forged handle, or zero. `*b` is the model buffer it copies (-1 if none). */
static OmegaGpuMem pick_mem(int *b) {
    OmegaGpuMem m;
    memset(&m, 0, sizeof m);
    *b = -1;
    switch (pick(8)) {
    case 0:
    case 1:
    case 2: { /* a buffer of the model's, live or stale */
        int i = pick(NBUF);
        if (M.buf[i].m.handle.generation == 0) break;
        m = M.buf[i].m;
        *b = i;
        break;
    }
    case 3: { /* a live handle naming another address */
        int i = pick(NBUF);
        if (M.buf[i].m.handle.generation == 0) break;
        m = M.buf[i].m;
        m.va += 1 + pick(8) * PAGE;
        *b = i;
        break;
    }
    case 4: /* the session's own launch buffer */
        if (M.open) m = M.lb;
        break;
    case 5: /* forged: generations far above any the tables issue */
        m.handle.index = pick_u32() % 64;
        m.handle.generation = 0x100000u + b32() % 0x7ff00000u;
        m.va = b64();
        m.size = pick_size();
        break;
    case 6: /* generation 0 with a garbage index: the zero handle */
        m.handle.index = b32();
        m.va = b64();
        break;
    default:
        break;
    }
    return m;
}

/* Field by field: a struct's padding bytes are whatever the writer left there. */
static bool same_mem(const OmegaGpuMem *a, const OmegaGpuMem *b) {
    return a->handle.index == b->handle.index && a->handle.generation == b->handle.generation && a->kind == b->kind &&
           a->cpu == b->cpu && a->va == b->va && a->size == b->size;
}

static bool same_scratch(const OmegaGpuScratch *a, const OmegaGpuScratch *b) {
    return same_mem(&a->mem, &b->mem) && a->cap == b->cap && a->high_water == b->high_water && a->reserved == b->reserved;
}

/* What free does to `*m`; updates the model. Returns the expected error; `*zeroed` says whether *m is
 * zeroed afterwards (else it is left as it was). */
static const char *predict_free(const OmegaGpuMem *m, bool *zeroed) {
    *zeroed = false;
    if (!M.lock) return want("lock: the calling thread does not hold the session lock");
    if (m->handle.generation == 0) {
        *zeroed = true;
        return "";
    }
    if (!M.open) {
        M.st.stale_refusals++;
        *zeroed = true;
        return want("free: device not open");
    }
    if (is_launch_buffer(m->handle)) {
        if (m->va != M.lb.va) {
            M.st.stale_refusals++;
            *zeroed = true;
            return want("free: handle (index");
        }
        return want("free: the buffer is the session's own launch buffer; nothing was released");
    }
    int b = find_handle(m->handle);
    if (b < 0) {
        M.st.stale_refusals++;
        *zeroed = true;
        return want("free: ");
    }
    if (M.buf[b].m.va != m->va) {
        M.st.stale_refusals++;
        *zeroed = true;
        return want("free: handle (index %u, generation %u) is live but names the buffer at", m->handle.index,
                    m->handle.generation);
    }
    if (M.latched) {
        if (!M.buf[b].parked) {
            M.buf[b].parked = true;
            park_one(M.buf[b].m.size);
        }
        return "";
    }
    M.st.frees++;
    give_back(b);
    drop_buf(b);
    *zeroed = true;
    return "";
}

static void do_free(OmegaGpuMem *m) {
    OmegaGpuMem before = *m;
    bool zeroed;
    const char *w = predict_free(m, &zeroed);
    char expect[sizeof want_buf];
    snprintf(expect, sizeof expect, "%s", w);
    clear_error();
    omega_gpu_session_free(m);
    CHECK_ERROR(expect);
    if (zeroed) {
        OmegaGpuMem zero;
        memset(&zero, 0, sizeof zero);
        REQUIRE(same_mem(m, &zero), "free did not zero *m");
    } else {
        REQUIRE(same_mem(m, &before), "free changed *m where it must leave it");
    }
}

static void op_free(void) {
    op_name = "free";
    if (pick(16) == 0) {
        clear_error();
        omega_gpu_session_free(NULL);
        CHECK_ERROR("free: m is NULL");
        return;
    }
    int b;
    OmegaGpuMem m = pick_mem(&b);
    trace("handle {%u, %u} va %#llx", m.handle.index, m.handle.generation, (unsigned long long)m.va);
    do_free(&m);
    /* The model's own copy follows what the library did to a buffer it named. */
    if (b >= 0 && !M.buf[b].live && M.buf[b].m.va == m.va && m.handle.generation == 0) {
    }
}

static const char *predict_sync(const OmegaGpuMem *m) {
    const char *g = gate("sync");
    if (g) return g;
    if (!M.open) return want("sync: device not open");
    if (M.latched) return want("sync: refused, the process is latched");
    bool live = is_launch_buffer(m->handle) || find_handle(m->handle) >= 0;
    if (!live) return want("sync: ");
    if (take_fault(F_FAIL_SYNC)) return want("sync: ");
    return "";
}

static void op_sync(void) {
    bool to_gpu = coin();
    op_name = to_gpu ? "sync_to_gpu" : "sync_to_cpu";
    clear_error();
    if (pick(16) == 0) {
        int rc = to_gpu ? omega_gpu_session_sync_to_gpu(NULL) : omega_gpu_session_sync_to_cpu(NULL);
        CHECK_RC(rc, -1);
        CHECK_ERROR("sync: m is NULL");
        return;
    }
    int b;
    OmegaGpuMem m = pick_mem(&b);
    const char *w = predict_sync(&m);
    int rc = to_gpu ? omega_gpu_session_sync_to_gpu(&m) : omega_gpu_session_sync_to_cpu(&m);
    CHECK_ERROR(w);
    CHECK_RC(rc, w[0] ? -1 : 0);
}

/* A CPU write, a sync to the device, the CPU copy poisoned, a sync back: the bytes come back (the
 * simulator's data buffers are discrete, so this goes through the device copy). */
static void op_roundtrip(void) {
    op_name = "write-sync-read";
    int b = pick(NBUF);
    if (!buf_live(b) || M.buf[b].kind == KIND_CODE) return;
    OmegaGpuMem m = M.buf[b].m;
    size_t n = m.size < 256 ? m.size : 256;
    uint8_t pattern[256];
    for (size_t i = 0; i < n; i++) pattern[i] = b8() ^ (uint8_t)i;
    memcpy(m.cpu, pattern, n);
    const char *w = predict_sync(&m);
    clear_error();
    int rc = omega_gpu_session_sync_to_gpu(&m);
    CHECK_ERROR(w);
    CHECK_RC(rc, w[0] ? -1 : 0);
    if (rc != 0) return;
    memset(m.cpu, 0xee, n);
    w = predict_sync(&m);
    rc = omega_gpu_session_sync_to_cpu(&m);
    CHECK_ERROR(w);
    CHECK_RC(rc, w[0] ? -1 : 0);
    if (rc == 0) REQUIRE(memcmp(m.cpu, pattern, n) == 0, "the bytes written did not come back through the device");
}

/* ----- scratch -------------------------------------------------------------------------------------------- */

enum { SCR_EMPTY, SCR_LIVE, SCR_STALE };

static int scratch_state(int s) {
    const OmegaGpuScratch *x = &M.scr[s];
    if (x->mem.handle.generation == 0) return SCR_EMPTY;
    int b = M.scr_buf[s];
    if (buf_live(b) && M.buf[b].m.handle.index == x->mem.handle.index &&
        M.buf[b].m.handle.generation == x->mem.handle.generation && M.buf[b].m.va == x->mem.va)
        return SCR_LIVE;
    return SCR_STALE;
}

/* scratch_to of the library: makes scratch `s` hold `bytes`; `reserved` as `s->reserved != 0`. */
static const char *predict_scratch_to(int s, size_t bytes, bool reserved, int *grow_rc) {
    *grow_rc = 0;
    const char *g = gate("scratch");
    if (g) return g;
    if (!M.open) return want("scratch: device not open");
    int st = scratch_state(s);
    int b = M.scr_buf[s];
    if (st == SCR_LIVE && M.buf[b].parked) return want("scratch: its buffer is parked");
    if (reserved) {
        if (st != SCR_LIVE || !M.buf[b].reserved) return want("scratch: reserved is set but its buffer holds no reservation");
        if (bytes > M.buf[b].bound) {
            *grow_rc = OMEGA_GPU_SESSION_SCRATCH_RESERVED;
            return want("scratch: request of %zu bytes past the reservation of %zu bytes", bytes, M.buf[b].bound);
        }
        if (bytes > M.scr_hw[s]) M.scr_hw[s] = bytes;
        return "";
    }
    if (st == SCR_LIVE && bytes <= M.buf[b].m.size) {
        if (bytes > M.scr_hw[s]) M.scr_hw[s] = bytes;
        return "";
    }
    uint64_t rounded = 0;
    const char *w = predict_alloc(bytes, KIND_DATA, &rounded);
    if (w[0]) return w;
    /* The new buffer first, then the old one released (not latched: the alloc would have refused). */
    if (st == SCR_LIVE) {
        M.st.frees++;
        give_back(b);
        drop_buf(b);
    }
    M.scr_buf[s] = -2; /* filled in with the returned buffer */
    if (bytes > M.scr_hw[s]) M.scr_hw[s] = bytes;
    return "";
}

static void check_scratch(int s) {
    const OmegaGpuScratch *x = &M.scr[s];
    REQUIRE(x->reserved == (M.scr_res[s] ? 1 : 0), "scratch %d reserved %d, model %d", s, x->reserved, M.scr_res[s]);
    REQUIRE(x->high_water == M.scr_hw[s], "scratch %d high_water %zu, model %zu", s, x->high_water, M.scr_hw[s]);
}

/* After a call that may have replaced the buffer: adopt the new one. */
static void adopt_scratch(int s) {
    if (M.scr_buf[s] != -2) return;
    const OmegaGpuScratch *x = &M.scr[s];
    REQUIRE(x->mem.handle.generation != 0 && x->cap == x->mem.size, "a grown scratch without its buffer");
    M.scr_buf[s] = record_buf(&x->mem, KIND_DATA);
}

static void op_scratch(void) {
    int s = pick(NSCR);
    size_t bytes = pick_size();
    int what = pick(4);
    if (new_buf_slot() < 0) return;
    clear_error();
    if (pick(32) == 0) {
        op_name = "scratch(NULL)";
        int rc = what == 0 ? omega_gpu_session_scratch(NULL, bytes) : omega_gpu_session_scratch_reserve(NULL, bytes);
        CHECK_RC(rc, -1);
        CHECK_ERROR("scratch: s is NULL");
        omega_gpu_session_scratch_free(NULL);
        CHECK_ERROR("scratch: s is NULL");
        omega_gpu_session_scratch_unreserve(NULL);
        CHECK_ERROR("scratch: s is NULL");
        return;
    }
    int saved_buf = M.scr_buf[s];
    if (what <= 1) {
        op_name = "scratch";
        trace("scratch %d bytes %zu", s, bytes);
        int grow_rc;
        const char *w = predict_scratch_to(s, bytes, M.scr_res[s], &grow_rc);
        char expect[sizeof want_buf];
        snprintf(expect, sizeof expect, "%s", w);
        if (w[0] && M.scr_buf[s] == -2) M.scr_buf[s] = saved_buf;
        int rc = omega_gpu_session_scratch(&M.scr[s], bytes);
        CHECK_ERROR(expect);
        CHECK_RC(rc, expect[0] ? (grow_rc ? grow_rc : -1) : 0);
        adopt_scratch(s);
    } else if (what == 2) {
        op_name = "scratch_reserve";
        trace("scratch %d reserve %zu", s, bytes);
        const char *g = gate("scratch");
        char expect[sizeof want_buf];
        if (g) {
            snprintf(expect, sizeof expect, "%s", g);
        } else {
            /* The old reservation goes first, whatever follows. */
            if (scratch_state(s) == SCR_LIVE) M.buf[M.scr_buf[s]].reserved = false;
            M.scr_res[s] = false;
            int grow_rc;
            const char *w = predict_scratch_to(s, bytes, false, &grow_rc);
            snprintf(expect, sizeof expect, "%s", w);
            if (w[0] && M.scr_buf[s] == -2) M.scr_buf[s] = saved_buf;
        }
        int rc = omega_gpu_session_scratch_reserve(&M.scr[s], bytes);
        CHECK_ERROR(expect);
        CHECK_RC(rc, expect[0] ? -1 : 0);
        adopt_scratch(s);
        if (rc == 0) {
            M.scr_res[s] = true;
            M.buf[M.scr_buf[s]].reserved = true;
            M.buf[M.scr_buf[s]].bound = bytes;
        }
    } else if (coin()) {
        op_name = "scratch_unreserve";
        const char *g = gate("scratch");
        char expect[sizeof want_buf];
        snprintf(expect, sizeof expect, "%s", g ? g : "");
        if (!g) {
            if (scratch_state(s) == SCR_LIVE) M.buf[M.scr_buf[s]].reserved = false;
            M.scr_res[s] = false;
        }
        omega_gpu_session_scratch_unreserve(&M.scr[s]);
        CHECK_ERROR(expect);
    } else {
        op_name = "scratch_free";
        OmegaGpuScratch before = M.scr[s];
        bool zeroed;
        const char *w = predict_free(&M.scr[s].mem, &zeroed);
        char expect[sizeof want_buf];
        snprintf(expect, sizeof expect, "%s", w);
        omega_gpu_session_scratch_free(&M.scr[s]);
        CHECK_ERROR(expect);
        if (zeroed) {
            OmegaGpuScratch zero;
            memset(&zero, 0, sizeof zero);
            REQUIRE(same_scratch(&M.scr[s], &zero), "scratch_free did not zero *s");
            M.scr_buf[s] = -1;
            M.scr_res[s] = false;
            M.scr_hw[s] = 0;
        } else {
            REQUIRE(same_scratch(&M.scr[s], &before), "scratch_free changed *s where it must not");
        }
    }
    check_scratch(s);
}

/* ----- kernels --------------------------------------------------------------------------------------------- */

static void op_kernel_load(void) {
    op_name = "kernel_load";
    int k = pick(NKERN);
    int which = pick(N_KERNEL_NAMES + 3);
    const char *name = which < N_KERNEL_NAMES ? KERNEL_NAMES[which] : which == N_KERNEL_NAMES ? "vector_ad" : NULL;
    bool null_out = which == N_KERNEL_NAMES + 2;
    if (M.kern_buf[k] >= 0 || new_buf_slot() < 0) return;
    OmegaGpuKernel out;
    memset(&out, 0x5a, sizeof out);
    clear_error();
    if (null_out) {
        CHECK_RC(omega_gpu_kernel_load("vector_add", NULL), -1);
        CHECK_ERROR("load: out is NULL");
        return;
    }
    trace("%s", name ? name : "(NULL)");
    char expect[sizeof want_buf];
    const char *g = gate("load");
    uint64_t rounded = 0;
    if (!name) snprintf(expect, sizeof expect, "load: name is NULL");
    else if (g) snprintf(expect, sizeof expect, "%s", g);
    else if (which == N_KERNEL_NAMES) snprintf(expect, sizeof expect, "load: ");
    else {
        /* The kernel's architecture comes from the open device where the build has cubins; then the code
         * image (a few dozen bytes on the simulator) plus the prefetch tail: one page. */
        const char *w = !M.open ? want("load: device not open|alloc: device not open")
                                : predict_alloc(64, KIND_CODE, &rounded);
        if (!w[0] && take_fault(F_FAIL_SYNC)) {
            /* The code could not be made visible: the buffer is freed again. */
            M.st.frees++;
            M.dev_bytes -= rounded;
            w = want("sync: ");
        }
        snprintf(expect, sizeof expect, "%s", w);
    }
    int rc = omega_gpu_kernel_load(name, &out);
    CHECK_ERROR(expect);
    if (expect[0]) {
        CHECK_RC(rc, -1);
        OmegaGpuKernel zero;
        memset(&zero, 0, sizeof zero);
        REQUIRE(memcmp(&out, &zero, sizeof zero) == 0, "a refused load left *out non-zero");
        return;
    }
    CHECK_RC(rc, 0);
    REQUIRE(out.code.size == rounded && out.entry_va == out.code.va, "kernel at %#llx in a %zu-byte buffer",
            (unsigned long long)out.entry_va, out.code.size);
    REQUIRE(out.gpr_count >= 64 && out.gpr_count % 8 == 0, "gpr_count %u not rounded", out.gpr_count);
    if (which == 0) REQUIRE(out.param_bytes == 28, "vector_add takes %u bytes of parameters", out.param_bytes);
    int b = record_buf(&out.code, KIND_CODE);
    M.buf[b].kernel = k;
    M.kern[k] = out;
    M.kern_buf[k] = b;
    M.kern_name[k] = which;
}

/* ----- launches -------------------------------------------------------------------------------------------- */

typedef struct {
    OmegaGpuLaunch L;
    uint32_t args[40];
    MLaunch run;
    bool null_L, null_args;
    int a_buf, b_buf, c_buf; /* a clean vector_add's buffers, for the result check */
    uint32_t n;
} Launch;

static int find_kernel(int name) {
    for (int k = 0; k < NKERN; k++)
        if (M.kern_buf[k] >= 0 && M.kern_name[k] == name && buf_live(M.kern_buf[k])) return k;
    return -1;
}

static int pick_data_buf(void) {
    int start = pick(NBUF);
    for (int i = 0; i < NBUF; i++) {
        int b = (start + i) % NBUF;
        if (buf_live(b) && M.buf[b].kind != KIND_CODE && !M.buf[b].parked) return b;
    }
    return -1;
}

static void put_va(uint32_t *w, uint64_t va) {
    w[0] = (uint32_t)va;
    w[1] = (uint32_t)(va >> 32);
}

static uint32_t pick_timeout(void) {
    static const uint32_t t[] = {1000, 1000, 1000, 100, 10, 1, 0, 5000};
    return t[pick(8)];
}

/* A launch: a clean vector_add (when a vector_add kernel and three data buffers are live), one with a field
 * changed, a launch of a raw code buffer, or fields from the tables. */
static void make_launch_fields(Launch *x);
static void make_launch(Launch *x) {
    make_launch_fields(x);
    if (x->null_args) x->L.args = NULL;
}

static void make_launch_fields(Launch *x) {
    memset(x, 0, sizeof *x);
    x->a_buf = x->b_buf = x->c_buf = -1;
    x->run.cls = RUN_UNKNOWN;
    x->run.code_buf = -1;
    for (int i = 0; i < 3; i++) x->run.data[i] = -1;
    OmegaGpuLaunch *L = &x->L;
    L->args = x->args;
    int flavour = pick(8);
    int k = find_kernel(0);
    int a = pick_data_buf(), b = pick_data_buf(), c = pick_data_buf();
    if (flavour <= 4 && k >= 0 && a >= 0 && b >= 0 && c >= 0 && c != a && c != b && a != b) {
        size_t min = M.buf[a].m.size;
        if (M.buf[b].m.size < min) min = M.buf[b].m.size;
        if (M.buf[c].m.size < min) min = M.buf[c].m.size;
        uint32_t n = 1 + b32() % (uint32_t)(min / 4 < 4096 ? min / 4 : 4096);
        static const uint32_t blocks[] = {32, 64, 128, 256, 1024};
        uint32_t block = blocks[pick(5)];
        L->code_va = M.kern[k].entry_va;
        L->gpr_count = M.kern[k].gpr_count;
        L->threads_x = block;
        L->threads_y = coin() ? 0 : 1;
        L->grid_x = (n + block - 1) / block + pick(3);
        L->grid_y = 1;
        L->num_elements = n;
        put_va(x->args, M.buf[a].m.va);
        put_va(x->args + 2, M.buf[b].m.va);
        put_va(x->args + 4, M.buf[c].m.va);
        x->args[6] = n;
        L->n_args = 7 + pick(3);
        L->timeout_ms = pick_timeout();
        L->spin_us = pick(4) == 0 ? pick(3) * 50 : 0;
        /* A GPU-cached output is GPU-read-only: the kernel's store faults. */
        x->run.cls = M.buf[c].kind == KIND_CACHED ? RUN_FAULT : RUN_CLEAN;
        x->run.code_buf = M.kern_buf[k];
        x->run.code_serial = M.buf[M.kern_buf[k]].serial;
        int d[3] = {a, b, c};
        for (int i = 0; i < 3; i++) {
            x->run.data[i] = d[i];
            x->run.data_serial[i] = M.buf[d[i]].serial;
        }
        x->a_buf = a;
        x->b_buf = b;
        x->c_buf = c;
        x->n = n;
        if (flavour == 4) {
            /* One field changed: most are refused before submit; the rest run into the unknown. */
            x->run.cls = RUN_UNKNOWN;
            switch (pick(12)) {
            case 0: L->threads_x = pick_u32(); break;
            case 1: L->threads_y = pick_u32(); break;
            case 2: L->grid_x = pick_u32(); break;
            case 3: L->grid_y = pick_u32(); break;
            case 4: L->gpr_count = pick_u32(); break;
            case 5: L->shared_bytes = pick_u32(); break;
            case 6: L->spin_us = pick_u32(); break;
            case 7: L->n_args = pick_u32() % 40; break;
            case 8: L->code_va += pick_u32(); break;
            case 9: /* past the output buffer, into its guard gap: an MMU fault */
                if (M.buf[c].pool >= 0) {
                    /* A carved buffer has no guard gap: the stores past its end land in its chunk, on
                     * whatever neighbours it has (documented), which the model cannot follow. */
                    x->null_args = true;
                    break;
                }
                x->args[6] = n = (uint32_t)(M.buf[c].m.size / 4) + 1 + b32() % 8192;
                L->grid_x = (n + block - 1) / block;
                /* Certain within the first slice of the simulated kernel; a longer one may run out of time. */
                if (n <= 65536) x->run.cls = RUN_FAULT;
                break;
            case 10: x->null_args = true; break;
            default: x->null_L = true; break;
            }
        }
        return;
    }
    /* A raw code buffer (zeros or the harness's bytes: no simulator code image), or a made-up address. */
    int cb = -1;
    for (int i = 0; i < NBUF; i++)
        if (buf_live(i) && M.buf[i].kind == KIND_CODE && M.buf[i].kernel < 0) cb = i;
    if (cb >= 0 && coin()) {
        L->code_va = M.buf[cb].m.va + (coin() ? 0 : pick_u32() % (M.buf[cb].m.size + 64));
        x->run.code_buf = cb;
        x->run.code_serial = M.buf[cb].serial;
        x->run.cls = RUN_FAULT;
    } else if (k >= 0 && coin()) {
        L->code_va = M.kern[k].entry_va + 16 + pick(64);
        x->run.code_buf = M.kern_buf[k];
        x->run.code_serial = M.buf[M.kern_buf[k]].serial;
        x->run.cls = RUN_FAULT; /* inside the image, not at its start: no code image there */
    } else {
        L->code_va = coin() ? b64() : (uint64_t)0x1000000000ull + pick_u32();
    }
    L->gpr_count = pick_u32();
    L->threads_x = pick(4) ? 1 + pick(64) : pick_u32();
    L->threads_y = pick(4) ? pick(2) : pick_u32();
    L->grid_x = pick(4) ? 1 + pick(8) : pick_u32();
    L->grid_y = pick(4) ? 1 : pick_u32();
    L->num_elements = b32();
    for (int i = 0; i < 40; i++) x->args[i] = b32();
    L->n_args = pick(4) ? 1 + pick(32) : pick_u32();
    L->timeout_ms = pick_timeout();
    L->shared_bytes = pick(4) ? 0 : pick_u32();
    L->spin_us = pick(4) ? 0 : pick_u32();
    if (pick(16) == 0) x->null_args = true;
    if (pick(32) == 0) x->null_L = true;
}

/* The code buffer of a launch address, or -1: the live code buffer holding it. */
static int code_buf_at(uint64_t va) {
    for (int i = 0; i < NBUF; i++)
        if (buf_live(i) && M.buf[i].kind == KIND_CODE && va >= M.buf[i].m.va && va - M.buf[i].m.va < M.buf[i].m.size)
            return i;
    return -1;
}

static uint32_t round_gpr(uint32_t g) {
    uint64_t r = ((uint64_t)g + 7) / 8 * 8;
    if (r > UINT32_MAX) r = UINT32_MAX - 7; /* saturating_mul of the library: above any limit either way */
    return r < 64 ? 64 : (uint32_t)r;
}

/* The checks every launch passes before anything is submitted, in the library's order (the C entry's own
 * first when `c_entry`). Returns the expected error, "" when the launch goes on to submit. */
static const char *predict_resolve(const Launch *x, const char *stage, bool c_entry) {
    const OmegaGpuLaunch *L = &x->L;
    if (c_entry) {
        const char *g = gate(stage);
        if (g) return g;
        if (M.latched) return want("%s: refused, the process is latched", stage);
    }
    if (x->null_L) return want("launch arguments: L is NULL");
    if (x->null_args) return want("launch arguments: args is NULL");
    if (L->n_args == 0 || L->n_args > OMEGA_GPU_SESSION_MAX_ARGS) return want("launch arguments: n_args");
    const char *g = gate(stage);
    if (g) return g;
    if (M.latched) return want("%s: refused, the process is latched", stage);
    uint32_t ty = L->threads_y ? L->threads_y : 1;
    if (L->threads_x == 0) return want("launch arguments: threads_x is 0");
    if (L->grid_x == 0 || L->grid_y == 0) return want("launch arguments: grid");
    if ((uint64_t)L->threads_x * ty > 1024) return want("launch arguments: ");
    if (L->spin_us > OMEGA_GPU_SESSION_MAX_SPIN_US) return want("launch arguments: spin_us");
    if (!M.open) return want("%s: device not open", stage);
    if (M.chan_dead) return want("launch: kernel fault");
    int cb = code_buf_at(L->code_va);
    if (cb < 0) return want("launch arguments: code_va");
    int k = M.buf[cb].kernel;
    bool templ = k >= 0 && M.kern[k].entry_va == L->code_va;
    if (templ && L->n_args * 4 < M.kern[k].param_bytes) return want("launch arguments: ");
    uint32_t stat = templ ? M.kern[k].shared_bytes : 0;
    uint64_t shared = L->shared_bytes == 0 ? (stat ? stat : OMEGA_GPU_SESSION_DEFAULT_SHARED_BYTES)
                                           : (L->shared_bytes > stat ? L->shared_bytes : stat);
    if (shared > MAX_SHARED) return want("launch arguments: ");
    uint32_t regs = templ ? M.kern[k].gpr_count : 0;
    if (round_gpr(L->gpr_count > regs ? L->gpr_count : regs) > MAX_GPR) return want("launch arguments: gpr_count");
    if (L->threads_x > 1024 || ty > 1024 || L->grid_x > 0x7fffffffu || L->grid_y > 65535) return want("launch arguments: ");
    return "";
}

/* What the launch's run will be: its class, with data or code freed since it was made a fault. */
static int run_class(const MLaunch *r) {
    if (r->cls == RUN_UNKNOWN) return RUN_UNKNOWN;
    if (r->code_buf < 0 || !buf_live(r->code_buf) || M.buf[r->code_buf].serial != r->code_serial) return RUN_FAULT;
    if (r->cls == RUN_CLEAN)
        for (int i = 0; i < 3; i++)
            if (!buf_live(r->data[i]) || M.buf[r->data[i]].serial != r->data_serial[i]) return RUN_FAULT;
    return r->cls;
}

/* What a submission that passed every check does: OUT_DONE, OUT_FAULT (certain; the channel is dead),
 * OUT_LATCH (uncertain: the process latches) or OUT_UNKNOWN. Consumes the faults it meets. */
enum { OUT_DONE, OUT_FAULT, OUT_LATCH, OUT_UNKNOWN };
static int predict_submission(int cls, uint32_t timeout_ms, bool any_work) {
    int hang = take_fault(F_HANG);
    int kfault = hang ? 0 : take_fault(F_KERNEL_FAULT);
    if (timeout_ms == 0) return OUT_LATCH;
    if (M.faults[F_REFUSE_POLL] > 0) {
        M.faults[F_REFUSE_POLL]--;
        return OUT_LATCH;
    }
    if (hang) return OUT_LATCH;
    if (kfault) return OUT_FAULT;
    if (!any_work) return OUT_DONE;
    if (cls == RUN_FAULT) return OUT_FAULT;
    if (cls == RUN_UNKNOWN) return OUT_UNKNOWN;
    return OUT_DONE;
}

/* In the child, a result the model could not predict: any documented one, which the model then adopts. */
static void adopt_unknown(int rc, uint64_t extra_parked) {
    const char *e = omega_gpu_session_last_error();
    if (rc == 0) {
        CHECK_ERROR("");
        return;
    }
    REQUIRE(rc == -1, "an unpredicted launch returned %d", rc);
    if (strstr(e, "process latched") != NULL) {
        REQUIRE(strncmp(e, "launch: ", 8) == 0, "a latch named no launch stage: \"%s\"", e);
        model_latch(extra_parked);
    } else if (strncmp(e, "launch: kernel fault", 20) == 0) {
        M.chan_dead = true;
    } else {
        FAIL("an unpredicted launch failed with an undocumented error: \"%s\"", e);
    }
}

static void note_marker(uint32_t marker) {
    REQUIRE(marker != 0, "a completed launch reported marker 0");
    if (M.sequence >= 0) REQUIRE(marker == (uint32_t)M.sequence, "marker %u, expected %lld", marker, (long long)M.sequence);
    M.sequence = marker;
}

/* A submission that reached the device: the next sequence number is used whatever the outcome. */
static void submission_made(void) {
    if (M.sequence >= 0) M.sequence = M.sequence == 0xffffffff ? 1 : M.sequence + 1;
}

/* Writes random inputs to a clean vector_add's buffers and makes them visible. False when a sync was
 * refused (as predicted): the launch is not made. */
static bool stage_inputs(const Launch *x, float *a, float *b) {
    for (uint32_t i = 0; i < x->n; i++) {
        a[i] = (float)(int32_t)(b32() % 2001) - 1000.0f;
        b[i] = (float)i * 0.5f;
    }
    memcpy(M.buf[x->a_buf].m.cpu, a, x->n * 4);
    memcpy(M.buf[x->b_buf].m.cpu, b, x->n * 4);
    int bufs[2] = {x->a_buf, x->b_buf};
    for (int i = 0; i < 2; i++) {
        const char *w = predict_sync(&M.buf[bufs[i]].m);
        clear_error();
        int rc = omega_gpu_session_sync_to_gpu(&M.buf[bufs[i]].m);
        CHECK_ERROR(w);
        CHECK_RC(rc, w[0] ? -1 : 0);
        if (rc) return false;
    }
    return true;
}

static void op_launch(void) {
    op_name = "launch";
    Launch x;
    make_launch(&x);
    static float a[4096], b[4096];
    if (x.a_buf >= 0 && !x.null_L && !x.null_args && !stage_inputs(&x, a, b)) return;
    trace("code %#llx block %ux%u grid %ux%u n_args %u timeout %u spin %u shared %u gpr %u cls %d",
          (unsigned long long)x.L.code_va, x.L.threads_x, x.L.threads_y, x.L.grid_x, x.L.grid_y, x.L.n_args,
          x.L.timeout_ms, x.L.spin_us, x.L.shared_bytes, x.L.gpr_count, x.run.cls);
    if (x.a_buf >= 0)
        trace("a %#llx kind %d, b %#llx kind %d, c %#llx kind %d, n %u", (unsigned long long)M.buf[x.a_buf].m.va,
              M.buf[x.a_buf].kind, (unsigned long long)M.buf[x.b_buf].m.va, M.buf[x.b_buf].kind,
              (unsigned long long)M.buf[x.c_buf].m.va, M.buf[x.c_buf].kind, x.n);
    const char *w = predict_resolve(&x, "launch", true);
    char expect[sizeof want_buf];
    snprintf(expect, sizeof expect, "%s", w);
    int want_rc = -1;
    int out = -1;
    if (!expect[0]) {
        if (M.cancel) {
            M.cancel = false;
            snprintf(expect, sizeof expect, "launch: cancelled before submit");
            want_rc = OMEGA_GPU_SESSION_CANCELLED;
        } else {
            /* From here the simulator is asked: a latch or an outcome the model cannot tell go to a child. */
            int saved[F_COUNT];
            memcpy(saved, M.faults, sizeof saved);
            out = predict_submission(run_class(&x.run), x.L.timeout_ms, true);
            if ((out == OUT_LATCH || out == OUT_UNKNOWN) && !fork_for_latch()) {
                memcpy(M.faults, saved, sizeof saved);
                in_i = in_n; /* the child ran the rest */
                return;
            }
            submission_made();
            if (out == OUT_FAULT) {
                M.chan_dead = true;
                snprintf(expect, sizeof expect, "launch: kernel fault");
            } else if (out == OUT_LATCH) {
                snprintf(expect, sizeof expect, "launch: ");
            }
        }
    }
    uint64_t elapsed0 = pick(4) == 0 ? UINT64_MAX - pick(8) : b32();
    uint64_t elapsed = elapsed0;
    uint32_t marker = 0xdeadbeef;
    bool give_out = coin();
    clear_error();
    int rc = omega_gpu_session_launch(x.null_L ? NULL : &x.L, give_out ? &elapsed : NULL, give_out ? &marker : NULL);
    if (out == OUT_UNKNOWN) {
        adopt_unknown(rc, 0);
        if (rc == 0 && give_out) note_marker(marker);
        return;
    }
    if (out == OUT_LATCH) {
        CHECK_RC(rc, -1);
        const char *e = omega_gpu_session_last_error();
        REQUIRE(strncmp(e, "launch: ", 8) == 0 && strstr(e, "process latched") != NULL,
                "a launch predicted to latch said \"%s\"", e);
        model_latch(0);
        return;
    }
    CHECK_ERROR(expect);
    if (expect[0]) {
        CHECK_RC(rc, want_rc);
        if (give_out) REQUIRE(elapsed == elapsed0 && marker == 0xdeadbeef, "a failed launch wrote its outputs");
        return;
    }
    CHECK_RC(rc, 0);
    if (give_out) {
        REQUIRE(elapsed - elapsed0 > 0 && elapsed - elapsed0 < (1ull << 40), "elapsed_ns was not added to (%llu -> %llu)",
                (unsigned long long)elapsed0, (unsigned long long)elapsed);
        note_marker(marker);
    } else if (M.sequence >= 0) {
        /* Still known: the submission used the next number. */
    }
    if (x.run.cls == RUN_CLEAN) {
        /* The sum, through the device copy of the output. */
        OmegaGpuMem *c = &M.buf[x.c_buf].m;
        const char *w2 = predict_sync(c);
        clear_error();
        int rc2 = omega_gpu_session_sync_to_cpu(c);
        CHECK_ERROR(w2);
        if (rc2 == 0) {
            const float *got = c->cpu;
            for (uint32_t i = 0; i < x.n; i++)
                REQUIRE(got[i] == a[i] + b[i], "vector_add c[%u] = %g, expected %g", i, (double)got[i], (double)(a[i] + b[i]));
        }
    }
}

/* ----- command lists ----------------------------------------------------------------------------------------- */

/* A list pointer: a live or freed list, a pointer next to one, a made-up one, or NULL. `*li` is the model
 * list it names (-1 for none). */
static OmegaGpuCmdList *pick_list(int *li) {
    *li = -1;
    int c = pick(10);
    if (c < 6) {
        int i = pick(NLIST);
        if (M.list[i].live) {
            *li = i;
            return M.list[i].p;
        }
        return M.list[i].p; /* NULL, or the pointer of a list freed since */
    }
    if (c == 6 && M.ndead) return M.dead[pick(M.ndead)];
    if (c == 7) {
        int i = pick(NLIST);
        if (M.list[i].p) return (OmegaGpuCmdList *)((uintptr_t)M.list[i].p + 1 + pick(15));
    }
    if (c == 8) return (OmegaGpuCmdList *)(uintptr_t)(coin() ? 0x10 : b64());
    return NULL;
}

/* The model list a pointer names (a made-up pointer may equal a live one). */
static int list_named(OmegaGpuCmdList *p) {
    for (int i = 0; i < NLIST; i++)
        if (M.list[i].live && M.list[i].p == p) return i;
    return -1;
}

static const char *list_unknown(const char *stage, OmegaGpuCmdList *p) {
    if (!p) return want("%s: list is NULL", stage);
    return want("%s: %p is not a live command list", stage, (void *)p);
}

static void check_list_stats(int li, const OmegaGpuCmdListStats *s) {
    const OmegaGpuCmdListStats *m = &M.list[li].st;
    REQUIRE(s->launches == m->launches && s->submits == m->submits && s->failed_submits == m->failed_submits &&
                s->barriers == m->barriers && s->independent == m->independent && s->unordered == m->unordered &&
                s->skipped == m->skipped && s->refusals == m->refusals,
            "list stats {launches %llu submits %llu failed %llu barriers %llu indep %llu unordered %llu skipped %llu "
            "refusals %llu}, model {%llu %llu %llu %llu %llu %llu %llu %llu}",
            (unsigned long long)s->launches, (unsigned long long)s->submits, (unsigned long long)s->failed_submits,
            (unsigned long long)s->barriers, (unsigned long long)s->independent, (unsigned long long)s->unordered,
            (unsigned long long)s->skipped, (unsigned long long)s->refusals, (unsigned long long)m->launches,
            (unsigned long long)m->submits, (unsigned long long)m->failed_submits, (unsigned long long)m->barriers,
            (unsigned long long)m->independent, (unsigned long long)m->unordered, (unsigned long long)m->skipped,
            (unsigned long long)m->refusals);
    REQUIRE(s->total_submit_ns >= s->last_submit_ns, "total_submit_ns below last_submit_ns");
}

static void op_cmdlist_create(void) {
    op_name = "cmdlist_create";
    int li = -1;
    for (int i = 0; i < NLIST; i++)
        if (!M.list[i].live) li = i;
    if (li < 0) return;
    OmegaGpuCmdListOpts o;
    memset(&o, 0, sizeof o);
    static const uint32_t barriers[] = {0, 0, 0, 1, 2, 0xffffffffu};
    o.barrier = barriers[pick(6)];
    o.skip_launch = pick(4) == 0 ? (coin() ? 1 : pick_u32()) : 0;
    o.timeout_ms = pick(3) == 0 ? pick_timeout() : 0;
    o.spin_us = pick(4) == 0 ? pick(3) * 50 : 0;
    bool null_opts = pick(4) == 0, null_out = pick(32) == 0;
    if (null_opts) memset(&o, 0, sizeof o);
    OmegaGpuCmdList *p = (OmegaGpuCmdList *)(uintptr_t)0x1234;
    char expect[sizeof want_buf];
    if (null_out) snprintf(expect, sizeof expect, "cmdlist create: out is NULL");
    else if (M.lock) snprintf(expect, sizeof expect, "lock: cmdlist create takes the session lock itself");
    else if (M.in_hook) snprintf(expect, sizeof expect, "on close: ");
    else if (o.barrier > 1) snprintf(expect, sizeof expect, "cmdlist create: barrier mode");
    else if (M.latched) snprintf(expect, sizeof expect, "cmdlist create: refused, the process is latched");
    else if (!M.open) snprintf(expect, sizeof expect, "cmdlist create: device not open");
    else if (take_fault(F_FAIL_ALLOC)) snprintf(expect, sizeof expect, "alloc: ");
    else expect[0] = 0;
    clear_error();
    int rc = omega_gpu_cmdlist_create(null_opts ? NULL : &o, null_out ? NULL : &p);
    CHECK_ERROR(expect);
    if (expect[0]) {
        CHECK_RC(rc, -1);
        if (!null_out) REQUIRE(p == NULL, "a refused create left *out non-NULL");
        return;
    }
    CHECK_RC(rc, 0);
    REQUIRE(p != NULL && list_named(p) < 0, "a new list with a NULL or live pointer");
    for (int d = 0; d < M.ndead; d++) REQUIRE(M.dead[d] != p, "a freed list's pointer was handed out again");
    MList *l = &M.list[li];
    memset(l, 0, offsetof(MList, l));
    l->p = p;
    l->live = true;
    l->epoch = M.epoch;
    l->barrier = o.barrier;
    l->skip = o.skip_launch;
    l->timeout_ms = o.timeout_ms;
    l->spin_us = o.spin_us;
    M.dev_bytes += MAX_LIST * 16;
    CHECK_RC(omega_gpu_cmdlist_count(p), 0);
    CHECK_RC(omega_gpu_cmdlist_is_latched(p), 0);
}

/* The stamp area of a list being released: freed, parked, or gone with its device. */
static void release_stamps(MList *l) {
    if (!M.open || l->epoch != M.epoch) return;
    if (M.latched) {
        if (!l->latched) park_one(MAX_LIST * 16); /* a latched list's area was parked at the latch */
        return;
    }
    M.dev_bytes -= MAX_LIST * 16;
}

static void forget_list(int li) {
    MList *l = &M.list[li];
    l->live = false;
    if (M.ndead < NDEAD) M.dead[M.ndead++] = l->p;
    else M.dead[pick(NDEAD)] = l->p;
}

static void op_cmdlist_free(void) {
    op_name = "cmdlist_free";
    int li;
    OmegaGpuCmdList *p = pick_list(&li);
    li = list_named(p);
    char expect[sizeof want_buf];
    int want_rc = -1;
    if (!p) {
        expect[0] = 0;
        want_rc = 0;
    } else if (M.lock) {
        snprintf(expect, sizeof expect, "lock: cmdlist free takes the session lock itself");
    } else if (li < 0) {
        snprintf(expect, sizeof expect, "%s", list_unknown("cmdlist free", p));
    } else {
        expect[0] = 0;
        want_rc = 0;
    }
    clear_error();
    int rc = omega_gpu_cmdlist_free(p);
    CHECK_ERROR(expect);
    CHECK_RC(rc, want_rc);
    if (rc == 0 && li >= 0) {
        release_stamps(&M.list[li]);
        forget_list(li);
    }
}

static void op_cmdlist_query(void) {
    int li;
    OmegaGpuCmdList *p = pick_list(&li);
    li = list_named(p);
    clear_error();
    switch (pick(4)) {
    case 0:
        op_name = "cmdlist_count";
        CHECK_RC(omega_gpu_cmdlist_count(p), li >= 0 ? M.list[li].n : 0);
        CHECK_ERROR(li >= 0 ? "" : list_unknown("cmdlist count", p));
        break;
    case 1:
        op_name = "cmdlist_is_latched";
        CHECK_RC(omega_gpu_cmdlist_is_latched(p), li >= 0 ? M.list[li].latched : -1);
        CHECK_ERROR(li >= 0 ? "" : list_unknown("cmdlist is latched", p));
        break;
    case 2: {
        op_name = "cmdlist_stamps";
        static uint64_t st[MAX_LIST + 8];
        size_t max = coin() ? pick(8) : MAX_LIST + 8;
        bool null_out = pick(8) == 0;
        size_t got = omega_gpu_cmdlist_stamps(p, null_out ? NULL : st, max);
        if (li < 0) {
            CHECK_RC(got, 0);
            CHECK_ERROR(list_unknown("cmdlist stamps", p));
            break;
        }
        MList *l = &M.list[li];
        if (max == 0) {
            CHECK_RC(got, 0);
            CHECK_ERROR("");
        } else if (null_out) {
            CHECK_RC(got, 0);
            CHECK_ERROR("cmdlist stamps: out is NULL");
        } else {
            bool area = M.open && l->epoch == M.epoch;
            size_t n = l->submitted < max ? l->submitted : max;
            CHECK_RC(got, area ? n : 0);
            CHECK_ERROR("");
            for (size_t i = 1; i < got; i++)
                if (st[i] && st[i - 1]) REQUIRE(st[i] >= st[i - 1], "stamps out of order at %zu", i);
        }
        break;
    }
    default: {
        op_name = "cmdlist_reset";
        char expect[sizeof want_buf];
        if (li < 0) snprintf(expect, sizeof expect, "%s", list_unknown("cmdlist reset", p));
        else if (gate("cmdlist reset")) snprintf(expect, sizeof expect, "%s", gate("cmdlist reset"));
        else if (M.list[li].latched) {
            snprintf(expect, sizeof expect, "cmdlist reset: refused, the list is latched");
            M.list[li].st.refusals++;
        } else {
            expect[0] = 0;
            M.list[li].n = 0;
            M.list[li].submitted = 0;
        }
        CHECK_RC(omega_gpu_cmdlist_reset(p), expect[0] ? -1 : 0);
        CHECK_ERROR(expect);
        break;
    }
    }
}

/* Adds one launch to list `li` (or to a pointer that is no list). */
static void add_one(OmegaGpuCmdList *p, int li, Launch *x) {
    char expect[sizeof want_buf];
    const char *g = gate("cmdlist add");
    MList *l = li >= 0 ? &M.list[li] : NULL;
    if (!l) snprintf(expect, sizeof expect, "%s", list_unknown("cmdlist add", p));
    else if (g) snprintf(expect, sizeof expect, "%s", g);
    else if (x->null_L) snprintf(expect, sizeof expect, "launch arguments: L is NULL");
    else if (x->null_args || x->L.n_args == 0 || x->L.n_args > OMEGA_GPU_SESSION_MAX_ARGS) {
        snprintf(expect, sizeof expect, "launch arguments: ");
        l->st.refusals++;
    } else if (l->latched) {
        snprintf(expect, sizeof expect, "cmdlist add: refused, the list is latched");
        l->st.refusals++;
    } else if (l->n >= MAX_LIST) {
        snprintf(expect, sizeof expect, "cmdlist add: OMEGA_GPU_CMDLIST_FULL");
        l->st.refusals++;
    } else {
        snprintf(expect, sizeof expect, "%s", predict_resolve(x, "cmdlist add", false));
        if (expect[0]) l->st.refusals++;
    }
    uint32_t index = 0xdeadbeef;
    bool give_index = coin();
    clear_error();
    int rc = omega_gpu_cmdlist_add(p, x->null_L ? NULL : &x->L, give_index ? &index : NULL);
    CHECK_ERROR(expect);
    CHECK_RC(rc, expect[0] ? -1 : 0);
    if (rc == 0) {
        if (give_index) CHECK_RC(index, l->n);
        MLaunch *r = &l->l[l->n++];
        *r = x->run;
        r->code_buf = code_buf_at(x->L.code_va);
        r->code_serial = r->code_buf >= 0 ? M.buf[r->code_buf].serial : 0;
        r->timeout_ms = x->L.timeout_ms;
        r->spin_us = x->L.spin_us;
        r->independent = false;
    } else if (give_index) {
        CHECK_RC(index, 0xdeadbeef);
    }
}

static void op_cmdlist_add(void) {
    op_name = "cmdlist_add";
    int li;
    OmegaGpuCmdList *p = pick_list(&li);
    li = list_named(p);
    Launch x;
    make_launch(&x);
    /* Sometimes the same launch many times: past OMEGA_GPU_CMDLIST_MAX_LAUNCHES. */
    int times = pick(16) == 0 ? MAX_LIST + 2 : 1 + pick(3);
    for (int t = 0; t < times; t++) {
        add_one(p, li, &x);
        if (t > 4 && omega_gpu_session_last_error()[0]) break;
    }
}

static void op_cmdlist_mark(void) {
    op_name = "cmdlist_mark_independent";
    int li;
    OmegaGpuCmdList *p = pick_list(&li);
    li = list_named(p);
    uint32_t index = coin() ? pick(4) : pick_u32();
    char expect[sizeof want_buf];
    if (li < 0) snprintf(expect, sizeof expect, "%s", list_unknown("cmdlist mark independent", p));
    else if (M.list[li].latched) {
        snprintf(expect, sizeof expect, "cmdlist mark independent: refused, the list is latched");
        M.list[li].st.refusals++;
    } else if (index >= M.list[li].n) {
        snprintf(expect, sizeof expect, "cmdlist mark independent: launch %u is not in the list", index);
        M.list[li].st.refusals++;
    } else {
        expect[0] = 0;
        M.list[li].l[index].independent = true;
    }
    clear_error();
    CHECK_RC(omega_gpu_cmdlist_mark_independent(p, index), expect[0] ? -1 : 0);
    CHECK_ERROR(expect);
}

static void op_cmdlist_submit(void) {
    op_name = "cmdlist_submit";
    int li;
    OmegaGpuCmdList *p = pick_list(&li);
    li = list_named(p);
    MList *l = li >= 0 ? &M.list[li] : NULL;
    char expect[sizeof want_buf];
    int want_rc = -1, out = -1;
    uint32_t n = l ? l->n : 0;
    const char *g = gate("cmdlist submit");
    if (!l) snprintf(expect, sizeof expect, "%s", list_unknown("cmdlist submit", p));
    else if (g) snprintf(expect, sizeof expect, "%s", g);
    else {
        const char *w = "";
        if (l->latched) w = want("cmdlist submit: refused, the list is latched");
        else if (M.latched) w = want("cmdlist submit: refused, the process is latched");
        else if (n == 0) w = want("cmdlist submit: the list is empty");
        else if (!M.open) w = want("cmdlist submit: device not open");
        else if (M.chan_dead) w = want("launch: kernel fault");
        else if (l->epoch != M.epoch) w = want("cmdlist submit: the list's stamp area belongs to a device that was closed");
        else {
            for (uint32_t k = 0; k < n && !w[0]; k++) {
                int cb = l->l[k].code_buf;
                /* Recorded launches of made-up code never get here: the add refused them. */
                if (cb < 0 || !buf_live(cb) || M.buf[cb].serial != l->l[k].code_serial)
                    w = want("cmdlist submit: launch %u: code_va", k);
            }
            if (!w[0] && M.cancel) {
                M.cancel = false;
                want_rc = OMEGA_GPU_SESSION_CANCELLED;
                w = want("launch: cancelled before submit");
            }
        }
        snprintf(expect, sizeof expect, "%s", w);
        if (expect[0]) l->st.refusals++;
    }
    if (l && !expect[0]) {
        uint32_t timeout = l->timeout_ms;
        if (!timeout) {
            uint64_t sum = 0;
            for (uint32_t k = 0; k < n; k++) sum += l->l[k].timeout_ms;
            timeout = sum > UINT32_MAX ? UINT32_MAX : (uint32_t)sum;
        }
        int cls = RUN_CLEAN;
        for (uint32_t k = 0; k < n; k++) {
            int c = run_class(&l->l[k]);
            if (c == RUN_FAULT) {
                cls = RUN_FAULT;
                break;
            }
            if (c == RUN_UNKNOWN) {
                cls = RUN_UNKNOWN;
                break;
            }
        }
        int saved[F_COUNT];
        memcpy(saved, M.faults, sizeof saved);
        out = predict_submission(cls, timeout, l->skip == 0);
        if ((out == OUT_LATCH || out == OUT_UNKNOWN) && !fork_for_latch()) {
            memcpy(M.faults, saved, sizeof saved);
            in_i = in_n;
            return;
        }
        submission_made();
    }
    OmegaGpuCmdListStats st;
    memset(&st, 0xa5, sizeof st);
    bool give_stats = coin();
    clear_error();
    int rc = omega_gpu_cmdlist_submit(p, give_stats ? &st : NULL);
    if (!l) {
        CHECK_ERROR(expect);
        CHECK_RC(rc, -1);
        return;
    }
    if (out == OUT_UNKNOWN) {
        adopt_unknown(rc, MAX_LIST * 16);
    } else if (out == OUT_LATCH) {
        CHECK_RC(rc, -1);
        const char *e = omega_gpu_session_last_error();
        REQUIRE(strncmp(e, "launch: ", 8) == 0 && strstr(e, "process latched") != NULL,
                "a submit predicted to latch said \"%s\"", e);
        model_latch(MAX_LIST * 16);
    } else if (out == OUT_FAULT) {
        CHECK_RC(rc, -1);
        CHECK_ERROR("launch: kernel fault");
        M.chan_dead = true;
    } else {
        CHECK_ERROR(expect);
        CHECK_RC(rc, expect[0] ? want_rc : 0);
    }
    if (out >= 0) {
        if (rc == 0) {
            l->st.submits++;
            l->st.launches += n;
            for (uint32_t k = 0; k < n; k++) {
                if (l->barrier == OMEGA_GPU_CMDLIST_BARRIER_NONE) l->st.unordered++;
                else if (l->l[k].independent) l->st.independent++;
                else if (k > 0) l->st.barriers++;
            }
            if (l->skip) l->st.skipped += n;
            l->submitted = n;
        } else {
            l->st.failed_submits++;
            l->submitted = 0;
            l->latched = M.latched && strstr(omega_gpu_session_last_error(), "process latched") != NULL;
        }
    }
    if (give_stats) check_list_stats(li, &st);
}

/* ----- the job engine ------------------------------------------------------------------------------------------ */

/* The scripted C backend: each step returns what the input chose. */
static struct {
    int32_t prepare, alloc, upload, readback;
    uint32_t outcome, wait, xid;
    uint32_t missing; /* bit i: function i of the table is NULL */
    uint64_t clock;
    int releases, allocs_seen;
    uint32_t n_seen;
} S;

static uint64_t be_now(void *ctx) {
    (void)ctx;
    return S.clock += 3;
}
static int32_t be_prepare(void *ctx) {
    (void)ctx;
    return S.prepare;
}
static int32_t be_alloc(void *ctx, uint32_t n) {
    (void)ctx;
    S.n_seen = n;
    S.allocs_seen++;
    return S.alloc;
}
static int32_t be_upload(void *ctx, const float *a, const float *b, uint32_t n) {
    (void)ctx;
    REQUIRE(a && b && n == S.n_seen, "upload got NULL inputs or %u elements after %u", n, S.n_seen);
    volatile float sink = a[n - 1] + b[n - 1]; /* readable for n */
    (void)sink;
    return S.upload;
}
static uint32_t be_launch(void *ctx, uint32_t n, const OmegaGpuTimeouts *t, OmegaGpuLaunchReport *r) {
    (void)ctx;
    REQUIRE(t && r && n == S.n_seen, "launch got NULL timeouts or report");
    r->wait = S.wait;
    r->xid = S.xid;
    r->marker = 77;
    r->kernel_ns = 1234;
    return S.outcome;
}
static const float *be_a, *be_b;
static int32_t be_readback(void *ctx, float *out, uint32_t n) {
    (void)ctx;
    REQUIRE(out && n == S.n_seen, "readback got NULL or %u elements", n);
    if (S.readback == OMEGA_GPU_BACKEND_STEP_OK)
        for (uint32_t i = 0; i < n; i++) out[i] = be_a[i] + be_b[i];
    return S.readback;
}
static void be_release(void *ctx) {
    (void)ctx;
    S.releases++;
}

static uint64_t counter_clock_value;
static uint64_t counter_clock(void) { return counter_clock_value += 11; }

static void op_engine_setup(void) {
    switch (pick(6)) {
    case 0:
        op_name = "engine_set_backend(NULL)";
        CHECK_RC(omega_gpu_engine_set_backend(NULL), 0);
        M.backend = 0;
        break;
    case 1: {
        op_name = "engine_set_backend";
        static const int32_t steps[] = {OMEGA_GPU_BACKEND_STEP_OK, OMEGA_GPU_BACKEND_STEP_OK, OMEGA_GPU_BACKEND_STEP_OK,
                                        OMEGA_GPU_BACKEND_STEP_FAILED, OMEGA_GPU_BACKEND_STEP_LATCHED, 7, INT32_MIN};
        S.prepare = steps[pick(7)];
        S.alloc = steps[pick(4)];
        S.upload = steps[pick(4)];
        S.readback = steps[pick(4)];
        S.outcome = pick(3) ? OMEGA_GPU_BACKEND_LAUNCH_DONE : pick(8);
        S.wait = pick(4);
        S.xid = pick_u32();
        S.missing = pick(4) == 0 ? (1u << pick(8)) : 0;
        OmegaGpuBackend t = {NULL, be_now, be_prepare, be_alloc, be_upload, be_launch, be_readback, be_release};
        void **f = (void **)&t.now_ns;
        for (int i = 0; i < 7; i++)
            if (S.missing & (1u << i)) f[i] = NULL;
        CHECK_RC(omega_gpu_engine_set_backend(&t), 0);
        M.backend = 1;
        break;
    }
    case 2:
        op_name = "engine_set_clock";
        if (coin()) {
            omega_gpu_engine_set_clock(counter_clock);
            M.clock_mode = 1;
        } else {
            omega_gpu_engine_set_clock(NULL);
            M.clock_mode = 0;
        }
        break;
    case 3:
        op_name = "engine_test_set_clock";
        M.clock_pinned = b64();
        omega_gpu_engine_test_set_clock(M.clock_pinned);
        M.clock_mode = 2;
        break;
    case 4:
        op_name = "engine_test_force_block";
        omega_gpu_engine_test_force_block();
        M.engine_blocked = true;
        break;
    default:
        op_name = "engine_test_reset_block";
        omega_gpu_engine_test_reset_block();
        M.engine_blocked = false;
        break;
    }
}

typedef struct {
    uint32_t failure, step, wait;
    bool run;   /* the outcome depends on what the session does (unknown: go to a child) */
} EngineWant;

#define EW(f, s, w) ((EngineWant){OMEGA_GPU_ENGINE_##f, OMEGA_GPU_ENGINE_STEP_##s, OMEGA_GPU_ENGINE_WAIT_##w, false})

/* The scripted backend's run. */
static EngineWant predict_custom(void) {
    bool miss_prepare = S.missing & 2, miss_alloc = S.missing & 4, miss_upload = S.missing & 8,
         miss_launch = S.missing & 16, miss_readback = S.missing & 32;
    if (miss_prepare) return EW(DEVICE_UNAVAILABLE, PREPARE, NONE);
    if (S.prepare == OMEGA_GPU_BACKEND_STEP_LATCHED) {
        M.engine_blocked = true;
        return EW(UNCERTAIN_COMPLETION_BLOCKED, PREPARE, NONE);
    }
    if (S.prepare != OMEGA_GPU_BACKEND_STEP_OK) return EW(DEVICE_UNAVAILABLE, PREPARE, NONE);
    if (miss_alloc || S.alloc != 0) return EW(ALLOC_FAILED, ALLOC, NONE);
    if (miss_upload || S.upload != 0) return EW(UPLOAD_FAILED, UPLOAD, NONE);
    if (miss_launch) return EW(LAUNCH_REFUSED, LAUNCH, NONE);
    uint32_t w = S.wait == OMEGA_GPU_ENGINE_WAIT_ENGINE_IDLE ? OMEGA_GPU_ENGINE_WAIT_ENGINE_IDLE : OMEGA_GPU_ENGINE_WAIT_KERNEL_DONE;
    switch (S.outcome) {
    case OMEGA_GPU_BACKEND_LAUNCH_DONE: break;
    case OMEGA_GPU_BACKEND_LAUNCH_REFUSED: return EW(LAUNCH_REFUSED, LAUNCH, NONE);
    case OMEGA_GPU_BACKEND_LAUNCH_POLL_REFUSED:
        M.engine_blocked = true;
        return (EngineWant){OMEGA_GPU_ENGINE_POLL_REFUSED, OMEGA_GPU_ENGINE_STEP_WAIT, w, false};
    case OMEGA_GPU_BACKEND_LAUNCH_CANCELLED:
        M.engine_blocked = true;
        return (EngineWant){OMEGA_GPU_ENGINE_COMPLETION_CANCELLED, OMEGA_GPU_ENGINE_STEP_WAIT, w, false};
    case OMEGA_GPU_BACKEND_LAUNCH_FAULT:
        return (EngineWant){OMEGA_GPU_ENGINE_KERNEL_FAULT, OMEGA_GPU_ENGINE_STEP_WAIT, w, false};
    default:
        M.engine_blocked = true;
        return (EngineWant){OMEGA_GPU_ENGINE_COMPLETION_TIMEOUT, OMEGA_GPU_ENGINE_STEP_WAIT, w, false};
    }
    if (miss_readback || S.readback != 0) return EW(READBACK_FAILED, READBACK, NONE);
    return EW(OK, NONE, NONE);
}

/* A device open made by someone else than op_open (the engine's prepare): the model follows. */
static void opened_elsewhere(void) {
    M.open = true;
    M.epoch++;
    M.open_count++;
    M.dev_bytes += PAGE;
    clear_error();
    OmegaGpuSession *s = omega_gpu_session_open(); /* open already: the launch buffer, nothing else */
    REQUIRE(s != NULL, "open after an engine run opened the device returned NULL");
    M.lb = s->launch_buffer;
    CHECK_ERROR("");
}

/* The session backend's run, step by step as the model sees the session (counts what it does). */
static EngineWant predict_session_run(uint32_t n, const OmegaGpuTimeouts *t, int *fork_needed) {
    *fork_needed = 0;
    if (!M.lock) return EW(DEVICE_UNAVAILABLE, PREPARE, NONE);
    if (M.latched) {
        M.engine_blocked = true;
        return EW(UNCERTAIN_COMPLETION_BLOCKED, PREPARE, NONE);
    }
    if (!M.open) {
        if (take_fault(F_FAIL_OPEN)) return EW(DEVICE_UNAVAILABLE, PREPARE, NONE);
        if (take_fault(F_FAIL_ALLOC)) return EW(DEVICE_UNAVAILABLE, PREPARE, NONE);
        *fork_needed = -1; /* opened: the caller records it after the run */
    }
    if (M.chan_dead) return EW(DEVICE_UNAVAILABLE, PREPARE, NONE);
    uint64_t r;
    int got = 0;
    int pools[3];
    /* The three data buffers. The device is open from here (the caller follows it if it opened now). */
    bool was_open = M.open;
    M.open = true;
    for (; got < 3; got++) {
        const char *w = predict_alloc((size_t)n * 4, KIND_DATA, &r);
        if (w[0]) break;
        pools[got] = M.placed;
    }
    uint64_t data_bytes = buffer_bytes((size_t)n * 4, KIND_DATA);
    EngineWant e = EW(OK, NONE, NONE);
    int held = got;
    if (got < 3) {
        e = EW(ALLOC_FAILED, ALLOC, NONE);
    } else if (take_fault(F_FAIL_SYNC)) {
        e = EW(UPLOAD_FAILED, UPLOAD, NONE);
    } else {
        const char *w = predict_alloc(64, KIND_CODE, &r);
        if (w[0]) e = EW(LAUNCH_REFUSED, LAUNCH, NONE);
        else {
            held = 4;
            if (take_fault(F_FAIL_SYNC)) e = EW(LAUNCH_REFUSED, LAUNCH, NONE);
            else if (M.cancel) {
                M.cancel = false;
                e = EW(LAUNCH_REFUSED, LAUNCH, NONE);
            } else {
                uint32_t limit = t->kernel_done_ms ? t->kernel_done_ms : OMEGA_GPU_ENGINE_DEFAULT_WAIT_MS;
                int saved[F_COUNT];
                memcpy(saved, M.faults, sizeof saved);
                int out = predict_submission(RUN_CLEAN, limit, true);
                if (out == OUT_LATCH) {
                    memcpy(M.faults, saved, sizeof saved);
                    M.open = was_open;
                    *fork_needed = 1;
                    return e;
                }
                submission_made();
                if (out == OUT_FAULT) {
                    M.chan_dead = true;
                    e = EW(KERNEL_FAULT, WAIT, KERNEL_DONE);
                } else if (take_fault(F_FAIL_SYNC)) {
                    e = EW(READBACK_FAILED, READBACK, NONE);
                }
            }
        }
    }
    /* Release: everything the run held, data first. */
    M.st.frees += held;
    for (int i = 0; i < (held < 3 ? held : 3); i++) {
        if (pools[i] >= 0) M.chunk_live[pools[i]]--;
        else M.dev_bytes -= data_bytes;
    }
    M.dev_bytes -= held == 4 ? PAGE : 0;
    M.open = was_open;
    return e;
}

static void check_result(const OmegaGpuResult *r, const EngineWant *e, int rc) {
    REQUIRE(r->failure == e->failure && r->step == e->step && r->wait == e->wait,
            "engine failure %u step %u wait %u, model %u %u %u (detail \"%.*s\")", r->failure, r->step, r->wait,
            e->failure, e->step, e->wait, OMEGA_GPU_ENGINE_DETAIL_BYTES, (const char *)r->detail);
    bool ok = e->failure == OMEGA_GPU_ENGINE_OK;
    CHECK_RC(rc, ok ? 0 : -1);
    REQUIRE(r->failure < OMEGA_GPU_ENGINE_FAILURE_COUNT, "failure code %u", r->failure);
    REQUIRE(memchr(r->detail, 0, sizeof r->detail) != NULL, "detail not NUL-terminated");
    REQUIRE(r->states & 1, "INITIAL not entered");
    REQUIRE(r->state == (ok ? OMEGA_GPU_ENGINE_STATE_SUCCESS : OMEGA_GPU_ENGINE_STATE_FAILED), "final state %u", r->state);
    REQUIRE(r->states & (1u << r->state), "the final state's bit is not set");
    REQUIRE(r->states < (1u << OMEGA_GPU_ENGINE_STATE_COUNT), "states %#x", r->states);
    if (ok) {
        REQUIRE(r->states == 0x3ff && r->reached == OMEGA_GPU_ENGINE_STATE_SUCCESS && r->detail[0] == 0,
                "a success with states %#x, reached %u, detail \"%s\"", r->states, r->reached, (const char *)r->detail);
        CHECK_ERROR("");
    } else {
        REQUIRE(r->detail[0] != 0 && !(r->states & (1u << OMEGA_GPU_ENGINE_STATE_SUCCESS)), "a failure without detail");
        REQUIRE(r->reached < OMEGA_GPU_ENGINE_STATE_SUCCESS && (r->states & (1u << r->reached)), "reached %u", r->reached);
        /* last error: "<stage>: <FAILURE NAME>: <rest>" */
        const char *d = (const char *)r->detail, *colon = strstr(d, ": ");
        const char *name = omega_gpu_engine_failure_name(r->failure);
        char expect[512];
        if (colon) snprintf(expect, sizeof expect, "%.*s: %s: %s", (int)(colon - d), d, name, colon + 2);
        else snprintf(expect, sizeof expect, "engine: %s: %s", name, d);
        const char *err = omega_gpu_session_last_error();
        REQUIRE(strcmp(err, expect) == 0, "last error \"%s\", expected \"%s\"", err, expect);
        char step[64];
        snprintf(step, sizeof step, "engine %s: ", omega_gpu_engine_step_name(r->step));
        for (char *c = step; *c; c++) *c = (char)(*c >= 'A' && *c <= 'Z' ? *c + 32 : *c);
        if (r->step != OMEGA_GPU_ENGINE_STEP_VALIDATE || strncmp(d, "execute:", 8) != 0)
            REQUIRE(strncmp(d, step, strlen(step)) == 0, "detail \"%s\" does not name step \"%s\"", d, step);
    }
    /* The times: the clock in force, state by state in order. */
    uint64_t prev = r->started_ns;
    for (int s = 0; s < OMEGA_GPU_ENGINE_STATE_COUNT; s++) {
        bool in = r->states & (1u << s);
        if (M.clock_mode == 2) {
            REQUIRE(r->entered_ns[s] == (in ? M.clock_pinned : 0), "state %d at %llu with the clock pinned at %llu", s,
                    (unsigned long long)r->entered_ns[s], (unsigned long long)M.clock_pinned);
            continue;
        }
        if (!in) {
            REQUIRE(r->entered_ns[s] == 0, "state %d not entered but timed", s);
            continue;
        }
        if (M.clock_mode == 1) REQUIRE(r->entered_ns[s] > prev, "state %d not after the one before", s);
        else REQUIRE(r->entered_ns[s] >= prev, "state %d before the one before", s);
        prev = r->entered_ns[s];
    }
    if (M.clock_mode == 2) REQUIRE(r->started_ns == M.clock_pinned && r->finished_ns == M.clock_pinned, "pinned clock");
    else REQUIRE(r->finished_ns >= prev, "finished before the last state");
}

static void op_execute(void) {
    op_name = "execute";
    static float a[4096], b[4096], out[4096];
    OmegaGpuJob job;
    memset(&job, 0, sizeof job);
    static const uint32_t ns[] = {1, 7, 256, 1000, 4096, 0};
    job.layout = pick(8) ? OMEGA_GPU_LAYOUT_VECTOR_1D : pick_u32();
    job.n = ns[pick(6)];
    job.a = pick(16) ? a : NULL;
    job.b = pick(16) ? b : NULL;
    job.out = pick(16) ? out : NULL;
    static const uint32_t tmo[] = {0, 0, 1000, 100, 1};
    job.timeouts.kernel_done_ms = tmo[pick(5)];
    job.timeouts.engine_idle_ms = tmo[pick(5)];
    job.timeouts.spin_us = pick(4) ? 0 : 50;
    for (uint32_t i = 0; i < job.n; i++) {
        a[i] = (float)(b8() % 200);
        b[i] = (float)i;
        out[i] = -1.0f;
    }
    be_a = a;
    be_b = b;
    bool null_job = pick(32) == 0, null_result = pick(32) == 0;
    OmegaGpuResult r;
    memset(&r, 0xa5, sizeof r);
    clear_error();
    if (null_result) {
        CHECK_RC(omega_gpu_execute(null_job ? NULL : &job, NULL), -1);
        CHECK_ERROR("execute: result is NULL");
        return;
    }
    if (null_job) {
        CHECK_RC(omega_gpu_execute(NULL, &r), -1);
        CHECK_ERROR("execute: job is NULL");
        REQUIRE(r.failure == OMEGA_GPU_ENGINE_INVALID_JOB && r.step == OMEGA_GPU_ENGINE_STEP_VALIDATE &&
                    r.state == OMEGA_GPU_ENGINE_STATE_FAILED,
                "a NULL job's result");
        return;
    }
    EngineWant e;
    int fork_needed = 0;
    int releases = S.releases;
    bool reaches_backend = false;
    if (M.engine_blocked) e = EW(UNCERTAIN_COMPLETION_BLOCKED, GATE, NONE);
    else if (job.layout != OMEGA_GPU_LAYOUT_VECTOR_1D) e = EW(UNSUPPORTED_LAYOUT, VALIDATE, NONE);
    else if (job.n == 0 || !job.a || !job.b || !job.out) e = EW(INVALID_JOB, VALIDATE, NONE);
    else if (M.backend == 1) {
        reaches_backend = true;
        e = predict_custom();
    } else {
        OmegaGpuAllocStats st = M.st;
        uint64_t dev = M.dev_bytes;
        bool chunk[NPOOL];
        int chunk_live[NPOOL];
        memcpy(chunk, M.chunk, sizeof chunk);
        memcpy(chunk_live, M.chunk_live, sizeof chunk_live);
        int faults[F_COUNT];
        memcpy(faults, M.faults, sizeof faults);
        bool cancel = M.cancel;
        e = predict_session_run(job.n, &job.timeouts, &fork_needed);
        if (fork_needed == 1) {
            if (!fork_for_latch()) {
                M.st = st;
                M.dev_bytes = dev;
                memcpy(M.chunk, chunk, sizeof chunk);
                memcpy(M.chunk_live, chunk_live, sizeof chunk_live);
                memcpy(M.faults, faults, sizeof faults);
                M.cancel = cancel;
                in_i = in_n;
                return;
            }
            /* In the child: the run latches, whatever else it says. */
            int rc = omega_gpu_execute(&job, &r);
            CHECK_RC(rc, -1);
            REQUIRE(r.failure == OMEGA_GPU_ENGINE_COMPLETION_TIMEOUT || r.failure == OMEGA_GPU_ENGINE_POLL_REFUSED,
                    "a run predicted to latch failed with %u", r.failure);
            if (!M.open) { /* the run opened the device, then latched: the launch buffer is a page */
                M.open = true;
                M.epoch++;
                M.open_count++;
                M.chan_dead = false;
                memset(&M.lb, 0, sizeof M.lb);
                M.lb.size = PAGE;
            }
            submission_made();
            model_latch(0);
            M.engine_blocked = true;
            /* Its four buffers were parked, not released. */
            for (int i = 0; i < 3; i++) park_one(buffer_bytes((size_t)job.n * 4, KIND_DATA));
            park_one(PAGE);
            REQUIRE(out[0] == -1.0f, "a failed run wrote the output");
            return;
        }
    }
    int rc = omega_gpu_execute(&job, &r);
    check_result(&r, &e, rc);
    if (fork_needed == -1) opened_elsewhere();
    if (M.backend == 1 && reaches_backend) {
        bool released = r.reached >= OMEGA_GPU_ENGINE_STATE_DEVICE_READY && e.step != OMEGA_GPU_ENGINE_STEP_PREPARE &&
                        !(S.missing & 64);
        CHECK_RC(S.releases - releases, released ? 1 : 0);
    }
    if (rc == 0) {
        for (uint32_t i = 0; i < job.n; i++) REQUIRE(out[i] == a[i] + b[i], "out[%u] = %g", i, (double)out[i]);
        REQUIRE(r.diag.backend == (M.backend ? OMEGA_GPU_ENGINE_BACKEND_CUSTOM : OMEGA_GPU_ENGINE_BACKEND_SESSION),
                "diag.backend %u", r.diag.backend);
    } else {
        for (uint32_t i = 0; i < job.n; i++) REQUIRE(out[i] == -1.0f, "a failed run wrote out[%u]", i);
    }
}

/* ----- lock, open, close, hooks ------------------------------------------------------------------------------ */

static void op_lock(void) {
    op_name = "lock";
    /* Taking it twice on one thread waits forever, as the contract says: not a call to make. */
    if (M.lock) return;
    clear_error();
    omega_gpu_session_lock();
    CHECK_ERROR("");
    M.lock = true;
}

static void op_unlock(void) {
    op_name = "unlock";
    clear_error();
    omega_gpu_session_unlock();
    if (M.lock) {
        CHECK_ERROR("");
        M.lock = false;
    } else {
        CHECK_ERROR("lock: unlock from a thread that does not hold the session lock");
    }
}

static void do_open(void) {
    char expect[sizeof want_buf];
    const char *g = gate("open");
    bool opens = false;
    if (g) snprintf(expect, sizeof expect, "%s", g);
    else if (M.latched) snprintf(expect, sizeof expect, "open: refused, the process is latched");
    else if (M.open) expect[0] = 0;
    else if (take_fault(F_FAIL_OPEN)) snprintf(expect, sizeof expect, "open: ");
    else if (take_fault(F_FAIL_ALLOC)) snprintf(expect, sizeof expect, "open: ");
    else {
        expect[0] = 0;
        opens = true;
    }
    clear_error();
    OmegaGpuSession *s = omega_gpu_session_open();
    CHECK_ERROR(expect);
    if (expect[0]) {
        REQUIRE(s == NULL, "a refused open returned a session");
        return;
    }
    REQUIRE(s != NULL, "open returned NULL");
    if (opens) {
        M.open = true;
        M.epoch++;
        M.open_count++;
        M.chan_dead = false;
        M.dev_bytes += PAGE;
        M.lb = s->launch_buffer;
    }
    REQUIRE(s->open_count == M.open_count && s->reserved == 0, "session open_count %u, model %u", s->open_count, M.open_count);
    REQUIRE(same_mem(&s->launch_buffer, &M.lb), "the launch buffer changed while open");
    REQUIRE(M.lb.kind == OMEGA_GPU_HANDLE_BUF_QUEUE && M.lb.size == PAGE && M.lb.cpu != NULL, "launch buffer kind %u size %zu",
            M.lb.kind, M.lb.size);
}

static void op_open(void) {
    op_name = "open";
    do_open();
}

/* What close releases: every buffer of the device, every list's stamp area, the channel's fault. */
static void model_closed(void) {
    for (int i = 0; i < NBUF; i++)
        if (M.buf[i].live) {
            M.st.frees++;
            drop_buf(i);
        }
    M.open = false;
    M.chan_dead = false;
    M.dev_bytes = 0;
    memset(M.chunk, 0, sizeof M.chunk);
    memset(M.chunk_live, 0, sizeof M.chunk_live);
    memset(&M.lb, 0, sizeof M.lb);
}

static bool hook_running_ok = true;

/* An on-close hook: one scripted call, its answer checked against the contract's rules for hooks. */
static void hook_fn(void *ctx) {
    HookCtx *h = ctx;
    const char *saved_name = op_name;
    op_name = "on-close hook";
    REQUIRE(!h->ran, "a hook ran twice");
    REQUIRE(hook_running_ok, "a hook ran outside close");
    h->ran = true;
    REQUIRE(omega_gpu_session_is_open(), "a hook ran with the device closed");
    M.in_hook = true;
    clear_error();
    switch (h->action) {
    case HOOK_FREE:
        if (buf_live(h->target)) {
            OmegaGpuMem m = M.buf[h->target].m;
            do_free(&m);
        }
        break;
    case HOOK_SCRATCH_FREE: {
        int s = h->target % NSCR;
        bool zeroed;
        char expect[sizeof want_buf];
        snprintf(expect, sizeof expect, "%s", predict_free(&M.scr[s].mem, &zeroed));
        omega_gpu_session_scratch_free(&M.scr[s]);
        CHECK_ERROR(expect);
        if (zeroed) {
            M.scr_buf[s] = -1;
            M.scr_res[s] = false;
            M.scr_hw[s] = 0;
        }
        break;
    }
    case HOOK_ALLOC: {
        OmegaGpuMem m;
        CHECK_RC(omega_gpu_session_alloc(16, &m), -1);
        CHECK_ERROR("on close: `alloc` refused inside an on-close hook");
        break;
    }
    case HOOK_LAUNCH: {
        uint32_t w = 0;
        OmegaGpuLaunch L = {0, 64, 1, 1, 1, 1, 1, &w, 1, 1000, 0, 0};
        CHECK_RC(omega_gpu_session_launch(&L, NULL, NULL), -1);
        CHECK_ERROR("on close: `launch` refused inside an on-close hook");
        break;
    }
    case HOOK_LOCK:
        omega_gpu_session_lock(); /* refused instead of waiting forever */
        CHECK_ERROR("on close: `lock` refused inside an on-close hook");
        break;
    case HOOK_UNLOCK:
        omega_gpu_session_unlock();
        CHECK_ERROR("lock: unlock refused: the lock is pinned by close, running its on-close hooks");
        break;
    case HOOK_CLOSE:
        omega_gpu_session_close();
        CHECK_ERROR("lock: close takes the session lock itself");
        break;
    case HOOK_OPEN:
        REQUIRE(omega_gpu_session_open() == NULL, "open inside a hook returned a session");
        CHECK_ERROR("on close: `open` refused inside an on-close hook");
        break;
    case HOOK_CMDLIST_CREATE: {
        OmegaGpuCmdList *p = NULL;
        CHECK_RC(omega_gpu_cmdlist_create(NULL, &p), -1);
        CHECK_ERROR("lock: cmdlist create takes the session lock itself");
        break;
    }
    default:
        CHECK_RC(omega_gpu_session_is_blocked(), 0);
        break;
    }
    M.in_hook = false;
    op_name = saved_name;
}

static void do_close(void) {
    char expect[sizeof want_buf];
    bool runs = false;
    if (M.lock) snprintf(expect, sizeof expect, "lock: close takes the session lock itself: call it without the lock");
    else if (M.latched) snprintf(expect, sizeof expect, "close: refused, the process is latched");
    else {
        expect[0] = 0;
        runs = M.open;
    }
    int hooks = M.nhooks;
    if (runs) {
        for (int i = 0; i < hooks; i++) M.hooks[i].ran = false;
        M.lock = true; /* the hooks run under the lock close takes */
    }
    clear_error();
    hook_running_ok = runs;
    omega_gpu_session_close();
    hook_running_ok = false;
    if (runs) {
        M.lock = false;
        for (int i = 0; i < hooks; i++) REQUIRE(M.hooks[i].ran, "hook %d did not run at close", i);
        M.nhooks = 0;
        /* A hook's own refusals are recorded; close itself records nothing after them. */
        model_closed();
        for (int i = 0; i < NLIST; i++) M.list[i].submitted = M.list[i].live ? M.list[i].submitted : 0;
        if (hooks == 0) CHECK_ERROR("");
        return;
    }
    CHECK_ERROR(expect);
}

static void op_close(void) {
    op_name = "close";
    do_close();
}

static void op_on_close(void) {
    op_name = "on_close";
    clear_error();
    if (pick(16) == 0) {
        CHECK_RC(omega_gpu_session_on_close(NULL, NULL), -1);
        CHECK_ERROR("on close: hook is NULL");
        return;
    }
    if (M.nhooks >= NHOOK) {
        static HookCtx spare;
        CHECK_RC(omega_gpu_session_on_close(hook_fn, &spare), -1);
        CHECK_ERROR("on close: at most 8 hooks");
        return;
    }
    HookCtx *h = &M.hooks[M.nhooks];
    h->action = pick(HOOK_KINDS);
    h->target = pick(NBUF);
    h->ran = false;
    CHECK_RC(omega_gpu_session_on_close(hook_fn, h), 0);
    CHECK_ERROR("");
    M.nhooks++;
}

/* ----- settings, queries, errors, host memory, faults ----------------------------------------------------------- */

static void op_cancel(void) {
    op_name = "cancel";
    clear_error();
    omega_gpu_session_cancel();
    CHECK_ERROR("");
    M.cancel = true;
}

static void op_spin(void) {
    op_name = "set_spin_us";
    static const uint32_t t[] = {0, 0, 1, 50, 1000, OMEGA_GPU_SESSION_MAX_SPIN_US, OMEGA_GPU_SESSION_MAX_SPIN_US + 1,
                                 0xffffffffu};
    uint32_t us = t[pick(8)];
    clear_error();
    int rc = omega_gpu_session_set_spin_us(us);
    if (us > OMEGA_GPU_SESSION_MAX_SPIN_US) {
        CHECK_RC(rc, -1);
        CHECK_ERROR("set spin: ");
    } else {
        CHECK_RC(rc, 0);
        CHECK_ERROR("");
        M.spin_us = us;
    }
}

static void op_query(void) {
    op_name = "queries";
    clear_error();
    CHECK_RC(omega_runtime_version(), OMEGA_RUNTIME_API_VERSION);
    const char *name = omega_gpu_session_platform();
    REQUIRE(name && strcmp(name, M.platform) == 0, "platform \"%s\", model \"%s\"", name ? name : "(NULL)", M.platform);
    CHECK_RC(omega_gpu_session_submit_prefix_words(), 0x210 / 4);
    CHECK_RC(omega_gpu_session_completion_mode(), M.spin_us ? OMEGA_GPU_COMPLETION_SPIN_POLL : OMEGA_GPU_COMPLETION_SLEEP_POLL);
    uint64_t now = omega_gpu_session_now_ns();
    REQUIRE(now > M.now_ns || M.now_ns == 0, "the platform clock went from %llu to %llu", (unsigned long long)M.now_ns,
            (unsigned long long)now);
    M.now_ns = now;
    size_t sz = pick_size();
    uint64_t r = buffer_bytes(sz, KIND_CODE);
    CHECK_RC(omega_gpu_code_alloc_bytes(sz), r);
    if (r == 0) CHECK_ERROR("code alloc: ");
    else CHECK_ERROR("");
    clear_error();
    OmegaGpuDeviceInfo info;
    memset(&info, 0xa5, sizeof info);
    if (pick(8) == 0) {
        CHECK_RC(omega_gpu_device_query(NULL), -1);
        CHECK_ERROR("device query: out is NULL");
    } else if (M.open) {
        CHECK_RC(omega_gpu_device_query(&info), 0);
        REQUIRE(info.arch_major == 9 && info.arch_minor == 0 && info.sm_count == 132 && info.memory_bytes == SIM_MEMORY &&
                    memchr(info.name, 0, sizeof info.name) && memchr(info.driver_version, 0, sizeof info.driver_version) &&
                    memchr(info.pci, 0, sizeof info.pci) && info.reserved == 0,
                "device info of the simulator");
        CHECK_ERROR("");
    } else {
        CHECK_RC(omega_gpu_device_query(&info), -1);
        CHECK_ERROR("device query: device not open");
    }
    clear_error();
    OmegaGpuBufferHandle h = M.lb.handle;
    if (coin()) {
        int b = pick(NBUF);
        h = M.buf[b].m.handle;
        CHECK_RC(omega_gpu_session_is_parked(h), h.generation && M.buf[b].parked && M.buf[b].live);
    } else if (coin()) {
        h.index = b32();
        h.generation = 0x100000u + b32() % 0x7ff00000u;
        CHECK_RC(omega_gpu_session_is_parked(h), 0);
    } else {
        CHECK_RC(omega_gpu_session_is_parked(h), M.latched && h.generation != 0);
    }
    omega_gpu_session_parked(NULL);
    CHECK_ERROR("parked: out is NULL");
    omega_gpu_session_alloc_stats(NULL);
    CHECK_ERROR("alloc stats: out is NULL");
}

static void op_names(void) {
    op_name = "names";
    static const char *const barrier[] = {"OMEGA_GPU_CMDLIST_BARRIER_DEFAULT", "OMEGA_GPU_CMDLIST_BARRIER_NONE"};
    static const char *const failures[] = {
        "OMEGA_GPU_ENGINE_OK", "OMEGA_GPU_ENGINE_INVALID_JOB", "OMEGA_GPU_ENGINE_UNSUPPORTED_LAYOUT",
        "OMEGA_GPU_ENGINE_DEVICE_UNAVAILABLE", "OMEGA_GPU_ENGINE_ALLOC_FAILED", "OMEGA_GPU_ENGINE_UPLOAD_FAILED",
        "OMEGA_GPU_ENGINE_LAUNCH_REFUSED", "OMEGA_GPU_ENGINE_COMPLETION_TIMEOUT", "OMEGA_GPU_ENGINE_POLL_REFUSED",
        "OMEGA_GPU_ENGINE_COMPLETION_CANCELLED", "OMEGA_GPU_ENGINE_KERNEL_FAULT", "OMEGA_GPU_ENGINE_READBACK_FAILED",
        "OMEGA_GPU_ENGINE_UNCERTAIN_COMPLETION_BLOCKED"};
    static const char *const states[] = {"INITIAL",   "VALIDATED",  "DEVICE_READY", "ALLOCATED", "UPLOADED", "SUBMITTED",
                                         "KERNEL_DONE", "IDLE",     "READ_BACK",    "SUCCESS",   "FAILED"};
    static const char *const steps[] = {"NONE", "GATE", "VALIDATE", "PREPARE", "ALLOC", "UPLOAD", "LAUNCH", "WAIT", "READBACK"};
    static const char *const waits[] = {"NONE", "KERNEL_DONE", "ENGINE_IDLE"};
    static const char *const refusals[] = {"OMEGA_GPU_PLAT_ABI_MAJOR", "OMEGA_GPU_PLAT_ABI_MINOR",
                                           "OMEGA_GPU_PLAT_MISSING_SERVICE", "OMEGA_GPU_PLAT_ZERO_LENGTH",
                                           "OMEGA_GPU_PLAT_NO_RIGHTS", "OMEGA_GPU_PLAT_POLLED_CACHED",
                                           "OMEGA_GPU_PLAT_EXEC_WRITABLE", "OMEGA_GPU_PLAT_OVERFLOW",
                                           "OMEGA_GPU_PLAT_CACHED_WRITABLE", "OMEGA_GPU_PLAT_BAD_VALUE"};
    uint32_t v = pick_u32() % 2 ? pick(16) : pick_u32();
#define NAME_IS(got, table, unknown)                                                                            \
    do {                                                                                                        \
        const char *g_ = (got), *w_ = v < sizeof table / sizeof table[0] ? table[v] : (unknown);                \
        REQUIRE(g_ && strcmp(g_, w_) == 0, "name of %u is \"%s\", expected \"%s\"", v, g_ ? g_ : "(NULL)", w_); \
    } while (0)
    NAME_IS(omega_gpu_cmdlist_barrier_name(v), barrier, "OMEGA_GPU_CMDLIST_BARRIER_UNKNOWN");
    NAME_IS(omega_gpu_engine_failure_name(v), failures, "OMEGA_GPU_ENGINE_UNKNOWN_FAILURE");
    NAME_IS(omega_gpu_engine_state_name(v), states, "UNKNOWN_STATE");
    NAME_IS(omega_gpu_engine_step_name(v), steps, "UNKNOWN_STEP");
    NAME_IS(omega_gpu_engine_wait_name(v), waits, "UNKNOWN_WAIT");
    {
        int c = (int)v;
        const char *g = omega_gpu_platform_refusal_name(c);
        const char *w = c >= 1 && c <= 10 ? refusals[c - 1] : "unknown";
        REQUIRE(g && strcmp(g, w) == 0, "refusal name of %d is \"%s\"", c, g ? g : "(NULL)");
    }
#undef NAME_IS
}

static void op_set_error(void) {
    op_name = "set_error";
    char text[80];
    int n = pick(sizeof text - 1);
    for (int i = 0; i < n; i++) text[i] = (char)(32 + pick(95));
    text[n] = 0;
    bool null = pick(4) == 0;
    omega_gpu_session_set_error(null ? NULL : text);
    const char *e = omega_gpu_session_last_error();
    REQUIRE(strcmp(e, null ? "" : text) == 0, "set_error then last_error: \"%s\"", e);
}

static void op_host(void) {
    op_name = "host memory";
    clear_error();
    if (M.nhost > 0 && coin()) {
        omega_gpu_host_free(M.host[--M.nhost]);
        CHECK_ERROR("");
        return;
    }
    if (pick(8) == 0) {
        omega_gpu_host_free(NULL);
        CHECK_ERROR("");
        return;
    }
    static const size_t sizes[] = {0, 1, 24, 4096, 1 << 20};
    bool calloc_ = coin();
    size_t count = coin() ? sizes[pick(5)] : pick_size(), size = coin() ? 1 : pick_size();
    if (M.nhost >= 8) return;
    size_t bytes = calloc_ ? count * size : count;
    bool overflow = calloc_ && size && count > SIZE_MAX / size;
    /* Huge sizes really are asked of malloc (and a sanitizer's malloc reports them): not here. */
    if (!overflow && bytes > (8u << 20)) return;
    void *p = calloc_ ? omega_gpu_host_calloc(count, size) : omega_gpu_host_alloc(count);
    if (overflow) {
        REQUIRE(p == NULL, "calloc of an overflowing product");
        CHECK_ERROR("host alloc: ");
        return;
    }
    if (M.table_no_host) {
        REQUIRE(p == NULL, "host alloc succeeded where it cannot");
        CHECK_ERROR("host alloc: ");
        return;
    }
    REQUIRE(p != NULL, "host alloc of %zu bytes failed", bytes);
    CHECK_ERROR("");
    REQUIRE(((uintptr_t)p & 7) == 0, "host memory not aligned for any scalar");
    if (calloc_)
        for (size_t i = 0; i < bytes; i += 4093) REQUIRE(((uint8_t *)p)[i] == 0, "calloc memory not zeroed");
    if (bytes) memset(p, 0x77, bytes < 4096 ? bytes : 4096);
    M.host[M.nhost++] = p;
}

static void op_inject(void) {
    op_name = "sim_inject";
    int f = pick(4) ? 1 + (int)pick(6) : (int)pick_u32();
    clear_error();
    int rc = omega_gpu_sim_inject(f);
    if (f >= 1 && f <= 6 && !M.table) {
        CHECK_RC(rc, 0);
        CHECK_ERROR("");
        M.faults[f]++;
    } else {
        CHECK_RC(rc, -1);
        CHECK_ERROR("sim inject: ");
    }
}

/* ----- the platform table ------------------------------------------------------------------------------------- */

enum { MUT_NONE, MUT_ABI_MAJOR, MUT_ABI_MINOR, MUT_DROP_SERVICE, MUT_UNKNOWN_SERVICE, MUT_CODE_FORMAT, MUT_PAGE,
       MUT_PARAM_BASE, MUT_NULL_FUNCTION, MUT_LIMITS, MUT_KINDS };

static const uint32_t SERVICES[] = {OMEGA_GPU_SVC_CLOCK, OMEGA_GPU_SVC_LOCK, OMEGA_GPU_SVC_DEVICE_MEM, OMEGA_GPU_SVC_SUBMIT,
                                    OMEGA_GPU_SVC_POLL, OMEGA_GPU_SVC_HOST_MEM, OMEGA_GPU_SVC_SYNC, OMEGA_GPU_SVC_DEVICE};

/* Clears one function of service `svc` in `t`. */
static void null_function(OmegaGpuPlatform *t, int svc, int which) {
    switch (svc) {
    case 0: if (which & 1) t->clock.now_ns = NULL; else t->clock.sleep_us = NULL; break;
    case 1: if (which % 3 == 0) t->lock.lock = NULL; else if (which % 3 == 1) t->lock.try_lock = NULL; else t->lock.unlock = NULL; break;
    case 2: if (which & 1) t->memory.alloc = NULL; else t->memory.free = NULL; break;
    case 3: if (which & 1) t->submit.submit = NULL; else t->submit.in_flight_buffers = NULL; break;
    case 4: if (which % 3 == 0) t->poll.poll = NULL; else if (which % 3 == 1) t->poll.timestamp = NULL; else t->poll.channel_fault = NULL; break;
    case 5: if (which % 3 == 0) t->host.alloc = NULL; else if (which % 3 == 1) t->host.calloc = NULL; else t->host.free = NULL; break;
    case 6: if (which & 1) t->sync.to_gpu = NULL; else t->sync.to_cpu = NULL; break;
    default: if (which & 1) t->device.open = NULL; else t->device.close = NULL; break;
    }
}

/* The simulator's table with at most one thing broken; `*svc` is the service a mutation touched. */
static OmegaGpuPlatform make_table(int mut, int *svc) {
    OmegaGpuPlatform t = omega_gpu_platform_sim();
    REQUIRE(t.abi_major == OMEGA_GPU_PLATFORM_ABI_MAJOR && t.abi_minor >= OMEGA_GPU_PLATFORM_ABI_MINOR &&
                t.caps.services == 0xff && t.caps.code_format == OMEGA_GPU_CODE_SIM_IMAGE && t.caps.page_bytes == PAGE &&
                t.release != NULL,
            "the simulator's table");
    *svc = pick(8);
    switch (mut) {
    case MUT_ABI_MAJOR: t.abi_major += 1 + pick(3); break;
    case MUT_ABI_MINOR: t.abi_minor = pick(OMEGA_GPU_PLATFORM_ABI_MINOR); break;
    case MUT_DROP_SERVICE: t.caps.services &= ~SERVICES[*svc]; break;
    case MUT_UNKNOWN_SERVICE: t.caps.services |= 1u << (8 + pick(24)); break;
    case MUT_CODE_FORMAT: t.caps.code_format = 2 + pick(100); break;
    case MUT_PAGE: t.caps.page_bytes = coin() ? 0 : 3000; break;
    case MUT_PARAM_BASE: t.caps.param_base |= 1 + pick(3); break;
    case MUT_NULL_FUNCTION: null_function(&t, *svc, pick(6)); break;
    case MUT_LIMITS:
        if (coin()) t.caps.launch.max_block[pick(3)] = 0;
        else t.caps.launch.reserved_shared_bytes = t.caps.launch.max_shared_bytes + 1;
        break;
    default: break;
    }
    return t;
}

/* What omega_gpu_platform_check_for(t, needed) answers for mutation `mut`. */
static int predict_check(int mut, int svc, uint32_t needed) {
    if (needed & ~0xffu) return OMEGA_GPU_PLAT_BAD_VALUE;
    switch (mut) {
    case MUT_UNKNOWN_SERVICE: return OMEGA_GPU_PLAT_BAD_VALUE;
    case MUT_ABI_MAJOR: return OMEGA_GPU_PLAT_ABI_MAJOR;
    case MUT_ABI_MINOR: return OMEGA_GPU_PLAT_ABI_MINOR;
    case MUT_DROP_SERVICE: return (needed & SERVICES[svc]) ? OMEGA_GPU_PLAT_MISSING_SERVICE : 0;
    case MUT_CODE_FORMAT:
    case MUT_PAGE:
    case MUT_PARAM_BASE:
    case MUT_LIMITS: return OMEGA_GPU_PLAT_BAD_VALUE;
    case MUT_NULL_FUNCTION: return OMEGA_GPU_PLAT_MISSING_SERVICE;
    default: return 0;
    }
}

static void op_platform_checks(void) {
    op_name = "platform checks";
    int mut = pick(MUT_KINDS), svc;
    OmegaGpuPlatform t = make_table(mut, &svc);
    uint32_t needed = pick(4) ? (uint32_t)OMEGA_GPU_SVC_SESSION : pick(3) ? (uint32_t)b8() : pick_u32();
    clear_error();
    int want_c = predict_check(mut, svc, needed);
    CHECK_RC(omega_gpu_platform_check_for(&t, needed), want_c);
    CHECK_ERROR(want_c ? "platform: " : "");
    if (want_c == OMEGA_GPU_PLAT_MISSING_SERVICE) CHECK_ERROR("platform: OMEGA_GPU_PLAT_MISSING_SERVICE: OMEGA_GPU_SVC_");
    clear_error();
    int want_s = predict_check(mut, svc, OMEGA_GPU_SVC_SESSION);
    CHECK_RC(omega_gpu_platform_check(&t), want_s);
    CHECK_ERROR(want_s ? "platform: " : "");
    clear_error();
    int want_n = mut == MUT_ABI_MAJOR || mut == MUT_ABI_MINOR || (mut == MUT_DROP_SERVICE && !(needed & ~0xffu))
                     ? predict_check(mut, svc, needed)
                     : (needed & ~0xffu) ? OMEGA_GPU_PLAT_BAD_VALUE : 0;
    int got_n = omega_gpu_platform_negotiate(&t, needed);
    CHECK_RC(got_n, want_n);
    CHECK_ERROR(want_n ? "platform: " : "");
    clear_error();
    CHECK_RC(omega_gpu_platform_check(NULL), -1);
    CHECK_ERROR("platform check: p is NULL");
    CHECK_RC(omega_gpu_platform_negotiate(NULL, needed), -1);
    CHECK_ERROR("platform negotiate: p is NULL");
    t.release(t.ctx); /* never installed: the maker releases it */

    /* A buffer descriptor: the contract's rules in their order. */
    OmegaGpuBufferDesc d;
    static const uint64_t bytes[] = {0, 1, 4096, 1ull << 48, (1ull << 48) + 1, UINT64_MAX};
    d.bytes = bytes[pick(6)];
    d.rights = pick(4) ? pick(64) : pick_u32();
    d.cache = pick(4) ? pick(2) : pick_u32();
    d.kind = pick(4) ? 1 + pick(3) : pick_u32();
    d.reserved = pick(4) ? 0 : b32();
    int w;
    if (d.rights > 63 || d.cache > 1 || d.kind < 1 || d.kind > 3) w = OMEGA_GPU_PLAT_BAD_VALUE;
    else if (d.bytes == 0) w = OMEGA_GPU_PLAT_ZERO_LENGTH;
    else if (d.bytes > (1ull << 48)) w = OMEGA_GPU_PLAT_OVERFLOW;
    else if (d.rights == 0) w = OMEGA_GPU_PLAT_NO_RIGHTS;
    else if ((d.rights & OMEGA_GPU_RIGHT_HOST_POLLED) && d.cache != OMEGA_GPU_CACHE_UNCACHED) w = OMEGA_GPU_PLAT_POLLED_CACHED;
    else if ((d.rights & OMEGA_GPU_RIGHT_GPU_EXEC) && (d.rights & OMEGA_GPU_RIGHT_GPU_WRITE)) w = OMEGA_GPU_PLAT_EXEC_WRITABLE;
    else if (d.cache == OMEGA_GPU_CACHE_CACHED && (d.rights & (OMEGA_GPU_RIGHT_GPU_WRITE | OMEGA_GPU_RIGHT_HOST_POLLED)))
        w = OMEGA_GPU_PLAT_CACHED_WRITABLE;
    else w = 0;
    clear_error();
    CHECK_RC(omega_gpu_platform_check_buffer(&d), w);
    CHECK_ERROR(w ? "platform: " : "");
    CHECK_RC(omega_gpu_platform_check_buffer(NULL), -1);
    CHECK_ERROR("platform check: d is NULL");
}

/* Installs a platform: a built-in by name, or the simulator's table (whole or broken) under a name. */
static void op_set_platform(void) {
    op_name = "set_platform";
    int c = pick(8);
    char expect[sizeof want_buf];
    clear_error();
    if (c <= 2) {
        static const char *const names[] = {"sim", "sim", "nvidia", "bogus", "", "SIM", NULL};
        const char *name = names[pick(7)];
        if (name && strcmp(name, "nvidia") == 0 && have_nvidia_device) name = "sim";
        const char *g = gate("set platform");
        bool ok = false;
        if (!name) snprintf(expect, sizeof expect, "set platform: name is NULL");
        else if (strcmp(name, "sim") != 0) snprintf(expect, sizeof expect, "platform: ");
        else if (g) snprintf(expect, sizeof expect, "%s", g);
        else if (M.latched) snprintf(expect, sizeof expect, "set platform: refused, the process is latched");
        else if (M.open) snprintf(expect, sizeof expect, "set platform: close the device first");
        else {
            expect[0] = 0;
            ok = true;
        }
        int rc = omega_gpu_session_set_platform(name, NULL);
        CHECK_ERROR(expect);
        CHECK_RC(rc, ok ? 0 : -1);
        if (ok) {
            M.table = M.table_no_host = false;
            snprintf(M.platform, sizeof M.platform, "sim");
            memset(M.faults, 0, sizeof M.faults);
            M.now_ns = 0;
        }
        return;
    }
    static const char *const names[] = {"fuzz-sim", "fuzz-sim", "other_table", "sim", "nvidia", "", "has space",
                                        "0123456789012345678901234567890123456789012345678901234567890123"};
    const char *name = names[pick(8)];
    int mut = pick(3) ? MUT_NONE : pick(MUT_KINDS), svc;
    OmegaGpuPlatform t = make_table(mut, &svc);
    bool no_host = mut == MUT_DROP_SERVICE && SERVICES[svc] == OMEGA_GPU_SVC_HOST_MEM;
    int chk = predict_check(mut, svc, OMEGA_GPU_SVC_SESSION);
    const char *g = gate("set platform");
    bool ok = false;
    if (!strcmp(name, "sim") || !strcmp(name, "nvidia")) snprintf(expect, sizeof expect, "set platform: `%s` is a built-in", name);
    else if (!name[0] || strchr(name, ' ') || strlen(name) > 63) snprintf(expect, sizeof expect, "set platform: a table's name");
    else if (chk) snprintf(expect, sizeof expect, "platform: ");
    else if (g) snprintf(expect, sizeof expect, "%s", g);
    else if (M.latched) snprintf(expect, sizeof expect, "set platform: refused, the process is latched");
    else if (M.open) snprintf(expect, sizeof expect, "set platform: close the device first");
    else {
        expect[0] = 0;
        ok = true;
    }
    int rc = omega_gpu_session_set_platform(name, &t);
    CHECK_ERROR(expect);
    CHECK_RC(rc, ok ? 0 : -1);
    if (!ok) {
        t.release(t.ctx); /* refused: still the maker's */
        return;
    }
    M.table = true;
    M.table_no_host = no_host;
    snprintf(M.platform, sizeof M.platform, "%s", name);
    memset(M.faults, 0, sizeof M.faults);
    M.now_ns = 0;
}

/* ----- the handle table --------------------------------------------------------------------------------------- */

static void op_handles(void) {
    op_name = "handle table";
    enum { CAP = 6 };
    static uint32_t gens[CAP];
    static void *vals[CAP];
    static OmegaGpuHandleTable t;
    static bool made;
    static uint32_t mgen[CAP];
    static void *mval[CAP];
    static OmegaGpuBufferHandle issued[16];
    static int nissued;
    static int cookie[8];
    uint32_t cap = 1 + pick(CAP);
    if (!made || pick(8) == 0) {
        switch (pick(6)) {
        case 0: CHECK_RC(omega_gpu_handles_init(NULL, gens, vals, cap), OMEGA_GPU_HANDLE_ERR_NULL); return;
        case 1: CHECK_RC(omega_gpu_handles_init(&t, NULL, vals, cap), OMEGA_GPU_HANDLE_ERR_NULL); return;
        case 2: CHECK_RC(omega_gpu_handles_init(&t, gens, vals, 0), OMEGA_GPU_HANDLE_ERR_NULL); return;
        default: break;
        }
        CHECK_RC(omega_gpu_handles_init(&t, gens, vals, cap), 0);
        REQUIRE(t.capacity == cap && t.live == 0, "init: capacity %u live %u", t.capacity, t.live);
        for (uint32_t i = 0; i < CAP; i++) {
            mgen[i] = 1;
            mval[i] = NULL;
        }
        made = true;
        nissued = 0;
    }
    int ops = 1 + pick(12);
    for (int k = 0; k < ops; k++) {
        int c = pick(4);
        if (c == 0) {
            void *v = coin() || pick(8) ? &cookie[pick(8)] : NULL;
            OmegaGpuBufferHandle h = {9, 9};
            bool null_out = pick(16) == 0;
            int rc = omega_gpu_handles_open(&t, v, null_out ? NULL : &h);
            uint32_t slot = 0;
            while (slot < t.capacity && mval[slot]) slot++;
            if (null_out || !v) {
                CHECK_RC(rc, OMEGA_GPU_HANDLE_ERR_NULL);
                if (!null_out) REQUIRE(h.index == 0 && h.generation == 0, "a refused open left *out");
            } else if (slot == t.capacity) {
                CHECK_RC(rc, OMEGA_GPU_HANDLE_ERR_FULL);
                REQUIRE(h.index == 0 && h.generation == 0, "a full open left *out");
            } else {
                CHECK_RC(rc, 0);
                REQUIRE(h.index == slot && h.generation == mgen[slot], "open gave {%u, %u}, model {%u, %u}", h.index,
                        h.generation, slot, mgen[slot]);
                mval[slot] = v;
                issued[nissued++ % 16] = h;
            }
        } else {
            OmegaGpuBufferHandle h;
            if (nissued && pick(4)) h = issued[pick(nissued < 16 ? nissued : 16)];
            else {
                h.index = pick(4) ? pick(CAP + 2) : pick_u32();
                h.generation = pick(4) ? pick(4) : pick_u32();
            }
            int want_rc;
            if (h.generation == 0) want_rc = OMEGA_GPU_HANDLE_ERR_ZERO;
            else if (h.index >= t.capacity) want_rc = OMEGA_GPU_HANDLE_ERR_OUT_OF_RANGE;
            else if (mgen[h.index] != h.generation || !mval[h.index]) want_rc = OMEGA_GPU_HANDLE_ERR_STALE;
            else want_rc = 0;
            void *got = (void *)1;
            bool null_value = pick(8) == 0;
            int rc = c == 1 ? omega_gpu_handles_close(&t, h, null_value ? NULL : &got)
                            : omega_gpu_handles_check(&t, h, null_value ? NULL : &got);
            CHECK_RC(rc, want_rc);
            if (!null_value) REQUIRE(got == (want_rc ? NULL : mval[h.index]), "the value behind a handle");
            if (c == 1 && want_rc == 0) {
                mval[h.index] = NULL;
                mgen[h.index] = mgen[h.index] + 1 ? mgen[h.index] + 1 : 1;
            }
        }
        uint32_t live = 0;
        for (uint32_t i = 0; i < t.capacity; i++) live += mval[i] != NULL;
        CHECK_RC(t.live, live);
    }
    OmegaGpuBufferHandle h = {0, 1};
    CHECK_RC(omega_gpu_handles_check(NULL, h, NULL), OMEGA_GPU_HANDLE_ERR_NULL);
    CHECK_RC(omega_gpu_handles_close(NULL, h, NULL), OMEGA_GPU_HANDLE_ERR_NULL);
    CHECK_RC(omega_gpu_handles_open(NULL, &cookie[0], &h), OMEGA_GPU_HANDLE_ERR_NULL);
}

/* ----- compound steps ------------------------------------------------------------------------------------------ */

/* Lock and open in one step, so inputs reach an open device quickly. */
static void op_session_up(void) {
    op_name = "lock+open";
    if (!M.lock) op_lock();
    op_name = "lock+open";
    do_open();
}

/* ----- the driver ------------------------------------------------------------------------------------------------ */

typedef void (*Op)(void);
static const Op OPS[] = {
    op_lock,          op_unlock,          op_open,         op_close,         op_alloc,          op_alloc,
    op_free,          op_free,            op_sync,         op_roundtrip,     op_scratch,        op_scratch,
    op_kernel_load,   op_kernel_load,     op_launch,       op_launch,        op_launch,         op_cancel,
    op_spin,          op_query,           op_names,        op_set_error,     op_host,           op_inject,
    op_inject,        op_set_platform,    op_on_close,     op_cmdlist_create, op_cmdlist_free,  op_cmdlist_query,
    op_cmdlist_add,   op_cmdlist_add,     op_cmdlist_mark, op_cmdlist_submit, op_cmdlist_submit, op_execute,
    op_execute,       op_engine_setup,    op_platform_checks, op_handles,    op_session_up,     op_session_up,
};
enum { N_OPS = sizeof OPS / sizeof OPS[0], MAX_OPS = 256 };

static bool initialized;

static void init_once(void) {
    initialized = true;
    setenv("OMEGA_PLATFORM", "sim", 1);
    have_nvidia_device = access("/dev/nvidiactl", F_OK) == 0;
    setup_counter_sharing();
    /* The process's platform is the simulator from the first call on. */
    const char *p = omega_gpu_session_platform();
    REQUIRE(p && strcmp(p, "sim") == 0, "the platform is \"%s\", not the simulator", p ? p : "(NULL)");
    REQUIRE(!omega_gpu_session_is_blocked(), "the process starts latched");
}

/* The model of a fresh input: nothing open, held or pending; the process-wide counters as they are. */
static void begin_input(void) {
    memset(&M, 0, sizeof M);
    M.open_count = omega_gpu_session_open_count();
    omega_gpu_session_alloc_stats(&M.st);
    M.sequence = -1;
    snprintf(M.platform, sizeof M.platform, "sim");
    for (int i = 0; i < NSCR; i++) M.scr_buf[i] = -1;
    for (int i = 0; i < NKERN; i++) M.kern_buf[i] = -1;
    counter_clock_value = 0;
    parent_done = false;
    op_index = 0;
    op_name = "begin";
    check_globals();
}

/* Between inputs: everything an input may leave is undone, so the next starts where this one did. */
static void reset(void) {
    op_name = "reset";
    op_index = -1;
    if (M.lock) omega_gpu_session_unlock();
    for (int i = 0; i < NLIST; i++)
        if (M.list[i].live) CHECK_RC(omega_gpu_cmdlist_free(M.list[i].p), 0);
    /* Hooks left registered run at these closes, doing nothing more. */
    for (int i = 0; i < NHOOK; i++) {
        M.hooks[i].action = HOOK_NOTHING;
        M.hooks[i].ran = false;
    }
    hook_running_ok = true;
    M.in_hook = false;
    omega_gpu_session_close();
    omega_gpu_session_lock();
    CHECK_RC(omega_gpu_session_set_platform("sim", NULL), 0);
    REQUIRE(omega_gpu_session_open() != NULL, "reset: open");
    if (M.cancel) {
        /* A cancel still pending is used up by a launch that is refused before submit. */
        OmegaGpuMem code;
        CHECK_RC(omega_gpu_session_alloc_code(16, &code), 0);
        uint32_t w = 0;
        OmegaGpuLaunch L = {code.va, 64, 1, 1, 1, 1, 1, &w, 1, 1000, 0, 0};
        CHECK_RC(omega_gpu_session_launch(&L, NULL, NULL), OMEGA_GPU_SESSION_CANCELLED);
        omega_gpu_session_free(&code);
    }
    omega_gpu_session_unlock();
    omega_gpu_session_close();
    hook_running_ok = false;
    for (int i = 0; i < M.nhost; i++) omega_gpu_host_free(M.host[i]);
    CHECK_RC(omega_gpu_engine_set_backend(NULL), 0);
    omega_gpu_engine_set_clock(NULL);
    omega_gpu_engine_test_reset_block();
    CHECK_RC(omega_gpu_session_set_spin_us(0), 0);
    REQUIRE(!omega_gpu_session_is_open() && !omega_gpu_session_is_blocked(), "reset left the device open or latched");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!initialized) init_once();
    begin_input();
    tally->inputs++;
    in_p = data;
    in_n = size;
    in_i = 0;
    for (op_index = 0; in_i < in_n && op_index < MAX_OPS; op_index++) {
        uint8_t c = b8();
        OPS[c % N_OPS]();
        tally->ops++;
        if (M.in_child) tally->child_ops++;
        if (M.latched) tally->latched_ops++;
        trace("done: \"%s\"", omega_gpu_session_last_error());
        if (parent_done) break;
        check_globals();
    }
    if (M.in_child) child_exit();
    reset();
    return 0;
}
