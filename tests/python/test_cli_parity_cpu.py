"""attnjit.prewarm(config) expands a model config as `attnjit prewarm --list` does
(the CLI at $ATTNJIT_CLI; skipped without it). The one intended difference: Python's
single_decode_with_kv_cache defaults to FlashInfer's use_tensor_cores=False, so its
decode kernels are the `.cudacore` ones."""
import os
import subprocess

import pytest

import attnjit

CLI = os.environ.get("ATTNJIT_CLI", "")


@pytest.mark.skipif(not os.access(CLI, os.X_OK), reason="set ATTNJIT_CLI to the attnjit CLI binary")
@pytest.mark.parametrize("config", ["llama-3-8b", "mistral-7b", "qwen2.5-72b"])
def test_config_expansion_matches_the_cli(config):
    out = subprocess.run([CLI, "prewarm", "--config", config, "--list", "--arch", "sm_90a"], check=True,
                         capture_output=True, text=True).stdout.split()
    cli = [n.replace(".sm90a", ".cudacore.sm90a") if n.startswith("decode.") and ".cudacore." not in n else n
           for n in out]
    assert sorted(attnjit.prewarm(config, arch="sm_90a")) == sorted(cli)
