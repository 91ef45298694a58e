#!/usr/bin/env python3
"""The attention library's peer: torch SDPA on the GPU machine, in the same run as Omega's
examples/attn_bench. Prints `torch.<metric> <value>` lines with attn_bench's metric names, so the two sit
side by side as ratios.

A harness, not part of Omega (Omega never links CUDA or PyTorch). Torch has no paged decode: its figure
for every page size is dense SDPA over contiguous K/V (what the issue's 1.12 TB/s at B=1, L=32K and
4.15 TB/s at B=16 were measured with), q [B, 32, 1, 128], k and v [B, 4, L, 128] bf16 with
enable_gqa=True (the 8 query heads of a KV head share it). The bandwidth counts the same K/V bytes as
attn_bench's. The copy is a device-to-device clone of 1 GiB, read plus written bytes.

Timing: CUDA events, the shorter of the median single call and the median of 20 back-to-back calls
divided by 20, after warm-ups (matmul_peer.py's rule).

  python3 benches/torch/attn_peer.py [--quick]
"""
import argparse

import torch
import torch.nn.functional as F

from matmul_peer import timed  # the same timing rule as the matmul peer (its directory is on sys.path)

Q_HEADS, KV_HEADS, HEAD_DIM = 32, 4, 128


def emit(name, value):
    print(f"torch.{name} {value:.4g}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    dev = torch.device("cuda")
    print(f"# attn_peer: torch {torch.__version__} on {torch.cuda.get_device_name(0)}", flush=True)
    n = (1 << 24) if args.quick else (1 << 30)
    src = torch.empty(n, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    copy = 2 * n / timed(lambda: dst.copy_(src), 20) / 1e9
    emit("copy_gbps", copy)
    del src, dst
    batches = [1, 4] if args.quick else [1, 4, 16, 64]
    lens = [1024, 4096] if args.quick else [1024, 4096, 16384, 32768]
    goal_a, goal_b = [], []
    for b in batches:
        for length in lens:
            q = torch.randn(b, Q_HEADS, 1, HEAD_DIM, dtype=torch.bfloat16, device=dev)
            k = torch.randn(b, KV_HEADS, length, HEAD_DIM, dtype=torch.bfloat16, device=dev)
            v = torch.randn_like(k)
            secs = timed(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), 20)
            gbps = 2 * k.numel() * k.element_size() / secs / 1e9
            for page in (16, 64):
                tag = f"p{page}_b{b}_kv{length}"
                emit(f"paged_decode_{tag}_us", secs * 1e6)
                emit(f"paged_decode_{tag}_gbps", gbps)
                emit(f"paged_decode_{tag}_copy_ratio", gbps / copy)
            if b >= 4 and length >= 4096:
                goal_a.append(gbps / copy)
            if b == 1 and length >= 16384:
                goal_b.append(gbps / copy)
            del q, k, v
    if goal_a:
        emit("paged_decode_goal_b4plus_kv4kplus_min_ratio", min(goal_a))
    if goal_b:
        emit("paged_decode_goal_b1_kv16kplus_min_ratio", min(goal_b))


if __name__ == "__main__":
    main()
