#!/usr/bin/env python3
"""FlashMLA's dense decode timed on attnjit-bench --mla's bf16 shapes (page 64, shuffled
block table, causal, d 576 / dv 512), for ratios taken in one GPU run. A peer, not library code.

Usage (on the GPU machine, FlashMLA built in place): PYTHONPATH=<flashmla tree> peer_flashmla.py [H,B,T,L]
(one shape only, e.g. 128,64,1,8192: for a profiler run)
Prints per shape: the whole call (scheduling metadata built each time) and per layer
(metadata reused, as engines do across layers), in us, TB/s and TFLOP/s.
"""
import math
import statistics
import sys

import torch
from flash_mla import flash_mla_with_kvcache, get_mla_metadata

L2_BYTES = 50 * 1024 * 1024
SHAPES = [(16, 128, 1, 4096), (16, 32, 1, 16384), (128, 128, 2, 4096), (128, 64, 1, 8192),
          (128, 128, 1, 4096), (64, 16, 1, 8192), (128, 1, 1, 32768),
          (16, 1, 1, 4096), (128, 1, 1, 4096), (64, 2, 1, 16384), (16, 64, 1, 8192)]


def make_set(h, b, t, length, page=64):
    pps = (length + page - 1) // page
    q = torch.randn(b, t, h, 576, dtype=torch.bfloat16, device="cuda")
    kv = torch.randn(b * pps, page, 1, 576, dtype=torch.bfloat16, device="cuda")
    bt = torch.randperm(b * pps, dtype=torch.int32, device="cuda").view(b, pps)
    sl = torch.full((b,), length, dtype=torch.int32, device="cuda")
    return q, kv, bt, sl


def median_us(fn, sets, rounds=30):
    for i in range(10):
        fn(i % sets)
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for i in range(sets):
            fn(i)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / sets)
    return statistics.median(times)


def main():
    print(f"{'flashmla (page 64)':<24} {'mode':<12} {'us':>10} {'TB/s':>8} {'TFLOP/s':>9}")
    shapes = [tuple(int(x) for x in sys.argv[1].split(","))] if len(sys.argv) > 1 else SHAPES
    for h, b, t, length in shapes:
        kv_bytes = b * length * 576 * 2
        sets = max(1, math.ceil(3 * L2_BYTES / kv_bytes))
        data = [make_set(h, b, t, length) for _ in range(sets)]
        metas = [get_mla_metadata()[0] for _ in range(sets)]

        def per_layer(i):
            q, kv, bt, sl = data[i]
            flash_mla_with_kvcache(q, kv, bt, sl, 512, metas[i], None, softmax_scale=1 / 24, causal=True)

        def whole_call(i):
            q, kv, bt, sl = data[i]
            flash_mla_with_kvcache(q, kv, bt, sl, 512, get_mla_metadata()[0], None, softmax_scale=1 / 24, causal=True)

        flops = 2.0 * (576 + 512) * length * b * t * h
        for mode, fn in (("whole call", whole_call), ("per layer", per_layer)):
            us = median_us(fn, sets)
            print(f"{f'h{h} B{b} q{t} L{length}':<24} {mode:<12} {us:>10.2f} {kv_bytes / us / 1e6:>8.3f} "
                  f"{flops / us / 1e6:>9.1f}")
        del data


if __name__ == "__main__":
    main()
