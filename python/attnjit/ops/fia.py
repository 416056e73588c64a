"""attnjit.npu_fused_infer_attention_score (also attnjit.fused_infer_attention_score):
torch_npu.npu_fused_infer_attention_score's call (prefill and decode in one op) on
NVIDIA GPUs, over the C++ fused_infer_attention_score."""
import sys

from .. import attnjit_ext as _ext
from .._errors import InvalidArgumentError
from .._tensors import CUPY, TORCH, empty, framework, launch_context, run_on_device

__all__ = ["npu_fused_infer_attention_score", "fused_infer_attention_score"]

# The seed's rarer optional tensors, in the seed's order: a given one goes to the C++
# op (query_rope/key_rope: MLA inside FIA; left padding, the shared prefix and int8
# output run; the quantised inputs raise its error naming the argument).
_RARE = ("dequant_scale1", "quant_scale1", "dequant_scale2", "quant_scale2", "quant_offset2", "antiquant_scale",
         "antiquant_offset", "query_padding_size", "kv_padding_size", "key_antiquant_scale",
         "key_antiquant_offset", "value_antiquant_scale", "value_antiquant_offset", "key_shared_prefix",
         "value_shared_prefix", "actual_shared_prefix_len", "query_rope", "key_rope", "key_rope_antiquant_scale")
_NO_RARE = {}


def _rare(values):
    for v in values:
        if v is not None:
            return {n: x for n, x in zip(_RARE, values) if x is not None}
    return _NO_RARE


def _lengths(x, name):
    """SymInt[]: a host list of int64 lengths (a list, tuple, or anything with tolist())."""
    if x is None:
        return None
    try:
        return [int(v) for v in (x.tolist() if hasattr(x, "tolist") else x)]
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"argument '{name}': expected a host list of int64 lengths, "
                                   f"got {type(x).__name__}") from None


def _mask_bytes(m):
    """A bool mask as its uint8 view (DLPack's bool is not a dtype the ops take; same bytes)."""
    if m is None:
        return None
    if framework(m) == TORCH:
        torch = sys.modules["torch"]
        return m.view(torch.uint8) if m.dtype == torch.bool else m
    if str(getattr(m, "dtype", "")) == "bool" and hasattr(m, "view"):
        try:
            return m.view("uint8")
        except (TypeError, ValueError):
            return m  # the op names atten_mask's dtype
    return m


def _is_int8(t):
    """Whether t (a tensor, array or ShapeOnly) holds int8: torch.int8, numpy/CuPy int8, "int8"."""
    return str(getattr(t, "dtype", "")).split(".")[-1] == "int8"


def _out_dtype(query, quant_scale2):
    """attention_out's dtype: int8 with quant_scale2, fp16 for an int8 query (the full int8
    path), else the query's (None)."""
    if quant_scale2 is not None:
        return "int8"
    return "float16" if _is_int8(query) else None


def _empty_out(like, shape, dtype):
    """attention_out in like's framework and device: like's dtype (None), or int8 / float16."""
    if dtype is None:
        return empty(like, shape, arg="attention_out")
    fw = framework(like)
    if fw == TORCH:
        torch = sys.modules["torch"]
        return torch.empty(shape, dtype=getattr(torch, dtype), device=like.device)
    if fw == CUPY:
        cupy = sys.modules["cupy"]
        with like.device:
            return cupy.empty(shape, dtype=getattr(cupy, dtype))
    return empty(like, shape, arg="attention_out")  # raises: attnjit allocates only for torch and CuPy


def _output_shapes(qs, value, num_heads, input_layout, softmax_lse_flag):
    """(attention_out shape, softmax_lse shape) as the seed and fia.hpp define them; an
    unexpected rank keeps query's shape and lets the op name the argument."""
    out = qs
    if input_layout == "BNSD_BSND" and len(qs) == 4:
        out = (qs[0], qs[2], qs[1], qs[3])
    elif input_layout == "TND" and len(qs) == 3 and value is not None and len(value.shape) == 3:
        out = (qs[0], qs[1], value.shape[2])
    if not softmax_lse_flag:
        return out, (1,)  # the seed's placeholder: the op writes 0 into it
    if input_layout == "TND" and len(qs) == 3:
        return out, (qs[0], num_heads, 1)
    if input_layout in ("BNSD", "BNSD_BSND") and len(qs) == 4:
        return out, (qs[0], num_heads, qs[2], 1)
    return out, (qs[0], num_heads, qs[1] if len(qs) > 1 else 1, 1)


def npu_fused_infer_attention_score(query, key, value, *, pse_shift=None, atten_mask=None, actual_seq_lengths=None,
                                    actual_seq_lengths_kv=None, dequant_scale1=None, quant_scale1=None,
                                    dequant_scale2=None, quant_scale2=None, quant_offset2=None, antiquant_scale=None,
                                    antiquant_offset=None, block_table=None, query_padding_size=None,
                                    kv_padding_size=None, key_antiquant_scale=None, key_antiquant_offset=None,
                                    value_antiquant_scale=None, value_antiquant_offset=None, key_shared_prefix=None,
                                    value_shared_prefix=None, actual_shared_prefix_len=None, query_rope=None,
                                    key_rope=None, key_rope_antiquant_scale=None, num_heads=1, scale=1.0,
                                    pre_tokens=2147483647, next_tokens=2147483647, input_layout="BSH",
                                    num_key_value_heads=0, sparse_mode=0, inner_precise=0, block_size=0,
                                    antiquant_mode=0, softmax_lse_flag=False, key_antiquant_mode=0,
                                    value_antiquant_mode=0, attention_out=None, softmax_lse=None, stream=None,
                                    backend="auto"):
    """Ascend's FIA with torch_npu's arguments; returns (attention_out, softmax_lse).

    Layouts BSH, BSND, BNSD, BNSD_BSND (output BSND) and TND; fp16/bf16; GQA through
    num_key_value_heads; atten_mask bool/int8/uint8 (nonzero = masked out); sparse modes
    0-4; pse_shift; paged KV (block_table int32, block_size). actual_seq_lengths(_kv):
    host lists of int64 (TND: cumulative). attention_out: query's shape and dtype
    (BNSD_BSND: BSND; TND: value's head dim). softmax_lse: with softmax_lse_flag, fp32
    (B, N, Q_S, 1) (TND: (T, N, 1)), natural log, +inf for a row that sees no key;
    without it, the seed's fp32 [1] placeholder holding 0. Both are allocated in query's
    framework (torch or CuPy; others pass attention_out= and softmax_lse=); int8 with
    quant_scale2 (and quant_offset2). The full int8 path: int8 query, key and value at
    Q_S > 1 with dequant_scale1, quant_scale1 and dequant_scale2 (fp32, one value each, on
    device), fp16 output (int8 with quant_scale2). MLA: query_rope/key_rope with D 512 + 64, N
    32/64/128, Q_S 1-16, key N 1 (value the key tensor itself), paged KV.
    query_padding_size / kv_padding_size (int64 device tensors, left padding) and
    key/value_shared_prefix with actual_shared_prefix_len and the antiquant scales pass
    through. NZ layouts raise the op's error.
    The stream is torch's or CuPy's current one, else `stream`.
    """
    s, switch = launch_context(query, stream)
    if attention_out is None or softmax_lse is None:
        out_shape, lse_shape = _output_shapes(tuple(query.shape), value, num_heads, input_layout, softmax_lse_flag)
        if attention_out is None:
            attention_out = _empty_out(query, out_shape, _out_dtype(query, quant_scale2))
        if softmax_lse is None:
            softmax_lse = empty(query, lse_shape, float32=True, arg="softmax_lse")
    rare = _rare((dequant_scale1, quant_scale1, dequant_scale2, quant_scale2, quant_offset2, antiquant_scale,
                  antiquant_offset, query_padding_size, kv_padding_size, key_antiquant_scale, key_antiquant_offset,
                  value_antiquant_scale, value_antiquant_offset, key_shared_prefix, value_shared_prefix,
                  actual_shared_prefix_len, query_rope, key_rope, key_rope_antiquant_scale))
    run_on_device(switch, _ext.npu_fused_infer_attention_score, None, s, query, key, value, attention_out,
                  softmax_lse, pse_shift, _mask_bytes(atten_mask), _lengths(actual_seq_lengths, "actual_seq_lengths"),
                  _lengths(actual_seq_lengths_kv, "actual_seq_lengths_kv"), block_table, rare, num_heads, scale,
                  pre_tokens, next_tokens, input_layout, num_key_value_heads, sparse_mode, inner_precise,
                  block_size, antiquant_mode, softmax_lse_flag, key_antiquant_mode, value_antiquant_mode, backend)
    return attention_out, softmax_lse


fused_infer_attention_score = npu_fused_infer_attention_score

_NAMED = dict(pse_shift=None, atten_mask=None, actual_seq_lengths=None, actual_seq_lengths_kv=None, block_table=None,
              num_heads=1, scale=1.0, pre_tokens=2147483647, next_tokens=2147483647, input_layout="BSH",
              num_key_value_heads=0, sparse_mode=0, inner_precise=0, block_size=0, antiquant_mode=0,
              softmax_lse_flag=False, key_antiquant_mode=0, value_antiquant_mode=0, attention_out=None,
              softmax_lse=None, backend="auto")


def prewarm(call, arch):
    """Compiles (or finds) the kernel this call launches; attention_out and softmax_lse
    may be omitted (from query's shape and dtype, as the call allocates them)."""
    a = dict(call)
    a.pop("op", None)
    a.pop("stream", None)
    unknown = set(a) - set(_NAMED) - set(_RARE) - {"query", "key", "value"}
    if unknown:
        raise InvalidArgumentError(f"argument '{sorted(unknown)[0]}': expected an argument of "
                                   "npu_fused_infer_attention_score, got an unknown name")
    c = {**_NAMED, **a}
    q = c["query"]
    out, lse = c["attention_out"], c["softmax_lse"]
    if out is None or (lse is None and c["softmax_lse_flag"]):
        out_shape, lse_shape = _output_shapes(tuple(q.shape), c.get("value"), c["num_heads"], c["input_layout"],
                                              c["softmax_lse_flag"])
        if out is None:
            dt = _out_dtype(q, a.get("quant_scale2"))
            out = _ext.ShapeOnly(list(out_shape), {"int8": "int8", "float16": "fp16", None: str(q.dtype)}[dt])
        if lse is None and c["softmax_lse_flag"]:
            lse = _ext.ShapeOnly(list(lse_shape), "fp32")
    return _ext.npu_fused_infer_attention_score(
        arch, 0, q, c.get("key"), c.get("value"), out, lse, c["pse_shift"], _mask_bytes(c["atten_mask"]),
        _lengths(c["actual_seq_lengths"], "actual_seq_lengths"),
        _lengths(c["actual_seq_lengths_kv"], "actual_seq_lengths_kv"), c["block_table"],
        {n: a[n] for n in _RARE if a.get(n) is not None}, c["num_heads"], c["scale"], c["pre_tokens"],
        c["next_tokens"], c["input_layout"], c["num_key_value_heads"], c["sparse_mode"], c["inner_precise"],
        c["block_size"], c["antiquant_mode"], c["softmax_lse_flag"], c["key_antiquant_mode"],
        c["value_antiquant_mode"], c["backend"])


PREWARM = {"fia": prewarm, "fused_infer_attention_score": prewarm, "npu_fused_infer_attention_score": prewarm}
