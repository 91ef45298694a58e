#!/usr/bin/env python3
"""Fits the TMA GEMM cost model of src/libs/matmul/plan.rs (`GemmCost`) to the recorded figures.

    t = L + waves * (BN / 256) * (e + per * b) + [splits > 1] * (BN / 128) * (r0 + r1 * splits)

waves = ceil(units / SMs), per = K blocks of 64 per unit, BN the tile width (256 or 128), L the launch
round trip inside every library figure (4.5 us, docs/perf/2026-12-02-matmul-library-bench.md). The points
are the figures of docs/perf/2026-12-02-matmul-bringup.md (runs 9, 10) and -matmul-library-bench.md (run 13)
whose plans are known; lm_head (HBM-bound, not compute-bound) is left out. Least squares, no numpy.
Run: python3 tools/fit_gemm_model.py
"""
import math

SMS, L = 132, 4.5


def plan(m, n, k, bn, splits):
    tiles = math.ceil(m / 128) * math.ceil(n / bn)
    kb = math.ceil(k / 64)
    per = math.ceil(kb / splits)
    s = math.ceil(kb / per)
    return tiles * s, per, s


# (M, N, K, BN, splits asked, microseconds, source)
POINTS = [
    (8192, 8192, 8192, 256, 1, 2 * 8192**3 / 730.2e6, "bench 8192^3"),
    (4096, 4096, 4096, 256, 1, 2 * 4096**3 / 692.0e6, "bench 4096^3"),
    (4096, 2048, 4096, 256, 1, 110.5, "bench O M=4096"),
    (4096, 5120, 2048, 256, 1, 137.5, "bench QKV M=4096"),
    (4096, 1536, 2048, 256, 1, 57.81, "bench gate+up M=4096"),
    (4096, 2048, 768, 256, 1, 34.97, "bench down M=4096"),
    (512, 5120, 2048, 256, 1, 30.59, "bench QKV M=512"),
    (512, 2048, 4096, 128, 2, 35.4, "bench O M=512"),
    (512, 1536, 2048, 128, 2, 30.53, "bench gate+up M=512"),
    (512, 2048, 768, 128, 2, 26.81, "bench down M=512"),
    (4096, 128, 2048, 128, 4, 40.0, "bench router M=4096"),
    (512, 128, 2048, 128, 32, 240.0, "bench router M=512"),
    (128, 128, 2048, 128, 32, 226.2, "bench router M=128"),
    (128, 5120, 2048, 128, 3, 36.04, "bench QKV M=128"),
    (128, 2048, 4096, 128, 8, 64.78, "bench O M=128"),
    (128, 1536, 2048, 128, 11, 111.0, "bench gate+up M=128"),
    (128, 2048, 768, 128, 6, 57.43, "bench down M=128"),
    (512, 5120, 2048, 128, 1, 2 * 512 * 5120 * 2048 / 338.6e6, "run 10 QKV narrow"),
    (512, 2048, 4096, 256, 4, 2 * 512 * 2048 * 4096 / 90.0e6, "run 10 O wide split 4"),
    (512, 1536, 2048, 256, 5, 2 * 512 * 1536 * 2048 / 34.1e6, "run 9 gate+up wide split 5"),
    (512, 2048, 768, 256, 4, 2 * 512 * 2048 * 768 / 21.1e6, "run 9 down wide split 4"),
]


def row(m, n, k, bn, asked):
    units, per, s = plan(m, n, k, bn, asked)
    waves = math.ceil(units / SMS)
    f = bn / 256
    red = bn / 128 if s > 1 else 0.0
    return [waves * f, waves * f * per, red, red * s]


def solve(a, b):
    n = len(b)
    m = [r[:] + [v] for r, v in zip(a, b)]
    for i in range(n):
        p = max(range(i, n), key=lambda r: abs(m[r][i]))
        m[i], m[p] = m[p], m[i]
        for r in range(n):
            if r != i:
                f = m[r][i] / m[i][i]
                m[r] = [x - f * y for x, y in zip(m[r], m[i])]
    return [m[i][n] / m[i][i] for i in range(n)]


xs = [row(*p[:5]) for p in POINTS]
ys = [p[5] - L for p in POINTS]
ata = [[sum(x[i] * x[j] for x in xs) for j in range(4)] for i in range(4)]
aty = [sum(x[i] * y for x, y in zip(xs, ys)) for i in range(4)]
e, b, r0, r1 = solve(ata, aty)
print(f"e = {e:.3f} us, b = {b:.4f} us per K block, r0 = {r0:.3f} us, r1 = {r1:.3f} us per split (BN 128)")
for p, x in zip(POINTS, xs):
    model = L + sum(c * v for c, v in zip([e, b, r0, r1], x))
    print(f"{p[6]:28s} measured {p[5]:8.1f} us  model {model:8.1f} us  ({model / p[5]:.2f})")
