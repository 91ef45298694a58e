#!/usr/bin/env python3
"""CUDA's host-to-device and device-to-host copies from pageable and pinned memory, through torch, at the
sizes of the host-pointer library entries (the peer of their `_copy_in_us` / `_of_floor` figures):
`torch.copy_<pageable|pinned>_<h2d|d2h>_<MiB>m_gbps`, the median of 20 copies after 3.

    python3 benches/torch/copy_peer.py
"""
import statistics
import time

import torch


def timed(f, reps=20):
    for _ in range(3):
        f()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        torch.cuda.synchronize()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def main():
    for mib in (4, 21, 64, 256):
        n = mib << 20
        dev = torch.empty(n, dtype=torch.uint8, device="cuda")
        for kind in ("pageable", "pinned"):
            host = torch.full((n,), 7, dtype=torch.uint8, pin_memory=(kind == "pinned"))
            h2d = timed(lambda: dev.copy_(host))
            d2h = timed(lambda: host.copy_(dev))
            print(f"torch.copy_{kind}_h2d_{mib}m_gbps {n / h2d / 1e9:.2f}")
            print(f"torch.copy_{kind}_d2h_{mib}m_gbps {n / d2h / 1e9:.2f}")


if __name__ == "__main__":
    main()
