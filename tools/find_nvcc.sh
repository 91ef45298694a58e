#!/usr/bin/env bash
# Prints the path of the nvcc Omega compiles kernels/cuda/*.cu with, or says on stderr why there is none
# and exits 1: tools/find_cuda_tool.sh's lookup for nvcc (it lists the order).
# Only bash itself: the lookup runs on machines whose PATH holds nothing else (tests/find_ptxas.rs).
here="${BASH_SOURCE[0]%/*}"
[ "$here" = "${BASH_SOURCE[0]}" ] && here=.
exec "$BASH" "$here/find_cuda_tool.sh" nvcc
