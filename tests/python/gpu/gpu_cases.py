"""The GPU tests' cases, float64 references and checks, shared by the tests and by
prewarm_gpu_tests.py (which compiles exactly these kernels ahead of time)."""
import math

import attnjit

# (q dtype, kv dtype, layout, batch, num_kv_heads, group, head_dim, page_size, max seq_len)
XQA_CASES = [
    ("bf16", "bf16", "NHD", 3, 2, 8, 128, 32, 300),
    ("fp16", "fp16", "HND", 2, 4, 4, 64, 16, 1000),
    ("bf16", "fp8_e4m3", "NHD", 2, 2, 8, 128, 64, 700),
    ("bf16", "bf16", "NHD", 1, 8, 8, 128, 32, 20000),  # long: split-KV (workspace + semaphores)
]
# (q dtype, kv dtype, layout, num_kv_heads, group, head_dim, kv_len, options)
DECODE_CASES = [
    ("bf16", "bf16", "NHD", 8, 4, 128, 777, {}),
    ("fp16", "fp16", "HND", 4, 1, 64, 33, {"return_lse": True}),
    ("bf16", "fp8_e4m3", "NHD", 2, 8, 128, 4096, {"use_tensor_cores": True, "k_scale": 0.5, "v_scale": 2.0}),
    ("bf16", "bf16", "NHD", 8, 4, 128, 9000, {"logits_soft_cap": 30.0, "window_left": 2000, "return_lse": True}),
]
# CuPy has no bf16: its cases are fp16.
CUPY_XQA = ("fp16", "fp16", "NHD", 2, 2, 8, 128, 32, 500)
CUPY_DECODE = ("fp16", "fp16", "NHD", 4, 4, 128, 600, {})


def tolerance(kv):
    return 4e-2 if kv.startswith("fp8") else 1e-2


def check(got, ref, kv):
    """Every element written (no NaN left) and close: relative L2 and a per-element bound."""
    import torch
    got = got.double()
    assert torch.isfinite(got).all(), "output has NaN/inf: an element was not written"
    tol = tolerance(kv)
    rms = ref.pow(2).mean().sqrt().item()
    rel_l2 = ((got - ref).norm() / ref.norm()).item()
    worst = (got - ref).abs().max().item()
    assert rel_l2 <= tol, f"relative L2 error {rel_l2:.3g} > {tol}"
    assert worst <= 5 * tol * rms + tol, f"max abs error {worst:.3g} > {5 * tol * rms + tol:.3g}"


def attention_ref(q, k, v, sm_scale, soft_cap=0.0, window_left=-1, sinks=None):
    """float64 decode attention. q [H, D], k/v [S, KH, D]; returns (out [H, D], lse2 [H])."""
    import torch
    H, D = q.shape
    S, KH, _ = k.shape
    g = H // KH
    kk = k.repeat_interleave(g, dim=1)  # [S, H, D]
    vv = v.repeat_interleave(g, dim=1)
    s = torch.einsum("hd,shd->hs", q, kk) * sm_scale
    if soft_cap > 0:
        s = soft_cap * torch.tanh(s / soft_cap)
    if window_left >= 0:
        s[:, : max(0, S - 1 - window_left)] = -math.inf
    lse = torch.logsumexp(s, dim=1)
    p = torch.softmax(s, dim=1)
    out = torch.einsum("hs,shd->hd", p, vv)
    return out, lse / math.log(2)


def torch_dtype(name):
    import torch
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp8_e4m3": torch.float8_e4m3fn}[name]


def xqa_shapes(case):
    qd, kd, layout, B, KH, G, D, P, L = case
    pages_per_seq = (L + P - 1) // P
    q = [B, 1, KH * G, D]
    kv = [B * pages_per_seq, P, KH, D] if layout == "NHD" else [B * pages_per_seq, KH, P, D]
    return q, kv, [B, pages_per_seq]


def xqa_prewarm_call(case):
    qd, kd, layout, B, KH, G, D, P, L = case
    q, kv, pt = xqa_shapes(case)
    S = attnjit.ShapeOnly
    return dict(op="xqa", q=S(q, qd), k_cache=S(kv, kd), v_cache=S(kv, kd), page_table=S(pt, "int32"),
                seq_lens=S([B, 1], "uint32"), output=S(q, qd), num_kv_heads=KH, page_size=P, kv_layout=layout)


def decode_prewarm_call(case):
    qd, kd, layout, KH, G, D, L, opt = case
    S = attnjit.ShapeOnly
    kv = [L, KH, D] if layout == "NHD" else [KH, L, D]
    return dict(op="decode", q=S([KH * G, D], qd), k=S(kv, kd), v=S(kv, kd), kv_layout=layout, **opt)


def all_prewarm_calls():
    return ([xqa_prewarm_call(c) for c in XQA_CASES + [CUPY_XQA]] +
            [decode_prewarm_call(c) for c in DECODE_CASES + [CUPY_DECODE]])
