#!/usr/bin/env bash
# Builds what the nvidia backend's hardware tests need into .gpu/ (git-ignored), on a machine with Rust,
# ptxas and nvcc: the sm_90 cubins of kernels/*.ptx, the sm_90a cubins of the launch-feature probes in
# kernels/cuda/probes/ (TMA, clusters, 227 KiB of shared memory), and the nv_smoke and nv_probe binaries.
# Carry .gpu/ to the GPU machine and run tools/gpu/run_smoke.sh and tools/gpu/run_features.sh there.
set -eu
cd "$(dirname "$0")/../.."
PTXAS=${PTXAS:-$(tools/find_ptxas.sh)}
ARCH=${ARCH:-sm_90}
mkdir -p .gpu
for k in vector_add empty timestamps local_array store_to spin scale_copy; do
    "$PTXAS" -arch="$ARCH" -O3 -o ".gpu/$k.cubin" "kernels/$k.ptx"
done
# The probes are CUDA C++ compiled the way build.rs compiles kernels/cuda/*.cu (which does not look into
# probes/: they are hardware checks, not kernels of the omega crate).
NVCC=${NVCC:-$(tools/find_nvcc.sh)}
for p in probe_tma probe_cluster probe_smem; do
    "$NVCC" -cubin -arch=sm_90a -O3 -o ".gpu/$p.cubin" "kernels/cuda/probes/$p.cu"
done
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target-nva}
cargo build --release -p omega-hal --example nv_smoke --example nv_probe
cp "$CARGO_TARGET_DIR/release/examples/nv_smoke" "$CARGO_TARGET_DIR/release/examples/nv_probe" .gpu/
ls -l .gpu
