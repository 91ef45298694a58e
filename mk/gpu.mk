# The nvidia backend's hardware smoke test (hal/examples/nv_smoke.rs). Build here (Rust + ptxas), carry
# .gpu/ to the GPU machine, run there. See docs/nvidia-backend.md.
.PHONY: nv-smoke-build nv-smoke

# The sm_90 cubins of kernels/*.ptx and the nv_smoke binary, into .gpu/.
nv-smoke-build:
	tools/gpu/build.sh

# On the GPU machine, with .gpu/ carried: main suite, fault, hang and quick runs in separate processes,
# then the CUDA baseline; logs in $(OUT) (default /tmp/nv-smoke).
nv-smoke:
	OUT=$(or $(OUT),/tmp/nv-smoke) tools/gpu/run_smoke.sh
