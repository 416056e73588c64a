"""Host cost of one attnjit.xqa call from Python, to compare with attnjit-bench's
"host overhead per xqa launch" (the C++ call): the same tiny problem, 50 bursts of
100 calls, median per call. Also times the extension call alone (no Python wrapper)
and an empty torch launch for scale. Needs torch and a CUDA GPU."""
import statistics
import time

import torch

import attnjit
from attnjit import attnjit_ext as _ext

B, KH, G, D, P = 1, 8, 8, 128, 32
dev = "cuda"
q = torch.zeros(B, 1, KH * G, D, dtype=torch.bfloat16, device=dev)
o = torch.zeros_like(q)
k = torch.zeros(B, P, KH, D, dtype=torch.bfloat16, device=dev)
v = torch.zeros_like(k)
pt = torch.zeros(B, 1, dtype=torch.int32, device=dev)
sl = torch.full((B, 1), 16, dtype=torch.uint32, device=dev)
ws = torch.zeros(1024, dtype=torch.uint8, device=dev)
sem = torch.zeros(64, dtype=torch.uint32, device=dev)
stream = torch.cuda.current_stream().cuda_stream


def wrapper():
    attnjit.xqa(q, k, v, pt, sl, o, ws, sem, KH, P)


def extension_only():
    _ext.xqa(None, stream, q, k, v, pt, sl, o, ws, sem, KH, P, None, 1.0, 1.0, 0, "NHD", None, None, 1.0, 1,
             None, "auto")


def torch_launch():
    o.zero_()


def per_call_us(fn):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(50):
        t0 = time.perf_counter()
        for _ in range(100):
            fn()
        times.append((time.perf_counter() - t0) / 100 * 1e6)
        torch.cuda.synchronize()
    return statistics.median(times)


for name, fn in [("attnjit.xqa (Python call -> launch)", wrapper), ("attnjit_ext.xqa (binding only)", extension_only),
                 ("torch Tensor.zero_ (one torch launch)", torch_launch)]:
    print(f"host overhead per {name}: {per_call_us(fn):.2f} us (median of 50 bursts of 100)")
print("compare: attnjit-bench --startup prints the C++ call's 'host overhead per xqa launch'")
