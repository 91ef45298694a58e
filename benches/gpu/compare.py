#!/usr/bin/env python3
"""Puts a benchmark's `omega.<metric>` lines beside a peer log's lines of the same metric names from the
same run, as ratios (how many times better Omega is: time ratios for `_us`, rate ratios otherwise).
PEERS are the peer log's prefixes to show (default `torch cublas`): for matmul, `torch` is torch's own call
(what a caller of F.linear gets, Python launch cost included: the small-M goal's peer), `cublas` is
cuBLAS alone in a CUDA graph writing bf16, and `cublas32` the same writing the f32 product Omega's `bf16`
call stores (the like-for-like peer of the TFLOP/s goals); attention's peer log has `torch` (SDPA) lines.

`--ours PREFIX` reads Omega's side from `PREFIX.` lines instead of `omega.` (matmul_bench prints its
bf16-output products as `omega16.`, the like-for-like side of `cublas`).

  python3 benches/gpu/compare.py [--ours PREFIX] OMEGA_LOG PEER_LOG [PEER ...]
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from perf_logs import load  # noqa: E402


def ratio(key, ours, theirs):
    if ours is None or theirs is None or ours == 0 or theirs == 0:
        return "-"
    return f"{(theirs / ours if key.endswith('_us') else ours / theirs):.2f}"


def main():
    args = sys.argv[1:]
    ours = "omega"
    if args[:1] == ["--ours"]:
        if len(args) < 2:
            sys.exit(__doc__)
        ours, args = args[1], args[2:]
    if len(args) < 2:
        sys.exit(__doc__)
    omega = load(args[0], ours)
    peers = {p: load(args[1], p) for p in (args[2:] or ["torch", "cublas"])}
    fmt = lambda v: f"{v:>10.4g}" if v is not None else f"{'-':>10}"
    print(f"{'metric':44} {ours:>10}" + "".join(f" {p:>10} {'/' + p:>8}" for p in peers))
    for k in sorted(k for k in omega if any(k in d for d in peers.values())):
        row = f"{k:44} {fmt(omega[k])}"
        for d in peers.values():
            row += f" {fmt(d.get(k))} {ratio(k, omega[k], d.get(k)):>8}"
        print(row)


if __name__ == "__main__":
    main()
