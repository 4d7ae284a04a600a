"""The xnp exception and warning hierarchy.

Every error that xnp raises on purpose derives from :class:`XnpError`, so a caller
can catch everything xnp complains about with one ``except`` clause, and each
subclass also derives from the matching built-in exception (``ValueError``,
``KeyError``, ...) so that generic handlers keep working.
"""

from __future__ import annotations

__all__ = [
    "CheckpointError",
    "ConfigError",
    "CoordinateError",
    "DimensionError",
    "EmptyDataError",
    "IncompatibleUnitsError",
    "MissingDependencyError",
    "NativeKernelError",
    "ShapeError",
    "UsageError",
    "VariableNotFoundError",
    "XnpError",
    "XnpWarning",
]


class XnpError(Exception):
    """Base class of every error raised by xnp."""


class ConfigError(XnpError, ValueError):
    """A model, task or training configuration holds an invalid value."""


class ShapeError(XnpError, ValueError):
    """Arrays passed to a model or layer have incompatible shapes or ranks."""


class CoordinateError(XnpError, KeyError):
    """A coordinate (latitude, longitude, time, ...) is missing or invalid."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""


class VariableNotFoundError(XnpError, KeyError):
    """A data variable asked for by name is not in the dataset."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""


class DimensionError(XnpError, ValueError):
    """A dimension is missing, unexpected, or has the wrong size."""


class EmptyDataError(XnpError, ValueError):
    """There is nothing to work on, e.g. every value is missing."""


class IncompatibleUnitsError(XnpError, ValueError):
    """Two inputs that must share units do not."""


class CheckpointError(XnpError, OSError):
    """A saved model or training checkpoint is missing, corrupted or incompatible."""


class MissingDependencyError(ConfigError, ImportError):
    """An optional dependency a feature needs (matplotlib, pykrige, ...) is not installed.

    Both an :class:`XnpError` and an :class:`ImportError`; the message names the
    extra to install (e.g. ``pip install 'xnp[plot]'``).
    """


class NativeKernelError(XnpError, RuntimeError):
    """xnp's native CPU kernels could not be built or loaded while ``XNP_NATIVE=1``.

    The message says what failed (no C++ compiler, a compiler error); unset
    ``XNP_NATIVE`` (or set it to ``0``) to use the pure-JAX computation instead.
    """


class UsageError(XnpError, ValueError):
    """The arguments asked for are inconsistent, e.g. an output whose format has no name.

    The ``xnp`` command reports it as an invalid command line (exit status 2), with
    its usage line; :func:`xnp.storage.output_format` raises it too.
    """


class XnpWarning(UserWarning):
    """Base class of every warning emitted by xnp."""
