#!/usr/bin/env python3
"""The elementwise library's peer: PyTorch's own ops on the GPU machine, in the same run as Omega's
examples/ew_bench. Prints `torch.<metric> <value>` lines with the metric names ew_bench prints, so the two
sit side by side: per op `_us`, `_gbps` (the bytes the op must read and write, counted as ew_bench counts
them), `_copy_gbps` (torch's device-to-device copy of as many bytes: `dst.copy_(src)`) and `_of_copy`.

A harness, not part of Omega (Omega never links CUDA or PyTorch). The ops are what a serving engine
calls without custom kernels: RMSNorm as torch.nn.functional.rms_norm (or the Hugging Face formula where
torch lacks it), the residual form as `h += x; rms_norm(h)`, RoPE as Hugging Face's rotate_half, Qwen3's
QK-norm as rms_norm over the head dim then RoPE, SwiGLU as `F.silu(gate) * up`, the fused form on the two
halves of one [rows, 2I] tensor. Timing: CUDA events around 20 back-to-back calls, median of 5 rounds
after a warm-up.

  python3 benches/torch/ew_peer.py [--quick]
"""
import argparse
import statistics

import torch
import torch.nn.functional as F


def timed(fn):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    rounds = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(20):
            fn()
        b.record()
        b.synchronize()
        rounds.append(a.elapsed_time(b) * 1e-3 / 20)
    return statistics.median(rounds)


def rms_norm(x, w, eps=1e-6):
    if hasattr(F, "rms_norm"):
        return F.rms_norm(x, (x.shape[-1],), w, eps)
    v = x.float()
    return (v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def report(tag, secs, nbytes):
    src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    copy = timed(lambda: dst.copy_(src))
    gbps, copy_gbps = nbytes / secs / 1e9, nbytes / copy / 1e9
    print(f"torch.{tag}_us {secs * 1e6:.3f}")
    print(f"torch.{tag}_gbps {gbps:.1f}")
    print(f"torch.{tag}_copy_gbps {copy_gbps:.1f}")
    print(f"torch.{tag}_of_copy {gbps / copy_gbps:.3f}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    rows = 64 if p.parse_args().quick else 16384
    for dtype, name in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
        e = torch.finfo(dtype).bits // 8
        cols = 2048
        x = torch.randn(rows, cols, device="cuda", dtype=dtype)
        h = torch.randn_like(x)
        w = torch.randn(cols, device="cuda", dtype=dtype)
        n = rows * cols
        report(f"ew_rmsnorm_{name}_{rows}x{cols}", timed(lambda: rms_norm(x, w)), (2 * n + cols) * e)

        def add_norm():
            h.add_(x)
            return rms_norm(h, w)

        report(f"ew_add_rmsnorm_{name}_{rows}x{cols}", timed(add_norm), (4 * n + cols) * e)
        q = x.view(rows, cols // 128, 128)
        cos = torch.randn(rows, 1, 128, device="cuda", dtype=dtype)
        sin = torch.randn_like(cos)
        table = rows * 64 * 4 * 2  # ew_bench counts f32 tables of [rows, 64]
        report(f"ew_rope_{name}_{rows}x{cols}", timed(lambda: q * cos + rotate_half(q) * sin), 2 * n * e + table)
        wq = torch.randn(128, device="cuda", dtype=dtype)

        def norm_rope():
            v = rms_norm(q, wq)
            return v * cos + rotate_half(v) * sin

        report(f"ew_norm_rope_{name}_{rows}x{cols}", timed(norm_rope), 2 * n * e + table + 128 * e)
        for inter in (2048, 6144):
            m = rows * inter
            gate = torch.randn(rows, inter, device="cuda", dtype=dtype)
            up = torch.randn_like(gate)
            report(f"ew_swiglu_{name}_{rows}x{inter}", timed(lambda: F.silu(gate) * up), 3 * m * e)
            gu = torch.randn(rows, 2 * inter, device="cuda", dtype=dtype)

            def fused():
                g, u = gu.chunk(2, dim=-1)
                return F.silu(g) * u

            report(f"ew_swiglu_fused_{name}_{rows}x{inter}", timed(fused), 3 * m * e)
            del gate, up, gu


if __name__ == "__main__":
    main()
