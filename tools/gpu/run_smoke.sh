#!/usr/bin/env bash
# Runs on the GPU machine from the repository root, with .gpu/ carried (see tools/gpu/build.sh).
# The main smoke test, then the fault and hang cases each in its own process, then a quick run that shows
# the GPU is still usable, then the CUDA baseline built here for side-by-side figures. Logs go to $OUT.
set -u
OUT=${OUT:-/tmp/nv-smoke}
mkdir -p "$OUT"
status=0
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,pci.bus_id --format=csv >"$OUT/smi.txt" 2>&1
run() { # name, timeout seconds, command...
    local name=$1 t=$2; shift 2
    timeout "$t" "$@" >"$OUT/$name.log" 2>&1; local rc=$?
    echo "== $name (rc $rc)"; grep -E '^\[FAIL\]|^# |^nv\.' "$OUT/$name.log" | head -70
    [ $rc -eq 0 ] || status=1
}
if [ "${FAULT_ONLY:-0}" != 1 ]; then run main 300 .gpu/nv_smoke main .gpu; fi
run fault 30 .gpu/nv_smoke fault .gpu
if [ "${FAULT_VARIANTS:-0}" = 1 ]; then
    # Diagnosis of the fault path: the VA space without replayable faults, and with a debugger object.
    NV_SMOKE_VASPACE_FLAGS=0x8 run fault_nofaulting 30 .gpu/nv_smoke fault .gpu
    NV_SMOKE_VASPACE_FLAGS=0x8 run quick_nofaulting 60 .gpu/nv_smoke quick .gpu
    NV_SMOKE_DEBUGGER=1 run fault_debugger 30 .gpu/nv_smoke fault .gpu
fi
if [ "${SKIP_HANG:-0}" != 1 ]; then run hang 30 .gpu/nv_smoke hang .gpu; fi
run quick 60 .gpu/nv_smoke quick .gpu
dmesg 2>/dev/null | grep -iE 'NVRM|xid' | tail -20 >"$OUT/dmesg.txt"
if [ "${NO_CUDA:-0}" != 1 ] && [ -f benches/cuda/baseline.cu ]; then
    /usr/local/cuda/bin/nvcc -O2 -arch=sm_90 -o /tmp/nv-cuda-baseline benches/cuda/baseline.cu >"$OUT/nvcc.log" 2>&1 \
        && /tmp/nv-cuda-baseline >"$OUT/cuda.log" 2>&1
    echo "== cuda baseline"; cat "$OUT/cuda.log" 2>/dev/null
fi
nvidia-smi --query-gpu=clocks.sm --format=csv,noheader >>"$OUT/smi.txt" 2>&1
echo "== smi"; cat "$OUT/smi.txt"
echo "== dmesg (NVRM/Xid, last 20)"; cat "$OUT/dmesg.txt"
exit $status
