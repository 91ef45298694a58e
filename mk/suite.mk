# The GPU suite and benchmarks. On a machine with Rust they are built first; on the GPU machine (no Rust)
# BIN points at carried binaries.
.PHONY: gpu-test gpu-bench gpu-binaries

TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)
BIN ?= $(if $(shell command -v cargo 2>/dev/null),$(TARGET_DIR)/release/examples,.gpu)

# The GPU programs (examples), built where cargo exists.
gpu-binaries:
	@if command -v cargo >/dev/null 2>&1; then cargo build --release --examples; fi

# Every GPU test; prints "N passed, M failed".
gpu-test: gpu-binaries
	OMEGA_PLATFORM=nvidia $(BIN)/gpu_suite

# The suite, Omega's benchmarks and the CUDA baseline in one run (needs nvcc).
gpu-bench: gpu-binaries
	BIN=$(BIN) benches/gpu/run.sh

# Named steps (benches/gpu/steps.sh lists them), each logged with the SM clock before and after, e.g.
# `make gpu-steps STEPS="suite q2dump q2check q48"`; logs in $(OUT) (default /tmp/omega-gpu).
.PHONY: gpu-steps
gpu-steps: gpu-binaries
	BIN=$(BIN) STEPS="$(or $(STEPS),suite)" OUT=$(or $(OUT),/tmp/omega-gpu) benches/gpu/steps.sh

# Builds the GPU programs here and copies them into .gpu/ (git-ignored), the folder a GPU machine
# without Rust runs them from.
.PHONY: gpu-pack
gpu-pack:
	cargo build --release --examples
	mkdir -p .gpu
	for b in hello_gpu gpu_suite gpu_bench matmul_bench ew_bench matmul_smoke attn_bench qwen3_decode doctor; do \
		f=$(TARGET_DIR)/release/examples/$$b; [ -x $$f ] && cp $$f .gpu/ && strip .gpu/$$b || true; done
	ls -la .gpu

# Preflight: kernel module version and flavour, driver ABI table, device files and permissions, the PCI
# device, then an open through Omega; every check runs, and a vector add on the simulator says whether
# the sim platform runs. Exits non-zero when the GPU path cannot run, naming what it lacks.
.PHONY: doctor hello-gpu
doctor:
	@if command -v cargo >/dev/null 2>&1; then cargo build --release --example doctor -q; fi
	$(BIN)/doctor

# The doctor first, then hello_gpu on the GPU.
hello-gpu: doctor
	@if command -v cargo >/dev/null 2>&1; then cargo build --release --example hello_gpu -q; fi
	OMEGA_PLATFORM=nvidia $(BIN)/hello_gpu
