/* The fuzz harness's shared declarations (fuzz/README.md, docs/testing.md "Fuzzing the C layer").
 *
 * One input is a byte string decoded into a sequence of calls of the C layer; a shadow model predicts
 * every return code, every stage text, the counters and the latch, and any difference aborts the process
 * (a finding). The harness is built two ways from the same sources:
 * - with clang `-fsanitize=fuzzer,address` against a coverage-instrumented `libomega.a` (fuzz/run.sh):
 *   libFuzzer drives it;
 * - with any C compiler and `fuzz/replay.c`'s `main` against the ordinary library (tests/fuzz_replay.rs):
 *   every file of the corpus and of the regressions is replayed by `cargo test`.
 */
#ifndef OMEGA_FUZZ_HARNESS_H
#define OMEGA_FUZZ_HARNESS_H

#include <stddef.h>
#include <stdint.h>

/* Runs one input (libFuzzer's entry point; the replay driver calls it too). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Set by the replay driver: print every call as it is made (FUZZ_TRACE=1). */
extern int fuzz_trace;

#endif
