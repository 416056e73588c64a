"""The MLA and FIA ops without a GPU: prewarm and inspect of their kernels, the sizing
helper, output shapes, and argument errors (numpy through DLPack, or ShapeOnly) that
name the argument."""
import pytest

import attnjit
from attnjit import ShapeOnly as S
from attnjit.ops.fia import _output_shapes

ARCH = "sm_90a"
np = pytest.importorskip("numpy")


def mla_call(**kw):
    call = dict(op="mla", query=S([2, 1, 16, 576], "bf16"), kv_cache=S([8, 64, 576], "bf16"), qk_nope_head_dim=128,
                kv_lora_rank=512, qk_rope_head_dim=64, block_tables=S([2, 4], "int32"), seq_lens=S([2], "int32"),
                max_seq_len=256)
    call.update(kw)
    return call


def fia_call(**kw):
    call = dict(op="fia", query=S([1, 8, 64, 128], "fp16"), key=S([1, 2, 512, 128], "fp16"),
                value=S([1, 2, 512, 128], "fp16"), num_heads=8, num_key_value_heads=2, input_layout="BNSD")
    call.update(kw)
    return call


def test_mla_int_arguments_are_named():
    for name in ("max_seq_len", "sparse_mla_top_k", "qk_nope_head_dim", "kv_lora_rank", "qk_rope_head_dim", "sm_count"):
        with pytest.raises(attnjit.InvalidArgumentError, match=f"argument '{name}': expected an int"):
            attnjit.prewarm(mla_call(**{name: 2**33}), arch=ARCH)


def test_mla_prewarm_then_inspect():
    # auto on sm_90a: the wgmma (trtllm-gen) kernel; 16 heads x 1 query token: its narrow tile.
    names = attnjit.prewarm(mla_call(), arch=ARCH)
    assert names == ["mla.bf16.hd576x512.g1.p64.nhd.causal.narrow.trtllmgen.sm90a"]
    info = attnjit.inspect(names[0])
    assert info["op"] == "mla" and info["origin"] == "memory" and info["arch"] == ARCH
    # The seed's name and the C++ name prewarm the same kernel; options reach the name.
    full = mla_call(op="trtllm_batch_decode_with_kv_cache_mla", sinks=[S([16], "fp32")], bmm1_scale=S([1], "fp32"),
                    return_lse=True)
    assert attnjit.prewarm(full, arch=ARCH) == [
        "mla.bf16.hd576x512.g1.p64.nhd.causal.sinks.lse.scaleptr.narrow.trtllmgen.sm90a"]
    # Sparse: FlashInfer's [batch, q_len, top_k] indices in block_tables.
    sparse = mla_call(op="batch_decode_mla", block_tables=S([2, 1, 32], "int32"), sparse_mla_top_k=32)
    assert attnjit.prewarm(sparse, arch=ARCH) == ["mla.bf16.hd576x512.g1.p64.nhd.custom.narrow.trtllmgen.sm90a"]
    assert attnjit.prewarm(dict(sparse, backend="xqa"), arch=ARCH) == ["mla.bf16.hd576x512.g1.p64.nhd.custom.sm90a"]
    assert attnjit.inspect("mla.bf16.hd576x512.g1.p64.nhd.custom", arch=ARCH)["name"].endswith(".custom.sm90a")


def test_fia_prewarm_then_inspect():
    # On sm_90a auto takes the wgmma (trtllm-gen) prefill kernel for head dim 128.
    names = attnjit.prewarm(fia_call(softmax_lse_flag=True), arch=ARCH)
    assert names == ["prefill.fp16.hd128.g1.contig.nhd.lse.trtllmgen.sm90a"]
    info = attnjit.inspect(names[0])
    assert info["op"] == "fia" and info["origin"] == "memory"
    causal = fia_call(op="npu_fused_infer_attention_score", sparse_mode=3, atten_mask=S([2048, 2048], "uint8"))
    assert attnjit.prewarm(causal, arch=ARCH) == ["prefill.fp16.hd128.g1.contig.nhd.causal.trtllmgen.sm90a"]
    # A bool mask (numpy here) goes in as its uint8 view: the full-mask (custom) kernel.
    mask = np.zeros((64, 512), dtype=bool)
    custom = fia_call(op="fused_infer_attention_score", sparse_mode=1, atten_mask=mask)
    assert attnjit.prewarm(custom, arch=ARCH) == ["prefill.fp16.hd128.g1.contig.nhd.custom.trtllmgen.sm90a"]
    # TND (192/128 head dims) from its name, through the op.
    assert attnjit.inspect("prefill.bf16.hd192x128.g1.contig.nhd.trtllmgen.sm90a")["op"] == "fia"
    # int8 K/V with the combined per-channel scale (Q_S > 1, BNSD: (2, N, 1, D)). 64 tokens x
    # group 4 = 256 query rows per KV head: dequantised first (the dqpass kernel, prewarmed
    # too), then the 16-bit wgmma kernel, whose name prewarm returns.
    int8 = fia_call(key=S([1, 2, 512, 128], "int8"), value=S([1, 2, 512, 128], "int8"),
                    antiquant_scale=S([2, 2, 1, 128], "fp16"))
    before = attnjit.cache_stats()
    assert attnjit.prewarm(int8, arch=ARCH) == ["prefill.fp16.hd128.g1.contig.nhd.trtllmgen.sm90a"]
    built = attnjit.cache_stats()
    # Two kernels new to this process, each compiled or read from the store: the pass and the attention.
    assert built["compiles"] + built["store_hits"] - before["compiles"] - before["store_hits"] == 2
    # 16 tokens x group 4 = 64 rows: the wgmma kernel's producer dequantises it to fp16.
    short = dict(int8, query=S([1, 8, 16, 128], "fp16"))
    assert attnjit.prewarm(short, arch=ARCH) == ["prefill.fp16.kvint8.hd128.g1.contig.nhd.trtllmgen.sm90a"]


def test_mla_backends_by_shape_and_by_request():
    # auto on sm_90a: the wgmma (trtllm-gen) kernel for 16-bit and fp8 KV at every shape (128 heads
    # x batch 16, and mla_call's 16 heads x batch 2); either on request; other archs refuse
    # trtllm-gen, naming the backend.
    wide = mla_call(query=S([16, 1, 128, 576], "bf16"), block_tables=S([16, 4], "int32"), seq_lens=S([16], "int32"))
    assert attnjit.prewarm(wide, arch=ARCH) == ["mla.bf16.hd576x512.g1.p64.nhd.causal.trtllmgen.sm90a"]
    assert attnjit.prewarm(dict(wide, backend="xqa"), arch=ARCH) == ["mla.bf16.hd576x512.g1.p64.nhd.causal.sm90a"]
    narrow = "mla.bf16.hd576x512.g1.p64.nhd.causal.narrow.trtllmgen.sm90a"  # 16 rows a CTA: the narrow tile
    assert attnjit.prewarm(mla_call(), arch=ARCH) == [narrow]
    assert attnjit.prewarm(mla_call(backend="trtllm-gen"), arch=ARCH) == [narrow]
    # 17-32 rows with 16-bit KV: the 32-row form (16 heads x 2 query tokens); fp8 KV there: the wide tile.
    q2 = mla_call(query=S([2, 2, 16, 576], "bf16"))
    assert attnjit.prewarm(q2, arch=ARCH) == ["mla.bf16.hd576x512.g1.p64.nhd.causal.narrow32.trtllmgen.sm90a"]
    assert attnjit.prewarm(dict(q2, kv_cache=S([8, 64, 576], "fp8_e4m3")), arch=ARCH) == [
        "mla.bf16.kve4m3.hd576x512.g1.p64.nhd.causal.trtllmgen.sm90a"]
    assert attnjit.inspect("mla.bf16.hd576x512.g1.p64.nhd.causal.narrow32.trtllmgen.sm90a")["op"] == "mla"
    info = attnjit.inspect("mla.bf16.hd576x512.g1.p64.nhd.causal.trtllmgen.sm90a")
    assert info["op"] == "mla" and info["origin"] == "memory"
    with pytest.raises(attnjit.UnsupportedError, match="backend trtllm-gen"):
        attnjit.prewarm(dict(wide, backend="trtllm-gen"), arch="sm_120")
    fp8 = dict(wide, kv_cache=S([64, 64, 576], "fp8_e4m3"))
    for backend in ("trtllm-gen", "auto"):
        assert attnjit.prewarm(dict(fp8, backend=backend), arch=ARCH) == [
            "mla.bf16.kve4m3.hd576x512.g1.p64.nhd.causal.trtllmgen.sm90a"]
    assert attnjit.prewarm(dict(fp8, backend="xqa"), arch=ARCH) == ["mla.bf16.kve4m3.hd576x512.g1.p64.nhd.causal.sm90a"]


def test_inspect_rejects_mla_and_prefill_names_it_cannot_build():
    with pytest.raises(attnjit.InvalidArgumentError, match="argument 'name'"):
        attnjit.inspect("mla.bf16.hd128.g1.p64.nhd.causal.sm90a")  # MLA is 576x512 only
    with pytest.raises(attnjit.InvalidArgumentError, match="got 'window'"):
        attnjit.inspect("prefill.bf16.hd128.g1.contig.nhd.window.sm90a")
    with pytest.raises(attnjit.InvalidArgumentError, match="stands for"):  # heads are a launch value: g1
        attnjit.inspect("prefill.bf16.hd128.g4.contig.nhd.sm90a")


def test_mla_workspace_bytes():
    big = attnjit.mla_workspace_bytes(64, 128, 1, 32768, 132)
    assert big > 0
    assert attnjit.mla_workspace_bytes(1, 16, 1, 32768, 132) <= big
    assert attnjit.mla_workspace_bytes(1, 16, 1, 64, 132) == 0  # one tile: never split
    assert attnjit.mla_workspace_bytes(4, 16, 2, 64, 132, sparse_mla_top_k=2048) > 0
    with pytest.raises(attnjit.InvalidArgumentError, match="argument 'num_heads'"):
        attnjit.mla_workspace_bytes(1, 129, 1, 1024, 132)


@pytest.mark.parametrize("kw, arg", [
    (dict(kv_lora_rank=256), "kv_lora_rank"),
    (dict(query=S([2, 1, 16, 512], "bf16")), "query"),
    (dict(kv_cache=S([8, 64, 576], "fp16")), "kv_cache"),  # neither the query's dtype nor fp8_e4m3
    (dict(block_tables=S([2, 4], "int64")), "block_tables"),
    (dict(seq_lens=S([3], "int32")), "seq_lens"),
    (dict(max_seq_len=257), "max_seq_len"),
    (dict(sparse_mla_top_k=8), "block_tables"),  # sparse needs [batch, q_len, top_k] indices there
    (dict(bmm1_scale=0.0), "bmm1_scale"),
    (dict(bmm2_scale=S([2], "fp32")), "bmm2_scale"),
    (dict(sinks=S([8], "fp32")), "sinks"),
    (dict(sinks=[S([16], "fp32"), S([16], "fp32")]), "sinks"),
    (dict(return_lse=True, lse=S([2, 8], "fp32")), "lse"),
    (dict(return_lse=True, lse_base="10"), "lse_base"),
    (dict(out=S([2, 1, 16, 576], "bf16")), "out"),
    (dict(backend="fast"), "backend"),
    (dict(workspace=None), "workspace"),  # not an argument of the op
])
def test_mla_argument_errors_name_the_argument(kw, arg):
    with pytest.raises(attnjit.InvalidArgumentError, match=f"argument '{arg}'"):
        attnjit.prewarm(mla_call(**kw), arch=ARCH)


def test_mla_launch_errors_with_numpy():
    q = np.zeros((1, 1, 16, 576), np.float16)
    kv = np.zeros((4, 32, 576), np.float16)
    bt, sl, ws = np.zeros((1, 4), np.int32), np.zeros(1, np.int32), np.zeros(1024, np.uint8)
    args = (q, kv, ws, 128, 512, 64, bt, sl, 128)
    with pytest.raises(attnjit.InvalidArgumentError, match="argument 'out'"):  # numpy: no allocation
        attnjit.trtllm_batch_decode_with_kv_cache_mla(*args)
    with pytest.raises(attnjit.InvalidArgumentError, match="argument 'query': expected a CUDA tensor, got a tensor on cpu"):
        attnjit.trtllm_batch_decode_with_kv_cache_mla(*args, out=np.zeros((1, 1, 16, 512), np.float16))
    with pytest.raises(attnjit.InvalidArgumentError, match="argument 'lse'"):
        attnjit.trtllm_batch_decode_with_kv_cache_mla(*args, out=np.zeros((1, 1, 16, 512), np.float16),
                                                      return_lse=True)
    with pytest.raises(attnjit.InvalidArgumentError, match="ShapeOnly has no data"):
        attnjit.trtllm_batch_decode_with_kv_cache_mla(S([1, 1, 16, 576], "fp16"), *args[1:],
                                                      out=S([1, 1, 16, 512], "fp16"))


@pytest.mark.parametrize("kw, arg", [
    (dict(input_layout="SBH"), "input_layout"),
    (dict(num_key_value_heads=3), "num_key_value_heads"),
    (dict(key=S([2, 2, 512, 128], "fp16"), value=S([2, 2, 512, 128], "fp16")), "key"),
    (dict(value=S([1, 2, 512, 128], "bf16")), "value"),
    (dict(sparse_mode=3), "atten_mask"),  # rightDownCausal needs the 2048x2048 mask
    (dict(sparse_mode=9), "sparse_mode"),
    (dict(atten_mask=S([64, 512], "fp16")), "atten_mask"),
    (dict(actual_seq_lengths=[65]), "actual_seq_lengths"),
    (dict(actual_seq_lengths_kv=[513]), "actual_seq_lengths_kv"),
    (dict(actual_seq_lengths=["a"]), "actual_seq_lengths"),
    (dict(actual_seq_lengths=3), "actual_seq_lengths"),
    (dict(softmax_lse_flag=True, softmax_lse=S([1], "fp32")), "softmax_lse"),
    (dict(softmax_lse=S([2], "fp32")), "softmax_lse"),  # without the flag: the [1] placeholder only
    (dict(attention_out=S([1, 64, 8, 128], "fp16")), "attention_out"),
    (dict(pse_shift=S([1, 8, 64, 512], "bf16")), "pse_shift"),
    (dict(inner_precise=4), "inner_precise"),
    (dict(block_table=S([1, 4], "int32"), block_size=100, actual_seq_lengths_kv=[400]), "block_size"),
    (dict(scale=float("nan")), "scale"),
    (dict(num_heads=4), "query"),
    (dict(queries=None), "queries"),  # not an argument of the op
    (dict(query_padding_size=S([1], "int32"), actual_seq_lengths=[30]), "query_padding_size"),
    (dict(key_shared_prefix=S([1, 2, 16, 128], "fp16")), "value_shared_prefix"),
    (dict(quant_offset2=S([1], "fp32")), "quant_offset2"),
    (dict(quant_scale2=S([3], "fp32")), "quant_scale2"),
    (dict(dequant_scale1=S([1], "fp32")), "dequant_scale1"),  # only with an int8 query
    # an int8 query (the full int8 path) takes all three per-tensor scales
    (dict(query=S([1, 8, 64, 128], "int8")), "dequant_scale1"),
    (dict(query=S([1, 8, 64, 128], "int8"), dequant_scale1=S([1], "fp32")), "quant_scale1"),
    # antiquant scales dequantise int8/int4 K/V only (fp16 K/V here)
    (dict(antiquant_scale=S([2, 256], "fp16")), "antiquant_scale"),
    (dict(key_antiquant_scale=S([1, 512], "fp32"), value_antiquant_scale=S([1, 512], "fp32")),
     "key_antiquant_scale"),
    # int8 K/V without any scale
    (dict(key=S([1, 2, 512, 128], "int8"), value=S([1, 2, 512, 128], "int8")), "antiquant_scale"),
])
def test_fia_argument_errors_name_the_argument(kw, arg):
    with pytest.raises(attnjit.InvalidArgumentError, match=f"argument '{arg}'"):
        attnjit.prewarm(fia_call(**kw), arch=ARCH)


@pytest.mark.parametrize("kw, arg", [
    (dict(input_layout="BNSD_NZ"), "input_layout"),
    (dict(key_rope_antiquant_scale=S([1], "fp32")), "key_rope_antiquant_scale"),  # reserved by the seed
])
def test_fia_refused_features_raise_the_ops_error(kw, arg):
    # Passed through to the C++ op, whose UnsupportedError names the argument.
    with pytest.raises(attnjit.UnsupportedError, match=f"argument '{arg}'") as e:
        attnjit.prewarm(fia_call(**kw), arch=ARCH)
    assert e.value.kind == "unsupported"


def fia_mla_call(**kw):
    # MLA inside FIA: query 512 + query_rope 64, key (blocks, block_size, 512) with N 1 as value too, paged.
    key = S([8, 128, 512], "bf16")
    call = dict(op="fia", query=S([2, 1, 32, 512], "bf16"), query_rope=S([2, 1, 32, 64], "bf16"), key=key,
                value=key, key_rope=S([8, 128, 64], "bf16"), block_table=S([2, 4], "int32"), block_size=128,
                actual_seq_lengths_kv=[300, 17], num_heads=32, num_key_value_heads=1, input_layout="BSND")
    call.update(kw)
    return call


def test_fia_mla_prewarms_the_mla_kernel():
    # query_rope/key_rope pass through to the op, which serves them on the mla kernel.
    assert attnjit.prewarm(fia_mla_call(), arch=ARCH) == ["mla.bf16.hd576x512.g1.p128.nhd.causal.splitrope.sm90a"]
    mtp = fia_mla_call(query=S([2, 4, 32, 512], "bf16"), query_rope=S([2, 4, 32, 64], "bf16"), sparse_mode=3,
                       atten_mask=S([2048, 2048], "uint8"), softmax_lse_flag=True)
    assert attnjit.prewarm(mtp, arch=ARCH) == ["mla.bf16.hd576x512.g1.p128.nhd.causal.lse.splitrope.sm90a"]
    with pytest.raises(attnjit.InvalidArgumentError, match="argument 'block_table'"):
        attnjit.prewarm(fia_mla_call(block_table=None), arch=ARCH)
    with pytest.raises(attnjit.InvalidArgumentError, match="argument 'key_rope'"):
        attnjit.prewarm(fia_mla_call(key_rope=None), arch=ARCH)


def test_fia_left_padding_prefix_and_int8_output_pass_through():
    # The device tensors reach the op: their variants compile (int8 output allocated as int8).
    pad = attnjit.prewarm(fia_call(query_padding_size=S([1], "int64"), actual_seq_lengths=[30],
                                   backend="xqa"), arch=ARCH)
    assert pad == ["prefill.fp16.hd128.g1.contig.nhd.leftpad.sm90a"]
    pre = attnjit.prewarm(fia_call(key_shared_prefix=S([1, 2, 16, 128], "fp16"),
                                   value_shared_prefix=S([1, 2, 16, 128], "fp16"),
                                   actual_shared_prefix_len=S([1], "int64"), backend="xqa"), arch=ARCH)
    assert pre == ["prefill.fp16.hd128.g1.contig.nhd.prefix.sm90a"]
    q8 = attnjit.prewarm(fia_call(quant_scale2=S([8, 128], "fp32"), quant_offset2=S([8, 128], "fp32"),
                                  backend="xqa"), arch=ARCH)
    assert q8 == ["prefill.fp16.oint8.hd128.g1.contig.nhd.sm90a"]


def test_fia_backends_on_sm90a_and_elsewhere():
    # auto on sm_90a: the wgmma (trtllm-gen) kernel; xqa on request; trtllm-gen off sm_90a is refused.
    assert attnjit.prewarm(fia_call(backend="trtllm-gen"), arch=ARCH)[0].endswith(".trtllmgen.sm90a")
    assert attnjit.prewarm(fia_call(backend="xqa"), arch=ARCH) == ["prefill.fp16.hd128.g1.contig.nhd.sm90a"]
    with pytest.raises(attnjit.UnsupportedError, match="backend trtllm-gen"):
        attnjit.prewarm(fia_call(backend="trtllm-gen"), arch="sm_80")


def test_fia_launch_errors_with_numpy():
    q = np.zeros((1, 8, 64, 128), np.float16)
    kv = np.zeros((1, 2, 512, 128), np.float16)
    kw = dict(num_heads=8, num_key_value_heads=2, input_layout="BNSD")
    with pytest.raises(attnjit.InvalidArgumentError, match="argument 'attention_out'"):  # numpy: no allocation
        attnjit.npu_fused_infer_attention_score(q, kv, kv, **kw)
    with pytest.raises(attnjit.InvalidArgumentError, match="argument 'softmax_lse'"):
        attnjit.npu_fused_infer_attention_score(q, kv, kv, attention_out=np.zeros_like(q), **kw)
    with pytest.raises(attnjit.InvalidArgumentError, match="argument 'query': expected a CUDA tensor, got a tensor on cpu"):
        attnjit.fused_infer_attention_score(q, kv, kv, attention_out=np.zeros_like(q),
                                            softmax_lse=np.zeros(1, np.float32), **kw)
    with pytest.raises(attnjit.InvalidArgumentError, match="argument 'actual_seq_lengths_kv': expected a host list"):
        attnjit.npu_fused_infer_attention_score(q, kv, kv, attention_out=np.zeros_like(q),
                                                softmax_lse=np.zeros(1, np.float32), actual_seq_lengths_kv=object(),
                                                **kw)


def test_fia_lengths_take_host_arrays():
    lens = np.array([48], np.int64)  # anything with tolist(): a numpy array, a CPU torch tensor
    assert attnjit.prewarm(fia_call(actual_seq_lengths=lens, actual_seq_lengths_kv=(500,)), arch=ARCH) == \
        ["prefill.fp16.hd128.g1.contig.nhd.trtllmgen.sm90a"]


def test_fia_output_shapes_follow_the_seed():
    # attention_out: query's shape (BNSD_BSND: BSND; TND: value's head dim); softmax_lse
    # (B, N, Q_S, 1) (TND: (T, N, 1)), or the [1] placeholder without the flag.
    v4, v3 = S([2, 4, 16, 64], "fp16"), S([100, 8, 128], "bf16")
    assert _output_shapes((2, 16, 512), v3, 8, "BSH", True) == ((2, 16, 512), (2, 8, 16, 1))
    assert _output_shapes((2, 16, 8, 64), v4, 8, "BSND", True) == ((2, 16, 8, 64), (2, 8, 16, 1))
    assert _output_shapes((2, 8, 16, 64), v4, 8, "BNSD", True) == ((2, 8, 16, 64), (2, 8, 16, 1))
    assert _output_shapes((2, 8, 16, 64), v4, 8, "BNSD_BSND", True) == ((2, 16, 8, 64), (2, 8, 16, 1))
    assert _output_shapes((100, 8, 192), v3, 8, "TND", True) == ((100, 8, 128), (100, 8, 1))
    assert _output_shapes((2, 8, 16, 64), v4, 8, "BNSD", False) == ((2, 8, 16, 64), (1,))


def test_fia_full_int8_prewarm():
    # int8 query, key and value with the three per-tensor fp32 scales (Q_S > 1): the dqpass
    # kernel copies all three to fp16, then the fp16 attention (the wgmma kernel on sm_90a).
    call = fia_call(query=S([1, 8, 64, 128], "int8"), key=S([1, 2, 512, 128], "int8"),
                    value=S([1, 2, 512, 128], "int8"), dequant_scale1=S([1], "fp32"), quant_scale1=S([1], "fp32"),
                    dequant_scale2=S([1], "fp32"))
    before = attnjit.cache_stats()
    assert attnjit.prewarm(call, arch=ARCH) == ["prefill.fp16.hd128.g1.contig.nhd.trtllmgen.sm90a"]
    built = attnjit.cache_stats()
    assert built["compiles"] + built["store_hits"] - before["compiles"] - before["store_hits"] >= 1  # the int8 pass
    # int8 output takes quant_scale2 too; a missing scale or Q_S = 1 is an error naming the argument.
    assert attnjit.prewarm(dict(call, quant_scale2=S([1], "fp32")), arch=ARCH) == [
        "prefill.fp16.oint8.hd128.g1.contig.nhd.trtllmgen.sm90a"]
    with pytest.raises(attnjit.InvalidArgumentError, match="dequant_scale2"):
        attnjit.prewarm(dict(call, dequant_scale2=None), arch=ARCH)
    with pytest.raises(attnjit.InvalidArgumentError, match="'query'"):
        attnjit.prewarm(dict(call, query=S([1, 8, 1, 128], "int8")), arch=ARCH)
