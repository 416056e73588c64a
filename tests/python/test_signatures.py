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

_KW = "*"  # the seed's marker: the parameters after it are keyword-only

# (name, default) in the seed's order, as the seeds write them ("*" where the seed has it).
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
    "trtllm_batch_decode_with_kv_cache_mla": ("flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla", [
        ("query", _REQ), ("kv_cache", _REQ), ("workspace_buffer", _REQ), ("qk_nope_head_dim", _REQ),
        ("kv_lora_rank", _REQ), ("qk_rope_head_dim", _REQ), ("block_tables", _REQ), ("seq_lens", _REQ),
        ("max_seq_len", _REQ), ("sparse_mla_top_k", 0), ("out", None), ("bmm1_scale", 1.0), ("bmm2_scale", 1.0),
        ("sinks", None), ("enable_pdl", None), ("backend", "auto")], "Tensor"),
    "npu_fused_infer_attention_score": ("torch_npu.npu_fused_infer_attention_score", [
        ("query", _REQ), ("key", _REQ), ("value", _REQ), (_KW, _REQ), ("pse_shift", None), ("atten_mask", None),
        ("actual_seq_lengths", None), ("actual_seq_lengths_kv", None), ("dequant_scale1", None),
        ("quant_scale1", None), ("dequant_scale2", None), ("quant_scale2", None), ("quant_offset2", None),
        ("antiquant_scale", None), ("antiquant_offset", None), ("block_table", None), ("query_padding_size", None),
        ("kv_padding_size", None), ("key_antiquant_scale", None), ("key_antiquant_offset", None),
        ("value_antiquant_scale", None), ("value_antiquant_offset", None), ("key_shared_prefix", None),
        ("value_shared_prefix", None), ("actual_shared_prefix_len", None), ("query_rope", None),
        ("key_rope", None), ("key_rope_antiquant_scale", None), ("num_heads", 1), ("scale", 1.0),
        ("pre_tokens", 2147483647), ("next_tokens", 2147483647), ("input_layout", "BSH"),
        ("num_key_value_heads", 0), ("sparse_mode", 0), ("inner_precise", 0), ("block_size", 0),
        ("antiquant_mode", 0), ("softmax_lse_flag", False), ("key_antiquant_mode", 0),
        ("value_antiquant_mode", 0)], "(Tensor, Tensor)"),
}
# attnjit's other names for an op: the same function.
ALIASES = {"fused_infer_attention_score": "npu_fused_infer_attention_score"}


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
    """The seed's (name, default) list and return type. Two styles: Python's
    `name: type = default` (FlashInfer; the arrow before the return type may be missing)
    and the ATen schema's `Type name=default` with `*` and `-> (Tensor, Tensor)` (torch_npu)."""
    text = open(path, encoding="utf-8").read()
    m = re.search(re.escape(qualname) + r"\((.*?)\)\s*(?:→|->)?\s*([^\n¶]+)", text, re.S)
    assert m, f"{path}: no signature line for {qualname}"
    params = []
    for p in split_params(m.group(1)):
        if p == _KW:
            params.append((_KW, _REQ))
            continue
        decl, eq, value = p.partition("=")
        default = ast.literal_eval(value.strip()) if eq else _REQ
        name = decl.partition(":")[0].strip() if ":" in decl else decl.split()[-1]
        params.append((name, default))
    return params, m.group(2).strip()


def seed_kinds(expected):
    """Each seed parameter's kind: positional-or-keyword until "*", keyword-only after it."""
    kinds, kind = [], inspect.Parameter.POSITIONAL_OR_KEYWORD
    for name, _ in expected:
        if name == _KW:
            kind = inspect.Parameter.KEYWORD_ONLY
        else:
            kinds.append((name, kind))
    return kinds


@pytest.mark.parametrize("op", sorted(EXPECTED) + sorted(ALIASES))
def test_signature_matches_seed(op):
    qualname, expected, _ = EXPECTED[ALIASES.get(op, op)]
    named = [(n, d) for n, d in expected if n != _KW]
    params = list(inspect.signature(getattr(attnjit, op)).parameters.values())
    seed_part = params[:len(named)]
    assert [(p.name, p.default) for p in seed_part] == named
    assert [(p.name, p.kind) for p in seed_part] == seed_kinds(expected)
    for p in params[len(named):]:  # attnjit's additions (stream=, out=...) never shift a seed argument
        assert p.kind == inspect.Parameter.KEYWORD_ONLY and p.default is not _REQ, p.name


def test_aliases_are_the_same_function():
    for alias, op in ALIASES.items():
        assert getattr(attnjit, alias) is getattr(attnjit, op)


@pytest.mark.parametrize("op", sorted(EXPECTED))
def test_expected_copy_matches_seed_document(op):
    qualname, expected, returns = EXPECTED[op]
    path = os.path.join(SEEDS, f"{op}.txt")
    if not os.path.exists(path):
        pytest.skip(f"seed document {path} is not here")
    params, ret = seed_signature(path, qualname)
    assert params == expected
    assert ret.startswith(returns or "None")


def test_seed_parser_reads_both_styles(tmp_path):
    # The parser itself, on one line of each style (so a parser that read nothing fails).
    py = tmp_path / "py.txt"
    py.write_text("m.f(a: Tensor, b: List[Tensor] | None = None, c: str = 'x') Tensor¶\n", encoding="utf-8")
    assert seed_signature(str(py), "m.f") == ([("a", _REQ), ("b", None), ("c", "x")], "Tensor")
    aten = tmp_path / "aten.txt"
    aten.write_text('g(Tensor q, *, SymInt[]? n=None,Tensor? t=None, int k=2147483647, str s="BSH", '
                    "bool f=False) -> (Tensor, Tensor)\n", encoding="utf-8")
    params, ret = seed_signature(str(aten), "g")
    assert params == [("q", _REQ), (_KW, _REQ), ("n", None), ("t", None), ("k", 2147483647), ("s", "BSH"),
                      ("f", False)]
    assert ret == "(Tensor, Tensor)"
    assert seed_kinds(params)[:2] == [("q", inspect.Parameter.POSITIONAL_OR_KEYWORD),
                                      ("n", inspect.Parameter.KEYWORD_ONLY)]


def test_ops_exist_only_with_a_cpp_binding():
    # Ops not in C++ yet are absent, not stubs: every public op has its extension entry
    # of the same name, and an op name without one is not exported.
    for op in EXPECTED:  # every op the C++ library has is bound
        assert op in attnjit.ops.PUBLIC, op
    for name in attnjit.ops.PUBLIC:
        assert hasattr(attnjit.attnjit_ext, name), name
    for name in ("trtllm_batch_decode_with_kv_cache_mla", "npu_fused_infer_attention_score",
                 "fused_infer_attention_score"):
        assert hasattr(attnjit, name) == hasattr(attnjit.attnjit_ext, name), name
