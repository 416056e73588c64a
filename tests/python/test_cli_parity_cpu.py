"""attnjit.prewarm(config) expands a model config as `attnjit prewarm --list` does
(the CLI at $ATTNJIT_CLI; skipped without it), ops decode, xqa, mla and fia alike,
skip notes included: the same names in the same order."""
import json
import os
import subprocess
import warnings

import pytest

import attnjit

CLI = os.environ.get("ATTNJIT_CLI", "")
needs_cli = pytest.mark.skipif(not os.access(CLI, os.X_OK), reason="set ATTNJIT_CLI to the attnjit CLI binary")

# Every mla and fia config field, away from their defaults where a field has one.
MLA_FIA = {"name": "mla-fia", "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "dtype": "bf16",
           "ops": [{"op": "fia"},
                   {"op": "fused_infer_attention_score", "sparse_modes": [0, 1, 2, 4], "block_sizes": [0, 128],
                    "return_lse": True, "pse_shift": True, "atten_mask": True, "decode": False},
                   {"op": "fia", "block_sizes": [256], "sparse_modes": [3], "decode": False},
                   {"op": "mla", "page_sizes": [32, 64], "sparse": True, "sinks": True, "scale_pointers": True,
                    "return_lse": True, "kv_cache_dtypes": ["bf16", "fp8_e4m3"]},
                   {"op": "batch_decode_mla", "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
                    "tensor_parallel": [1, 2]}]}


def cli_list(config):
    r = subprocess.run([CLI, "prewarm", "--config", config, "--list", "--arch", "sm_90a"], check=True,
                       capture_output=True, text=True)
    names = r.stdout.split()
    notes = [line for line in r.stderr.splitlines() if line.startswith("skipping op")]
    return names, notes


def python_list(config):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        names = attnjit.prewarm(config, arch="sm_90a")
    notes = [str(w.message).removeprefix("attnjit.prewarm: ") for w in caught]
    return names, notes


@needs_cli
@pytest.mark.parametrize("config", ["llama-3-8b", "mistral-7b", "qwen2.5-72b", "deepseek-v3"])
def test_config_expansion_matches_the_cli(config):
    names, notes = python_list(config)
    cli_names, cli_notes = cli_list(config)
    assert sorted(names) == sorted(cli_names)
    assert notes == cli_notes
    if config == "deepseek-v3":  # its ops are mla: bf16 and fp8 KV, both on the wgmma kernel (auto's pick),
        # for 128 heads and, at tensor parallelism 8, 16 (the narrow tile)
        assert sorted(names) == sorted(f"mla.{v}.hd576x512.g1.p64.nhd.causal.{t}trtllmgen.sm90a"
                                       for v in ("bf16", "bf16.kve4m3", "e4m3.obf16") for t in ("", "narrow."))
        assert notes == []


@needs_cli
def test_mla_and_fia_config_fields_match_the_cli(tmp_path):
    path = tmp_path / "mla-fia.json"
    path.write_text(json.dumps(MLA_FIA))
    names, notes = python_list(str(path))
    cli_names, cli_notes = cli_list(str(path))
    assert sorted(names) == sorted(cli_names)
    assert notes == cli_notes
    # Every field reached a kernel: masks, paging, LSE, pse, sparse MLA, sinks, scale pointers.
    for part in (".causal.lse.pse.", ".p128.nhd.custom.lse.pse.", ".p256.nhd.causal.", "mla.bf16.hd576x512.g1.p32.nhd.custom.sinks.lse.scaleptr.",
                 "mla.bf16.kve4m3.hd576x512.g1.p64.nhd.custom.sinks.lse.scaleptr.",
                 "mla.e4m3.obf16.hd576x512.g1.p32.nhd.causal.sinks.lse.scaleptr."):
        assert any(part in n for n in names), part
