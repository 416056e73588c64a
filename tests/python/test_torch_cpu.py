"""torch tensors without a GPU (skipped where torch is not installed): fp8 through
DLPack, the torch fast path agreeing with __dlpack__, and device errors."""
import pytest

import attnjit
from attnjit import attnjit_ext as _ext

torch = pytest.importorskip("torch")


def xqa_call(kv_dtype):
    q = torch.zeros(2, 1, 32, 128, dtype=torch.bfloat16)
    kv = torch.zeros(8, 32, 8, 128, dtype=kv_dtype)
    return dict(op="xqa", q=q, k_cache=kv, v_cache=kv, page_table=torch.zeros(2, 4, dtype=torch.int32),
                seq_lens=torch.zeros(2, 1, dtype=torch.int32), output=q, num_kv_heads=8, page_size=32)


def test_fp8_kv_through_dlpack_and_both_import_paths_agree():
    call = xqa_call(torch.float8_e4m3fn)
    attnjit._tensors.framework(call["q"])  # installs the fast path, as a launch does
    fast = attnjit.prewarm(call, arch="sm_90a")
    assert fast == ["xqa.bf16.kve4m3.hd128.g4.p32.nhd.sm90a"]
    _ext._set_torch_fast_path(None, None)
    try:
        assert attnjit.prewarm(call, arch="sm_90a") == fast  # Tensor.__dlpack__
    finally:
        _ext._set_torch_fast_path(torch.Tensor, torch._C._to_dlpack)


def test_strided_torch_tensors_keep_their_strides():
    call = xqa_call(torch.bfloat16)
    bad = torch.zeros(4, 2, dtype=torch.int32).t()  # a transposed view: not contiguous
    with pytest.raises(ValueError, match="argument 'page_table': expected a contiguous tensor"):
        attnjit.prewarm({**call, "page_table": bad}, arch="sm_90a")
    with pytest.raises(ValueError, match="argument 'k_cache': expected dtype"):
        attnjit.prewarm({**call, "k_cache": torch.zeros(8, 32, 8, 128, dtype=torch.float32)}, arch="sm_90a")


def test_host_torch_tensors_are_refused_for_launch():
    q = torch.zeros(8, 64, dtype=torch.float16)
    k = torch.zeros(3, 2, 64, dtype=torch.float16)
    with pytest.raises(attnjit.InvalidArgumentError, match="argument 'q': expected a CUDA tensor, got a tensor on cpu"):
        attnjit.single_decode_with_kv_cache(q, k, k)
