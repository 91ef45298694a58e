#!/usr/bin/env python3
"""The twin of src/libs/serving/weights.rs: the same seeded bf16 weights, bit for bit.

Element `index` of tensor `tensor` under `seed`: h = mix(mix(mix(seed) ^ tensor) ^ index) with splitmix64's
step, u = h >> 40, v = (u * 2^-23 - 1) * a in float32, rounded to bf16 to nearest even. Every step is an
integer operation or one IEEE float32 operation, so numpy (vectorised, wrapping uint64 arithmetic) and the
pure-Python path (used when numpy is missing) give the Rust values exactly; torch gets them through numpy,
or on the GPU (`bf16_tensor_torch`: the same hash in int64 torch ops, checked against numpy at first use).

A norm's weights are centred: v = center + (u * 2^-23 - 1) * a, the sum one more float32 operation
(weights.rs `fill_bf16_centered`). The Qwen3 model's tensors (src/libs/serving/qwen3/config.rs) are named,
numbered, shaped and scaled by `qwen3_tensors`, `tensor_id`, `tensor_shape`, `tensor_scale`, `tensor_center`;
`qwen3_tensor(cfg, tensor)` is one of them as torch bfloat16.

    python3 benches/torch/qwen_weights.py --seed 7 --tensor 3 --count 16 --scale 0.5
    python3 benches/torch/qwen_weights.py --qwen3 tiny --name model.layers.1.self_attn.q_norm.weight --count 8

print the bf16 bit patterns, one hex word a line (tests/serving.rs and tests/qwen3_weights.rs hold such
vectors).
"""
import argparse
import math
import struct

M64 = (1 << 64) - 1


def splitmix64(z):
    z = (z + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def f32(x):
    """x rounded to float32 (Python floats are doubles)."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def bf16_rne_bits(x):
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFFFFFF) >> 16


def bf16_bits_python(seed, tensor, start, count, a, center=0.0):
    base = splitmix64(splitmix64(seed) ^ tensor)
    a32, c32 = f32(a), f32(center)
    out = []
    for i in range(start, start + count):
        u = splitmix64(base ^ i) >> 40
        # u * 2^-23 - 1 is exact in float32 (and in a double); the product by a is rounded once, to float32,
        # and so is the sum with the centre (a double's sum of two float32, then rounded, is the float32 sum;
        # v is never -0, so a centre of 0 changes nothing, as in weights.rs).
        v = f32((u * 2.0**-23 - 1.0) * a32)
        out.append(bf16_rne_bits(f32(c32 + v)))
    return out


def bf16_bits_numpy(np, seed, tensor, start, count, a, center=0.0):
    def mix(z):
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))

    base = np.uint64(splitmix64(splitmix64(seed) ^ tensor))
    with np.errstate(over="ignore"):
        h = mix(base ^ np.arange(start, start + count, dtype=np.uint64))
    u = (h >> np.uint64(40)).astype(np.float32)
    v = (u * np.float32(2.0**-23) - np.float32(1.0)) * np.float32(a)
    v = np.float32(center) + v
    bits = v.view(np.uint32)
    return ((bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)


def bf16_tensor(seed, tensor, shape, a, center=0.0):
    """The tensor as torch bfloat16 (needs torch and numpy)."""
    import numpy as np
    import torch

    bits = bf16_bits_numpy(np, seed, tensor, 0, math.prod(shape), a, center).astype(np.int16)
    return torch.from_numpy(bits).view(torch.bfloat16).reshape(shape)


# ----- the generator in torch int64 ops, on any device ---------------------------------------------------

_CHECKED = set()


def _i64(x):
    """The uint64 x as the int64 of the same bits."""
    return x - (1 << 64) if x >= 1 << 63 else x


def _shr(z, s):
    """Logical right shift of int64 bits (torch's >> is arithmetic)."""
    return (z >> s) & ((1 << (64 - s)) - 1)


def _mix_torch(z):
    # int64 addition and multiplication wrap (two's complement) in torch on CPU and CUDA: the uint64 ops.
    z = z + _i64(0x9E3779B97F4A7C15)
    z = (z ^ _shr(z, 30)) * _i64(0xBF58476D1CE4E5B9)
    z = (z ^ _shr(z, 27)) * _i64(0x94D049BB133111EB)
    return z ^ _shr(z, 31)


def fill_torch(out, seed, tensor, start, a, center=0.0, chunk=1 << 26):
    """Fills the flat bfloat16 tensor `out` with elements start.. of `tensor` (any device), chunk by chunk.

    The first use on a device compares 4096 elements with the pure-Python path, so a torch whose int64
    arithmetic did not wrap would be refused, not silently give other weights."""
    import torch

    dev = out.device
    base = _i64(splitmix64(splitmix64(seed) ^ tensor))
    a32 = torch.tensor(a, dtype=torch.float32, device=dev)
    c32 = torch.tensor(center, dtype=torch.float32, device=dev)
    n = out.numel()
    for at in range(0, n, chunk):
        m = min(chunk, n - at)
        z = _mix_torch(torch.arange(start + at, start + at + m, dtype=torch.int64, device=dev) ^ base)
        # Each torch op is one kernel: one IEEE float32 rounding each, as numpy's and Rust's.
        v = c32 + (_shr(z, 40).to(torch.float32) * 2.0**-23 - 1.0) * a32
        bits = v.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
        bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF
        # The 16 bits as a signed value, so the narrowing to int16 is exact.
        bits = bits - ((bits >> 15) << 16)
        out.view(-1)[at : at + m] = bits.to(torch.int16).view(torch.bfloat16)
        del z, v, bits
    key = str(dev)
    if key not in _CHECKED:
        _CHECKED.add(key)
        probe = torch.empty(4096, dtype=torch.bfloat16, device=dev)
        fill_torch(probe, seed, tensor, 0, a, center)
        got = [int(b) & 0xFFFF for b in probe.view(torch.int16).cpu().tolist()]
        want = bf16_bits_python(seed, tensor, 0, 4096, a, center)
        assert got == want, f"torch's generator on {dev} differs from the reference one"
    return out


def bf16_tensor_torch(seed, tensor, shape, a, center=0.0, device="cuda"):
    """The tensor as torch bfloat16, generated on `device` (no numpy, no host copy)."""
    import torch

    out = torch.empty(math.prod(shape), dtype=torch.bfloat16, device=device)
    return fill_torch(out, seed, tensor, 0, a, center).view(shape)


# ----- Qwen3's tensors (src/libs/serving/qwen3/config.rs) ------------------------------------------------

QWEN3_SEED = 0x5157454E33304241
QWEN3_FULL = dict(
    hidden=2048, layers=48, q_heads=32, kv_heads=4, head_dim=128, experts=128, top_k=8, expert_inter=768,
    vocab=151936, eps=1e-6, rope_theta=1e6,
)
QWEN3_TINY = dict(
    hidden=256, layers=2, q_heads=4, kv_heads=2, head_dim=64, experts=8, top_k=2, expert_inter=128, vocab=1000,
    eps=1e-6, rope_theta=1e6,
)
QWEN3 = {"full": QWEN3_FULL, "tiny": QWEN3_TINY}

# (kind, number in the id, Hugging Face name after "model.layers.N."), in TensorKind::LAYER order.
GLOBALS = [("embed", 1, "model.embed_tokens.weight"), ("final_norm", 2, "model.norm.weight"),
           ("lm_head", 3, "lm_head.weight")]
LAYER = [
    ("input_norm", 0, "input_layernorm.weight"), ("q", 1, "self_attn.q_proj.weight"),
    ("k", 2, "self_attn.k_proj.weight"), ("v", 3, "self_attn.v_proj.weight"), ("o", 4, "self_attn.o_proj.weight"),
    ("q_norm", 5, "self_attn.q_norm.weight"), ("k_norm", 6, "self_attn.k_norm.weight"),
    ("post_norm", 7, "post_attention_layernorm.weight"), ("router", 8, "mlp.gate.weight"),
    ("gate_up", 9, "mlp.experts.gate_up"), ("down", 10, "mlp.experts.down"),
]
NORMS = {"final_norm", "input_norm", "q_norm", "k_norm", "post_norm"}


def qwen3_tensors(cfg):
    """Every tensor as (layer or None, kind): the globals, then layer by layer (config.rs `tensors`)."""
    return [(None, k) for k, _, _ in GLOBALS] + [(l, k) for l in range(cfg["layers"]) for k, _, _ in LAYER]


def tensor_id(tensor):
    layer, kind = tensor
    if layer is None:
        return next(n for k, n, _ in GLOBALS if k == kind)
    return 100 * (layer + 1) + next(n for k, n, _ in LAYER if k == kind)


def tensor_name(tensor):
    layer, kind = tensor
    if layer is None:
        return next(name for k, _, name in GLOBALS if k == kind)
    return f"model.layers.{layer}." + next(name for k, _, name in LAYER if k == kind)


def tensor_by_name(cfg, name):
    return next(t for t in qwen3_tensors(cfg) if tensor_name(t) == name)


def tensor_shape(cfg, tensor):
    c, kind = cfg, tensor[1]
    h, q, kv = c["hidden"], c["q_heads"] * c["head_dim"], c["kv_heads"] * c["head_dim"]
    e, i, v, d = c["experts"], c["expert_inter"], c["vocab"], c["head_dim"]
    return {
        "embed": [v, h], "lm_head": [v, h], "final_norm": [h], "input_norm": [h], "post_norm": [h],
        "q_norm": [d], "k_norm": [d], "q": [q, h], "k": [kv, h], "v": [kv, h], "o": [h, q], "router": [e, h],
        "gate_up": [e, 2 * i, h], "down": [e, h, i],
    }[kind]


def tensor_scale(cfg, tensor):
    """a: 1 for the embedding, 0.25 for a norm, float32 sqrt(3 / K) for a linear layer (K its last side)."""
    kind = tensor[1]
    if kind == "embed":
        return 1.0
    if kind in NORMS:
        return 0.25
    # float32 division and square root, each correctly rounded; a double's, rounded to float32, is the same.
    return f32(math.sqrt(f32(3.0 / tensor_shape(cfg, tensor)[-1])))


def tensor_center(tensor):
    return 1.0 if tensor[1] in NORMS else 0.0


def qwen3_bits(cfg, tensor, start, count):
    """Elements start..start+count of a Qwen3 tensor as bf16 bit patterns (numpy when present)."""
    args = (QWEN3_SEED, tensor_id(tensor), start, count, tensor_scale(cfg, tensor), tensor_center(tensor))
    try:
        import numpy as np

        return [int(b) for b in bf16_bits_numpy(np, *args)]
    except ImportError:
        return bf16_bits_python(*args)


def qwen3_tensor(cfg, tensor, device=None):
    """A Qwen3 tensor as torch bfloat16: generated on `device` in torch ops, or through numpy on the host."""
    shape, a, c = tensor_shape(cfg, tensor), tensor_scale(cfg, tensor), tensor_center(tensor)
    if device is not None:
        return bf16_tensor_torch(QWEN3_SEED, tensor_id(tensor), shape, a, c, device)
    return bf16_tensor(QWEN3_SEED, tensor_id(tensor), shape, a, c)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--tensor", type=int, default=3)
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--count", type=int, default=16)
    p.add_argument("--scale", type=float, default=0.5)
    p.add_argument("--qwen3", choices=sorted(QWEN3), help="a Qwen3 tensor of this config (with --name)")
    p.add_argument("--name", help="the tensor's name (config.rs Tensor::name)")
    args = p.parse_args()
    if args.qwen3:
        cfg = QWEN3[args.qwen3]
        for b in qwen3_bits(cfg, tensor_by_name(cfg, args.name), args.start, args.count):
            print(f"{b:#06x}")
        return
    try:
        import numpy as np

        bits = [int(b) for b in bf16_bits_numpy(np, args.seed, args.tensor, args.start, args.count, args.scale)]
        assert bits == bf16_bits_python(args.seed, args.tensor, args.start, args.count, args.scale)
    except ImportError:
        bits = bf16_bits_python(args.seed, args.tensor, args.start, args.count, args.scale)
    for b in bits:
        print(f"{b:#06x}")


if __name__ == "__main__":
    main()
