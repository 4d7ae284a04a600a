"""Which kernel runs: one branch per platform, traced only where more than one can run.

The attention and bias kernels have a CPU branch (native kernels), a CUDA branch
(Pallas) and a portable JAX branch.  :func:`jax.lax.platform_dependent` picks one
when the computation is lowered, but it traces every branch it is given first,
and the portable branch of biased attention (tiled scans, their transposes in
training) is the costliest to trace: on a 2-core CPU it was 3.9 of the 5.7 s that
tracing a small BSA-TNP training step took (compiling it: 6.5 s more).  In a
process whose only backend is the CPU, nothing else can run, so
:func:`by_platform` calls the CPU branch (or the portable one) directly; with an
accelerator it leaves the choice to :func:`jax.lax.platform_dependent`, so that a
computation placed on the CPU of a GPU machine still gets the CPU branch.

(xnp never lowers a computation for another platform than the one it runs on, as
:mod:`jax.export` can; a CPU-only process that did would get the CPU branch.)
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import jax

__all__ = ["by_platform", "cpu_only", "on_cuda"]


@cache
def cpu_only() -> bool:
    """Whether this process's default JAX backend is the CPU (no accelerator in use)."""
    return jax.default_backend() == "cpu"


@cache
def on_cuda() -> bool:
    """Whether this process has an NVIDIA GPU (JAX's ``cuda`` backend)."""
    try:
        return bool(jax.devices("cuda"))
    except (RuntimeError, ValueError):  # no such backend, or it failed to start
        return False


def by_platform(*args: Any, default: Callable[..., Any], **branches: Callable[..., Any]) -> Any:
    """``branches[platform](*args)`` for the platform that runs it, else ``default(*args)``.

    As :func:`jax.lax.platform_dependent` (same arguments), but in a CPU-only
    process only the branch that can run is traced.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> x = jnp.arange(3.0)
    >>> y = by_platform(x, cpu=lambda x: x + 1, default=lambda x: x + 1)
    >>> y.tolist()
    [1.0, 2.0, 3.0]
    """
    if cpu_only():
        return branches.get("cpu", default)(*args)
    return jax.lax.platform_dependent(*args, default=default, **branches)
