#!/usr/bin/env python3
"""PyTorch SDPA peers (cuDNN and FlashAttention-2 backends) for attnjit-bench --fia:
bf16 prefill at the Hopper prefill issue's shapes, the same FLOP count
(2 * S_q * S_kv * (D_qk + D_v) * H * B, halved for causal), median of CUDA-event timings."""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPES = [(4, 8192, 32, 32, 128), (16, 2048, 32, 32, 128), (4, 8192, 32, 8, 128), (8, 4096, 32, 32, 64),
          (4, 4096, 16, 16, 256)]
BACKENDS = [("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)]


def median_ms(fn, iters=20, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


def main():
    print(f"{'sdpa prefill (bf16, BHSD)':<44} {'ms':>10} {'TFLOP/s':>10}")
    for B, S, H, KH, D in SHAPES:
        q = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(B, KH, S, D, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(B, KH, S, D, device="cuda", dtype=torch.bfloat16)
        for causal in (False, True):
            for name, backend in BACKENDS:
                label = f"B{B} S{S} H{H}/{KH} D{D} {'causal' if causal else 'full'} {name}"
                try:
                    with sdpa_kernel(backend):
                        ms = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                                              enable_gqa=KH != H))
                except RuntimeError as e:
                    print(f"{label:<44} unavailable: {str(e).splitlines()[0][:60]}")
                    continue
                flops = 2.0 * S * S * 2 * D * H * B * (0.5 if causal else 1.0)
                print(f"{label:<44} {ms:>10.3f} {flops / ms / 1e9:>10.1f}")


if __name__ == "__main__":
    main()
