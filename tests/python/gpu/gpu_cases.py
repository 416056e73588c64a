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




# MLA: (dtype, seq_lens, q_len_per_request, num_heads, page_size, options). Options: sinks,
# return_lse, scale_tensors (bmm scales as device tensors), top_k (sparse: indices in block_tables).
MLA_CASES = [
    ("bf16", [3000, 77, 1], 1, 16, 64, {}),  # long and short requests: split-KV (workspace semaphores)
    ("bf16", [1000, 513], 2, 128, 32, {"return_lse": True}),  # causal among 2 queries
    ("fp16", [5000, 40], 4, 16, 64, {"sinks": True, "return_lse": True}),
    ("bf16", [20000], 1, 128, 64, {"scale_tensors": True}),
    ("bf16", [700, 300], 2, 16, 64, {"top_k": 128}),  # sparse
]
CUPY_MLA = ("fp16", [600, 100], 1, 16, 64, {})
MLA_BMM1, MLA_BMM2 = 1.0 / 24.0, 0.5  # 1 / sqrt(576); an output scale that is not 1

# FIA: (dtype, input_layout, batch, num_heads, num_kv_heads, Q_S, KV_S, head_dim, options);
# options are the op's keywords (sparse_mode 3 gets the 2048x2048 mask).
FIA_CASES = [
    ("bf16", "BSND", 2, 8, 2, 128, 300, 128, {"sparse_mode": 3}),  # causal (rightDownCausal), GQA 4
    ("fp16", "BNSD", 2, 8, 8, 64, 200, 64, {}),  # no mask
    ("bf16", "BNSD", 3, 16, 4, 1, 1000, 128, {"softmax_lse_flag": True}),  # decode, GQA, LSE
    ("bf16", "BSND", 2, 8, 1, 100, 160, 128,  # causal with actual lengths: empty and past-length rows
     {"sparse_mode": 3, "softmax_lse_flag": True, "actual_seq_lengths": [100, 37], "actual_seq_lengths_kv": [160, 20]}),
    ("fp16", "BNSD", 1, 4, 2, 96, 96, 128, {"sparse_mode": 3, "softmax_lse_flag": True}),
]
CUPY_FIA = ("fp16", "BNSD", 1, 8, 2, 64, 128, 64, {})


def mla_shapes(case):
    """(query, kv_cache, block_tables, max_seq_len, num_pages) shapes of an MLA case."""
    dt, lens, T, H, P, opt = case
    B = len(lens)
    pages_per_seq = (max(lens) + P - 1) // P
    num_pages = B * pages_per_seq + 2  # pages no request owns (sparse indices may still pick them)
    bt = [B, T, opt["top_k"]] if opt.get("top_k") else [B, pages_per_seq]
    return [B, T, H, 576], [num_pages, P, 576], bt, pages_per_seq * P, num_pages


def mla_prewarm_call(case):
    dt, lens, T, H, P, opt = case
    q, kv, bt, max_seq_len, _ = mla_shapes(case)
    S = attnjit.ShapeOnly
    scale = S([1], "fp32") if opt.get("scale_tensors") else 1.0
    return dict(op="mla", query=S(q, dt), kv_cache=S(kv, dt), qk_nope_head_dim=128, kv_lora_rank=512,
                qk_rope_head_dim=64, block_tables=S(bt, "int32"), seq_lens=S([len(lens)], "int32"),
                max_seq_len=max_seq_len, sparse_mla_top_k=opt.get("top_k", 0), bmm1_scale=scale, bmm2_scale=scale,
                sinks=S([H], "fp32") if opt.get("sinks") else None, return_lse=bool(opt.get("return_lse")))


def fia_shapes(case):
    """(query, key/value) shapes of a FIA case in its layout."""
    dt, layout, B, N, KN, QS, KS, D, opt = case
    if layout == "BSND":
        return [B, QS, N, D], [B, KS, KN, D]
    return [B, N, QS, D], [B, KN, KS, D]


def fia_prewarm_call(case):
    dt, layout, B, N, KN, QS, KS, D, opt = case
    q, kv = fia_shapes(case)
    S = attnjit.ShapeOnly
    call = dict(op="fia", query=S(q, dt), key=S(kv, dt), value=S(kv, dt), num_heads=N, num_key_value_heads=KN,
                input_layout=layout, scale=1 / math.sqrt(D), **opt)
    if opt.get("sparse_mode", 0) >= 2:
        call["atten_mask"] = S([2048, 2048], "uint8")
    return call


def all_prewarm_calls():
    return ([xqa_prewarm_call(c) for c in XQA_CASES + [CUPY_XQA]] +
            [decode_prewarm_call(c) for c in DECODE_CASES + [CUPY_DECODE]] +
            [mla_prewarm_call(c) for c in MLA_CASES + [CUPY_MLA]] +
            [fia_prewarm_call(c) for c in FIA_CASES + [CUPY_FIA]])
