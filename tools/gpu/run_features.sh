#!/usr/bin/env bash
# Runs on the GPU machine from the repository root, with .gpu/ carried (see tools/gpu/build.sh): the
# Hopper launch-feature probes (nv_probe tma, cluster, smem), each in its own process so that a launch
# that faults or hangs does not hide the others, then the CUDA-side check of the device-built TMA
# descriptors against cuTensorMapEncodeTiled (benches/cuda/tma_check.cu, built here with CUDA; Omega
# itself never links it). Logs go to $OUT.
set -u
OUT=${OUT:-/tmp/nv-features}
mkdir -p "$OUT"
status=0
run() { # name, timeout seconds, command...
    local name=$1 t=$2; shift 2
    timeout "$t" "$@" >"$OUT/$name.log" 2>&1; local rc=$?
    echo "== $name (rc $rc)"; grep -E '^\[FAIL\]|^\[ok\]|^# ' "$OUT/$name.log" | head -80
    [ $rc -eq 0 ] || status=1
}
for probe in tma cluster smem; do run "$probe" 60 .gpu/nv_probe .gpu "$probe"; done
if [ "${NO_CUDA:-0}" != 1 ]; then
    /usr/local/cuda/bin/nvcc -O2 -std=c++17 -gencode arch=compute_90a,code=sm_90a -I kernels/cuda/probes \
        -o /tmp/nv-tma-check benches/cuda/tma_check.cu -lcuda >"$OUT/tma_check_nvcc.log" 2>&1 \
        || { echo "== tma_check: nvcc failed"; cat "$OUT/tma_check_nvcc.log"; status=1; }
    if [ -x /tmp/nv-tma-check ]; then run tma_check 120 /tmp/nv-tma-check "${TMA_SHAPES:-200}"; fi
    tail -3 "$OUT/tma_check.log" 2>/dev/null
fi
dmesg 2>/dev/null | grep -iE 'NVRM|xid' | tail -20 >"$OUT/dmesg.txt"
echo "== dmesg (NVRM/Xid, last 20)"; cat "$OUT/dmesg.txt"
exit $status
