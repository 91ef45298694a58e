#!/usr/bin/env python3
"""Charts of the matmul benchmark: one SVG per Qwen3-30B-A3B matrix, TFLOP/s and weight GB/s against M,
Omega beside cuBLAS (through PyTorch), from the recorded lines of one run.

  tools/plot_matmul.py OMEGA_LOG TORCH_LOG OUT_DIR

The logs hold `omega.<metric> <value>` (examples/matmul_bench) and `torch.<metric> <value>`
and `cublas.<metric> <value>` (benches/torch/matmul_peer.py; the second since cuBLAS-in-a-graph timing
was added, drawn when present) lines with metrics `matmul_bf16_{M}x{N}x{K}_{tflops,gbps}`. No plotting
library: the SVG is written by hand, so the script runs wherever Python does.
"""
import math
import os
import sys

MATRICES = {
    "qkv": (5120, 2048, "fused QKV"),
    "o": (2048, 4096, "attention output"),
    "router": (128, 2048, "router"),
    "gateup": (1536, 2048, "expert gate+up"),
    "down": (2048, 768, "expert down"),
    "lmhead": (151936, 2048, "lm_head"),
}
COLORS = {"omega": "#1f77b4", "torch": "#d62728", "cublas": "#ff7f0e"}
LABELS = {"omega": "Omega", "torch": "torch call (cuBLAS)", "cublas": "cuBLAS in a CUDA graph"}


def load(path, prefix):
    out = {}
    for line in open(path, errors="replace"):
        parts = line.split()
        if len(parts) == 2 and parts[0].startswith(prefix + "."):
            try:
                out[parts[0][len(prefix) + 1:]] = float(parts[1])
            except ValueError:
                pass
    return out


def series(data, n, k, unit):
    pts = []
    for key, v in data.items():
        if not key.startswith("matmul_bf16_") or not key.endswith("_" + unit):
            continue
        shape = key[len("matmul_bf16_"):-len(unit) - 1].split("x")
        if len(shape) == 3 and int(shape[1]) == n and int(shape[2]) == k:
            pts.append((int(shape[0]), v))
    return sorted(pts)


def panel(x0, y0, w, h, title, unit, lines):
    """One chart: log2 M on x, linear value on y."""
    svg = [f'<text x="{x0 + w / 2}" y="{y0 - 8}" text-anchor="middle" font-size="13">{title}</text>']
    allpts = [p for pts in lines.values() for p in pts]
    if not allpts:
        return svg + [f'<text x="{x0 + 10}" y="{y0 + h / 2}" font-size="12">no data</text>']
    ms = sorted({m for m, _ in allpts})
    lo, hi = math.log2(ms[0]), math.log2(ms[-1])
    top = max(v for _, v in allpts) * 1.1 or 1
    sx = lambda m: x0 + (math.log2(m) - lo) / ((hi - lo) or 1) * w
    sy = lambda v: y0 + h - v / top * h
    svg.append(f'<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="none" stroke="#888"/>')
    for m in ms:
        svg.append(f'<text x="{sx(m)}" y="{y0 + h + 14}" text-anchor="middle" font-size="10">{m}</text>')
    for i in range(5):
        v = top * i / 4
        svg.append(f'<text x="{x0 - 4}" y="{sy(v) + 3}" text-anchor="end" font-size="10">{v:.0f}</text>')
        svg.append(f'<line x1="{x0}" x2="{x0 + w}" y1="{sy(v)}" y2="{sy(v)}" stroke="#eee"/>')
    svg.append(f'<text x="{x0 + w / 2}" y="{y0 + h + 28}" text-anchor="middle" font-size="11">M (rows of x)</text>')
    svg.append(f'<text x="{x0 - 38}" y="{y0 + h / 2}" font-size="11" transform="rotate(-90 {x0 - 38} {y0 + h / 2})" '
               f'text-anchor="middle">{unit}</text>')
    for who, pts in lines.items():
        if not pts:
            continue
        d = " ".join(f"{'M' if i == 0 else 'L'}{sx(m):.1f},{sy(v):.1f}" for i, (m, v) in enumerate(pts))
        svg.append(f'<path d="{d}" fill="none" stroke="{COLORS[who]}" stroke-width="2"/>')
        for m, v in pts:
            svg.append(f'<circle cx="{sx(m):.1f}" cy="{sy(v):.1f}" r="2.5" fill="{COLORS[who]}"/>')
    return svg


def chart(name, peers, out_dir):
    n, k, what = MATRICES[name]
    w, h, pad = 360, 220, 60
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * w + 3 * pad}" height="{h + 2 * pad + 30}" '
           'font-family="sans-serif">', '<rect width="100%" height="100%" fill="white"/>']
    for i, (unit, label) in enumerate([("tflops", "TFLOP/s"), ("gbps", "weight GB/s")]):
        lines = {who: series(data, n, k, unit) for who, data in peers.items()}
        svg += panel(pad + i * (w + pad), pad, w, h, f"{what}: N={n}, K={k} — {label}", label, lines)
    for i, who in enumerate(w for w in peers if peers[w]):
        x = pad + i * 190
        svg.append(f'<rect x="{x}" y="{h + pad + 36}" width="12" height="12" fill="{COLORS[who]}"/>')
        svg.append(f'<text x="{x + 18}" y="{h + pad + 46}" font-size="12">{LABELS[who]}</text>')
    svg.append("</svg>")
    path = os.path.join(out_dir, f"matmul_{name}.svg")
    with open(path, "w") as f:
        f.write("\n".join(svg) + "\n")
    return path


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    peers = {"omega": load(sys.argv[1], "omega")}
    peers.update({who: load(sys.argv[2], who) for who in ("torch", "cublas")})
    os.makedirs(sys.argv[3], exist_ok=True)
    for name in MATRICES:
        print(chart(name, peers, sys.argv[3]))


if __name__ == "__main__":
    main()
