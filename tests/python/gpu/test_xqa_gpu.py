"""attnjit.xqa on a GPU against a float64 PyTorch reference: torch (current stream,
fp8 KV through DLPack), a CUDA-graph replay, a CuPy input, and a miss during capture."""
import math

import pytest

import attnjit
from gpu_cases import CUPY_XQA, XQA_CASES, attention_ref, check, torch_dtype, xqa_shapes

torch = pytest.importorskip("torch")


class XqaInputs:
    def __init__(self, case, seed=0):
        qd, kd, layout, B, KH, G, D, P, L = case
        self.case = case
        gen = torch.Generator(device="cuda").manual_seed(seed)
        q, kv, pt = xqa_shapes(case)
        dev = "cuda"
        self.q = torch.randn(q, generator=gen, device=dev).to(torch_dtype(qd))
        self.k = torch.randn(kv, generator=gen, device=dev).to(torch_dtype(kd))
        self.v = torch.randn(kv, generator=gen, device=dev).to(torch_dtype(kd))
        self.page_table = torch.randperm(kv[0], generator=gen, device=dev).view(pt).to(torch.int32)
        lens = torch.randint(1, L + 1, (B, 1), generator=gen, device=dev)
        lens[0, 0] = L  # one request uses every page
        self.seq_lens = lens.to(torch.uint32)
        self.output = torch.full(q, math.nan, device=dev, dtype=torch_dtype(qd))
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        ws = attnjit.xqa_workspace_bytes(B, KH, G, 1, D, pt[1] * P, sms)
        self.workspace = torch.empty(max(ws, 16), dtype=torch.uint8, device=dev)
        self.semaphores = torch.zeros(attnjit.xqa_semaphore_count(B, KH, G, 1), dtype=torch.uint32, device=dev)

    def args(self, **kw):
        qd, kd, layout, B, KH, G, D, P, L = self.case
        return dict(q=self.q, k_cache=self.k, v_cache=self.v, page_table=self.page_table, seq_lens=self.seq_lens,
                    output=self.output, workspace_buffer=self.workspace, semaphores=self.semaphores,
                    num_kv_heads=KH, page_size=P, kv_layout=layout, **kw)

    def reference(self, kv_scale=1.0):
        qd, kd, layout, B, KH, G, D, P, L = self.case
        outs = []
        for b in range(B):
            n = int(self.seq_lens[b, 0].item())
            pages = self.page_table[b].long()
            k, v = self.k.double()[pages], self.v.double()[pages]
            if layout == "HND":
                k, v = k.transpose(1, 2), v.transpose(1, 2)
            k = k.reshape(-1, KH, D)[:n] * (kv_scale if kd.startswith("fp8") else 1.0)
            v = v.reshape(-1, KH, D)[:n] * (kv_scale if kd.startswith("fp8") else 1.0)
            outs.append(attention_ref(self.q[b, 0].double(), k, v, 1 / math.sqrt(D))[0])
        return torch.stack(outs).unsqueeze(1)


@pytest.mark.parametrize("case", XQA_CASES, ids=lambda c: "-".join(map(str, c)))
def test_xqa_matches_float64_reference(case):
    x = XqaInputs(case)
    kv_scale = 0.5 if case[1].startswith("fp8") else 1.0
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())  # the inputs were written on the default stream
    with torch.cuda.stream(s):  # the op must follow torch's current stream
        assert attnjit.xqa(**x.args(kv_scale=kv_scale)) is None
    s.synchronize()
    check(x.output, x.reference(kv_scale), case[1])


def test_xqa_cuda_graph_replay():
    case = XQA_CASES[0]
    x = XqaInputs(case, seed=1)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        attnjit.xqa(**x.args())  # warm-up: loads the kernel on this device
    s.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        attnjit.xqa(**x.args())
    for seed in (2, 3):  # new inputs in the same buffers, then replay
        y = XqaInputs(case, seed=seed)
        x.q.copy_(y.q); x.k.copy_(y.k); x.v.copy_(y.v); x.seq_lens.copy_(y.seq_lens)
        x.output.fill_(math.nan)
        g.replay()
        torch.cuda.synchronize()
        check(x.output, x.reference(), case[1])


def test_xqa_miss_during_capture_raises_not_prewarmed():
    # A variant no other test uses (fp16, head_dim 32, page 128, HND): never loaded here.
    case = ("fp16", "fp16", "HND", 1, 1, 2, 32, 128, 128)
    x = XqaInputs(case)
    s = torch.cuda.Stream()
    g = torch.cuda.CUDAGraph()
    with pytest.raises(attnjit.NotPrewarmedError) as e:
        with torch.cuda.graph(g, stream=s):
            attnjit.xqa(**x.args())
    assert e.value.kind == "not_prewarmed"
    assert "prewarm" in str(e.value)


def test_xqa_rejects_host_and_wrong_dtype_tensors():
    x = XqaInputs(XQA_CASES[0])
    with pytest.raises(ValueError, match="argument 'page_table': expected a CUDA tensor"):
        attnjit.xqa(**{**x.args(), "page_table": x.page_table.cpu()})
    with pytest.raises(attnjit.InvalidArgumentError, match="argument 'page_table'"):
        attnjit.xqa(**{**x.args(), "page_table": x.page_table.long()})
    with pytest.raises(ValueError, match="argument 'page_table'"):  # not contiguous
        attnjit.xqa(**{**x.args(), "page_table": x.page_table.t().contiguous().t()})


def test_xqa_cupy_input():
    cupy = pytest.importorskip("cupy")
    x = XqaInputs(CUPY_XQA, seed=4)
    torch.cuda.synchronize()  # CuPy's stream does not wait for torch's
    c = {k: cupy.from_dlpack(v) for k, v in x.args().items() if isinstance(v, torch.Tensor)}
    with cupy.cuda.Stream(non_blocking=True) as s:  # CuPy's current stream
        attnjit.xqa(**{**x.args(), **c})
    s.synchronize()
    check(torch.from_dlpack(c["output"]), x.reference(), CUPY_XQA[1])
