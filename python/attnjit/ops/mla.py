"""attnjit.trtllm_batch_decode_with_kv_cache_mla: flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla's
call (DeepSeek MLA decode over a paged latent KV cache, 512 + 64), over batch_decode_mla."""
import sys

from .. import attnjit_ext as _ext
from .._errors import InvalidArgumentError
from .._tensors import empty, launch_context, run_on_device

__all__ = ["trtllm_batch_decode_with_kv_cache_mla", "mla_workspace_bytes"]

mla_workspace_bytes = _ext.mla_workspace_bytes


def _one_sink(sinks):
    """The seed types sinks as List[Tensor]: one fp32 [num_heads] tensor, bare or in a list."""
    if isinstance(sinks, (list, tuple)):
        if len(sinks) != 1:
            raise InvalidArgumentError(f"argument 'sinks': expected one fp32 [num_heads] tensor (or a list of "
                                       f"one), got a list of {len(sinks)}")
        return sinks[0]
    return sinks


def trtllm_batch_decode_with_kv_cache_mla(query, kv_cache, workspace_buffer, qk_nope_head_dim, kv_lora_rank,
                                          qk_rope_head_dim, block_tables, seq_lens, max_seq_len,
                                          sparse_mla_top_k=0, out=None, bmm1_scale=1.0, bmm2_scale=1.0,
                                          sinks=None, enable_pdl=None, backend="auto", *, return_lse=False,
                                          lse=None, lse_base="e", sm_count=None, stream=None):
    """MLA decode with FlashInfer's arguments; returns `out`, or (out, lse) with return_lse.

    query [batch, q_len_per_request, num_heads, 576] (q_nope 512 then q_rope 64), bf16 or
    fp16, or fp8 e4m3 with an fp8 e4m3 cache; kv_cache [num_pages, page_size, 576] or
    [num_pages, 1, page_size, 576], the query's dtype or fp8 e4m3; block_tables int32 [batch, max_pages]; seq_lens int32 [batch]. The
    queries of a request are causal among themselves: query t sees KV positions
    < seq_len - q_len_per_request + t + 1. Sparse (sparse_mla_top_k > 0, FlashInfer's
    convention): block_tables is int32 [batch, q_len_per_request, top_k] of physical
    positions page * page_size + slot (-1 unused); each query row sees only those.

    workspace_buffer: a device buffer (uint8) of at least
    mla_workspace_bytes(batch, num_heads, q_len_per_request, max_seq_len, sm_count,
    sparse_mla_top_k) bytes, used when a call splits the KV. Its first bytes are the
    split semaphores: zero the buffer once when allocating it (every launch leaves them
    at zero again); one buffer serves one stream at a time.

    bmm1_scale (q_scale * k_scale * sm_scale / sqrt(576)) and bmm2_scale (v_scale *
    o_scale): floats, or one-element fp32 device tensors (read by the kernel: CUDA-graph
    friendly). sinks: fp32 [num_heads] (or a list of one). out: allocated as
    [batch, q_len_per_request, num_heads, kv_lora_rank] in query's dtype (bf16 for an fp8
    query, as FlashInfer) and framework (torch or CuPy; others pass out=). return_lse: also an fp32
    [batch * q_len_per_request, num_heads] log-sum-exp of the scaled logits (sinks
    included), base lse_base ('e' or '2'), allocated unless lse= is given. The stream is
    torch's or CuPy's current one, else `stream`.
    """
    s, switch = launch_context(query, stream)
    shape = tuple(query.shape)
    if out is None and len(shape) == 4:  # another rank: the op names the query
        out = _empty_out(query, shape[:3] + (kv_lora_rank,))
    if return_lse and lse is None and len(shape) == 4:
        lse = empty(query, (shape[0] * shape[1], shape[2]), float32=True, arg="lse")
    run_on_device(switch, _ext.trtllm_batch_decode_with_kv_cache_mla, None, s, query, kv_cache, workspace_buffer,
                  qk_nope_head_dim, kv_lora_rank, qk_rope_head_dim, block_tables, seq_lens, max_seq_len,
                  sparse_mla_top_k, out, bmm1_scale, bmm2_scale, _one_sink(sinks), enable_pdl, backend,
                  lse if return_lse else None, lse_base, sm_count)
    return (out, lse) if return_lse else out


_REQUIRED = ("query", "kv_cache", "qk_nope_head_dim", "kv_lora_rank", "qk_rope_head_dim", "block_tables",
             "seq_lens", "max_seq_len")
_DEFAULTS = dict(workspace_buffer=None, sparse_mla_top_k=0, out=None, bmm1_scale=1.0, bmm2_scale=1.0, sinks=None,
                 enable_pdl=None, backend="auto", return_lse=False, lse=None, lse_base="e", sm_count=None)


def prewarm(call, arch):
    """Compiles (or finds) the kernel this call launches; out and lse may be omitted
    (from query's shape; lse only with return_lse), workspace_buffer too."""
    a = dict(call)
    a.pop("op", None)
    a.pop("stream", None)
    unknown = set(a) - set(_DEFAULTS) - set(_REQUIRED)
    if unknown:
        raise InvalidArgumentError(f"argument '{sorted(unknown)[0]}': expected an argument of "
                                   "trtllm_batch_decode_with_kv_cache_mla, got an unknown name")
    missing = [n for n in _REQUIRED if n not in a]
    if missing:
        raise InvalidArgumentError(f"argument '{missing[0]}': expected a value (required), got nothing")
    c = {**_DEFAULTS, **a}
    q = c["query"]
    shape = list(q.shape)
    out, lse = c["out"], None
    if out is None and len(shape) == 4:
        out = _ext.ShapeOnly(shape[:3] + [c["kv_lora_rank"]], "bf16" if _is_fp8(q) else _dtype_name(q))
    if c["return_lse"]:
        lse = c["lse"]
        if lse is None and len(shape) == 4:
            lse = _ext.ShapeOnly([shape[0] * shape[1], shape[2]], "fp32")
    return _ext.trtllm_batch_decode_with_kv_cache_mla(
        arch, 0, q, c["kv_cache"], c["workspace_buffer"], c["qk_nope_head_dim"], c["kv_lora_rank"],
        c["qk_rope_head_dim"], c["block_tables"], c["seq_lens"], c["max_seq_len"], c["sparse_mla_top_k"], out,
        c["bmm1_scale"], c["bmm2_scale"], _one_sink(c["sinks"]), c["enable_pdl"], c["backend"], lse,
        c["lse_base"], c["sm_count"])


def _is_fp8(x):
    """An fp8 e4m3 query: its output is bf16 (FlashInfer's trtllm-gen and xqa MLA)."""
    return "e4m3" in _dtype_name(x)


def _empty_out(query, shape):
    """out for the query: its dtype and framework; bf16 for an fp8 torch query (CuPy has no
    bf16: pass out= there)."""
    if _is_fp8(query) and "torch" in sys.modules and isinstance(query, sys.modules["torch"].Tensor):
        torch = sys.modules["torch"]
        return torch.empty(shape, dtype=torch.bfloat16, device=query.device)
    return empty(query, shape)


def _dtype_name(x):
    """A tensor's dtype as ShapeOnly takes it ('torch.bfloat16', 'float16', 'bf16'...)."""
    return str(x.dtype)


PREWARM = {"mla": prewarm, "batch_decode_mla": prewarm, "trtllm_batch_decode_with_kv_cache_mla": prewarm}
