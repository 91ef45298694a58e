#!/usr/bin/env bash
# A GPU job made of named steps, run from the repository root on the GPU machine:
#     STEPS="suite q2dump q2check q48 qpeer" OUT=$OUT bash benches/gpu/steps.sh
# Binaries come from $BIN (built where Rust is and carried: docs/gpu-workflow.md). Each step
# writes $OUT/<step>.log, headed by its command and the SM clock, power and temperature before it and
# closed by its status, time and the clock after, so a figure can be read with the clock it ran at; the
# logs are packed into $OUT/logs.tar.gz and the lines that carry results are printed last.
#
# Steps:
#   suite                  the GPU suite (`N passed, M failed`)
#   q2dump, q2check        2 layers, batch 1, 16 steps dumped, then checked against PyTorch
#   q2b4dump, q2b4check    the same at batch 4
#   qtdump, qtcheck        the TINY model at batch 3
#   q48                    48 layers, batch 1, ctx 1K, 20 steps, profile, then 1000 sealed steps
#   q48b<B>, q48c16, q48b<B>c16   batch B (8, 32) and/or ctx 16K
#   qb_<B>_<C>_<prefetch>_<router>  any batch, context, prefetch (bulk|lines|off), router (fused|separate)
#   qm_<B>_<C>_<merge>     any batch and context, attention merge (auto|launch|cluster|ticket)
#   qp_<B>_<C>             the previous build ($BIN/qwen3_decode_prev) at a batch and context, for an A/B
#   gsplits                `matmul_bench --gemv-splits`
#   gvar, gocc             benches/cuda/gemv_variants.cu (built here with the machine's nvcc): the
#                          variants, or the occupancy study (--occupancy)
#   qpeer                  the PyTorch peer's decode step at batch 1, 8, 32 and ctx 1K, 16K
#   ew, ewpeer             `ew_bench --check`, and its PyTorch peer (benches/torch/ew_peer.py)
#   attn, attnpeer         `attn_bench --check`, and its PyTorch peer (benches/torch/attn_peer.py)
#   attn_s<N>[_<merge>]    `attn_bench --check --splits N [--merge auto|launch|cluster|ticket]`: every
#                          decode at N KV splits (merged as the planner's rule says, or as named)
#   attn_m<merge>          `attn_bench --check --merge <merge>`: every decode merged as named, the
#                          planner's split
#   prefillchk, prefillpeer  benches/cuda/prefill_check.cu over the prefill module's cubin (both built here
#                          with the machine's nvcc): checked, then timed at 1K/4K/16K; and its PyTorch
#                          peer (benches/torch/prefill_peer.py, SDPA's flash backend)
#   attnprev, ewprev       the previous build ($BIN/attn_bench_prev, $BIN/ew_bench_prev) `--check`, for
#                          an A/B
#   attn_st<N>             `attn_bench --check --stages N`: every decode at N pipeline stages (2 or 4)
#   mm, mmalt, mmpeer      `matmul_bench --check`, `matmul_bench --alternatives`, and the PyTorch/cuBLAS peer
#                          (benches/torch/matmul_peer.py)
#   mmhost, mmhost_<T>_<P>[_<S>]  `matmul_bench --host`: the host-pointer entry and its copies alone,
#                          with the settings' copy threads, pieces and ring slots, or with T copy threads,
#                          pieces of P MiB (and S slots)
#   copypeer               CUDA's pageable and pinned copies through torch (benches/torch/copy_peer.py),
#                          the peer of the host-pointer entries' copies
#   ewvar                  benches/cuda/ew_variants.cu (built here): the RMSNorm forms and QK-norm + RoPE
#                          variants beside cudaMemcpy's copy
#   gemmchk[_<variant>]    benches/cuda/gemm_check.cu (built here with the machine's nvcc and cuBLAS), every
#                          variant or the named family / variant, beside cuBLAS
#   skchk                  benches/cuda/skinny_check.cu (built here): the skinny GEMM, the GEMV and the
#                          swapped-operand small-M TMA GEMM at every split beside cuBLAS, M = 1..64
#   gemmsw                 benches/cuda/gemm_swiglu_check.cu (built here): the gate+up GEMM with SwiGLU in its
#                          epilogue beside the GEMM and SwiGLU launches it replaces, and cuBLAS's
#   anything else          `gpu_suite --case <step>`
set -u
BIN=${BIN:-.gpu}
OUT=${OUT:-/tmp/omega-gpu}
STEPS=${STEPS:-suite}
mkdir -p "$OUT"
export OMEGA_PLATFORM=nvidia
status=0

smi() { nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader,nounits 2>/dev/null |
    awk -F', ' '{printf "%s MHz, %s W, %s", $1, $2, $3}'; }

decode() { # batch context [extra...]
    local b=$1 c=$2; shift 2
    echo "$BIN/${DECODE:-qwen3_decode} --bench --steps 20 --batch $b --context $c --profile $*"
}

command_of() {
    case "$1" in
        suite) echo "$BIN/gpu_suite" ;;
        q2dump) echo "$BIN/qwen3_decode --layers 2 --steps 16 --dump $OUT/q2.jsonl" ;;
        q2b4dump) echo "$BIN/qwen3_decode --layers 2 --steps 16 --batch 4 --dump $OUT/q2b4.jsonl" ;;
        qtdump) echo "$BIN/qwen3_decode --tiny --steps 16 --batch 3 --dump $OUT/qt.jsonl" ;;
        q2check | q2b4check | qtcheck) echo "python3 benches/torch/qwen3_peer.py --check $OUT/${1%check}.jsonl" ;;
        q48) decode 1 1024 --sealed-steps 1000 ;;
        q48b*c16) local b=${1#q48b}; decode "${b%c16}" 16384 ;;
        q48c16) decode 1 16384 ;;
        q48b*) decode "${1#q48b}" 1024 ;;
        qb_*_*_*_*)
            IFS=_ read -r _ b c p r <<<"$1"
            decode "$b" "$c" --prefetch "$p" --router "$r" ;;
        qm_*_*_*)
            IFS=_ read -r _ b c m <<<"$1"
            decode "$b" "$c" --attn-merge "$m" ;;
        qp_*_*)
            IFS=_ read -r _ b c <<<"$1"
            DECODE=qwen3_decode_prev decode "$b" "$c" ;;
        gsplits) echo "$BIN/matmul_bench --gemv-splits" ;;
        gvar) echo "/tmp/gemv_variants" ;;
        gocc) echo "/tmp/gemv_variants --occupancy" ;;
        qpeer) echo "python3 benches/torch/qwen3_peer.py --bench --quick --batch 1,8,32 --ctx 1024,16384" ;;
        ew) echo "$BIN/ew_bench --check" ;;
        ewprev) echo "$BIN/ew_bench_prev --check" ;;
        ewpeer) echo "python3 benches/torch/ew_peer.py" ;;
        attn) echo "$BIN/attn_bench --check" ;;
        attnpeer) echo "python3 benches/torch/attn_peer.py" ;;
        attn_st*) echo "$BIN/attn_bench --check --stages ${1#attn_st}" ;;
        attn_m*) echo "$BIN/attn_bench --check --merge ${1#attn_m}" ;;
        attnprev) echo "$BIN/attn_bench_prev --check" ;;
        attn_s*_*)
            IFS=_ read -r _ n m <<<"$1"
            echo "$BIN/attn_bench --check --splits ${n#s} --merge $m" ;;
        attn_s*) echo "$BIN/attn_bench --check --splits ${1#attn_s}" ;;
        mm) echo "$BIN/matmul_bench --check" ;;
        mmalt) echo "$BIN/matmul_bench --alternatives" ;;
        mmpeer) echo "python3 benches/torch/matmul_peer.py" ;;
        mmhost) echo "$BIN/matmul_bench --host" ;;
        copypeer) echo "python3 benches/torch/copy_peer.py" ;;
        mmhost_*_*_*)
            IFS=_ read -r _ t p k <<<"$1"
            echo "env OMEGA_NVIDIA_COPY_THREADS=$t OMEGA_NVIDIA_STAGING_PIECE_BYTES=$((p << 20)) OMEGA_NVIDIA_STAGING_SLOTS=$k $BIN/matmul_bench --host" ;;
        mmhost_*_*)
            IFS=_ read -r _ t p <<<"$1"
            echo "env OMEGA_NVIDIA_COPY_THREADS=$t OMEGA_NVIDIA_STAGING_PIECE_BYTES=$((p << 20)) $BIN/matmul_bench --host" ;;
        # CUDA has no completion limit of its own: a variant that hangs (the stream-K entries' flags) is
        # stopped after 5 minutes instead of holding the machine.
        ewvar) echo "timeout 300 /tmp/ew_variants" ;;
        gemmchk) echo "timeout 300 /tmp/gemm_check" ;;
        prefillchk) echo "timeout 300 /tmp/prefill_check --cubin /tmp/prefill.cubin" ;;
        prefillpeer) echo "python3 benches/torch/prefill_peer.py" ;;
        gemmchk_*) echo "timeout 300 /tmp/gemm_check --variant ${1#gemmchk_}" ;;
        gemmsw) echo "timeout 300 /tmp/gemm_swiglu_check" ;;
        skchk) echo "timeout 300 /tmp/skinny_check" ;;
        *) echo "$BIN/gpu_suite --case $1" ;;
    esac
}

for step in $STEPS; do
    if [ "$step" = gvar ] || [ "$step" = gocc ]; then
        /usr/local/cuda/bin/nvcc -O3 -std=c++17 -arch=sm_90a -Ikernels/cuda/matmul -Ikernels/cuda \
            -o /tmp/gemv_variants benches/cuda/gemv_variants.cu >"$OUT/gvar-nvcc.log" 2>&1 || status=1
    fi
    if [ "$step" = ewvar ] && [ ! -x /tmp/ew_variants ]; then
        /usr/local/cuda/bin/nvcc -O3 -std=c++17 -arch=sm_90a -Ikernels/cuda \
            -o /tmp/ew_variants benches/cuda/ew_variants.cu >"$OUT/ewvar-nvcc.log" 2>&1 || status=1
    fi
    if [ "${step%%_*}" = gemmchk ] && [ ! -x /tmp/gemm_check ]; then
        /usr/local/cuda/bin/nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Ikernels/cuda/matmul \
            -o /tmp/gemm_check benches/cuda/gemm_check.cu -lcublas -lcuda >"$OUT/gemmchk-nvcc.log" 2>&1 || status=1
    fi
    if [ "$step" = gemmsw ] && [ ! -x /tmp/gemm_swiglu_check ]; then
        /usr/local/cuda/bin/nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Ikernels/cuda/matmul \
            -Ikernels/cuda -o /tmp/gemm_swiglu_check benches/cuda/gemm_swiglu_check.cu -lcublas -lcuda \
            >"$OUT/gemmsw-nvcc.log" 2>&1 || status=1
    fi
    if [ "$step" = skchk ] && [ ! -x /tmp/skinny_check ]; then
        /usr/local/cuda/bin/nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Ikernels/cuda/matmul \
            -o /tmp/skinny_check benches/cuda/skinny_check.cu -lcublas -lcuda >"$OUT/skchk-nvcc.log" 2>&1 || status=1
    fi
    if [ "$step" = prefillchk ] && [ ! -x /tmp/prefill_check ]; then
        { /usr/local/cuda/bin/nvcc -cubin -arch=sm_90a -O3 -std=c++17 -Ikernels/cuda -o /tmp/prefill.cubin \
            kernels/cuda/prefill.cu && /usr/local/cuda/bin/nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a \
            -o /tmp/prefill_check benches/cuda/prefill_check.cu -lcuda; } >"$OUT/prefillchk-nvcc.log" 2>&1 || status=1
    fi
    cmd=$(command_of "$step")
    # A step named again (an A/B alternated) logs beside its earlier runs: <step>.log, <step>.2.log, ...
    log="$OUT/$step.log" n=1
    while [ -e "$log" ]; do n=$((n + 1)) log="$OUT/$step.$n.log"; done
    echo "### $step: $cmd (sm clock before: $(smi))" >"$log"
    start=$(date +%s)
    $cmd >>"$log" 2>&1
    rc=$?
    [ $rc = 0 ] || status=1
    echo "### rc=$rc, $(($(date +%s) - start)) s, sm clock after: $(smi)" >>"$log"
done

(cd "$OUT" && tar czf logs.tar.gz ./*.log)
seen=" "
for name in $STEPS; do
    case "$seen" in *" $name "*) continue ;; esac
    seen="$seen$name "
    for log in "$OUT/$name.log" "$OUT/$name".[0-9]*.log; do
        [ -e "$log" ] || continue
        step=$(basename "$log" .log)
        echo "== $step"
        head -1 "$log"
        grep -E 'passed, .* failed|^FAIL| FAIL$|^[^#].*check: |qwen3 decode B=|profile total|sealed: [0-9]+ driver|peer qwen3 best|^best |gemv_variants failed|ew_variants failed|^# .* split auto|_of_copy |_of_floor |_goal_|copy_ratio |_tflops |^swiglu\.' \
            "$log" | tail -20
        tail -1 "$log"
    done
done
exit $status
