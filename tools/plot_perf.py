#!/usr/bin/env python3
"""Charts of the recorded benchmarks, Omega beside its peer from the same run, as SVG files.

  tools/plot_perf.py matmul OMEGA_LOG PEER_LOG OUT_DIR
  tools/plot_perf.py attention OMEGA_LOG PEER_LOG OUT_DIR

matmul: one SVG per Qwen3-30B-A3B matrix, TFLOP/s and weight GB/s against M. OMEGA_LOG holds
`omega.<metric> <value>` lines (examples/matmul_bench; its bf16-output `omega16.` lines too, when
present), PEER_LOG `torch.<metric>`, `cublas.<metric>` and `cublas32.<metric>` lines
(benches/torch/matmul_peer.py; cuBLAS in a CUDA graph, writing bf16 and f32, is drawn when present),
metrics `matmul_bf16_{M}x{N}x{K}_{tflops,gbps}`.

attention: one SVG per KV page size (16, 64) of the paged decode, one panel per batch, GB/s of the KV
bytes against the KV length, with each side's measured copy bandwidth as a dashed line. OMEGA_LOG holds
`omega.` lines of examples/attn_bench, PEER_LOG `torch.` lines of benches/torch/attn_peer.py (dense SDPA
over the same KV), metrics `paged_decode_p{P}_b{B}_kv{L}_gbps` and `copy_gbps`.

No plotting library: the SVG is written by hand, so the script runs wherever Python does.
"""
import math
import os
import re
import sys

from perf_logs import load

MATRICES = {
    "qkv": (5120, 2048, "fused QKV"),
    "o": (2048, 4096, "attention output"),
    "router": (128, 2048, "router"),
    "gateup": (1536, 2048, "expert gate+up"),
    "down": (2048, 768, "expert down"),
    "lmhead": (151936, 2048, "lm_head"),
}
COLORS = {"omega": "#1f77b4", "omega16": "#17becf", "torch": "#d62728", "cublas": "#ff7f0e", "cublas32": "#8c564b"}
MATMUL_LABELS = {
    "omega": "Omega, f32 out",
    "omega16": "Omega, bf16 out",
    "torch": "torch call (cuBLAS, bf16 out)",
    "cublas": "cuBLAS in a CUDA graph, bf16 out",
    "cublas32": "cuBLAS in a CUDA graph, f32 out",
}
ATTN_LABELS = {"omega": "Omega paged decode", "torch": "torch SDPA (dense KV)"}
PAGES = (16, 64)
BATCHES = (1, 4, 16, 64)


def matmul_series(data, n, k, unit):
    pts = []
    for key, v in data.items():
        if not key.startswith("matmul_bf16_") or not key.endswith("_" + unit):
            continue
        shape = key[len("matmul_bf16_"):-len(unit) - 1].split("x")
        if len(shape) == 3 and int(shape[1]) == n and int(shape[2]) == k:
            pts.append((int(shape[0]), v))
    return sorted(pts)


def attn_series(data, page, batch):
    pts = []
    for key, v in data.items():
        m = re.fullmatch(r"paged_decode_p(\d+)_b(\d+)_kv(\d+)_gbps", key)
        if m and int(m.group(1)) == page and int(m.group(2)) == batch:
            pts.append((int(m.group(3)), v))
    return sorted(pts)


def panel(x0, y0, w, h, title, xlabel, ylabel, lines, levels=None):
    """One chart: log2 of x on the x axis, linear y; `levels` are dashed horizontal lines per side."""
    levels = levels or {}
    svg = [f'<text x="{x0 + w / 2}" y="{y0 - 8}" text-anchor="middle" font-size="13">{title}</text>']
    allpts = [p for pts in lines.values() for p in pts]
    if not allpts:
        return svg + [f'<text x="{x0 + 10}" y="{y0 + h / 2}" font-size="12">no data</text>']
    xs = sorted({x for x, _ in allpts})
    lo, hi = math.log2(xs[0]), math.log2(xs[-1])
    top = max([v for _, v in allpts] + list(levels.values())) * 1.1 or 1
    sx = lambda x: x0 + (math.log2(x) - lo) / ((hi - lo) or 1) * w
    sy = lambda v: y0 + h - v / top * h
    svg.append(f'<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="none" stroke="#888"/>')
    for x in xs:
        svg.append(f'<text x="{sx(x)}" y="{y0 + h + 14}" text-anchor="middle" font-size="10">{x}</text>')
    for i in range(5):
        v = top * i / 4
        svg.append(f'<text x="{x0 - 4}" y="{sy(v) + 3}" text-anchor="end" font-size="10">{v:.0f}</text>')
        svg.append(f'<line x1="{x0}" x2="{x0 + w}" y1="{sy(v)}" y2="{sy(v)}" stroke="#eee"/>')
    svg.append(f'<text x="{x0 + w / 2}" y="{y0 + h + 28}" text-anchor="middle" font-size="11">{xlabel}</text>')
    svg.append(f'<text x="{x0 - 38}" y="{y0 + h / 2}" font-size="11" transform="rotate(-90 {x0 - 38} {y0 + h / 2})" '
               f'text-anchor="middle">{ylabel}</text>')
    for who, v in levels.items():
        svg.append(f'<line x1="{x0}" x2="{x0 + w}" y1="{sy(v):.1f}" y2="{sy(v):.1f}" stroke="{COLORS[who]}" '
                   'stroke-dasharray="4 3" stroke-width="1"/>')
    for who, pts in lines.items():
        if not pts:
            continue
        d = " ".join(f"{'M' if i == 0 else 'L'}{sx(x):.1f},{sy(v):.1f}" for i, (x, v) in enumerate(pts))
        svg.append(f'<path d="{d}" fill="none" stroke="{COLORS[who]}" stroke-width="2"/>')
        for x, v in pts:
            svg.append(f'<circle cx="{sx(x):.1f}" cy="{sy(v):.1f}" r="2.5" fill="{COLORS[who]}"/>')
    return svg


def legend(x0, y, who_labels):
    svg = []
    for i, (who, label) in enumerate(who_labels):
        x = x0 + i * 210
        svg.append(f'<rect x="{x}" y="{y}" width="12" height="12" fill="{COLORS[who]}"/>')
        svg.append(f'<text x="{x + 18}" y="{y + 10}" font-size="12">{label}</text>')
    return svg


def write(path, width, height, parts):
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif">',
           '<rect width="100%" height="100%" fill="white"/>'] + parts + ["</svg>"]
    with open(path, "w") as f:
        f.write("\n".join(svg) + "\n")
    return path


def matmul_chart(name, peers, out_dir):
    n, k, what = MATRICES[name]
    w, h, pad = 360, 220, 60
    parts = []
    for i, (unit, label) in enumerate([("tflops", "TFLOP/s"), ("gbps", "weight GB/s")]):
        lines = {who: matmul_series(data, n, k, unit) for who, data in peers.items()}
        parts += panel(pad + i * (w + pad), pad, w, h, f"{what}: N={n}, K={k} — {label}", "M (rows of x)", label,
                       lines)
    parts += legend(pad, h + pad + 36, [(who, MATMUL_LABELS[who]) for who in peers if peers[who]])
    return write(os.path.join(out_dir, f"matmul_{name}.svg"), 2 * w + 3 * pad, h + 2 * pad + 30, parts)


def attention_chart(page, peers, out_dir):
    w, h, pad = 300, 200, 60
    parts = []
    for i, batch in enumerate(BATCHES):
        lines = {who: attn_series(data, page, batch) for who, data in peers.items()}
        levels = {who: data["copy_gbps"] for who, data in peers.items() if "copy_gbps" in data}
        col, row = i % 2, i // 2
        parts += panel(pad + col * (w + pad), pad + row * (h + pad + 20), w, h,
                       f"paged decode, page {page}, batch {batch}", "KV length (tokens)", "GB/s of KV", lines, levels)
    y = pad + 2 * (h + pad + 20) - 10
    parts += legend(pad, y, [(who, ATTN_LABELS[who]) for who in peers if peers[who]])
    parts.append(f'<text x="{pad}" y="{y + 30}" font-size="11">dashed: each side\'s measured copy bandwidth '
                 '(read + write) in the same run</text>')
    return write(os.path.join(out_dir, f"attention_p{page}.svg"), 2 * w + 3 * pad, y + 45, parts)


def main():
    if len(sys.argv) != 5 or sys.argv[1] not in ("matmul", "attention"):
        sys.exit(__doc__)
    kind, omega_log, peer_log, out_dir = sys.argv[1:]
    peers = {"omega": load(omega_log, "omega")}
    os.makedirs(out_dir, exist_ok=True)
    if kind == "matmul":
        # The bf16-output lines (`omega16.`, `cublas32.` for the f32 peer) where the logs have them.
        peers["omega16"] = load(omega_log, "omega16")
        peers.update({who: load(peer_log, who) for who in ("torch", "cublas", "cublas32")})
        for name in MATRICES:
            print(matmul_chart(name, peers, out_dir))
    else:
        peers["torch"] = load(peer_log, "torch")
        for page in PAGES:
            print(attention_chart(page, peers, out_dir))


if __name__ == "__main__":
    main()
