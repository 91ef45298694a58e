#!/usr/bin/env python3
"""The prefill attention's peer: PyTorch's scaled_dot_product_attention on its flash backend, on the GPU
machine, in the same run as Omega's benches/cuda/prefill_check. Prints `torch.prefill.<seq>.causal.<metric>
<value>` lines with the metric names prefill_check prints (`omega_` there, `torch_` here), so the two sit
side by side.

A harness, not part of Omega. Shape: batch 1, GQA 32 q / 4 kv heads, head dim 128, causal, bf16, seq
1K/4K/16K. K and V are expanded to the 32 q heads once before timing (the flash backend of SDPA takes
equal head counts; `enable_gqa` routes to other backends on some versions), so the timed call is the
attention alone. FLOPs as FlashAttention counts them: 4 * d per attended (query, kv) pair, seq (seq + 1)
/ 2 pairs a head when causal. Timing: CUDA events around 20 back-to-back calls after a warm-up, the
median of --iters rounds.

  python3 benches/torch/prefill_peer.py [--iters N]
"""
import argparse
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

QH, KVH, D = 32, 4, 128
SEQS = [1024, 4096, 16384]


def timed(fn, iters):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    rounds = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(20):
            fn()
        b.record()
        b.synchronize()
        rounds.append(a.elapsed_time(b) * 1e-3 / 20)
    return statistics.median(rounds)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=5)
    args = ap.parse_args()
    torch.manual_seed(0)
    print(f"torch.version {torch.__version__}", flush=True)
    for seq in SEQS:
        q = torch.rand(1, QH, seq, D, device="cuda", dtype=torch.bfloat16) * 2 - 1
        k = torch.rand(1, KVH, seq, D, device="cuda", dtype=torch.bfloat16) * 2 - 1
        v = torch.rand(1, KVH, seq, D, device="cuda", dtype=torch.bfloat16) * 2 - 1
        k = k.repeat_interleave(QH // KVH, dim=1)
        v = v.repeat_interleave(QH // KVH, dim=1)
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            s = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), args.iters)
        flops = 4.0 * D * seq * (seq + 1) / 2 * QH
        print(f"torch.prefill.{seq}.causal.torch_ms {s * 1e3:.4f}", flush=True)
        print(f"torch.prefill.{seq}.causal.torch_tflops {flops / s / 1e12:.1f}", flush=True)


if __name__ == "__main__":
    main()
