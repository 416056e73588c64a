"""The op wrappers, one module per op: each defines its public functions (__all__)
and PREWARM, {op name: fn(call_dict, arch) -> kernel name}. Modules here are found
at import, so adding an op is one file here plus its C++ binding in python/src/ops/
(which registers an attnjit_ext function of the op's name: tests check the pair)."""
import importlib
import pkgutil

PUBLIC = {}
PREWARM = {}

for _info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
    _mod = importlib.import_module(f"{__name__}.{_info.name}")
    for _name in getattr(_mod, "__all__", ()):
        PUBLIC[_name] = getattr(_mod, _name)
    PREWARM.update(getattr(_mod, "PREWARM", {}))
