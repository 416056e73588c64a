"""attnjit.xqa: flashinfer.xqa.xqa's call (paged-KV GQA decode, speculative decoding)."""
from .. import attnjit_ext as _ext
from .._tensors import launch_context, run_on_device

__all__ = ["xqa", "xqa_workspace_bytes", "xqa_semaphore_count"]

xqa_workspace_bytes = _ext.xqa_workspace_bytes
xqa_semaphore_count = _ext.xqa_semaphore_count


def xqa(q, k_cache, v_cache, page_table, seq_lens, output, workspace_buffer, semaphores, num_kv_heads,
        page_size, sinks=None, q_scale=1.0, kv_scale=1.0, sliding_win_size=0, kv_layout="NHD",
        sm_count=None, enable_pdl=None, rcp_out_scale=1.0, q_seq_len=1, mask=None, *, stream=None,
        backend="auto"):
    """Paged-KV attention with flashinfer.xqa.xqa's arguments; writes `output`, returns None.

    Size `workspace_buffer` (uint8) with xqa_workspace_bytes and `semaphores` (uint32,
    zeroed once) with xqa_semaphore_count. The stream is torch's current stream for
    torch tensors, CuPy's for CuPy arrays, else `stream` (a CUstream handle, default 0).
    """
    s, switch = launch_context(q, stream)
    return run_on_device(switch, _ext.xqa, None, s, q, k_cache, v_cache, page_table, seq_lens, output,
                         workspace_buffer, semaphores, num_kv_heads, page_size, sinks, q_scale, kv_scale,
                         sliding_win_size, kv_layout, sm_count, enable_pdl, rcp_out_scale, q_seq_len, mask,
                         backend)


def prewarm(call, arch):
    """Compiles (or finds) the kernel a call with these arguments launches; returns its name."""
    a = dict(call)
    a.pop("op", None)
    a.pop("stream", None)
    defaults = dict(sinks=None, q_scale=1.0, kv_scale=1.0, sliding_win_size=0, kv_layout="NHD",
                    sm_count=None, enable_pdl=None, rcp_out_scale=1.0, q_seq_len=1, mask=None,
                    workspace_buffer=None, semaphores=None, backend="auto")
    unknown = set(a) - set(defaults) - {"q", "k_cache", "v_cache", "page_table", "seq_lens", "output",
                                       "num_kv_heads", "page_size"}
    if unknown:
        from .._errors import InvalidArgumentError
        raise InvalidArgumentError(f"argument '{sorted(unknown)[0]}': expected an argument of xqa, got an unknown name")
    v = {**defaults, **a}
    return _ext.xqa(arch, 0, v["q"], v["k_cache"], v["v_cache"], v["page_table"], v["seq_lens"], v["output"],
                    v["workspace_buffer"], v["semaphores"], v["num_kv_heads"], v["page_size"], v["sinks"],
                    v["q_scale"], v["kv_scale"], v["sliding_win_size"], v["kv_layout"], v["sm_count"],
                    v["enable_pdl"], v["rcp_out_scale"], v["q_seq_len"], v["mask"], v["backend"])


PREWARM = {"xqa": prewarm}
