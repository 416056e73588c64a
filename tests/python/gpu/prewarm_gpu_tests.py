"""Compiles the GPU tests' kernels into $ATTNJIT_CACHE_DIR for an arch, without a GPU
(scripts/stage_python_gpu.sh runs it), so the GPU machine spends its time testing."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import attnjit  # noqa: E402
from gpu_cases import all_prewarm_calls  # noqa: E402

arch = os.environ.get("ATTNJIT_PREWARM_ONLY", "sm_90a")
names = attnjit.prewarm(all_prewarm_calls(), arch=arch)
print(f"prewarmed {len(names)} kernels for {arch}: {attnjit.cache_stats()['compiles']} compiled")
