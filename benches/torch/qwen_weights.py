#!/usr/bin/env python3
"""The twin of src/libs/serving/weights.rs: the same seeded bf16 weights, bit for bit.

Element `index` of tensor `tensor` under `seed`: h = mix(mix(mix(seed) ^ tensor) ^ index) with splitmix64's
step, u = h >> 40, v = (u * 2^-23 - 1) * a in float32, rounded to bf16 to nearest even. Every step is an
integer operation or one IEEE float32 operation, so numpy (vectorised, wrapping uint64 arithmetic) and the
pure-Python path (used when numpy is missing) give the Rust values exactly; torch gets them through numpy.

    python3 benches/torch/qwen_weights.py --seed 7 --tensor 3 --count 16 --scale 0.5

prints the bf16 bit patterns, one hex word a line (tests/serving_weights.rs holds such a vector).
"""
import argparse
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


def bf16_bits_python(seed, tensor, start, count, a):
    base = splitmix64(splitmix64(seed) ^ tensor)
    a32 = f32(a)
    out = []
    for i in range(start, start + count):
        u = splitmix64(base ^ i) >> 40
        # u * 2^-23 - 1 is exact in float32 (and in a double); the product by a is rounded once, to float32.
        out.append(bf16_rne_bits(f32((u * 2.0**-23 - 1.0) * a32)))
    return out


def bf16_bits_numpy(np, seed, tensor, start, count, a):
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
    bits = v.view(np.uint32)
    return ((bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)


def bf16_tensor(seed, tensor, shape, a):
    """The tensor as torch bfloat16 (needs torch and numpy)."""
    import numpy as np
    import torch

    n = 1
    for s in shape:
        n *= s
    bits = bf16_bits_numpy(np, seed, tensor, 0, n, a).astype(np.int16)
    return torch.from_numpy(bits).view(torch.bfloat16).reshape(shape)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--tensor", type=int, default=3)
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--count", type=int, default=16)
    p.add_argument("--scale", type=float, default=0.5)
    args = p.parse_args()
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
