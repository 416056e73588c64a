"""attnjit.trtllm_batch_decode_with_kv_cache_mla on a GPU against a float64 PyTorch
reference: torch (allocated output and LSE, sinks, scale tensors, sparse indices), a
CUDA-graph replay and a CuPy input."""
import math

import pytest

import attnjit
from gpu_cases import CUPY_MLA, MLA_BMM1, MLA_BMM2, MLA_CASES, check, mla_shapes, torch_dtype

torch = pytest.importorskip("torch")


class MlaInputs:
    def __init__(self, case, seed=0, dev="cuda"):
        dt, lens, T, H, P, opt = case
        self.case = case
        gen = torch.Generator(device=dev).manual_seed(seed)
        q, kv, bt, self.max_seq_len, num_pages = mla_shapes(case)
        B = len(lens)
        self.query = torch.randn(q, generator=gen, device=dev).to(torch_dtype(dt))
        self.kv_cache = torch.randn(kv, generator=gen, device=dev).to(torch_dtype(dt))
        self.top_k = opt.get("top_k", 0)
        if self.top_k:  # physical positions anywhere in the cache, some -1 (unused)
            idx = torch.randint(0, num_pages * P, bt, generator=gen, device=dev)
            drop = torch.rand(bt, generator=gen, device=dev) < 0.2
            self.block_tables = torch.where(drop, torch.full_like(idx, -1), idx).to(torch.int32)
        else:
            pages = torch.randperm(num_pages, generator=gen, device=dev)[: bt[0] * bt[1]]
            self.block_tables = pages.view(bt).to(torch.int32)
        self.seq_lens = torch.tensor(lens, dtype=torch.int32, device=dev)
        sms = torch.cuda.get_device_properties(0).multi_processor_count if dev == "cuda" else 132
        ws = attnjit.mla_workspace_bytes(B, H, T, self.max_seq_len, sms, self.top_k)
        self.workspace = torch.zeros(max(ws, 16), dtype=torch.uint8, device=dev)  # zeroed once: semaphores
        self.sinks = (torch.randn(H, generator=gen, device=dev) * 2 + 1) if opt.get("sinks") else None
        if opt.get("scale_tensors"):
            self.bmm1 = torch.tensor([MLA_BMM1], dtype=torch.float32, device=dev)
            self.bmm2 = torch.tensor([MLA_BMM2], dtype=torch.float32, device=dev)
        else:
            self.bmm1, self.bmm2 = MLA_BMM1, MLA_BMM2

    def args(self):
        """The seed's positional arguments."""
        return (self.query, self.kv_cache, self.workspace, 128, 512, 64, self.block_tables, self.seq_lens,
                self.max_seq_len, self.top_k)

    def kwargs(self, **kw):
        opt = self.case[5]
        sinks = [self.sinks] if self.sinks is not None else None  # the seed's List[Tensor]
        return {**dict(bmm1_scale=self.bmm1, bmm2_scale=self.bmm2, sinks=sinks,
                       return_lse=bool(opt.get("return_lse"))), **kw}

    def reference(self):
        """float64 (out [B, T, H, 512], lse [B * T, H] natural log, -inf where nothing is seen)."""
        dt, lens, T, H, P, opt = self.case
        B = len(lens)
        kv = self.kv_cache.double().reshape(-1, 576)
        dev = self.query.device
        out = torch.zeros(B, T, H, 512, dtype=torch.float64, device=dev)
        lse = torch.full((B * T, H), -math.inf, dtype=torch.float64, device=dev)
        for b in range(B):
            for t in range(T):
                if self.top_k:
                    idx = self.block_tables[b, t].long()
                    rows = idx[(idx >= 0) & (idx < kv.shape[0])]
                else:
                    end = min(lens[b], lens[b] - T + t + 1)  # causal among the request's queries
                    j = torch.arange(max(end, 0), device=dev)
                    rows = self.block_tables[b].long()[j // P] * P + j % P
                k = kv[rows]
                s = (self.query[b, t].double() @ k.T) * MLA_BMM1  # [H, n]
                s_all = s if self.sinks is None else torch.cat([s, self.sinks.double()[:, None]], dim=1)
                row_lse = torch.logsumexp(s_all, dim=1)
                lse[b * T + t] = row_lse
                if rows.numel():
                    out[b, t] = (torch.exp(s - row_lse[:, None]) @ k[:, :512]) * MLA_BMM2
        return out, lse


def check_lse(got, ref):
    assert got.dtype == torch.float32 and got.shape == ref.shape
    finite = torch.isfinite(ref)
    assert torch.equal(torch.isinf(got) & (got < 0), ~finite), "a row that sees nothing must have LSE -inf"
    torch.testing.assert_close(got.double()[finite], ref[finite], atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("case", MLA_CASES, ids=lambda c: "-".join(str(x) for x in c[:5]) + "-" + "-".join(c[5]))
def test_mla_matches_float64_reference(case):
    x = MlaInputs(case)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())  # the inputs were written on the default stream
    with torch.cuda.stream(s):  # the op follows torch's current stream
        res = attnjit.trtllm_batch_decode_with_kv_cache_mla(*x.args(), **x.kwargs())
    s.synchronize()
    out, lse = res if case[5].get("return_lse") else (res, None)
    assert out.shape == (*x.query.shape[:3], 512) and out.dtype == x.query.dtype and out.device == x.query.device
    ref_out, ref_lse = x.reference()
    check(out, ref_out, case[0])
    if lse is not None:
        check_lse(lse, ref_lse)
    # Again into a NaN-filled out= (the same kernel: prewarmed): every element written, and the
    # semaphores reset themselves.
    out2 = torch.full_like(out, math.nan)
    res2 = attnjit.trtllm_batch_decode_with_kv_cache_mla(*x.args(), **x.kwargs(), out=out2)
    assert (res2[0] if lse is not None else res2) is out2
    torch.cuda.synchronize()
    check(out2, ref_out, case[0])


def test_mla_cuda_graph_replay():
    case = MLA_CASES[0]  # splits: the captured launch uses the workspace's semaphores
    x = MlaInputs(case, seed=1)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up on the capturing stream: loads the kernel
        attnjit.trtllm_batch_decode_with_kv_cache_mla(*x.args(), **x.kwargs())
    s.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        out = attnjit.trtllm_batch_decode_with_kv_cache_mla(*x.args(), **x.kwargs())  # the graph's pool
    for seed in (2, 3):  # new inputs in the same buffers, then replay
        y = MlaInputs(case, seed=seed)
        x.query.copy_(y.query)
        x.kv_cache.copy_(y.kv_cache)
        x.block_tables.copy_(y.block_tables)
        out.fill_(math.nan)
        g.replay()
        torch.cuda.synchronize()
        check(out, x.reference()[0], case[0])


def test_mla_rejects_host_and_wrong_dtype_tensors():
    x = MlaInputs(MLA_CASES[0])
    a = list(x.args())
    with pytest.raises(ValueError, match="argument 'seq_lens': expected a CUDA tensor"):
        attnjit.trtllm_batch_decode_with_kv_cache_mla(*a[:7], x.seq_lens.cpu(), *a[8:])
    with pytest.raises(attnjit.InvalidArgumentError, match="argument 'block_tables'"):
        attnjit.trtllm_batch_decode_with_kv_cache_mla(*a[:6], x.block_tables.long(), *a[7:])
    with pytest.raises(attnjit.InvalidArgumentError, match="argument 'kv_cache'"):
        attnjit.trtllm_batch_decode_with_kv_cache_mla(a[0], x.kv_cache.float(), *a[2:])


def test_mla_cupy_input():
    cupy = pytest.importorskip("cupy")
    x = MlaInputs(CUPY_MLA, seed=4)
    torch.cuda.synchronize()  # CuPy's stream does not wait for torch's
    c = [cupy.from_dlpack(v) if isinstance(v, torch.Tensor) else v for v in x.args()]
    with cupy.cuda.Stream(non_blocking=True) as s:  # CuPy's current stream
        out = attnjit.trtllm_batch_decode_with_kv_cache_mla(*c, bmm1_scale=MLA_BMM1, bmm2_scale=MLA_BMM2)
    s.synchronize()
    assert isinstance(out, cupy.ndarray) and out.shape == (*c[0].shape[:3], 512) and out.dtype == c[0].dtype
    check(torch.from_dlpack(out), x.reference()[0], CUPY_MLA[0])
