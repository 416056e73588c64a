"""Peers on the same GPU: PyTorch SDPA (cuDNN and flash backends) on contiguous
KV at the attnjit-bench shapes. Prints TB/s with the same byte count."""
import math
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F

L2 = 60e6
ROOF = 4.46


def bench(fn, sets, iters=50, warmup=10):
    for i in range(warmup):
        fn(i % sets)
    torch.cuda.synchronize()
    times = []
    for i in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn(i % sets)
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    times.sort()
    return times[len(times) // 2]


def run(label, B, H, KH, L, D=128):
    kv_bytes = 2 * B * KH * L * D * 2
    sets = max(1, math.ceil(3 * L2 / kv_bytes))
    data = []
    for _ in range(sets):
        q = torch.randn(B, H, 1, D, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(B, KH, L, D, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(B, KH, L, D, device="cuda", dtype=torch.bfloat16)
        data.append((q, k, v))
    nbytes = kv_bytes + 2 * B * H * D * 2
    out = []
    for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
        try:
            with sdpa_kernel([backend]):
                ms = bench(lambda i: F.scaled_dot_product_attention(*data[i], enable_gqa=True), sets)
            out.append(f"{name} {nbytes / ms / 1e9:.2f} TB/s ({ms:.4f} ms)")
        except Exception as ex:  # a backend may refuse a shape
            out.append(f"{name} n/a ({type(ex).__name__})")
    print(f"peer {label:<22} " + " | ".join(out), flush=True)


for B, L in ((1, 32768), (16, 8192), (64, 4096), (128, 2048)):
    run(f"xqa-shape b{B} L{L}", B, 64, 8, L)
for L in (4096, 32768, 131072):
    run(f"single L{L}", 1, 32, 8, L)
