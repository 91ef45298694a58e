#!/usr/bin/env bash
# Tools the C layer's checks, the CUDA build and the fuzzer need on a fresh machine (.ci/run calls this):
# a C compiler, binutils (nm, readelf) and pkg-config for the C consumer tests and `make test-install`,
# g++ for nvcc's host pass over kernels/cuda/*.cu (apt-get, as root on the CI machine), clang 14 with its
# runtime (libFuzzer, ASan) for `make fuzz`, pinned to Debian 12's build of it, and the pinned cbindgen
# for `tools/gen_headers.sh --check` (into this checkout's .tools/, about one minute on two cores).
set -euo pipefail
cd "$(dirname "$0")/.."
missing=()
command -v cc >/dev/null 2>&1 || missing+=(gcc)
command -v nm >/dev/null 2>&1 && command -v readelf >/dev/null 2>&1 || missing+=(binutils)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
command -v g++ >/dev/null 2>&1 || missing+=(g++)
clang_version=1:14.0.6-12
if [ "$(dpkg-query -W -f='${Version}' clang-14 2>/dev/null)" != "$clang_version" ] ||
    [ "$(dpkg-query -W -f='${Version}' libclang-rt-14-dev 2>/dev/null)" != "$clang_version" ]; then
    missing+=("clang-14=$clang_version" "libclang-rt-14-dev=$clang_version")
fi
if [ "${#missing[@]}" -gt 0 ]; then
    apt-get update -qq && apt-get install -y -qq "${missing[@]}"
fi
tools/gen_headers.sh --install
