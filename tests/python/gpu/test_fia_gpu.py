"""attnjit.npu_fused_infer_attention_score on a GPU against a float64 PyTorch reference:
BSND and BNSD, no mask and rightDownCausal (sparse_mode 3), GQA, decode (Q_S = 1), actual
lengths, the LSE and its placeholder; a CUDA-graph replay and a CuPy input."""
import math

import pytest

import attnjit
from gpu_cases import CUPY_FIA, FIA_CASES, check, fia_shapes, torch_dtype

torch = pytest.importorskip("torch")


class FiaInputs:
    def __init__(self, case, seed=0, device="cuda"):
        dt, layout, B, N, KN, QS, KS, D, opt = case
        self.case = case
        gen = torch.Generator(device=device).manual_seed(seed)
        q, kv = fia_shapes(case)
        self.query = torch.randn(q, generator=gen, device=device).to(torch_dtype(dt))
        self.key = torch.randn(kv, generator=gen, device=device).to(torch_dtype(dt))
        self.value = torch.randn(kv, generator=gen, device=device).to(torch_dtype(dt))
        self.opt = dict(opt)
        if opt.get("sparse_mode", 0) >= 2:  # the seed's compressed 2048x2048 mask (True = masked out)
            self.opt["atten_mask"] = torch.triu(torch.ones(2048, 2048, dtype=torch.bool, device=device), diagonal=1)

    def kwargs(self, **kw):
        dt, layout, B, N, KN, QS, KS, D, opt = self.case
        return {**dict(num_heads=N, num_key_value_heads=KN, input_layout=layout, scale=1 / math.sqrt(D)),
                **self.opt, **kw}

    def bsnd(self, t):
        """A query/key/value tensor as (B, S, N, D) float64."""
        return (t if self.case[1] == "BSND" else t.transpose(1, 2)).double()

    def reference(self):
        """float64 (out in the query's layout, lse (B, N, Q_S) with +inf for a row that sees no
        key or lies past its actual length; such rows' outputs are 0)."""
        dt, layout, B, N, KN, QS, KS, D, opt = self.case
        q, k, v = self.bsnd(self.query), self.bsnd(self.key), self.bsnd(self.value)
        G = N // KN
        out = torch.zeros(B, QS, N, D, dtype=torch.float64, device=q.device)
        lse = torch.full((B, N, QS), math.inf, dtype=torch.float64, device=q.device)
        q_lens = opt.get("actual_seq_lengths", [QS] * B)
        kv_lens = opt.get("actual_seq_lengths_kv", [KS] * B)
        causal = QS > 1 and opt.get("sparse_mode", 0) == 3
        for b in range(B):
            ql, kl = (1 if QS == 1 else q_lens[b]), kv_lens[b]
            kk = k[b, :kl].repeat_interleave(G, dim=1)  # [kl, N, D]
            vv = v[b, :kl].repeat_interleave(G, dim=1)
            s = torch.einsum("ind,jnd->nij", q[b, :ql], kk) / math.sqrt(D)  # [N, ql, kl]
            if causal:  # rightDownCausal: key j is visible from query i when j - i <= kl - ql
                i = torch.arange(ql, device=q.device)[:, None]
                j = torch.arange(kl, device=q.device)[None, :]
                s = s.masked_fill((j - i) > (kl - ql), -math.inf)
            row_lse = torch.logsumexp(s, dim=2)  # [N, ql]; -inf where nothing is visible
            p = torch.exp(s - row_lse[..., None]).nan_to_num(0.0)
            out[b, :ql] = torch.einsum("nij,jnd->ind", p, vv)
            lse[b, :, :ql] = torch.where(torch.isinf(row_lse), math.inf, row_lse)
        return (out if layout == "BSND" else out.transpose(1, 2)), lse


def check_lse(got, ref):
    assert got.dtype == torch.float32 and got.shape == (*ref.shape, 1)
    got = got[..., 0]
    finite = torch.isfinite(ref)
    assert torch.equal(torch.isposinf(got), ~finite), "rows that see no key have LSE +inf, the others a value"
    torch.testing.assert_close(got.double()[finite], ref[finite], atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("case", FIA_CASES, ids=lambda c: "-".join(str(x) for x in c[:8]) + "-" + "-".join(c[8]))
def test_fia_matches_float64_reference(case):
    x = FiaInputs(case)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())  # the inputs were written on the default stream
    with torch.cuda.stream(s):  # the op follows torch's current stream
        out, lse = attnjit.npu_fused_infer_attention_score(x.query, x.key, x.value, **x.kwargs())
    s.synchronize()
    assert out.shape == x.query.shape and out.dtype == x.query.dtype and out.device == x.query.device
    ref, ref_lse = x.reference()
    check(out, ref, case[0])
    if case[8].get("softmax_lse_flag"):
        check_lse(lse, ref_lse)
    else:  # the seed's placeholder: fp32 [1] holding 0
        assert lse.shape == (1,) and lse.dtype == torch.float32 and lse.item() == 0.0
    # Into NaN-filled outputs given by the caller: every element written (padding rows too).
    out2 = torch.full_like(out, math.nan)
    lse2 = torch.full_like(lse, math.nan)
    got = attnjit.fused_infer_attention_score(x.query, x.key, x.value, attention_out=out2, softmax_lse=lse2,
                                              **x.kwargs())
    assert got[0] is out2 and got[1] is lse2
    torch.cuda.synchronize()
    check(out2, ref, case[0])
    if case[8].get("softmax_lse_flag"):
        check_lse(lse2, ref_lse)
    else:
        assert lse2.item() == 0.0


def test_fia_bnsd_bsnd_output_layout():
    case = ("bf16", "BNSD", 2, 8, 2, 64, 100, 128, {"sparse_mode": 3})
    x = FiaInputs(case, seed=7)
    out, _ = attnjit.npu_fused_infer_attention_score(x.query, x.key, x.value, **x.kwargs(input_layout="BNSD_BSND"))
    torch.cuda.synchronize()
    assert out.shape == (2, 64, 8, 128)  # BSND
    check(out, x.reference()[0].transpose(1, 2), case[0])


def test_fia_cuda_graph_replay():
    case = FIA_CASES[0]
    x = FiaInputs(case, seed=1)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up on the capturing stream: loads the kernel
        attnjit.npu_fused_infer_attention_score(x.query, x.key, x.value, **x.kwargs())
    s.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        out, lse = attnjit.npu_fused_infer_attention_score(x.query, x.key, x.value, **x.kwargs())
    for seed in (2, 3):  # new inputs in the same buffers, then replay
        y = FiaInputs(case, seed=seed)
        x.query.copy_(y.query)
        x.key.copy_(y.key)
        x.value.copy_(y.value)
        out.fill_(math.nan)
        lse.fill_(math.nan)
        g.replay()
        torch.cuda.synchronize()
        check(out, x.reference()[0], case[0])
        assert lse.item() == 0.0  # the placeholder's memset is part of the graph


def test_fia_rejects_host_tensors_and_refused_features():
    x = FiaInputs(FIA_CASES[1])
    with pytest.raises(ValueError, match="argument 'value': expected a CUDA tensor"):
        attnjit.npu_fused_infer_attention_score(x.query, x.key, x.value.cpu(), **x.kwargs())
    with pytest.raises(attnjit.UnsupportedError, match="argument 'antiquant_scale'"):
        attnjit.npu_fused_infer_attention_score(x.query, x.key, x.value, antiquant_scale=x.query[0, 0, :2],
                                                **x.kwargs())


def test_fia_cupy_input():
    cupy = pytest.importorskip("cupy")
    x = FiaInputs(CUPY_FIA, seed=4)
    torch.cuda.synchronize()  # CuPy's stream does not wait for torch's
    cq, ck, cv = (cupy.from_dlpack(t) for t in (x.query, x.key, x.value))
    with cupy.cuda.Stream(non_blocking=True) as s:  # CuPy's current stream
        out, lse = attnjit.npu_fused_infer_attention_score(cq, ck, cv, **x.kwargs())
    s.synchronize()
    assert isinstance(out, cupy.ndarray) and out.shape == cq.shape and out.dtype == cq.dtype
    assert isinstance(lse, cupy.ndarray) and lse.shape == (1,) and float(lse[0]) == 0.0
    check(torch.from_dlpack(out), x.reference()[0], CUPY_FIA[0])
