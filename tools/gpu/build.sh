#!/usr/bin/env bash
# Builds what the nvidia backend's hardware smoke test needs into .gpu/ (git-ignored), on a machine with
# Rust and ptxas: the sm_90 cubins of kernels/*.ptx and the nv_smoke binary. Carry .gpu/ to the GPU
# machine and run tools/gpu/run_smoke.sh there.
set -eu
cd "$(dirname "$0")/../.."
PTXAS=${PTXAS:-$(tools/find_ptxas.sh)}
ARCH=${ARCH:-sm_90}
mkdir -p .gpu
for k in vector_add empty timestamps local_array store_to spin; do
    "$PTXAS" -arch="$ARCH" -O3 -o ".gpu/$k.cubin" "kernels/$k.ptx"
done
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target-nva}
cargo build --release -p omega-hal --example nv_smoke
cp "$CARGO_TARGET_DIR/release/examples/nv_smoke" .gpu/nv_smoke
ls -l .gpu
