# The fuzz target over the C layer: fuzz/harness.c and its shadow model, libFuzzer with ASan on the
# simulator (docs/testing.md, "Fuzzing the C layer"). Needs clang-14 and libclang-rt-14-dev.
.PHONY: fuzz fuzz-long fuzz-replay fuzz-merge

FUZZ_SECONDS ?= 60
FUZZ_LONG_SECONDS ?= 1800

# Build the fuzz target, replay fuzz/corpus and fuzz/regressions, then fuzz for FUZZ_SECONDS (60; CI).
fuzz:
	fuzz/run.sh $(FUZZ_SECONDS)

# The same for FUZZ_LONG_SECONDS (1800) at the lowest priority, for a machine others share.
fuzz-long:
	nice -n 19 fuzz/run.sh $(FUZZ_LONG_SECONDS)

# Build the fuzz target and replay fuzz/corpus and fuzz/regressions only.
fuzz-replay:
	fuzz/run.sh --replay

# Fold the inputs of the last runs (target/fuzz/corpus) into fuzz/corpus, only those that add coverage.
fuzz-merge:
	fuzz/run.sh --merge
