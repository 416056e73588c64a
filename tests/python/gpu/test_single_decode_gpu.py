"""attnjit.single_decode_with_kv_cache on a GPU against a float64 PyTorch reference:
torch (allocated output and LSE), a CUDA-graph replay and a CuPy input."""
import math

import pytest

import attnjit
from gpu_cases import CUPY_DECODE, DECODE_CASES, attention_ref, check, torch_dtype

torch = pytest.importorskip("torch")


def make(case, seed=0):
    qd, kd, layout, KH, G, D, L, opt = case
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(KH * G, D, generator=gen, device="cuda").to(torch_dtype(qd))
    shape = (L, KH, D) if layout == "NHD" else (KH, L, D)
    k = torch.randn(shape, generator=gen, device="cuda").to(torch_dtype(kd))
    v = torch.randn(shape, generator=gen, device="cuda").to(torch_dtype(kd))
    return q, k, v


def reference(case, q, k, v):
    qd, kd, layout, KH, G, D, L, opt = case
    k, v = k.double(), v.double()
    if layout == "HND":
        k, v = k.transpose(0, 1), v.transpose(0, 1)
    k = k * opt.get("k_scale", 1.0)
    v = v * opt.get("v_scale", 1.0)
    return attention_ref(q.double(), k, v, 1 / math.sqrt(D), soft_cap=opt.get("logits_soft_cap", 0.0),
                         window_left=opt.get("window_left", -1))


@pytest.mark.parametrize("case", DECODE_CASES, ids=lambda c: "-".join(map(str, c[:7])))
def test_single_decode_matches_float64_reference(case):
    qd, kd, layout, KH, G, D, L, opt = case
    q, k, v = make(case)
    res = attnjit.single_decode_with_kv_cache(q, k, v, kv_layout=layout, **opt)
    out, lse = res if opt.get("return_lse") else (res, None)
    assert out.shape == q.shape and out.dtype == q.dtype and out.device == q.device
    torch.cuda.synchronize()
    ref, ref_lse = reference(case, q, k, v)
    check(out, ref, kd)
    if lse is not None:
        assert lse.dtype == torch.float32 and lse.shape == (KH * G,)
        torch.testing.assert_close(lse.double(), ref_lse, atol=1e-2, rtol=1e-3)


def test_single_decode_cuda_graph_replay():
    case = DECODE_CASES[0]
    qd, kd, layout, KH, G, D, L, opt = case
    q, k, v = make(case, seed=1)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up on the capturing stream: kernel and split scratch
        attnjit.single_decode_with_kv_cache(q, k, v, kv_layout=layout)
    s.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        out = attnjit.single_decode_with_kv_cache(q, k, v, kv_layout=layout)  # allocated in the graph's pool
    for seed in (2, 3):
        q2, k2, v2 = make(case, seed=seed)
        q.copy_(q2); k.copy_(k2); v.copy_(v2)
        out.fill_(math.nan)
        g.replay()
        torch.cuda.synchronize()
        check(out, reference(case, q, k, v)[0], kd)


def test_single_decode_explicit_out_and_errors():
    case = DECODE_CASES[0]
    qd, kd, layout, KH, G, D, L, opt = case
    q, k, v = make(case, seed=5)
    out = torch.full_like(q, math.nan)
    assert attnjit.single_decode_with_kv_cache(q, k, v, out=out) is out
    torch.cuda.synchronize()
    check(out, reference(case, q, k, v)[0], kd)
    with pytest.raises(ValueError, match="argument 'k'"):
        attnjit.single_decode_with_kv_cache(q, k.float(), v)
    with pytest.raises(ValueError, match="argument 'v': expected a CUDA tensor"):
        attnjit.single_decode_with_kv_cache(q, k, v.cpu())


def test_single_decode_cupy_input():
    cupy = pytest.importorskip("cupy")
    q, k, v = make(CUPY_DECODE, seed=6)
    torch.cuda.synchronize()  # CuPy's stream does not wait for torch's
    cq, ck, cv = (cupy.from_dlpack(t) for t in (q, k, v))
    with cupy.cuda.Stream(non_blocking=True) as s:
        out = attnjit.single_decode_with_kv_cache(cq, ck, cv)
    s.synchronize()
    assert isinstance(out, cupy.ndarray) and out.shape == cq.shape and out.dtype == cq.dtype
    check(torch.from_dlpack(out), reference(CUPY_DECODE, q, k, v)[0], CUPY_DECODE[1])
