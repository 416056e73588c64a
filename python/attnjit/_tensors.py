"""Frameworks, streams and output allocation for the ops (the tensors themselves go
to the extension through DLPack)."""
import sys

from ._errors import InvalidArgumentError

TORCH, CUPY, OTHER = 1, 2, 3
_framework_by_type = {}


def framework(x):
    t = type(x)
    fw = _framework_by_type.get(t)
    if fw is None:
        mod = t.__module__ or ""
        fw = TORCH if mod.startswith("torch") else CUPY if mod.startswith("cupy") else OTHER
        _framework_by_type[t] = fw
        torch = sys.modules.get("torch")
        if fw == TORCH and torch is not None and t is torch.Tensor and hasattr(torch._C, "_to_dlpack"):
            from . import attnjit_ext
            attnjit_ext._set_torch_fast_path(torch.Tensor, torch._C._to_dlpack)
    return fw


_torch_raw_stream = None


def _torch_stream(dev):
    global _torch_raw_stream
    if _torch_raw_stream is None:
        torch = sys.modules["torch"]
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        _torch_raw_stream = raw if raw is not None else (lambda d: torch.cuda.current_stream(d).cuda_stream)
    return _torch_raw_stream(dev)


def stream_handle(stream):
    """An int CUstream from an int, a torch.cuda.Stream (.cuda_stream) or a CuPy stream (.ptr)."""
    if isinstance(stream, int):
        return stream
    for attr in ("cuda_stream", "ptr"):
        handle = getattr(stream, attr, None)
        if isinstance(handle, int):
            return handle
    raise InvalidArgumentError(f"argument 'stream': expected a CUstream handle (int), a torch.cuda.Stream "
                               f"or a CuPy stream, got {type(stream).__name__}")


def launch_context(x, stream):
    """(stream handle, device to switch to or None) for a launch whose first tensor is x.
    torch: its current stream on x's device; CuPy: its current stream; else `stream` or 0."""
    fw = framework(x)
    if fw == TORCH:
        dev = x.get_device()
        if dev < 0:
            return 0, None  # a host tensor: the extension names the device error
        torch = sys.modules["torch"]
        switch = dev if dev != torch.cuda.current_device() else None
        return (_torch_stream(dev) if stream is None else stream_handle(stream)), switch
    if stream is not None:
        return stream_handle(stream), None
    if fw == CUPY:
        cupy = sys.modules["cupy"]
        return cupy.cuda.get_current_stream().ptr, None
    return 0, None


def run_on_device(switch, fn, *args):
    """Runs fn on torch device `switch` (None: the current one)."""
    if switch is None:
        return fn(*args)
    torch = sys.modules["torch"]
    with torch.cuda.device(switch):
        return fn(*args)


def empty(like, shape, float32=False, arg="out"):
    """A new tensor in like's framework and device: like's dtype, or fp32."""
    fw = framework(like)
    if fw == TORCH:
        torch = sys.modules["torch"]
        return torch.empty(shape, dtype=torch.float32 if float32 else like.dtype, device=like.device)
    if fw == CUPY:
        cupy = sys.modules["cupy"]
        with like.device:
            return cupy.empty(shape, dtype=cupy.float32 if float32 else like.dtype)
    raise InvalidArgumentError(
        f"argument '{arg}': expected a tensor (attnjit allocates outputs only for torch and CuPy "
        f"inputs; pass {arg}= for {type(like).__module__}), got None")
