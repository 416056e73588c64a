"""GPU tests: skipped, with a reason, where torch or a CUDA GPU is missing."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


def pytest_collection_modifyitems(config, items):
    try:
        import torch
        ok = torch.cuda.is_available()
        why = "no CUDA GPU (torch.cuda.is_available() is False)"
    except ImportError:
        ok, why = False, "torch is not installed"
    if not ok:
        here = os.path.dirname(os.path.abspath(__file__))
        for item in items:  # this hook sees the whole session's items: only ours
            if os.path.abspath(str(item.fspath)).startswith(here + os.sep):
                item.add_marker(pytest.mark.skip(reason=why))
