"""Chunks of points on the host: sizes from a memory budget, padding, compiled calls.

The exact path cuts targets into chunks of one size chosen from a memory budget
(:func:`chunk_size_for_budget`); chunks are sliced and padded in numpy on the
host (no device dispatch per field) and their outputs written back in place.
:func:`bucket` is the padded-size policy of this package (:func:`xnp.arrays.padded_size`
with 1024-point tiles), :func:`compiled` the jitted calls shared by every
predictor of one model structure.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from flax import nnx

from xnp.arrays import Points, padded_size
from xnp.errors import ConfigError
from xnp.nn.dispatch import cpu_only

__all__ = [
    "FIELDS",
    "bucket",
    "check_finite",
    "chunk_size_for_budget",
    "compiled",
    "copy_back",
    "gather",
    "host_chunk",
    "host_fields",
    "real_points",
    "with_dummy",
]


def chunk_size_for_budget(config: Any, budget_bytes: int, *, multiple: int = 256) -> int:
    """Target points per chunk so that one chunk's activations fit ``budget_bytes``.

    The estimate counts, per target point, the widest activations of the
    embedding, the attention projections, the feed-forward and the head (float32,
    with a factor 6 for XLA temporaries, checked against XLA's own memory
    analysis in the tests), plus the fixed Biased Scan Attention
    tile memory.  The result is a multiple of ``multiple``.
    """
    widths = [
        *getattr(config, "embed_hidden", ()), *getattr(config, "head_hidden", ()),
        getattr(config, "ffn_hidden", 0), 4 * getattr(config, "dim_attn", 0),
        4 * getattr(config, "dim_token", 0),
    ]  # fmt: skip
    per_point = 6 * 4 * max([*widths, 64])
    heads = getattr(config, "n_heads", 1)
    tile = 4 * 4 * heads * getattr(config, "q_chunk", 1024) * getattr(config, "k_chunk", 1024)
    free = budget_bytes - tile
    if free < per_point * multiple:
        raise ConfigError(
            f"a memory budget of {budget_bytes / 2**20:.0f} MiB is too small for this model "
            f"(attention tiles alone need {tile / 2**20:.0f} MiB); raise it or use smaller "
            "q_chunk/k_chunk."
        )
    return int(free // per_point // multiple * multiple)


FIELDS = ("s", "t", "x", "f", "mask")


def bucket(n: int, minimum: int = 256) -> int:
    """Padded size for ``n`` points (:func:`xnp.arrays.padded_size` with 1024-point tiles).

    Powers of two up to ``minimum``; then powers of two and 1.5× powers of two
    up to 1024 (each compiled size costs a compilation of ``condition`` and one of
    ``predict`` per target size, so they are kept few); then multiples of 1024
    (the attention tile), so 100,000 points pad to 100,352, not 131,072.
    """
    return padded_size(n, minimum=minimum, tile=1024)


# XLA:CPU hands element-wise work next to a matmul to YNNPACK "library fusions",
# which materialise every broadcast bias and scale at the full activation shape.
# For the many small calls of the regional path (a few hundred points each) that
# costs more than it saves: measured on the paper-size model at 256 context and
# 256 target points, one chunk per call, 15 ms instead of 19–23 ms (min of 10).
# For large calls (thousands of points) the fusions win, so only the regional
# call turns them off.
_SMALL_CALL_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": ""}


def _jit_small_calls(fn: Any) -> Any:
    """``jax.jit(fn)`` tuned for small shapes on the CPU (no YNNPACK fusions).

    Falls back to plain ``jax.jit`` on other backends, or when this jaxlib does
    not know the option.
    """
    if not cpu_only():
        return jax.jit(fn)
    tuned, plain = jax.jit(fn, compiler_options=_SMALL_CALL_OPTIONS), jax.jit(fn)
    state = {"fn": tuned}

    def call(*args: Any) -> Any:
        try:
            return state["fn"](*args)
        except jax.errors.JaxRuntimeError as err:
            if state["fn"] is plain or "compile option" not in str(err):
                raise
            state["fn"] = plain
            return plain(*args)

    call._cache_size = lambda: state["fn"]._cache_size()  # type: ignore[attr-defined]
    return call


@functools.lru_cache(maxsize=16)
def compiled(graphdef: nnx.GraphDef) -> tuple[Any, Any, Any]:
    """Jitted condition, predict, and both in one call, for a model structure.

    Shared by all Predictors of the same structure.
    """
    condition = jax.jit(lambda p, c: nnx.merge(graphdef, p).condition(c))
    predict = jax.jit(lambda p, st, t: nnx.merge(graphdef, p).predict(st, t))

    def fused(p: Any, context: Points, targets: Points) -> Any:
        model = nnx.merge(graphdef, p)
        return model.predict(model.condition(context), targets)

    return condition, predict, _jit_small_calls(fused)


def gather(fields: dict[str, np.ndarray], index: np.ndarray) -> dict[str, np.ndarray]:
    """Fields ``[N + 1, ...]`` (last row: a masked dummy) gathered to ``[G, n, ...]``."""
    return {name: a[index] for name, a in fields.items()}


def with_dummy(points: Points) -> dict[str, np.ndarray]:
    """The numpy fields of a one-set :class:`Points` plus a masked padding row."""
    fields = {k: np.asarray(getattr(points, k))[0] for k in FIELDS}
    return {k: np.concatenate([a, np.zeros_like(a[:1])]) for k, a in fields.items()}


def real_points(points: Points) -> dict[str, np.ndarray]:
    """The real (unmasked) points of a one-set :class:`Points`: numpy ``s, t, x, f`` ``[N, .]``."""
    keep = np.asarray(points.mask)[0]
    return {k: np.asarray(getattr(points, k))[0][keep] for k in FIELDS if k != "mask"}


def host_fields(points: Points) -> dict[str, np.ndarray]:
    """The fields of ``points`` as host (numpy) arrays ``[B, N, ...]``."""
    return {k: np.asarray(getattr(points, k)) for k in FIELDS}


def host_chunk(fields: dict[str, np.ndarray], start: int, stop: int, size: int) -> Points:
    """Points ``start:stop`` padded to ``size`` with masked zeros, built on the host.

    Slicing and padding in numpy costs no device dispatch per field (five eager
    ``jnp`` slices and pads per chunk were 7 % of a 10,000-target prediction).
    """
    out = {}
    for name, a in fields.items():
        part = a[:, start:stop]
        if part.shape[1] < size:
            pad = np.zeros((a.shape[0], size, *a.shape[2:]), a.dtype)
            pad[:, : part.shape[1]] = part
            part = pad
        out[name] = part
    return Points(**out)


def copy_back(mean: np.ndarray, std: np.ndarray, start: int, stop: int, m: Any, s: Any) -> None:
    """Write a chunk's outputs ``[B, size, Dy]`` (padding dropped) to ``start:stop``."""
    mean[:, start:stop] = np.asarray(m)[:, : stop - start]
    std[:, start:stop] = np.asarray(s)[:, : stop - start]


def check_finite(fields: dict[str, np.ndarray], role: str, names: Sequence[str]) -> None:
    """Raise unless the real points' ``names`` fields are finite (NaN would spread)."""
    real = np.asarray(fields["mask"], bool)
    for name in names:
        values = np.asarray(fields[name])
        if values.size and not np.isfinite(values[real]).all():
            what = {"s": "location", "t": "time", "x": "covariate", "f": "value"}[name]
            raise ConfigError(
                f"some {role} points have a missing (NaN) or infinite {what}; mask them "
                "(mask=False) or drop them. (xnp.predict drops missing values itself.)"
            )
