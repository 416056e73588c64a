"""JAX arrays without a GPU (skipped where jax is not installed): read-only DLPack
exports with bf16 and fp8, and the out= JAX needs (attnjit allocates only for torch/CuPy)."""
import pytest

import attnjit

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")


def on_cpu(x):
    # Host arrays even where JAX's default device is a GPU (the GPU machine).
    return jax.device_put(x, jax.devices("cpu")[0])


def test_jax_bf16_and_fp8_through_dlpack():
    q = on_cpu(jnp.zeros((32, 128), jnp.bfloat16))
    k = on_cpu(jnp.zeros((10, 8, 128), jnp.float8_e4m3fn))
    assert attnjit.prewarm(dict(op="decode", q=q, k=k, v=k), arch="sm_90a") == \
        ["decode.bf16.kve4m3.hd128.g4.contig.nhd.sm90a"]
    with pytest.raises(attnjit.InvalidArgumentError, match="argument 'out'"):
        attnjit.single_decode_with_kv_cache(q, k, k)
    with pytest.raises(attnjit.InvalidArgumentError, match="argument 'q': expected a CUDA tensor, got a tensor on cpu"):
        attnjit.single_decode_with_kv_cache(q, k, k, out=on_cpu(jnp.zeros((32, 128), jnp.bfloat16)))
