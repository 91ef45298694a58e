#!/usr/bin/env python3
"""The matmul library's peer: cuBLAS through PyTorch, on the GPU machine, in the same run as Omega's
examples/matmul_bench. Prints `torch.<metric> <value>` lines with the metric names matmul_bench prints,
so benches/gpu/compare.py can put the two side by side as ratios.

A harness, not part of Omega (Omega never links CUDA or PyTorch). Timing: CUDA events around each call,
median of --iters after a warm-up (`torch.` lines), and cuBLAS alone in a CUDA graph of 20 calls (`cublas.`
lines: no Python launch cost), the operands resident on the device, y = x @ W.T as torch's
F.linear computes it (bf16 in, bf16 out: what a serving engine calls; the f32 path with TF32 off).
The bf16 products are timed a third way, `cublas32.` lines: cuBLAS in a graph writing the f32 product
(`torch.mm(x, W.T, out_dtype=torch.float32)`), the like-for-like peer of Omega's `bf16` call, which
stores f32 (twice the output bytes of the bf16 one). A torch without that overload says so in a `#`
line and prints no `cublas32.` figure.

  python3 benches/torch/matmul_peer.py [--quick]
"""
import argparse
import statistics

import torch
import torch.nn.functional as F

QWEN = {  # name: (N, K), as a linear layer stores W [N, K]
    "qkv": (5120, 2048),
    "o": (2048, 4096),
    "router": (128, 2048),
    "gateup": (1536, 2048),
    "down": (2048, 768),
    "lmhead": (151936, 2048),
}
MS = [1, 2, 4, 8, 16, 32, 64, 128, 512, 4096]
# The SwiGLU products (M, N, K): y [M, N] from x [M, K] and the fused gate+up weight [2N, K]; an expert's
# gate+up (N = 768) at 512, 4096 and 8192 rows. matmul_bench's SWIGLU_SHAPES.
SWIGLU = [(512, 768, 2048), (4096, 768, 2048), (8192, 768, 2048)]


def timed(fn, iters):
    """Seconds per call: the median over `iters` rounds of one call between two events (what a caller
    waiting for each result sees), and, where that is shorter, a round of 20 back-to-back calls divided
    by 20 (the GPU running ahead of Python, so the launch gaps of the single call do not count)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    single, batched = [], []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        single.append(a.elapsed_time(b) * 1e-3)
        a.record()
        for _ in range(20):
            fn()
        b.record()
        b.synchronize()
        batched.append(a.elapsed_time(b) * 1e-3 / 20)
    return min(statistics.median(single), statistics.median(batched))


def graph_timed(fn, iters):
    """Seconds per call of cuBLAS itself: 20 calls captured in one CUDA graph, replayed between two events,
    the median over `iters` replays divided by 20. Python's launch cost (about 25 us a call on the H200
    host, which floors every small product's `timed` figure) is not in it: this is the figure Omega's
    command-list timing is compared with for the TFLOP/s goals."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(20):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    runs = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        runs.append(a.elapsed_time(b) * 1e-3 / 20)
    return statistics.median(runs)


def emit(name, value, prefix="torch"):
    print(f"{prefix}.{name} {value:.4g}", flush=True)


def f32_out_supported():
    """Whether this torch has `torch.mm(..., out_dtype=torch.float32)` for bf16 operands (printed either way)."""
    a = torch.ones(16, 16, device="cuda", dtype=torch.bfloat16)
    try:
        ok = torch.mm(a, a.t(), out_dtype=torch.float32).dtype == torch.float32
        print(f"# cublas32: torch.mm out_dtype=float32 {'available' if ok else 'returned another dtype'}")
        return ok
    except (TypeError, RuntimeError) as e:
        print(f"# cublas32: unavailable in this torch: {e}")
        return False


def emit_product(fn, iters, tag, flops, weight_bytes=None, f32_out=None):
    """The call figure (`torch.`) and cuBLAS's own in a graph (`cublas.`), and with `f32_out` the graph of
    that f32-output product (`cublas32.`), as TFLOP/s, us and GB/s of W."""
    runs = [("torch", timed(fn, iters)), ("cublas", graph_timed(fn, iters))]
    if f32_out is not None:
        runs.append(("cublas32", graph_timed(f32_out, iters)))
    for prefix, t in runs:
        if weight_bytes is not None:
            emit(f"{tag}_us", t * 1e6, prefix)
            emit(f"{tag}_gbps", weight_bytes / t / 1e9, prefix)
        emit(f"{tag}_tflops", flops / t / 1e12, prefix)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    iters = 5 if args.quick else 20
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    print(f"# torch {torch.__version__} device={torch.cuda.get_device_name()} cuda={torch.version.cuda}")

    # Copy bandwidth: the ceiling the weight-streaming goals are stated against (read + write of 1 GiB).
    src = torch.empty(1 << 30, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    t = timed(lambda: dst.copy_(src), iters)
    emit("copy_d2d_1g_gbps", 2 * src.numel() / t / 1e9)
    del src, dst

    f32_out = f32_out_supported()
    mm32 = lambda x, w: (lambda: torch.mm(x, w.t(), out_dtype=torch.float32)) if f32_out else None
    for n in ([4096, 8192] if not args.quick else [4096]):
        x = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        w = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        emit_product(lambda: F.linear(x, w), iters, f"matmul_bf16_{n}x{n}x{n}", 2 * n**3, f32_out=mm32(x, w))
    n = 8192 if not args.quick else 2048
    x = torch.randn(n, n, device=dev, dtype=torch.float32)
    w = torch.randn(n, n, device=dev, dtype=torch.float32)
    emit_product(lambda: F.linear(x, w), iters, f"matmul_f32_{n}x{n}x{n}", 2 * n**3)
    del x, w

    for name, (N, K) in QWEN.items():
        w = torch.randn(N, K, device=dev, dtype=torch.bfloat16)
        for m in MS if not args.quick else [1, 64, 512]:
            x = torch.randn(m, K, device=dev, dtype=torch.bfloat16)
            emit_product(
                lambda: F.linear(x, w), iters, f"matmul_bf16_{m}x{N}x{K}", 2 * m * N * K, 2 * N * K, mm32(x, w)
            )
        del w

    # The gate+up projection and its SwiGLU (the peer of Matmul::swiglu_bf16_to_bf16): F.linear into [M,
    # 2N] bf16, then silu of the gate half times the up half, as a call (`torch.`) and in a graph
    # (`torchgraph.`: three kernels, no Python launch cost); and cuBLAS's [M, 2N] GEMM alone in a graph
    # (`cublas.swiglu_gemm_`), the floor a fused launch is measured against.
    for M, N, K in SWIGLU if not args.quick else SWIGLU[:1]:
        x = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
        w = torch.randn(2 * N, K, device=dev, dtype=torch.bfloat16)

        def swiglu():
            p = F.linear(x, w)
            return F.silu(p[:, :N]) * p[:, N:]

        emit(f"swiglu_{M}x{N}x{K}_us", timed(swiglu, iters) * 1e6)
        emit(f"swiglu_{M}x{N}x{K}_us", graph_timed(swiglu, iters) * 1e6, "torchgraph")
        emit(f"swiglu_gemm_{M}x{N}x{K}_us", graph_timed(lambda: F.linear(x, w), iters) * 1e6, "cublas")
        del x, w

    # Grouped experts at decode: 128 experts, top-8, random routing; torch loops over the touched experts.
    E, top = 128, 8
    for name, (N, K) in (("gateup", QWEN["gateup"]), ("down", QWEN["down"])):
        w = torch.randn(E, N, K, device=dev, dtype=torch.bfloat16)
        for T in [1, 8, 64]:
            x = torch.randn(T, K, device=dev, dtype=torch.bfloat16)
            g = torch.Generator().manual_seed(1000 + T)
            ids = torch.stack([torch.randperm(E, generator=g)[:top] for _ in range(T)]).to(dev)
            touched = torch.unique(ids).tolist()
            rows = {e: (ids == e).nonzero()[:, 0] for e in touched}

            def loop():
                return [F.linear(x[rows[e]], w[e]) for e in touched]

            t = timed(loop, iters)
            emit(f"moe_{name}_T{T}_us", t * 1e6)
            emit(f"moe_{name}_T{T}_gbps", 2 * len(touched) * N * K / t / 1e9)
        del w


if __name__ == "__main__":
    main()
