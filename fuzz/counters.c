/* Where the coverage counters are: the bounds of the `__sancov_cntrs` section, which holds the inline 8-bit
 * counters of every instrumented module (the harness and libomega.a). fuzz/run.sh compiles this file
 * without coverage instrumentation: in an instrumented file these declarations would clash with the ones
 * the coverage pass makes itself, and its module would register no counters at all. */
#include <stddef.h>
#include <stdint.h>

extern uint8_t __start___sancov_cntrs[] __attribute__((weak, visibility("hidden")));
extern uint8_t __stop___sancov_cntrs[] __attribute__((weak, visibility("hidden")));

uint8_t *fuzz_counters(size_t *len) {
    if (!__start___sancov_cntrs || __stop___sancov_cntrs <= __start___sancov_cntrs) {
        *len = 0;
        return NULL;
    }
    *len = (size_t)(__stop___sancov_cntrs - __start___sancov_cntrs);
    return __start___sancov_cntrs;
}
