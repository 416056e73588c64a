"""attnjit's ops accept the calls their seed documents describe: the same parameter
names, order, kinds and defaults (../shared/seeds/*.txt; a copy is kept here so the
test runs where the seeds are not, and the copy is checked against them when present)."""
import ast
import inspect
import os
import re

import pytest

import attnjit

SEEDS = os.environ.get("ATTNJIT_SEEDS_DIR") or os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "seeds")
_REQ = inspect.Parameter.empty

# (name, default) in the seed's order, as the seeds write them.
EXPECTED = {
    "xqa": ("flashinfer.xqa.xqa", [
        ("q", _REQ), ("k_cache", _REQ), ("v_cache", _REQ), ("page_table", _REQ), ("seq_lens", _REQ),
        ("output", _REQ), ("workspace_buffer", _REQ), ("semaphores", _REQ), ("num_kv_heads", _REQ),
        ("page_size", _REQ), ("sinks", None), ("q_scale", 1.0), ("kv_scale", 1.0), ("sliding_win_size", 0),
        ("kv_layout", "NHD"), ("sm_count", None), ("enable_pdl", None), ("rcp_out_scale", 1.0),
        ("q_seq_len", 1), ("mask", None)], None),
    "single_decode_with_kv_cache": ("flashinfer.decode.single_decode_with_kv_cache", [
        ("q", _REQ), ("k", _REQ), ("v", _REQ), ("kv_layout", "NHD"), ("pos_encoding_mode", "NONE"),
        ("use_tensor_cores", False), ("q_scale", None), ("k_scale", None), ("v_scale", None),
        ("window_left", -1), ("logits_soft_cap", None), ("sm_scale", None), ("rope_scale", None),
        ("rope_theta", None), ("return_lse", False)], "Tensor"),
}


def split_params(text):
    """Top-level comma split (types such as Literal[False] hold no commas at depth 0)."""
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += 1 if ch in "[(" else -1 if ch in "])" else 0
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return [p for p in out + [cur.strip()] if p]


def seed_signature(path, qualname):
    text = open(path, encoding="utf-8").read()
    m = re.search(re.escape(qualname) + r"\((.*?)\)\s*→\s*([^\n¶]+)", text, re.S)
    assert m, f"{path}: no signature line for {qualname}"
    params = []
    for p in split_params(m.group(1)):
        name, _, rest = p.partition(":")
        default = _REQ
        if "=" in rest:
            default = ast.literal_eval(rest.split("=", 1)[1].strip())
        params.append((name.strip(), default))
    return params, m.group(2).strip()


@pytest.mark.parametrize("op", sorted(EXPECTED))
def test_signature_matches_seed(op):
    qualname, expected, _ = EXPECTED[op]
    sig = inspect.signature(getattr(attnjit, op))
    params = list(sig.parameters.values())
    seed_part = params[:len(expected)]
    assert [(p.name, p.default) for p in seed_part] == expected
    for p in seed_part:
        assert p.kind == inspect.Parameter.POSITIONAL_OR_KEYWORD, p.name
    for p in params[len(expected):]:  # attnjit's additions (stream=, out=...) never shift a seed argument
        assert p.kind == inspect.Parameter.KEYWORD_ONLY and p.default is not _REQ, p.name


@pytest.mark.parametrize("op", sorted(EXPECTED))
def test_expected_copy_matches_seed_document(op):
    qualname, expected, returns = EXPECTED[op]
    path = os.path.join(SEEDS, f"{op}.txt")
    if not os.path.exists(path):
        pytest.skip(f"seed document {path} is not here")
    params, ret = seed_signature(path, qualname)
    assert params == expected
    assert ret.startswith(returns or "None")


def test_ops_exist_only_with_a_cpp_binding():
    # Ops not in C++ yet are absent, not stubs: every public op has its extension entry
    # of the same name, and an op name without one is not exported.
    assert "xqa" in attnjit.ops.PUBLIC and "single_decode_with_kv_cache" in attnjit.ops.PUBLIC
    for name in attnjit.ops.PUBLIC:
        assert hasattr(attnjit.attnjit_ext, name), name
    for name in ("trtllm_batch_decode_with_kv_cache_mla", "npu_fused_infer_attention_score",
                 "fused_infer_attention_score"):
        assert hasattr(attnjit, name) == hasattr(attnjit.attnjit_ext, name), name
