"""Ahead of time without a GPU: prewarm (configs and op calls), inspect, cache_stats,
the sizing helpers, and error kinds."""
import json

import pytest

import attnjit
from attnjit import ShapeOnly as S

ARCH = "sm_90a"


def xqa_call(**kw):
    call = dict(op="xqa", q=S([2, 1, 32, 128], "bf16"), k_cache=S([8, 32, 8, 128], "bf16"),
                v_cache=S([8, 32, 8, 128], "bf16"), page_table=S([2, 4], "int32"), seq_lens=S([2, 1], "uint32"),
                output=S([2, 1, 32, 128], "bf16"), num_kv_heads=8, page_size=32)
    call.update(kw)
    return call


def test_prewarm_call_then_inspect_finds_it_in_memory():
    names = attnjit.prewarm(xqa_call(), arch=ARCH)
    assert names == ["xqa.bf16.hd128.g4.p32.nhd.sm90a"]
    info = attnjit.inspect(names[0])
    assert info["name"] == names[0] and info["arch"] == ARCH and info["op"] == "xqa"
    assert info["origin"] == "memory"  # prewarmed just now in this process
    stats = attnjit.cache_stats()
    assert stats["compiles"] >= 1 and stats["cache_path"].endswith("cubins.sqlite3")


def test_prewarm_bundled_config_and_decode_name():
    assert "llama-3-8b" in attnjit.bundled_configs()
    names = attnjit.prewarm("llama-3-8b", arch=ARCH)
    # FlashInfer's default use_tensor_cores=False runs the tensor-core kernel too.
    assert "decode.bf16.hd128.g4.contig.nhd.sm90a" in names
    assert "xqa.bf16.kve4m3.hd128.g4.p32.nhd.sm90a" in names
    info = attnjit.inspect("decode.bf16.hd128.g4.contig.nhd.sm90a")
    assert info["op"] == "decode" and info["origin"] == "memory"
    # batch 1's kernels of 32-token tiles (a long single request, and xqa at batch 1): the config
    # prewarms them, and inspect builds a call for their names
    for name in ("decode.bf16.hd128.g4.contig.nhd.tile32.sm90a", "xqa.bf16.hd128.g4.p32.nhd.tile32.sm90a"):
        assert name in names
        info = attnjit.inspect(name)
        assert info["name"] == name and info["origin"] == "memory"


def test_prewarm_config_dict_and_file(tmp_path):
    cfg = {"name": "tiny", "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64, "dtype": "fp16",
           "ops": [{"op": "xqa", "page_sizes": [16]}, {"op": "prefill"}]}
    with pytest.warns(UserWarning, match="skipping op 'prefill': family not implemented yet"):
        assert attnjit.prewarm(cfg, arch=ARCH) == ["xqa.fp16.hd64.g4.p16.nhd.sm90a"]
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps({**cfg, "ops": [{"op": "decode", "return_lse": True}]}))
    assert attnjit.prewarm(str(path), arch=[ARCH]) == ["decode.fp16.hd64.g4.contig.nhd.lse.sm90a"]


def test_config_unknown_op_is_named():
    cfg = {"name": "x", "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64, "ops": [{"op": "xqq"}]}
    with pytest.raises(attnjit.InvalidArgumentError, match=r"ops\[0\]\.op"):
        attnjit.prewarm(cfg, arch=ARCH)


def test_config_unknown_field_is_named():
    cfg = {"name": "x", "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64,
           "ops": [{"op": "xqa", "page_size": [16]}]}
    with pytest.raises(attnjit.InvalidArgumentError, match=r"ops\[0\]\.page_size"):
        attnjit.prewarm(cfg, arch=ARCH)


def test_prewarm_argument_errors_carry_the_ops_message():
    with pytest.raises(ValueError, match="argument 'page_size': expected 16, 32, 64 or 128, got 48") as e:
        attnjit.prewarm(xqa_call(page_size=48), arch=ARCH)
    assert isinstance(e.value, attnjit.Error) and e.value.kind == "invalid_argument"
    with pytest.raises(attnjit.InvalidArgumentError, match="argument 'q': expected dtype"):
        attnjit.prewarm(xqa_call(q=S([2, 1, 32, 128], "fp32")), arch=ARCH)
    with pytest.raises(attnjit.InvalidArgumentError, match="argument 'kv_layout'"):
        attnjit.prewarm(xqa_call(kv_layout="NDH"), arch=ARCH)
    with pytest.raises(attnjit.InvalidArgumentError, match="argument 'k': expected"):
        attnjit.prewarm(dict(op="decode", q=S([8, 128], "bf16"), k=S([10, 2, 64], "bf16"),
                             v=S([10, 2, 64], "bf16")), arch=ARCH)


def test_scalar_arguments_are_named_when_they_do_not_convert():
    # nanobind's own TypeError names no argument: the ops' int scalars are converted by name.
    for bad, given in ((2**31, "2147483648"), (-2**31 - 1, "-2147483649"), (1.5, "a float"), ("4", "a str"),
                       (None, "a NoneType")):
        with pytest.raises(attnjit.InvalidArgumentError, match=f"argument 'sliding_win_size': expected an int.*{given}"):
            attnjit.prewarm(xqa_call(sliding_win_size=bad), arch=ARCH)
    with pytest.raises(attnjit.InvalidArgumentError, match="argument 'num_kv_heads': expected an int"):
        attnjit.prewarm(xqa_call(num_kv_heads=8.0), arch=ARCH)
    with pytest.raises(attnjit.InvalidArgumentError, match="argument 'sm_count': expected an int"):
        attnjit.prewarm(xqa_call(sm_count="all"), arch=ARCH)
    with pytest.raises(attnjit.InvalidArgumentError, match="argument 'window_left': expected an int"):
        attnjit.prewarm(dict(op="decode", q=S([8, 128], "bf16"), k=S([10, 2, 128], "bf16"),
                             v=S([10, 2, 128], "bf16"), window_left=2**40), arch=ARCH)
    np = pytest.importorskip("numpy")  # numpy integers index like ints
    assert attnjit.prewarm(xqa_call(page_size=np.int64(32), sliding_win_size=np.int32(0)), arch=ARCH)


def test_numpy_tensors_through_dlpack():
    np = pytest.importorskip("numpy")
    # Prewarming takes host arrays for their shapes and dtypes (DLPack, no copy).
    q = np.zeros((2, 1, 32, 128), np.float16)
    kv = np.zeros((8, 32, 8, 128), np.float16)
    names = attnjit.prewarm(dict(op="xqa", q=q, k_cache=kv, v_cache=kv, page_table=np.zeros((2, 4), np.int32),
                                 seq_lens=np.zeros((2, 1), np.uint32), output=q, num_kv_heads=8, page_size=32),
                            arch=ARCH)
    assert names == ["xqa.fp16.hd128.g4.p32.nhd.sm90a"]
    # Read-only arrays (as JAX exports) come in too.
    ro = q.copy()
    ro.setflags(write=False)
    assert attnjit.prewarm(dict(op="decode", q=ro[0, 0], k=kv[0], v=kv[0]), arch=ARCH) == \
        ["decode.fp16.hd128.g4.contig.nhd.sm90a"]
    # A wrong dtype is the op's own message; a non-contiguous page table too.
    with pytest.raises(ValueError, match="argument 'page_table': expected dtype"):
        attnjit.prewarm(xqa_call(page_table=np.zeros((2, 4), np.int64)), arch=ARCH)
    with pytest.raises(ValueError, match="argument 'page_table': expected .*contiguous"):
        attnjit.prewarm(xqa_call(page_table=np.zeros((4, 2), np.int32).T), arch=ARCH)
    # Launching needs CUDA tensors: a host array is refused before anything runs.
    with pytest.raises(ValueError, match="argument 'q': expected a CUDA tensor, got a tensor on cpu"):
        attnjit.xqa(q, kv, kv, np.zeros((2, 4), np.int32), np.zeros((2, 1), np.uint32), q,
                    np.zeros(16, np.uint8), np.zeros(4, np.uint32), 8, 32)
    with pytest.raises(ValueError, match="argument 'q': expected a CUDA tensor"):
        attnjit.single_decode_with_kv_cache(np.zeros((8, 64), np.float16), np.zeros((3, 2, 64), np.float16),
                                            np.zeros((3, 2, 64), np.float16), out=np.zeros((8, 64), np.float16))
    # numpy is not a framework attnjit allocates in: out= is required, and says so.
    with pytest.raises(ValueError, match="argument 'out'"):
        attnjit.single_decode_with_kv_cache(np.zeros((8, 64), np.float16), np.zeros((3, 2, 64), np.float16),
                                            np.zeros((3, 2, 64), np.float16))


def test_not_a_tensor_and_shape_only_launch():
    with pytest.raises(ValueError, match="argument 'q': expected a tensor exporting __dlpack__"):
        attnjit.xqa("q", None, None, None, None, None, None, None, 8, 32)
    with pytest.raises(ValueError, match="ShapeOnly has no data"):
        attnjit.xqa(S([1], "bf16"), None, None, None, None, None, None, None, 8, 32)


def test_sizing_helpers():
    ws = attnjit.xqa_workspace_bytes(64, 8, 8, 1, 128, 32768, 132)
    assert ws > 0
    assert attnjit.xqa_workspace_bytes(1, 8, 8, 1, 128, 32768, 132) <= ws * 64
    assert attnjit.xqa_semaphore_count(64, 8, 8, 1) > 0
    with pytest.raises(attnjit.InvalidArgumentError, match="argument 'head_group_ratio'") as e:
        attnjit.xqa_semaphore_count(64, 8, 65, 1)
    assert e.value.kind == "invalid_argument"


def test_inspect_rejects_names_the_ops_do_not_build():
    with pytest.raises(attnjit.InvalidArgumentError, match="argument 'name'"):
        attnjit.inspect("nope")
    with pytest.raises(attnjit.InvalidArgumentError, match="argument 'name'"):
        attnjit.inspect("xqa.bf16.hd128.g4.p32.nhd.bogus.sm90a")


def test_error_kinds_map_to_classes():
    assert issubclass(attnjit.InvalidArgumentError, ValueError)
    assert issubclass(attnjit.NotPrewarmedError, attnjit.Error)
    with pytest.raises(attnjit.UnsupportedError) as e:  # no trtllm-gen kernel has run on a GPU yet
        attnjit.prewarm(xqa_call(backend="trtllm-gen"), arch=ARCH)
    assert e.value.kind == "unsupported" or isinstance(e.value, attnjit.Error)


def test_stream_argument_forms():
    from attnjit._tensors import stream_handle

    class CupyLike:
        ptr = 1234

    class TorchLike:
        cuda_stream = 0

    assert stream_handle(7) == 7 and stream_handle(CupyLike()) == 1234 and stream_handle(TorchLike()) == 0
    with pytest.raises(attnjit.InvalidArgumentError, match="argument 'stream'"):
        stream_handle("fast")
