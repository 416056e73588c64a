"""Python package tests. Each session gets its own cache folder unless
ATTNJIT_CACHE_DIR is set (the GPU machine's staged store)."""
import os
import tempfile

if not os.environ.get("ATTNJIT_CACHE_DIR"):
    _cache = tempfile.mkdtemp(prefix="attnjit-pytest-")  # 0700
    os.environ["ATTNJIT_CACHE_DIR"] = _cache
