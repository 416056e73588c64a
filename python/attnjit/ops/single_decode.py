"""attnjit.single_decode_with_kv_cache: flashinfer.decode.single_decode_with_kv_cache's call."""
from .. import attnjit_ext as _ext
from .._errors import InvalidArgumentError
from .._tensors import empty, launch_context, run_on_device

__all__ = ["single_decode_with_kv_cache"]


def single_decode_with_kv_cache(q, k, v, kv_layout="NHD", pos_encoding_mode="NONE", use_tensor_cores=False,
                                q_scale=None, k_scale=None, v_scale=None, window_left=-1,
                                logits_soft_cap=None, sm_scale=None, rope_scale=None, rope_theta=None,
                                return_lse=False, *, out=None, lse=None, stream=None, backend="auto",
                                enable_pdl=False):
    """One request's decode step over a contiguous KV, as FlashInfer's call.

    Returns the output [num_qo_heads, head_dim] (allocated in q's framework, torch or
    CuPy, unless `out` is given), or (output, lse) with return_lse (lse: fp32
    [num_qo_heads], base 2). The stream is torch's or CuPy's current one, else `stream`.
    use_tensor_cores is kept for FlashInfer's signature: both values run the tensor-core
    kernel (a CUDA-core one was slower at every shape measured, and was removed).
    """
    s, switch = launch_context(q, stream)
    if out is None:
        out = empty(q, tuple(q.shape))
    if return_lse and lse is None:
        lse = empty(q, (q.shape[0],), float32=True, arg="lse")
    run_on_device(switch, _ext.single_decode_with_kv_cache, None, s, q, k, v, out,
                  lse if return_lse else None, kv_layout, pos_encoding_mode, use_tensor_cores,
                  1.0 if q_scale is None else q_scale, 1.0 if k_scale is None else k_scale,
                  1.0 if v_scale is None else v_scale, window_left,
                  0.0 if logits_soft_cap is None else logits_soft_cap, sm_scale,
                  1.0 if rope_scale is None else rope_scale, 1e4 if rope_theta is None else rope_theta,
                  backend, enable_pdl)
    return (out, lse) if return_lse else out


def prewarm(call, arch):
    """Compiles (or finds) the kernel this call launches; out and lse may be omitted
    (q's shape and dtype; lse only with return_lse)."""
    a = dict(call)
    a.pop("op", None)
    a.pop("stream", None)
    defaults = dict(kv_layout="NHD", pos_encoding_mode="NONE", use_tensor_cores=False, q_scale=None,
                    k_scale=None, v_scale=None, window_left=-1, logits_soft_cap=None, sm_scale=None,
                    rope_scale=None, rope_theta=None, return_lse=False, out=None, lse=None, backend="auto",
                    enable_pdl=False)
    unknown = set(a) - set(defaults) - {"q", "k", "v"}
    if unknown:
        raise InvalidArgumentError(f"argument '{sorted(unknown)[0]}': expected an argument of "
                                   "single_decode_with_kv_cache, got an unknown name")
    c = {**defaults, **a}
    q = c["q"]
    out = c["out"] if c["out"] is not None else q
    lse = None
    if c["return_lse"]:
        lse = c["lse"] if c["lse"] is not None else _ext.ShapeOnly([q.shape[0]], "fp32")

    def opt(name, default):
        return default if c[name] is None else c[name]

    return _ext.single_decode_with_kv_cache(
        arch, 0, q, c["k"], c["v"], out, lse, c["kv_layout"], c["pos_encoding_mode"], c["use_tensor_cores"],
        opt("q_scale", 1.0), opt("k_scale", 1.0), opt("v_scale", 1.0), c["window_left"],
        opt("logits_soft_cap", 0.0), c["sm_scale"], opt("rope_scale", 1.0), opt("rope_theta", 1e4),
        c["backend"], c["enable_pdl"])


PREWARM = {"decode": prewarm, "single_decode_with_kv_cache": prewarm}
