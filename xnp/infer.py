"""Inference at scale: condition once, predict target chunks, regional context.

Array-level (no xarray): :class:`Predictor` wraps a model that has the split API
(``condition(context) -> state``, ``predict(state, targets) -> (mean, std)``).

* **Exact path.**  The context is conditioned once; targets are cut into chunks
  of one fixed size (the last chunk padded), so ``predict`` compiles once and
  peak memory is set by the chunk size, which is chosen from a memory budget.
  Targets are conditionally independent given the context, so the result equals
  one-shot prediction.
* **Regional path.**  With ``context_radius_km``, targets are ordered along a
  space-filling curve and cut into chunks no wider than the radius
  (:func:`regional_spans`); each chunk is conditioned only on the context points
  within the radius of the chunk's bounding cap (scipy KD-tree on unit-sphere
  xyz).  Context subsets and target chunks are padded to power-of-two sizes, so
  the number of compilations stays logarithmic in the sizes.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from scipy.spatial import cKDTree
from tqdm import tqdm

from xnp.errors import ConfigError, EmptyDataError, ShapeError
from xnp.geo.distance import EARTH_RADIUS_KM
from xnp.points import Points

__all__ = [
    "Predictor",
    "chunk_size_for_budget",
    "parse_bytes",
    "parse_distance_km",
    "regional_spans",
]

_UNITS = {"b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "kib": 2**10, "mib": 2**20, "gib": 2**30}


def parse_bytes(value: str | int) -> int:
    """Bytes from an int or a string such as ``"2GB"`` or ``"512 MiB"``.

    Examples
    --------
    >>> parse_bytes("512 MiB"), parse_bytes(1000)
    (536870912, 1000)
    """
    if isinstance(value, int | np.integer):
        return int(value)
    m = re.fullmatch(r"\s*([0-9.]+)\s*([a-zA-Z]*)\s*", str(value))
    unit = (m.group(2) or "b").lower() if m else ""
    if not m or unit not in _UNITS:
        raise ConfigError(f"cannot read {value!r} as a memory size; use e.g. '2GB' or '512MiB'.")
    return int(float(m.group(1)) * _UNITS[unit])


def parse_distance_km(value: str | float) -> float:
    """Kilometres from a number (km) or a string such as ``"500km"`` or ``"250 m"``.

    Examples
    --------
    >>> parse_distance_km("500km"), parse_distance_km("250 m"), parse_distance_km(3)
    (500.0, 0.25, 3.0)
    """
    if isinstance(value, int | float | np.floating):
        km = float(value)
    else:
        m = re.fullmatch(r"\s*([0-9.]+)\s*(km|m)?\s*", str(value))
        if not m:
            raise ConfigError(f"cannot read {value!r} as a distance; use e.g. '500km'.")
        km = float(m.group(1)) / (1000.0 if m.group(2) == "m" else 1.0)
    if not km > 0:
        raise ConfigError(f"a context radius must be positive; got {value!r}.")
    return km


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


def _pad_points(points: Points, n: int) -> Points:
    return points.pad_to(n) if points.size < n else points


def _bucket(n: int, minimum: int = 256) -> int:
    """Next power of two ≥ n (at least ``minimum``)."""
    return max(minimum, 1 << max(0, math.ceil(math.log2(max(n, 1)))))


def _morton_order(lat: np.ndarray, lon: np.ndarray, bits: int = 16) -> np.ndarray:
    """Indices that sort points along a Z-order curve of (lat, lon): compact chunks."""
    yi = np.clip((lat + 90.0) / 180.0 * (2**bits - 1), 0, 2**bits - 1).astype(np.uint64)
    xi = np.clip((lon + 180.0) / 360.0 * (2**bits - 1), 0, 2**bits - 1).astype(np.uint64)
    code = np.zeros_like(xi)
    for b in range(bits):
        code |= ((xi >> np.uint64(b)) & np.uint64(1)) << np.uint64(2 * b)
        code |= ((yi >> np.uint64(b)) & np.uint64(1)) << np.uint64(2 * b + 1)
    return np.argsort(code, kind="stable")


@functools.lru_cache(maxsize=16)
def _compiled(graphdef: nnx.GraphDef) -> tuple[Any, Any]:
    """Jitted condition and predict for a model structure (shared by all Predictors)."""
    condition = jax.jit(lambda p, c: nnx.merge(graphdef, p).condition(c))
    predict = jax.jit(lambda p, st, t: nnx.merge(graphdef, p).predict(st, t))
    return condition, predict


def _cap(xyz: np.ndarray) -> tuple[np.ndarray, float]:
    """Centre (unit vector) and angular radius of a cap holding the points ``xyz``."""
    centre = xyz.mean(0)
    centre = centre / max(float(np.linalg.norm(centre)), 1e-12)
    return centre, float(np.max(np.arccos(np.clip(xyz @ centre, -1.0, 1.0))))


def regional_spans(
    xyz: np.ndarray, chunk_size: int, radius_km: float, *, min_size: int = 256
) -> list[tuple[int, int]]:
    """Cut points sorted along a space-filling curve into spatially compact chunks.

    Chunks of ``chunk_size`` are halved while their cap is wider than the
    context radius (and they hold more than ``min_size`` points), so a chunk's
    context (its cap widened by the radius) stays regional even when the
    targets are sparse.

    Examples
    --------
    >>> lat = np.linspace(50.0, 58.0, 1000)
    >>> xyz = _xyz(np.stack([lat, np.zeros_like(lat)], -1))
    >>> regional_spans(xyz, 1000, 300.0)  # 890 km of targets, halved once
    [(0, 500), (500, 1000)]
    """
    limit = radius_km / EARTH_RADIUS_KM
    todo = [(a, min(a + chunk_size, len(xyz))) for a in range(0, len(xyz), chunk_size)]
    spans = []
    while todo:
        start, stop = todo.pop(0)
        if stop - start > min_size and _cap(xyz[start:stop])[1] > limit:
            middle = (start + stop) // 2
            todo[:0] = [(start, middle), (middle, stop)]
        else:
            spans.append((start, stop))
    return spans


def _xyz(s: np.ndarray) -> np.ndarray:
    lat, lon = np.deg2rad(s[..., 0]), np.deg2rad(s[..., 1])
    return np.stack([np.cos(lat) * np.cos(lon), np.cos(lat) * np.sin(lon), np.sin(lat)], -1)


class Predictor:
    """Chunked, exact (or regional) prediction with a conditioned-once context.

    Parameters
    ----------
    model : nnx.Module
        A model with ``condition`` and ``predict`` (e.g. :class:`xnp.models.bsa_tnp.BSATNP`).
    chunk_size : int, optional
        Target points per chunk.  Default: from ``memory_budget``.
    memory_budget : str or int
        Memory one chunk may use (default ``"1GiB"``).
    progress : bool
        Show a progress bar over chunks.

    Examples
    --------
    >>> from xnp.models.bsa_tnp import BSATNP
    >>> from xnp.models.config import BSATNPConfig
    >>> model = BSATNP(BSATNPConfig.tiny(), rngs=nnx.Rngs(0))
    >>> ctx = Points.from_arrays(s=np.zeros((1, 4, 2)), f=np.ones((1, 4, 1)))
    >>> tgt = Points.from_arrays(s=np.ones((1, 10, 2)))
    >>> mean, std = Predictor(model, chunk_size=8).predict(ctx, tgt)
    >>> mean.shape
    (1, 10, 1)
    """

    def __init__(
        self,
        model: nnx.Module,
        *,
        chunk_size: int | None = None,
        memory_budget: str | int = "1GiB",
        progress: bool = False,
    ):
        self.config = getattr(model, "config", None)
        graphdef, self.params = nnx.split(model)
        self.chunk_size = (
            int(chunk_size)
            if chunk_size is not None
            else chunk_size_for_budget(self.config, parse_bytes(memory_budget))
        )
        if self.chunk_size < 1:
            raise ConfigError(f"chunk_size must be positive; got {chunk_size}.")
        self.progress = progress
        self._condition, self._predict = _compiled(graphdef)

    # -- exact path --------------------------------------------------------------------
    def condition(self, context: Points) -> Any:
        """Condition on ``context`` once; padded to a power-of-two size to limit compiles."""
        if not bool(np.any(np.asarray(context.mask))):
            raise EmptyDataError("the context holds no valid point; nothing to condition on.")
        return self._condition(self.params, _pad_points(context, _bucket(context.size)))

    def _chunks(self, n: int) -> Iterator[tuple[int, int]]:
        for start in range(0, n, self.chunk_size):
            yield start, min(start + self.chunk_size, n)

    def _padded_size(self, n: int) -> int:
        """Chunks are padded to ``chunk_size``, or to a power of two when fewer points."""
        return min(self.chunk_size, _bucket(n, minimum=64))

    def predict_state(self, state: Any, targets: Points) -> tuple[np.ndarray, np.ndarray]:
        """Predict ``targets`` in fixed-size chunks against a conditioned ``state``."""
        means, stds = [], []
        spans = list(self._chunks(targets.size))
        size = self._padded_size(targets.size)
        for start, stop in tqdm(spans, desc="predicting", disable=not self.progress):
            chunk = _pad_points(targets.slice(start, stop), size)
            mean, std = self._predict(self.params, state, chunk)
            means.append(np.asarray(mean[:, : stop - start]))
            stds.append(np.asarray(std[:, : stop - start]))
        return np.concatenate(means, axis=1), np.concatenate(stds, axis=1)

    def predict(
        self, context: Points, targets: Points, *, context_radius_km: float | str | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Mean and std ``[B, Nt, Dy]`` (numpy) of ``targets`` given ``context``.

        With ``context_radius_km`` (batch size 1 only), each chunk conditions on
        the context within that great-circle distance of it.
        """
        if context_radius_km is None:
            return self.predict_state(self.condition(context), targets)
        return self._predict_regional(context, targets, parse_distance_km(context_radius_km))

    # -- regional path -----------------------------------------------------------------
    def _predict_regional(
        self, context: Points, targets: Points, radius_km: float
    ) -> tuple[np.ndarray, np.ndarray]:
        if context.batch_size != 1 or targets.batch_size != 1:
            raise ShapeError("regional prediction takes one context set (batch size 1).")
        ctx = jax.tree.map(lambda a: np.asarray(a[0]), context)
        valid = np.flatnonzero(ctx.mask)
        if valid.size == 0:
            raise EmptyDataError("the context holds no valid point; nothing to condition on.")
        tree = cKDTree(_xyz(ctx.s[valid]))
        tgt_s = np.asarray(targets.s[0])
        order = _morton_order(tgt_s[:, 0], tgt_s[:, 1])
        mean = np.zeros((targets.size, targets.f.shape[-1]), np.float32)
        std = np.zeros_like(mean)
        xyz_all = _xyz(tgt_s[order])
        spans = regional_spans(xyz_all, self.chunk_size, radius_km)
        for start, stop in tqdm(spans, desc="predicting", disable=not self.progress):
            idx = order[start:stop]
            centre, cap = _cap(xyz_all[start:stop])
            angle = min(cap + radius_km / EARTH_RADIUS_KM, np.pi)
            near = valid[tree.query_ball_point(centre, 2.0 * np.sin(angle / 2.0) + 1e-9)]
            if near.size == 0:
                raise EmptyDataError(
                    f"no context point lies within {radius_km:g} km of the targets near "
                    f"lat={np.rad2deg(np.arcsin(centre[2])):.2f}; increase context_radius."
                )
            sub = jax.tree.map(lambda a, near=near: jnp.asarray(a[None, np.sort(near)]), ctx)
            state = self.condition(sub)
            chunk = jax.tree.map(lambda a, idx=idx: a[:, idx], targets)
            size = min(self.chunk_size, _bucket(idx.size, minimum=64))
            m, s = self._predict(self.params, state, _pad_points(chunk, size))
            mean[idx] = np.asarray(m[0, : idx.size])
            std[idx] = np.asarray(s[0, : idx.size])
        return mean[None], std[None]
