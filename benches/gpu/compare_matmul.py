#!/usr/bin/env python3
"""Puts matmul_bench's figures beside the torch peer's from the same run, as ratios (how many times better
Omega is: time ratios for `_us`, rate ratios otherwise). Two peers per metric: `torch` is torch's own call
(what a caller of F.linear gets, Python launch cost included: the small-M goal's peer) and `cublas` is
cuBLAS alone in a CUDA graph (the TFLOP/s goals' peer).

  python3 benches/gpu/compare_matmul.py matmul.log matmul_torch.log
"""
import sys


def load(path, prefix):
    d = {}
    for line in open(path, errors="replace"):
        parts = line.split()
        if len(parts) == 2 and parts[0].startswith(prefix + "."):
            try:
                d[parts[0][len(prefix) + 1:]] = float(parts[1])
            except ValueError:
                pass
    return d


def ratio(key, ours, theirs):
    if ours is None or theirs is None or ours == 0 or theirs == 0:
        return "-"
    return f"{(theirs / ours if key.endswith('_us') else ours / theirs):.2f}"


def main():
    omega, torch, cublas = load(sys.argv[1], "omega"), load(sys.argv[2], "torch"), load(sys.argv[2], "cublas")
    print(f"{'metric':40} {'omega':>10} {'torch':>10} {'cublas':>10} {'/torch':>7} {'/cublas':>8}")
    fmt = lambda v: f"{v:>10.4g}" if v is not None else f"{'-':>10}"
    for k in sorted(set(omega) & (set(torch) | set(cublas))):
        o, t, c = omega[k], torch.get(k), cublas.get(k)
        print(f"{k:40} {fmt(o)} {fmt(t)} {fmt(c)} {ratio(k, o, t):>7} {ratio(k, o, c):>8}")


if __name__ == "__main__":
    main()
