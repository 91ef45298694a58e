#!/usr/bin/env python3
"""Qwen3-30B-A3B's decode step in PyTorch, from the weights Omega generates (benches/torch/qwen_weights.py):
the check of Omega's model against an independent implementation, and its benchmark peer.

A harness, not part of Omega (Omega never links CUDA or PyTorch). The model is written the Hugging Face way
(embedding, per layer RMSNorm, q/k/v projections, per-head QK-RMSNorm, rotate_half RoPE at theta 1e6, GQA
attention over a KV cache, o_proj, residual, RMSNorm, a router whose top-k softmax is renormalised, SwiGLU
experts, their weighted sum, residual; final RMSNorm, lm_head, greedy argmax) with Omega's rounding points
(src/libs/serving/qwen3/reference.rs): the residual, the norms' outputs, q/k/v, the normed and rotated q/k,
the attention output, o_proj's output and SwiGLU's output are bf16; norms, RoPE, softmax, router logits,
the expert products and their weighted sum are float32.

  python3 benches/torch/qwen3_peer.py --check DUMP [--layers L] [--prompt 1,2] [--tol 0.075]
  python3 benches/torch/qwen3_peer.py --bench [--layers 48] [--quick] [--ctx 1024,16384] [--batch 1,8,32]

--check DUMP compares an Omega dump with this model, step by step, feeding the dump's input tokens. The dump
(docs/serving.md, "Qwen3 dump format") is JSON lines:
  - an optional first line without "step", the header: {"dump": "omega-qwen3", "config": {"hidden": ..,
    "layers": .., "q_heads": .., "kv_heads": .., "head_dim": .., "experts": .., "top_k": .., "expert_inter":
    .., "vocab": .., "eps": .., "rope_theta": ..}, "batch": B, "prompt": [B tokens], "platform": ".."}
    (all fields optional but "config"; without a header: --config full|tiny and --layers, --prompt);
  - then one line per step i = 0, 1, ...: {"step": i, "input": [B tokens fed], "tokens": [B greedy tokens
    out], "logits_sha": sha256 hex of the step's logits [B, vocab] as little-endian float32, row-major,
    "logits": [[the first 64 logits of each row]], "top5": [[the 5 best token ids of each row, best
    first]]}; "input" may be left out: then step 0 takes the header's prompt (or --prompt) and step i the
    tokens of step i - 1 (greedy decoding).
A step passes when each row's token is this model's argmax, or a near tie broken the other way (this model's
logit of Omega's token within twice the row's tolerance of its best), and every dumped logit is within --tol
times the row's RMS (over the whole vocabulary) of this model's. Omega and this model round to bf16 at the
same points but sum in other orders, so a value now and then lands on the other side of a bf16 rounding and
the flips spread: the default, 0.075, is Omega's own `qwen3::reference::Apart::TOLERANCE` (three times what
its host reference differs from itself summed in another order); a wrong step moves the logits by their whole
spread. Its attention is Omega's decode arithmetic (float64 scores, each softmax weight rounded to bf16 for
the weighted sum of V, the normaliser unrounded). Prints `peer qwen3 check step=i tokens=ok|(per row
ok,near-tie,DIFFER) max_err=.. tol=.. top5_overlap=.. router_gap=.. [routing-tie]` (router_gap: the smallest
gap over the layers and rows between the last chosen expert's router logit and the first left out, relative to
the router logits' rms). A row past the logit tolerance still passes where that gap is within --route-tol
(0.03, twice Omega's tolerance's rms fraction): a routing near tie, which another correct implementation may
break the other way, moving the logits by that expert's weighted share; it is counted and printed
(`routing-tie`), and the steps after it must pass again. A final `peer qwen3 check: ok (N steps, batch B, L
layers, T near ties, R routing ties)` or `peer qwen3 check: FAILED ...` (exit status 1).

--bench times the decode step at each batch and context, the whole model on the GPU, the weights generated
on the GPU (the same bits as Omega's: qwen_weights.fill_torch, self-checked), the KV cache filled with random
bf16 (timing does not depend on its values); each step appends K/V at position ctx - 1 and attends over ctx
positions (scaled_dot_product_attention, GQA). Modes: eager, and the step captured in a CUDA graph and
replayed (no Python launch cost). The MoE two ways: `gather` (each chosen expert's weights gathered per
token-choice and multiplied with bmm) and `grouped` (the token-choices sorted by expert, torch._grouped_mm
over the 128 experts; skipped, and said so, where torch lacks it). Prints
  peer qwen3 decode B=1 ctx=1024 mode=graph moe=grouped step_us=.. tok_s=..
and a last `peer qwen3 best B=.. ctx=.. step_us=.. (mode, moe)` per shape.
"""
import argparse
import hashlib
import json
import math
import os
import statistics
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qwen_weights as qw  # noqa: E402

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # py_compile on a machine without torch; main() says so.
    torch = None

LOGITS_SHOWN = 64


class Model:
    """The weights on the GPU and the step. `precise`: the check's arithmetic (float32 products of the
    widened bf16 weights where Omega keeps float32); else the serving arithmetic (bf16 products)."""

    def __init__(self, cfg, device="cuda", precise=False, progress=True):
        self.cfg, self.dev, self.precise = cfg, device, precise
        self.gaps = None  # the check's per-layer router gaps of the step running (a list), or None
        t0 = time.time()
        gen = {}
        tensors = qw.qwen3_tensors(cfg)
        for n, t in enumerate(tensors):
            gen[t] = qw.qwen3_tensor(cfg, t, device=device)
            if progress and (n % 55 == 0 or n == len(tensors) - 1):
                print(f"# weights: {n + 1}/{len(tensors)} tensors, {time.time() - t0:.1f} s", flush=True)
        self.embed = gen[(None, "embed")]
        self.final_norm = gen[(None, "final_norm")].float()
        self.lm_head = gen[(None, "lm_head")]
        self.lm_head_f = self.lm_head.float() if precise else None
        self.layers = []
        for l in range(cfg["layers"]):
            w = {k: gen[(l, k)] for k, _, _ in qw.LAYER}
            for k in ("input_norm", "post_norm", "q_norm", "k_norm"):
                w[k] = w[k].float()
            w["router"] = w["router"].float()
            self.layers.append(w)
        # theta^(-2i/d) in float64, made here: a tensor from a Python number copies from the host, which a
        # CUDA graph's capture refuses.
        d = cfg["head_dim"]
        i = torch.arange(d // 2, dtype=torch.float64, device=device)
        self.inv_freq = torch.pow(torch.full_like(i, float(cfg["rope_theta"])), -2.0 * i / d)
        # 1 / sqrt(d) * log2(e), each step in float32 (the decode kernel's scale).
        f32 = lambda x: torch.tensor(x, dtype=torch.float32)  # noqa: E731
        self.scale_log2 = float((f32(1.0) / torch.sqrt(f32(float(d)))) * f32(math.log2(math.e)))
        torch.cuda.synchronize()
        self.load_s = time.time() - t0

    # ----- the pieces -------------------------------------------------------------------------------------

    def rmsnorm(self, x, w):
        """bf16(x * rsqrt(mean(x^2) + eps) * w), in float32."""
        xf = x.float()
        inv = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.cfg["eps"])
        return (xf * inv * w).to(torch.bfloat16)

    def norm_rope(self, x, w, cos, sin):
        """Per head (last dim): RMSNorm with w, then rotate_half RoPE, in float32, one bf16 rounding."""
        xf = x.float()
        n = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.cfg["eps"]) * w
        half = n.shape[-1] // 2
        a, b = n[..., :half], n[..., half:]
        return torch.cat((a * cos - b * sin, b * cos + a * sin), -1).to(torch.bfloat16)

    def rope_tables(self, positions):
        """cos, sin [len(positions), 1, head_dim / 2]: p * theta^(-2i/d) in float64, rounded to float32."""
        angle = positions.to(torch.float64)[:, None] * self.inv_freq[None, :]
        return torch.cos(angle).float()[:, None, :], torch.sin(angle).float()[:, None, :]

    def attention(self, q, kc, vc, n):
        """q [B, qh, d] bf16 over the first n positions of the cache kc, vc [B, kvh, ctx, d]: out [B, qh*d]."""
        c = self.cfg
        bsz, group = q.shape[0], c["q_heads"] // c["kv_heads"]
        if self.precise:
            # Omega's decode arithmetic (omega_refmath::attend_row with round_p): scores in float64 times
            # scale * log2(e) (both float32, as the kernel has them), p = 2^(s - max), the sum of p
            # unrounded, each p rounded to bf16 for the weighted sum of V (the tensor cores' P . V).
            k, v = kc[:, :, :n].double(), vc[:, :, :n].double()
            qg = q.double().view(bsz, c["kv_heads"], group, c["head_dim"])
            s = torch.matmul(qg, k.transpose(-1, -2)) * self.scale_log2
            p = torch.exp2(s - s.amax(-1, keepdim=True))
            o = torch.matmul(p.float().to(torch.bfloat16).double(), v) / p.sum(-1, keepdim=True)
        else:
            qh = q.view(bsz, c["q_heads"], 1, c["head_dim"])
            o = sdpa_gqa(qh, kc[:, :, :n], vc[:, :, :n])
        return o.reshape(bsz, -1).to(torch.bfloat16)

    def moe(self, x, w, mode):
        """The experts' weighted sum [B, hidden] in float32 for the bf16 x [B, hidden]."""
        c = self.cfg
        logits = x.float() @ w["router"].t()
        top, idx = torch.topk(logits, c["top_k"], dim=-1)
        if self.gaps is not None:
            # How far the last chosen expert lies above the first left out, per row, relative to the row's
            # router logits' rms: within rounding of zero, another correct implementation may route otherwise.
            nxt = torch.topk(logits, c["top_k"] + 1, dim=-1).values[:, -1]
            self.gaps.append((top[:, -1] - nxt) / logits.pow(2).mean(-1).sqrt())
        weights = torch.softmax(top, -1)
        bsz, k, inter = x.shape[0], c["top_k"], c["expert_inter"]
        flat = idx.reshape(-1)
        if mode == "grouped":
            order = torch.argsort(flat, stable=True)
            counts = torch.zeros(c["experts"], dtype=torch.int32, device=x.device)
            counts.index_add_(0, flat.to(torch.int64), torch.ones_like(flat, dtype=torch.int32))
            offs = torch.cumsum(counts, 0, dtype=torch.int32)
            xs = x[order // k]
            g = torch._grouped_mm(xs, w["gate_up"].transpose(-2, -1), offs=offs)
            s = (F.silu(g[:, :inter].float()) * g[:, inter:].float()).to(torch.bfloat16)
            d = torch._grouped_mm(s, w["down"].transpose(-2, -1), offs=offs).float()
            y = torch.empty_like(d)
            y[order] = d
            y = y.view(bsz, k, -1)
        else:
            xr = x.repeat_interleave(k, 0)[:, None, :]
            gu, dn = w["gate_up"][flat], w["down"][flat]
            if self.precise:
                g = torch.bmm(xr.float(), gu.float().transpose(1, 2))[:, 0]
            else:
                g = torch.bmm(xr, gu.transpose(1, 2))[:, 0].float()
            s = (F.silu(g[:, :inter]) * g[:, inter:]).to(torch.bfloat16)
            if self.precise:
                d = torch.bmm(s[:, None, :].float(), dn.float().transpose(1, 2))[:, 0]
            else:
                d = torch.bmm(s[:, None, :], dn.transpose(1, 2))[:, 0].float()
            y = d.view(bsz, k, -1)
        return (weights[:, :, None] * y).sum(1)

    def step(self, tokens, pos, n, caches, moe="gather"):
        """One decode step: tokens [B] (device int64) at position `pos` (device int64 [1]); attends the
        first n cache positions (a Python int); caches[l] = (k, v) [B, kvh, ctx, d] bf16. Logits [B, vocab]."""
        c = self.cfg
        bsz, d = tokens.shape[0], c["head_dim"]
        cos, sin = self.rope_tables(pos)
        h = self.embed[tokens]
        for w, (kc, vc) in zip(self.layers, caches):
            x = self.rmsnorm(h, w["input_norm"])
            q, k, v = F.linear(x, w["q"]), F.linear(x, w["k"]), F.linear(x, w["v"])
            q = self.norm_rope(q.view(bsz, c["q_heads"], d), w["q_norm"], cos, sin)
            k = self.norm_rope(k.view(bsz, c["kv_heads"], d), w["k_norm"], cos, sin)
            kc.index_copy_(2, pos, k.view(bsz, c["kv_heads"], 1, d))
            vc.index_copy_(2, pos, v.view(bsz, c["kv_heads"], 1, d))
            o = self.attention(q, kc, vc, n)
            h = (h.float() + F.linear(o, w["o"]).float()).to(torch.bfloat16)
            x = self.rmsnorm(h, w["post_norm"])
            h = (h.float() + self.moe(x, w, moe)).to(torch.bfloat16)
        x = self.rmsnorm(h, self.final_norm)
        if self.precise:
            return x.float() @ self.lm_head_f.t()
        return F.linear(x, self.lm_head).float()

    def caches(self, bsz, ctx, fill=False):
        shape = (bsz, self.cfg["kv_heads"], ctx, self.cfg["head_dim"])
        make = (lambda: (torch.randn(shape, device=self.dev) * 0.5).to(torch.bfloat16)) if fill else (
            lambda: torch.zeros(shape, dtype=torch.bfloat16, device=self.dev))
        return [(make(), make()) for _ in self.layers]


_GQA = {}


def sdpa_gqa(q, k, v):
    """scaled_dot_product_attention with grouped KV heads: enable_gqa where torch has it (2.5+), else the
    KV heads repeated (said once on stderr)."""
    if _GQA.get("ok", True):
        try:
            return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        except TypeError:
            _GQA["ok"] = False
            print("# attention: this torch has no enable_gqa; KV heads repeated", file=sys.stderr)
    g = q.shape[1] // k.shape[1]
    return F.scaled_dot_product_attention(q, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1))


# ----- the check --------------------------------------------------------------------------------------------


def logits_sha(logits):
    """sha256 of [B, vocab] float32, little-endian, row-major (the dump's logits_sha)."""
    flat = logits.detach().float().cpu().reshape(-1)
    try:
        data = flat.numpy().astype("<f4").tobytes()
    except (ImportError, RuntimeError):  # no numpy: the slow way
        data = struct.pack(f"<{flat.numel()}f", *flat.tolist())
    return hashlib.sha256(data).hexdigest()


def read_dump(path, args):
    lines = [json.loads(line) for line in open(path) if line.strip()]
    header = lines[0] if lines and "step" not in lines[0] else {}
    steps = lines[1:] if header else lines
    if "config" in header:
        cfg = dict(header["config"])
    else:
        cfg = dict(qw.QWEN3[args.config])
    if args.layers:
        cfg["layers"] = args.layers
    prompt = header.get("prompt") or ([int(t) for t in args.prompt.split(",")] if args.prompt else None)
    return header, cfg, steps, prompt


def check(args):
    header, cfg, steps, prompt = read_dump(args.check, args)
    if not steps:
        sys.exit("peer qwen3 check: the dump has no step lines")
    bsz = len(steps[0]["tokens"])
    print(f"# check {args.check}: {len(steps)} steps, batch {bsz}, config {cfg}, platform "
          f"{header.get('platform', '?')}", flush=True)
    model = Model(cfg, precise=True)
    caches = model.caches(bsz, len(steps))
    failed, feed, ties, route_ties = [], prompt, 0, 0
    for i, line in enumerate(steps):
        assert line["step"] == i, f"step line {i} says step {line['step']}"
        inp = line.get("input", feed)
        if inp is None:
            sys.exit("peer qwen3 check: step 0 has no input and there is no prompt (header or --prompt)")
        tokens = torch.tensor(inp, dtype=torch.int64, device="cuda")
        pos = torch.tensor([i], dtype=torch.int64, device="cuda")
        model.gaps = []
        logits = model.step(tokens, pos, i + 1, caches)
        route_gap = torch.stack(model.gaps).amin(0)  # per row, over the layers
        ours = logits.argmax(-1).tolist()
        rms = logits.pow(2).mean(-1).sqrt()
        if any(v is None for row in line["logits"] for v in row):
            # The dump writes a NaN or an infinity as null (JSON has neither).
            print(f"peer qwen3 check step={i} logits=NOT-FINITE (null in the dump)", flush=True)
            failed.append(i)
            feed = line["tokens"]
            continue
        shown = torch.tensor(line["logits"], dtype=torch.float32, device="cuda")
        err = (shown - logits[:, : shown.shape[1]]).abs().amax(-1)
        tol = args.tol * rms
        top5 = logits.topk(5, -1).indices.tolist()
        overlap = min(len(set(a) & set(b)) for a, b in zip(top5, line["top5"]))
        # A row past the tolerance passes only where a layer's routing was a near tie (its relative router
        # gap within --route-tol): the two implementations may each have chosen another expert there, which
        # moves the logits by that expert's weighted share. Reported as routing-tie.
        within = err <= tol
        route_tie = (~within) & (route_gap <= args.route_tol)
        ok_logits = bool((within | route_tie).all())
        route_ties += int(route_tie.sum().item())
        # Each row's token: this model's argmax, or a near tie broken the other way (this model's logit of
        # Omega's token within twice the row's tolerance of its best: rounding decides such a tie).
        below = [(logits[b, o] - logits[b, t]).item() for b, (o, t) in enumerate(zip(ours, line["tokens"]))]
        verdict = ["ok" if o == t else "near-tie" if g <= 2 * tol[b].item() else "DIFFER"
                   for b, (o, t, g) in enumerate(zip(ours, line["tokens"], below))]
        ok_tokens = "DIFFER" not in verdict
        ties += verdict.count("near-tie")
        word = "ok" if all(v == "ok" for v in verdict) else ",".join(verdict)
        gaps = "" if word == "ok" else " gaps=" + ",".join(f"{g:.4g}" for g in below)
        print(f"peer qwen3 check step={i} tokens={word} max_err={err.max().item():.4g} "
              f"tol={tol.min().item():.4g} top5_overlap={overlap}/5 router_gap={route_gap.min().item():.3g}"
              f"{' routing-tie' if bool(route_tie.any()) else ''}{gaps}", flush=True)
        if args.verbose:
            print(f"#   omega {line['tokens']} peer {ours} sha omega {line.get('logits_sha', '-')[:16]} "
                  f"peer {logits_sha(logits)[:16]}")
        if not (ok_tokens and ok_logits):
            failed.append(i)
        feed = line["tokens"]
    if failed:
        print(f"peer qwen3 check: FAILED at steps {failed} of {len(steps)}")
        sys.exit(1)
    print(f"peer qwen3 check: ok ({len(steps)} steps, batch {bsz}, {cfg['layers']} layers, {ties} near ties, "
          f"{route_ties} routing ties)")


def write_dump(args):
    """This model's own dump (the format above), for trying --check without Omega: --write-dump PATH."""
    cfg = dict(qw.QWEN3[args.config])
    if args.layers:
        cfg["layers"] = args.layers
    prompt = [int(t) for t in (args.prompt or "1").split(",")]
    model = Model(cfg, precise=True)
    caches = model.caches(len(prompt), args.steps)
    with open(args.write_dump, "w") as out:
        out.write(json.dumps({"dump": "omega-qwen3", "config": cfg, "batch": len(prompt), "prompt": prompt,
                              "platform": "torch"}) + "\n")
        feed = prompt
        for i in range(args.steps):
            tokens = torch.tensor(feed, dtype=torch.int64, device="cuda")
            logits = model.step(tokens, torch.tensor([i], device="cuda"), i + 1, caches)
            out_tokens = logits.argmax(-1).tolist()
            line = {"step": i, "input": feed, "tokens": out_tokens, "logits_sha": logits_sha(logits),
                    "logits": logits[:, :LOGITS_SHOWN].tolist(), "top5": logits.topk(5, -1).indices.tolist()}
            out.write(json.dumps(line) + "\n")
            feed = out_tokens
    print(f"# wrote {args.write_dump}: {args.steps} steps")


# ----- the benchmark ----------------------------------------------------------------------------------------


def timed(fn, iters):
    """Median seconds of one call, after warm-up: each call between its own pair of events, the calls back
    to back (the host runs ahead; one synchronisation at the end)."""
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    marks = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    for start, end in marks:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(start.elapsed_time(end) * 1e-3 for start, end in marks)


def graphed(fn):
    """fn captured in a CUDA graph (warmed on a side stream first): the replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay, graph


def bench(args):
    cfg = dict(qw.QWEN3_FULL)
    cfg["layers"] = args.layers or cfg["layers"]
    print(f"# torch {torch.__version__} device={torch.cuda.get_device_name()} cuda={torch.version.cuda} "
          f"layers={cfg['layers']}", flush=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    model = Model(cfg)
    print(f"# weights generated on the GPU in {model.load_s:.1f} s "
          f"({torch.cuda.memory_allocated() / 2**30:.1f} GiB)", flush=True)
    moes = ["gather"] + (["grouped"] if hasattr(torch, "_grouped_mm") else [])
    if "grouped" not in moes:
        print("# moe=grouped skipped: this torch has no torch._grouped_mm", flush=True)
    batches = [int(b) for b in args.batch.split(",")]
    ctxs = [int(c) for c in args.ctx.split(",")]
    iters = 3 if args.quick else 10
    t_start = time.time()
    for ctx in ctxs:
        for bsz in batches:
            need = 2 * cfg["layers"] * bsz * cfg["kv_heads"] * ctx * cfg["head_dim"] * 2
            free = torch.cuda.mem_get_info()[0]
            if need + (8 << 30) > free:
                print(f"# B={bsz} ctx={ctx}: the cache needs {need / 2**30:.1f} GiB, {free / 2**30:.1f} free: skipped",
                      flush=True)
                continue
            caches = model.caches(bsz, ctx, fill=True)
            tokens = torch.randint(0, cfg["vocab"], (bsz,), device="cuda")
            pos = torch.tensor([ctx - 1], device="cuda")
            best = None
            for moe in moes:
                def one():
                    return model.step(tokens, pos, ctx, caches, moe=moe).argmax(-1)
                try:
                    results = [("eager", timed(one, iters))]
                    replay, graph = graphed(one)
                    results.append(("graph", timed(replay, iters)))
                except RuntimeError as e:  # a torch whose grouped mm or graph refuses this shape: said, not hidden
                    print(f"# B={bsz} ctx={ctx} moe={moe}: {str(e).splitlines()[0]}", flush=True)
                    continue
                replay = graph = None
                for mode, s in results:
                    print(f"peer qwen3 decode B={bsz} ctx={ctx} mode={mode} moe={moe} step_us={s * 1e6:.1f} "
                          f"tok_s={bsz / s:.1f}", flush=True)
                    if best is None or s < best[0]:
                        best = (s, mode, moe)
            if best:
                print(f"peer qwen3 best B={bsz} ctx={ctx} step_us={best[0] * 1e6:.1f} ({best[1]}, {best[2]})",
                      flush=True)
            del caches
            torch.cuda.empty_cache()
    print(f"# bench: {time.time() - t_start:.1f} s after the weights")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", metavar="DUMP", help="compare an Omega dump (JSON lines) with this model")
    p.add_argument("--write-dump", metavar="PATH", help="write this model's own dump (--config, --steps)")
    p.add_argument("--bench", action="store_true", help="time the full model's decode step")
    p.add_argument("--config", choices=sorted(qw.QWEN3), default="full", help="without a dump header")
    p.add_argument("--layers", type=int, help="layers (the check: overrides the dump's config)")
    p.add_argument("--prompt", help="the first tokens, comma-separated, one per sequence")
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--tol", type=float, default=0.075, help="logit tolerance, times the row's RMS")
    p.add_argument("--route-tol", type=float, default=0.03,
                   help="a routing near tie: the router gap below this, times the router logits' RMS")
    p.add_argument("--batch", default="1,8,32")
    p.add_argument("--ctx", default="1024,16384")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args()
    if torch is None:
        sys.exit("qwen3_peer: needs torch")
    if not torch.cuda.is_available():
        sys.exit("qwen3_peer: needs a CUDA GPU")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    with torch.inference_mode():
        if args.check:
            check(args)
        elif args.write_dump:
            write_dump(args)
        elif args.bench:
            bench(args)
        else:
            p.error("one of --check, --write-dump, --bench")


if __name__ == "__main__":
    main()
