"""attnjit's exceptions: one class per attnjit::ErrorCode, each carrying `.kind`."""


class Error(RuntimeError):
    """An attnjit::Error. `kind` is its error code: 'invalid_argument', 'unsupported',
    'compile_failed', 'driver', 'no_device', 'store', 'not_prewarmed' or 'internal'."""

    kind = "internal"

    def __init__(self, message, kind=None):
        super().__init__(message)
        if kind is not None:
            self.kind = kind


class InvalidArgumentError(Error, ValueError):
    """An argument is wrong (dtype, shape, device, layout...): the message names it."""
    kind = "invalid_argument"


class UnsupportedError(Error, NotImplementedError):
    """A valid request that this build, arch or backend cannot serve."""
    kind = "unsupported"


class CompileError(Error):
    """NVRTC rejected the rendered source; `log`, `options` and `source` reproduce it."""
    kind = "compile_failed"
    log = options = source = ""


class DriverError(Error):
    kind = "driver"


class NoDeviceError(Error):
    """No libcuda or no GPU: prewarm, inspect and the sizing helpers still work."""
    kind = "no_device"


class StoreError(Error):
    kind = "store"


class NotPrewarmedError(Error):
    """A kernel miss while the stream was being captured into a CUDA graph: prewarm
    the call (or run it once) before capture."""
    kind = "not_prewarmed"


_BY_KIND = {c.kind: c for c in (InvalidArgumentError, UnsupportedError, CompileError, DriverError,
                                 NoDeviceError, StoreError, NotPrewarmedError)}


def _make_error(kind, message, extra):
    """Called by the extension's exception translator."""
    exc = _BY_KIND.get(kind, Error)(message, kind)
    for key, value in extra.items():
        setattr(exc, key, value)
    return exc
