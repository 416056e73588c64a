"""attnjit: JIT-compiled LLM attention kernels (NVRTC, a shared SQLite cubin store),
called like the libraries they mirror: attnjit.xqa, attnjit.single_decode_with_kv_cache and
attnjit.trtllm_batch_decode_with_kv_cache_mla take the arguments of FlashInfer's functions of
those names, and attnjit.npu_fused_infer_attention_score (also fused_infer_attention_score)
those of torch_npu's. Tensors come in through DLPack (torch, CuPy, JAX, numpy); nothing is copied."""
from . import attnjit_ext as _ext
from ._errors import (CompileError, DriverError, Error, InvalidArgumentError, NoDeviceError, NotPrewarmedError,
                      StoreError, UnsupportedError, _make_error)

_ext._set_error_factory(_make_error)

from ._aot import bundled_configs, cache_stats, expand_config, inspect, load_config, prewarm  # noqa: E402
from .ops import PUBLIC as _PUBLIC  # noqa: E402

ShapeOnly = _ext.ShapeOnly
__version__ = _ext.version
globals().update(_PUBLIC)

__all__ = ["Error", "InvalidArgumentError", "UnsupportedError", "CompileError", "DriverError", "NoDeviceError",
           "StoreError", "NotPrewarmedError", "ShapeOnly", "prewarm", "inspect", "cache_stats", "bundled_configs",
           "load_config", "expand_config", *_PUBLIC]
