# The whole host test suite: what CI runs (README: "Run the tests").
.PHONY: test test-rust test-sim-only test-loom hello

LOOM_TARGET ?= target/loom

# Every host suite, what CI runs: test-rust, test-sim-only, test-loom, test-c-layer, and a minute of fuzz.
# No GPU needed.
test: test-rust test-sim-only test-loom test-c-layer fuzz
	@echo "make test: every host suite passed"

# cargo test of the whole workspace (unit, integration, C consumers, UI, doctests), and the benches built.
test-rust:
	cargo test --workspace --no-fail-fast
	cargo bench --workspace --no-run

# The simulator alone, the nvidia backend compiled out (what `omega` is off Linux): it must build, and the
# library's own tests pass without it.
test-sim-only:
	cargo build -p omega --no-default-features
	cargo test -p omega --no-default-features --lib

# loom models of the lock and the latch (omega) and of the staged copies' crew (omega-hal), release mode,
# bounded preemptions, their own target dir so the `--cfg loom` build does not evict the normal one.
test-loom:
	RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=$(LOOM_TARGET) \
		cargo test -p omega -p omega-hal --release --lib loom_models

# hello_gpu on the environment's platform (sim where there is no GPU).
hello:
	cargo run --release --example hello_gpu
