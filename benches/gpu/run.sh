#!/usr/bin/env bash
# One GPU job, run from the repository root on the GPU machine: the GPU suite, Omega's benchmarks and the
# CUDA baseline (built here with nvcc), side by side. Binaries come from $BIN (built on a machine with
# Rust and carried: docs/gpu-workflow.md). Full logs go to $OUT; a short table is printed last.
set -u
BIN=${BIN:-.gpu}
OUT=${OUT:-/tmp/omega-gpu}
mkdir -p "$OUT"
export OMEGA_PLATFORM=nvidia
status=0

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >"$OUT/smi.txt" 2>&1
# The CUDA baseline is built first, so no idle gap falls between the suite and the benchmarks.
if [ "${SUITE_ONLY:-0}" != 1 ]; then
    /usr/local/cuda/bin/nvcc -O2 -arch=sm_90 -o /tmp/omega-cuda-baseline benches/cuda/baseline.cu -lcuda >"$OUT/nvcc.log" 2>&1 || status=1
fi
if [ -x "$BIN/doctor" ]; then "$BIN/doctor" >"$OUT/doctor.log" 2>&1 || status=1; fi
"$BIN/hello_gpu" >"$OUT/hello.log" 2>&1 || status=1
"$BIN/gpu_suite" >"$OUT/suite.log" 2>&1 || status=1
if [ "${SUITE_ONLY:-0}" != 1 ]; then
    "$BIN/gpu_bench" ${QUICK:+--quick} >"$OUT/bench.log" 2>&1 || status=1
    /tmp/omega-cuda-baseline ${QUICK:+--quick} >"$OUT/cuda.log" 2>&1 || status=1
    # The default-flags context (the peer of Omega's default wait) is a process of its own.
    /tmp/omega-cuda-baseline --default-wait ${QUICK:+--quick} >>"$OUT/cuda.log" 2>&1 || status=1
    # The matmul library beside cuBLAS through PyTorch (the peer is a harness; Omega never uses it).
    if [ -x "$BIN/matmul_bench" ]; then
        "$BIN/matmul_bench" ${QUICK:+--quick} >"$OUT/matmul.log" 2>&1 || status=1
        if python3 -c "import torch" 2>/dev/null; then
            python3 benches/torch/matmul_peer.py ${QUICK:+--quick} >"$OUT/matmul_torch.log" 2>&1 || status=1
        fi
    fi
    # The attention library beside torch SDPA.
    if [ -x "$BIN/attn_bench" ]; then
        "$BIN/attn_bench" ${QUICK:+--quick} --check >"$OUT/attn.log" 2>&1 || status=1
        if python3 -c "import torch" 2>/dev/null; then
            python3 benches/torch/attn_peer.py ${QUICK:+--quick} >"$OUT/attn_torch.log" 2>&1 || status=1
        fi
    fi
    # The elementwise library beside torch's ops, each against its own copy of as many bytes.
    if [ -x "$BIN/ew_bench" ]; then
        "$BIN/ew_bench" ${QUICK:+--quick} >"$OUT/ew.log" 2>&1 || status=1
        if python3 -c "import torch" 2>/dev/null; then
            python3 benches/torch/ew_peer.py ${QUICK:+--quick} >"$OUT/ew_torch.log" 2>&1 || status=1
        fi
    fi
    nvidia-smi --query-gpu=clocks.sm --format=csv,noheader >>"$OUT/smi.txt" 2>&1
fi

echo "== doctor";  cat "$OUT/doctor.log" 2>/dev/null | tail -5
echo "== hello";   cat "$OUT/hello.log"
echo "== suite";   cat "$OUT/suite.log"
if [ "${SUITE_ONLY:-0}" != 1 ]; then
    echo "== benchmarks (omega vs cuda, same run)"
    python3 - "$OUT/bench.log" "$OUT/cuda.log" <<'PY'
import sys
def load(p):
    d = {}
    for line in open(p, errors="replace"):
        parts = line.split()
        if len(parts) == 2 and "." in parts[0] and not line.startswith("#"):
            try: d[parts[0].split(".", 1)[1]] = float(parts[1])
            except ValueError: pass
    return d
o, c = load(sys.argv[1]), load(sys.argv[2])
print(f"{'metric':34} {'omega':>10} {'cuda':>10} {'omega/cuda':>11}")
for k in sorted(set(o) | set(c)):
    ov, cv = o.get(k), c.get(k)
    r = f"{ov / cv:.2f}" if ov is not None and cv else "-"
    print(f"{k:34} {ov if ov is not None else '-':>10} {cv if cv is not None else '-':>10} {r:>11}")
PY
    if [ -f "$OUT/matmul.log" ] && [ -f "$OUT/matmul_torch.log" ]; then
        echo "== matmul (omega vs cublas through torch, same run)"
        python3 benches/gpu/compare.py "$OUT/matmul.log" "$OUT/matmul_torch.log" torch cublas
    fi
    if [ -f "$OUT/attn.log" ] && [ -f "$OUT/attn_torch.log" ]; then
        echo "== attention (omega paged decode vs torch SDPA dense, same run)"
        python3 benches/gpu/compare.py "$OUT/attn.log" "$OUT/attn_torch.log" torch
    fi
    if [ -f "$OUT/ew.log" ] && [ -f "$OUT/ew_torch.log" ]; then
        echo "== elementwise (omega vs torch, same run; _of_copy: each against its own copy)"
        python3 benches/gpu/compare.py "$OUT/ew.log" "$OUT/ew_torch.log" torch
    fi
fi
exit $status
