"""Ahead of time: prewarm (model configs or op calls), inspect (a kernel name), and
cache_stats. Every kernel is built through its op's own prewarm entry (the public
C++ prewarm_<op>), so a prewarmed key is exactly the key the op looks up."""
import json
import os
import warnings

from . import attnjit_ext as _ext
from ._errors import InvalidArgumentError
from .ops import PREWARM

ShapeOnly = _ext.ShapeOnly
_CONFIG_DIR = os.path.join(os.path.dirname(__file__), "configs")
_MODEL_FIELDS = {"name", "description", "source", "num_attention_heads", "num_key_value_heads", "head_dim",
                 "dtype", "kv_cache_dtypes", "page_sizes", "kv_layouts", "sliding_window", "ops"}
_PLANNED_OPS = {"prefill"}
_OP_FIELDS = {
    "decode": {"op", "kv_cache_dtypes", "kv_layouts", "backend", "pos_encodings", "return_lse",
               "logits_soft_cap", "sliding_window"},
    "xqa": {"op", "kv_cache_dtypes", "page_sizes", "kv_layouts", "backend", "spec_decode", "sinks",
            "sliding_window", "scale_pointers", "fp8_output"},
    "mla": {"op", "kv_cache_dtypes", "page_sizes", "backend", "kv_lora_rank", "qk_rope_head_dim",
            "qk_nope_head_dim", "v_head_dim", "sinks", "scale_pointers", "return_lse", "sparse", "tensor_parallel"},
    "fia": {"op", "backend", "sparse_modes", "atten_mask", "block_sizes", "return_lse", "pse_shift", "decode"},
}
_OP_ALIASES = {"batch_decode_mla": "mla", "fused_infer_attention_score": "fia"}


def cache_stats():
    """The process runtime's counters: lookups, compiles, store_hits, module_loads,
    compile_ms, store_load_ms and cache_path."""
    return _ext.cache_stats()


def bundled_configs():
    """Names of the model configs shipped with the package (the CLI's bundled ones)."""
    if not os.path.isdir(_CONFIG_DIR):
        return []
    return sorted(f[:-5] for f in os.listdir(_CONFIG_DIR) if f.endswith(".json"))


def load_config(name_or_path):
    """A model config: a .json path, or a name in $ATTNJIT_CONFIG_DIR or the bundled ones."""
    candidates = [name_or_path] if name_or_path.endswith(".json") else []
    if os.environ.get("ATTNJIT_CONFIG_DIR"):
        candidates.append(os.path.join(os.environ["ATTNJIT_CONFIG_DIR"], name_or_path + ".json"))
    candidates.append(os.path.join(_CONFIG_DIR, name_or_path + ".json"))
    for path in candidates:
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                return json.load(f)
    raise InvalidArgumentError(f"argument 'config': expected a .json file or a model config name "
                               f"({', '.join(bundled_configs())}), got '{name_or_path}'")


def _check_fields(d, allowed, where):
    for key in d:
        if key not in allowed:
            raise InvalidArgumentError(f"argument '{where}{key}': expected one of {sorted(allowed)}, got an unknown field")


# A batch-1 xqa (or single_decode) length that takes batch 1's kernel of 32-token tiles where the
# spec has one (C++: ops::decode_batch1_takes_tile32; the CLI's model-config expansion uses the same 8K).
_BATCH1_TOKENS = 8192


def expand_config(cfg):
    """A model config -> op call dicts with ShapeOnly tensors, as the CLI expands it
    (decode, xqa, mla and fia ops: one KV token, batch 1, one page, and decode and xqa at 8K tokens too;
    fia: KV_S 2048),
    using the Python ops' defaults (FlashInfer's: single_decode_with_kv_cache without
    tensor cores). Ops the CLI skips with a note are skipped with that note as a warning."""
    _check_fields(cfg, _MODEL_FIELDS, "")
    try:
        H, KH, D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    except KeyError as e:
        raise InvalidArgumentError(f"argument '{e.args[0]}': expected a number, got nothing") from None
    dt = cfg.get("dtype", "bf16")
    window = bool(cfg.get("sliding_window") or 0)
    calls = []
    for i, op in enumerate(cfg.get("ops", [])):
        name, where = op.get("op"), f"ops[{i}]."
        if name in _PLANNED_OPS:
            warnings.warn(f"attnjit.prewarm: skipping op '{name}': family not implemented yet")
            continue
        kind = _OP_ALIASES.get(name, name)
        if kind not in _OP_FIELDS:
            raise InvalidArgumentError(f"argument '{where}op': expected one of "
                                       f"{sorted(set(_OP_FIELDS) | set(_OP_ALIASES))}, got {name!r}")
        _check_fields(op, _OP_FIELDS[kind], where)

        def field(name, default):
            return op.get(name, cfg.get(name, default))

        if kind == "mla":
            calls.extend(_mla_calls(op, name, H, dt, field, where))
            continue
        if kind == "fia":
            calls.extend(_fia_calls(op, H, KH, D, dt))
            continue

        layouts = [x.upper() for x in field("kv_layouts", ["NHD"])]
        win = op.get("sliding_window", window)
        backend = op.get("backend", "auto")
        for kv in field("kv_cache_dtypes", [dt]):
            for layout in layouts:
                if kind == "decode":
                    # one KV token, and 8K: batch 1's own kernel where there is one (tile32)
                    for pe, n in [(pe, n) for pe in op.get("pos_encodings", ["none"]) for n in (1, _BATCH1_TOKENS)]:
                        kshape = [n, KH, D] if layout == "NHD" else [KH, n, D]
                        calls.append(dict(op="decode", q=ShapeOnly([H, D], dt), k=ShapeOnly(kshape, kv),
                                          v=ShapeOnly(kshape, kv), kv_layout=layout, pos_encoding_mode=pe.upper(),
                                          logits_soft_cap=30.0 if op.get("logits_soft_cap") else None,
                                          window_left=4096 if win else -1,
                                          return_lse=bool(op.get("return_lse")), backend=backend))
                    continue
                outs = [dt] + (["fp8_e4m3"] if op.get("fp8_output") and kv == "fp8_e4m3" else [])
                for page in field("page_sizes", [32]):
                    kshape = [1, page, KH, D] if layout == "NHD" else [1, KH, page, D]
                    for qlen in [1, 2] if op.get("spec_decode") else [1]:
                        qshape = [1, 1, qlen, H, D] if qlen > 1 else [1, 1, H, D]
                        # one page, and 8K tokens: batch 1's own kernel where there is one (tile32)
                        for out, pages in [(o, n) for o in outs for n in (1, -(-_BATCH1_TOKENS // page))]:
                            ptr = ShapeOnly([1], "fp32") if op.get("scale_pointers") else 1.0
                            calls.append(dict(
                                op="xqa", q=ShapeOnly(qshape, dt), k_cache=ShapeOnly(kshape, kv),
                                v_cache=ShapeOnly(kshape, kv), page_table=ShapeOnly([1, pages], "int32"),
                                seq_lens=ShapeOnly([1], "uint32"), output=ShapeOnly(qshape, out),
                                num_kv_heads=KH, page_size=page, kv_layout=layout, q_seq_len=qlen,
                                mask=ShapeOnly([1, qlen, ((qlen + 31) // 32) * 2], "uint16") if qlen > 1 else None,
                                sinks=ShapeOnly([KH, H // KH], "fp32") if op.get("sinks") else None,
                                sliding_win_size=4096 if win else 0, q_scale=ptr,
                                kv_scale=ptr if kv == "fp8_e4m3" else 1.0, backend=backend))
    return calls


def _mla_calls(op, name, H, dt, field, where):
    """The CLI's mla expansion: batch_decode_mla's arguments, one page, batch 1; an fp8 KV with
    the model's query dtype and with an fp8 query (which writes bf16); for each tensor-parallel
    degree, its heads a GPU (16 or fewer take the wgmma kernel's narrow tile on sm_90a)."""
    calls = []
    heads, tps = [], field("tensor_parallel", [1])
    if not isinstance(tps, list) or not tps:
        raise InvalidArgumentError(f"argument '{where}tensor_parallel': expected a non-empty list, got {tps!r}")
    for tp in tps:
        if not isinstance(tp, int) or isinstance(tp, bool):
            raise InvalidArgumentError(f"argument '{where}tensor_parallel': expected tensor-parallel degrees, got {tp!r}")
        if tp < 1 or H % tp:
            raise InvalidArgumentError(f"argument '{where}tensor_parallel': {tp} does not divide num_attention_heads {H}")
        heads.append(H // tp)
    ptr = ShapeOnly([1], "fp32") if op.get("scale_pointers") else 1.0
    dims = {k: op[k] for k in ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim") if k in op}
    for kv in field("kv_cache_dtypes", [dt]):
        fp8 = kv in ("fp8_e4m3", "e4m3", "float8_e4m3fn")
        for q in [dt, "fp8_e4m3"] if fp8 else [dt]:
            for page in field("page_sizes", [64]):
                for sparse, h in [(sp, h) for sp in ([False, True] if op.get("sparse") else [False]) for h in heads]:
                    calls.append(dict(
                        op="mla", query=ShapeOnly([1, 1, h, 576], q), kv_cache=ShapeOnly([1, page, 576], kv),
                        out=ShapeOnly([1, 1, h, 512], "bf16" if q == "fp8_e4m3" else q),
                        qk_nope_head_dim=dims.get("qk_nope_head_dim", 128),
                        kv_lora_rank=dims.get("kv_lora_rank", 512),
                        qk_rope_head_dim=dims.get("qk_rope_head_dim", 64),
                        # sparse: FlashInfer's [batch, q_len, top_k] indices in block_tables
                        block_tables=ShapeOnly([1, 1, 1] if sparse else [1, 1], "int32"),
                        seq_lens=ShapeOnly([1], "int32"), max_seq_len=page, sparse_mla_top_k=1 if sparse else 0,
                        bmm1_scale=ptr, bmm2_scale=ptr, sinks=ShapeOnly([h], "fp32") if op.get("sinks") else None,
                        return_lse=bool(op.get("return_lse")), backend=op.get("backend", "auto")))
    return calls


def _fia_calls(op, H, KH, D, dt):
    """The CLI's fia expansion: BSND, batch 1, KV_S 2048 (paged: one block), Q_S 128 and,
    unless decode is false, Q_S 1 (which ignores sparse_mode: only the first is kept)."""
    calls = []
    modes = op.get("sparse_modes", [0, 3])
    mask, pse, lse = bool(op.get("atten_mask")), bool(op.get("pse_shift")), bool(op.get("return_lse"))
    for bs in op.get("block_sizes", [0]):
        for qs in [128, 1] if op.get("decode", True) else [128]:
            for mode in modes:
                if qs == 1 and mode != modes[0]:
                    continue
                full_mask = mask or mode == 1
                mode = 0 if qs == 1 else mode  # Q_S 1 ignores sparse_mode (and refuses the 2048x2048 mask)
                kv_s = bs if bs > 0 else 2048
                kv = ShapeOnly([1, bs, KH * D] if bs > 0 else [1, kv_s, KH, D], dt)
                c = dict(op="fia", query=ShapeOnly([1, qs, H, D], dt), key=kv, value=kv, input_layout="BSND",
                         num_heads=H, num_key_value_heads=KH, sparse_mode=mode, softmax_lse_flag=lse,
                         backend=op.get("backend", "auto"))
                if bs > 0:
                    c.update(block_table=ShapeOnly([1, 1], "int32"), block_size=bs, actual_seq_lengths_kv=[bs])
                if mode >= 2:
                    c["atten_mask"] = ShapeOnly([2048, 2048], "uint8")
                elif full_mask:
                    c["atten_mask"] = ShapeOnly([1, kv_s] if qs == 1 else [qs, kv_s], "uint8")
                if pse:
                    c["pse_shift"] = ShapeOnly([1, H, qs, kv_s], dt)
                calls.append(c)
    return calls


def _calls(config_or_specs):
    if isinstance(config_or_specs, str):
        return expand_config(load_config(config_or_specs))
    if isinstance(config_or_specs, dict):
        return [config_or_specs] if "op" in config_or_specs else expand_config(config_or_specs)
    calls = []
    for item in config_or_specs:
        calls.extend(_calls(item))
    return calls


def prewarm(config_or_specs, arch=None):
    """Compiles, or finds in the store, every kernel the calls would launch.

    config_or_specs: a model config (bundled name such as 'llama-3-8b', a .json path,
    or a dict), an op call ({'op': 'xqa', 'q': ShapeOnly(...) or a tensor, ...: the
    op's own arguments}), or a list of these. arch: 'sm_90a', a list of archs, or None
    for this GPU (then the kernels are also loaded, ready for CUDA-graph capture).
    Returns the kernels' names.
    """
    archs = [""] if arch is None else [arch] if isinstance(arch, str) else list(arch)
    names = []
    for call in _calls(config_or_specs):
        op = call.get("op")
        if op not in PREWARM:
            raise InvalidArgumentError(f"argument 'op': expected one of {sorted(PREWARM)}, got {op!r}")
        for a in archs:
            name = PREWARM[op](call, a)
            if name not in names:
                names.append(name)
    return names


_DTYPE_TOKENS = {"fp16": "fp16", "bf16": "bf16", "e4m3": "fp8_e4m3", "e5m2": "fp8_e5m2"}
_DECODE_FLAGS = {"custom", "rope_llama", "alibi", "softcap", "window", "sinks", "lse", "scaleptr", "trtllmgen"}
_NAME_FLAGS = {"decode": _DECODE_FLAGS | {"tile32"}, "xqa": _DECODE_FLAGS | {"tile32"},
               "mla": {"causal", "custom", "sinks", "lse", "scaleptr", "narrow", "narrow32", "trtllmgen"},
               "prefill": {"causal", "custom", "lse", "pse", "trtllmgen"}}


def _mla_call_for_name(q, kv, out, page, flags, backend):
    """An mla kernel's call, one page; custom = sparse. Heads are a launch value, except that
    the wgmma kernel takes its narrow tiles at 16 or fewer rows a CTA (16 heads with `narrow`,
    or on xqa) and at 17-32 with 16-bit KV (32 heads with `narrow32`), else 64."""
    sparse = "custom" in flags
    ptr = ShapeOnly([1], "fp32") if "scaleptr" in flags else 1.0
    h = 16 if "narrow" in flags or backend == "xqa" else 32 if "narrow32" in flags else 64
    return dict(op="mla", query=ShapeOnly([1, 1, h, 576], q), kv_cache=ShapeOnly([1, page, 576], kv),
                qk_nope_head_dim=128, kv_lora_rank=512, qk_rope_head_dim=64,
                block_tables=ShapeOnly([1, 1, 1] if sparse else [1, 1], "int32"), seq_lens=ShapeOnly([1], "int32"),
                max_seq_len=max(page, 1), sparse_mla_top_k=1 if sparse else 0,
                out=ShapeOnly([1, 1, h, 512], out), bmm1_scale=ptr, bmm2_scale=ptr,
                sinks=ShapeOnly([h], "fp32") if "sinks" in flags else None, return_lse="lse" in flags,
                backend=backend)


def _fia_call_for_name(q, hd, hd_vo, page, flags, backend):
    """A prefill (FIA) kernel's call: TND where the head dims differ (192/128), else BSND
    with one head; causal = sparse_mode 3, custom = a full mask (sparse_mode 1); Q_S 128,
    or 1 for a block size Q_S > 1 does not take (not a multiple of 128)."""
    mode = 3 if "causal" in flags else 1 if "custom" in flags else 0
    c = dict(op="fia", softmax_lse_flag="lse" in flags, sparse_mode=mode, backend=backend)
    if hd != hd_vo:
        n, t = 8, 128
        c.update(query=ShapeOnly([t, n, hd], q), key=ShapeOnly([t, n, hd], q), value=ShapeOnly([t, n, hd_vo], q),
                 input_layout="TND", num_heads=n, actual_seq_lengths=[t], actual_seq_lengths_kv=[t])
        if mode:
            c["atten_mask"] = ShapeOnly([2048, 2048], "uint8")
        return c
    qs = 128 if page % 128 == 0 else 1
    kv_s = page or 2048
    kv = ShapeOnly([1, page, hd], q) if page else ShapeOnly([1, kv_s, 1, hd], q)
    c.update(query=ShapeOnly([1, qs, 1, hd], q), key=kv, value=kv, input_layout="BSND", num_heads=1)
    if page:
        c.update(block_table=ShapeOnly([1, 1], "int32"), block_size=page, actual_seq_lengths_kv=[page])
    if mode == 3:
        c["atten_mask"] = ShapeOnly([2048, 2048], "uint8")
    elif mode == 1:
        c["atten_mask"] = ShapeOnly([qs, kv_s], "uint8")
    if "pse" in flags:
        c["pse_shift"] = ShapeOnly([1, 1, qs, kv_s], q)
    return c


def call_for_name(name):
    """A kernel's readable name -> (op call with ShapeOnly tensors, arch or None)."""
    parts = name.split(".")
    bad = InvalidArgumentError(f"argument 'name': expected a kernel name such as "
                               f"'xqa.bf16.kve4m3.hd128.g8.p32.nhd.sm90a', got '{name}'")
    if len(parts) < 6 or parts[0] not in _NAME_FLAGS or parts[1] not in _DTYPE_TOKENS:
        raise bad
    family, q = parts[0], _DTYPE_TOKENS[parts[1]]
    kv = out = q
    rest = parts[2:]
    arch = None
    if rest and rest[-1].startswith("sm"):
        arch = "sm_" + rest.pop()[2:]
    flags = set()
    hd = hd_vo = group = page = None
    layout = None
    for tok in rest:
        if tok.startswith("kv") and tok[2:] in _DTYPE_TOKENS:
            kv = _DTYPE_TOKENS[tok[2:]]
        elif tok.startswith("o") and tok[1:] in _DTYPE_TOKENS:
            out = _DTYPE_TOKENS[tok[1:]]
        elif tok.startswith("hd"):
            dims = tok[2:].split("x")
            hd, hd_vo = int(dims[0]), int(dims[-1])
        elif tok.startswith("g") and tok[1:].isdigit():
            group = int(tok[1:])
        elif tok.startswith("p") and tok[1:].isdigit():
            page = int(tok[1:])
        elif tok == "contig":
            page = 0
        elif tok in ("nhd", "hnd"):
            layout = tok.upper()
        else:
            flags.add(tok)
    if hd is None or group is None or page is None or layout is None:
        raise bad
    if (hd != hd_vo and family in ("decode", "xqa")) or (family == "mla" and (hd, hd_vo) != (576, 512)):
        raise bad
    known = _NAME_FLAGS[family]
    if flags - known:
        raise InvalidArgumentError(f"argument 'name': expected flags attnjit.inspect can build a call for "
                                   f"({', '.join(sorted(known))}), got '{sorted(flags - known)[0]}' in '{name}'")
    backend = "trtllm-gen" if "trtllmgen" in flags else "auto"
    if family == "mla":  # a name without trtllmgen is the xqa kernel, which auto does not pick on sm_90a
        return _mla_call_for_name(q, kv, out, page, flags, backend if "trtllmgen" in flags else "xqa"), arch
    if family == "prefill":
        return _fia_call_for_name(q, hd, hd_vo, page, flags, backend), arch
    if family == "decode":
        n = _BATCH1_TOKENS if "tile32" in flags else 1  # batch 1's kernel: 8K tokens
        kshape = [n, 1, hd] if layout == "NHD" else [1, n, hd]
        pe = "ROPE_LLAMA" if "rope_llama" in flags else "ALIBI" if "alibi" in flags else "NONE"
        return dict(op="decode", q=ShapeOnly([group, hd], q), k=ShapeOnly(kshape, kv), v=ShapeOnly(kshape, kv),
                    out=ShapeOnly([group, hd], out), kv_layout=layout, pos_encoding_mode=pe,
                    logits_soft_cap=30.0 if "softcap" in flags else None,
                    window_left=4096 if "window" in flags else -1, return_lse="lse" in flags,
                    backend=backend), arch
    qlen = 2 if "custom" in flags else 1
    qshape = [1, 1, qlen, group, hd] if qlen > 1 else [1, 1, group, hd]
    kshape = [1, page, 1, hd] if layout == "NHD" else [1, 1, page, hd]
    ptr = ShapeOnly([1], "fp32") if "scaleptr" in flags else 1.0
    pages = -(-_BATCH1_TOKENS // page) if "tile32" in flags else 1  # batch 1's kernel: 8K tokens
    return dict(op="xqa", q=ShapeOnly(qshape, q), k_cache=ShapeOnly(kshape, kv), v_cache=ShapeOnly(kshape, kv),
                page_table=ShapeOnly([1, pages], "int32"), seq_lens=ShapeOnly([1], "uint32"),
                output=ShapeOnly(qshape, out), num_kv_heads=1, page_size=page, kv_layout=layout, q_seq_len=qlen,
                mask=ShapeOnly([1, qlen, 2], "uint16") if qlen > 1 else None,
                sinks=ShapeOnly([1, group], "fp32") if "sinks" in flags else None,
                sliding_win_size=4096 if "window" in flags else 0, q_scale=ptr,
                kv_scale=ptr if kv.startswith("fp8") else 1.0, backend=backend), arch


def inspect(name, arch=None):
    """Builds the op call that a kernel name stands for, prewarms it through the op and
    reports: name, arch, op, origin ('compiled', 'store' or 'memory'), compile_ms and
    cache_path. A name the ops do not build exactly (another spelling, a flag the call
    cannot reach) is an InvalidArgumentError."""
    call, name_arch = call_for_name(name)
    if name_arch and arch and name_arch != arch:
        raise InvalidArgumentError(f"argument 'arch': expected the name's arch {name_arch}, got {arch}")
    target = name_arch or arch or ""
    before = _ext.cache_stats()
    built = PREWARM[call["op"]](call, target)
    after = _ext.cache_stats()
    wanted = name if name_arch else f"{name}.{built.rsplit('.', 1)[-1]}"
    if built != wanted:
        raise InvalidArgumentError(f"argument 'name': expected a name the ops build; '{name}' stands for "
                                   f"'{built}'")
    origin = ("compiled" if after["compiles"] > before["compiles"]
              else "store" if after["store_hits"] > before["store_hits"] else "memory")
    return {"name": built, "arch": "sm_" + built.rsplit(".", 1)[-1][2:], "op": call["op"], "origin": origin,
            "compile_ms": after["compile_ms"] - before["compile_ms"], "cache_path": after["cache_path"],
            "call": call}
