"""Inference at scale: condition once, predict target chunks, regional context.

Array-level (no xarray): :class:`Predictor` wraps a model that has the split API
(``condition(context) -> state``, ``predict(state, targets) -> (mean, std)``).

* **Exact path.**  The context is conditioned once; targets are cut into chunks
  of one fixed size (the last chunk padded), so ``predict`` compiles once and
  peak memory is set by the chunk size, which is chosen from a memory budget.
  Targets are conditionally independent given the context, so the result equals
  one-shot prediction.
* **Regional path.**  With ``context_radius_km``, targets are cut by a
  balanced k-d split into compact chunks of one size, no wider than the radius
  (:func:`compact_chunks`); each chunk is conditioned only on the context points
  within the radius of the chunk's bounding cap (scipy KD-tree on unit-sphere
  xyz).  Context subsets are padded on the host to a few bucket sizes
  (2^k and 1.5·2^k from 64 to 1024, then multiples of the 1024-point attention
  tile), so compilations stay few and padding wastes little; chunks of the same
  padded sizes are stacked along the batch axis and run as one call
  (condition and predict fused), so a million small regional problems become a
  few thousand calls large enough to keep the cores busy.
"""

from __future__ import annotations

import functools
import math
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from flax import nnx
from scipy.spatial import cKDTree
from tqdm import tqdm

from xnp.arrays import Points, padded_size
from xnp.errors import ConfigError, EmptyDataError, ShapeError
from xnp.geo.distance import EARTH_RADIUS_KM
from xnp.geo.sphere import unit_vectors
from xnp.units import parse_bytes, parse_distance_km

__all__ = ["Predictor", "chunk_size_for_budget", "compact_chunks"]


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


_FIELDS = ("s", "t", "x", "f", "mask")
_REGIONAL_CHUNK = 256


def _bucket(n: int, minimum: int = 256) -> int:
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
    if jax.default_backend() != "cpu":
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
def _compiled(graphdef: nnx.GraphDef) -> tuple[Any, Any, Any]:
    """Jitted condition, predict, and both in one call, for a model structure.

    Shared by all Predictors of the same structure.
    """
    condition = jax.jit(lambda p, c: nnx.merge(graphdef, p).condition(c))
    predict = jax.jit(lambda p, st, t: nnx.merge(graphdef, p).predict(st, t))

    def fused(p: Any, context: Points, targets: Points) -> Any:
        model = nnx.merge(graphdef, p)
        return model.predict(model.condition(context), targets)

    return condition, predict, _jit_small_calls(fused)


def _cap(xyz: np.ndarray) -> tuple[np.ndarray, float]:
    """Centre (unit vector) and angular radius of a cap holding the points ``xyz``."""
    centre = xyz.mean(0)
    centre = centre / max(float(np.linalg.norm(centre)), 1e-12)
    return centre, float(np.max(np.arccos(np.clip(xyz @ centre, -1.0, 1.0))))


def compact_chunks(
    xyz: np.ndarray, chunk_size: int, radius_km: float | None = None, *, min_size: int = 64
) -> list[np.ndarray]:
    """Split points (unit vectors ``[N, 3]``) into spatially compact chunks.

    A balanced k-d split: a set larger than ``chunk_size`` is cut at the
    ``chunk_size``-multiple nearest its median along its widest axis, so all
    chunks but one hold exactly ``chunk_size`` points (one compiled shape).
    With ``radius_km``, chunks wider than the radius are halved further (down to
    ``min_size`` points), so a chunk's context (its cap widened by the radius)
    stays regional where targets are sparse.

    Examples
    --------
    >>> lat = np.linspace(50.0, 58.0, 1000)
    >>> xyz = unit_vectors(np.stack([lat, np.zeros_like(lat)], -1))
    >>> [len(c) for c in compact_chunks(xyz, 256)]
    [256, 256, 256, 232]
    >>> max(_cap(xyz[c])[1] for c in compact_chunks(xyz, 1000, 300.0)) * 6371 < 300
    True
    """
    limit = None if radius_km is None else radius_km / EARTH_RADIUS_KM
    chunks, todo = [], [np.arange(len(xyz))]
    while todo:
        idx = todo.pop()
        pts = xyz[idx]
        too_wide = limit is not None and idx.size > min_size and _cap(pts)[1] > limit
        if idx.size <= chunk_size and not too_wide:
            chunks.append(idx)
            continue
        axis = int(np.argmax(pts.max(0) - pts.min(0)))
        if idx.size > chunk_size:
            left = (-(-idx.size // chunk_size) // 2) * chunk_size
        else:
            left = idx.size // 2
        part = np.argpartition(pts[:, axis], left - 1)
        todo += [idx[part[left:]], idx[part[:left]]]
    return chunks


def _gather(fields: dict[str, np.ndarray], index: np.ndarray) -> dict[str, np.ndarray]:
    """Fields ``[N + 1, ...]`` (last row: a masked dummy) gathered to ``[G, n, ...]``."""
    return {name: a[index] for name, a in fields.items()}


def _with_dummy(points: Points) -> dict[str, np.ndarray]:
    """The numpy fields of a one-set :class:`Points` plus a masked padding row."""
    fields = {k: np.asarray(getattr(points, k))[0] for k in _FIELDS}
    return {k: np.concatenate([a, np.zeros_like(a[:1])]) for k, a in fields.items()}


def _host_fields(points: Points) -> dict[str, np.ndarray]:
    """The fields of ``points`` as host (numpy) arrays ``[B, N, ...]``."""
    return {k: np.asarray(getattr(points, k)) for k in _FIELDS}


def _host_chunk(fields: dict[str, np.ndarray], start: int, stop: int, size: int) -> Points:
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


def _copy_back(mean: np.ndarray, std: np.ndarray, start: int, stop: int, m: Any, s: Any) -> None:
    """Write a chunk's outputs ``[B, size, Dy]`` (padding dropped) to ``start:stop``."""
    mean[:, start:stop] = np.asarray(m)[:, : stop - start]
    std[:, start:stop] = np.asarray(s)[:, : stop - start]


def _check_finite(fields: dict[str, np.ndarray], role: str, names: Sequence[str]) -> None:
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


def is_planar(config: Any) -> bool:
    """Whether a model config works on planar coordinates (no great-circle distances)."""
    return getattr(config, "spatial_bias", None) == "euclidean" or (
        getattr(config, "geometry", None) == "plane"
    )


class Predictor:
    """Chunked, exact (or regional) prediction with a conditioned-once context.

    Parameters
    ----------
    model : nnx.Module
        A model with ``condition`` and ``predict`` (e.g. :class:`xnp.models.bsa_tnp.BSATNP`).
    chunk_size : int, optional
        Target points per chunk.  Default: from ``memory_budget`` on the exact
        path; 256 on the regional path, whose chunks are also kept no wider than
        the radius (on 1M targets from 100k context at 300 km, 256 beat the
        memory-based size by 1.2× and costs per target are flat from 256 to 512).
    memory_budget : str or int
        Memory one chunk may use (default ``"1GiB"``).
    progress : bool
        Show a progress bar over chunks.
    regional_points : int
        Regional path: chunks whose padded sizes match are stacked into one
        batched call of about this many (context + target) points, so the small
        per-chunk problems fill the machine's vector units and cores (on a
        2-core CPU, 4 chunks of 256 + 256 points per call measured fastest; larger
        batches fall out of the caches).

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
        regional_points: int = 2048,
    ):
        self.config = getattr(model, "config", None)
        self.regional_chunk = int(chunk_size) if chunk_size is not None else _REGIONAL_CHUNK
        graphdef, self.params = nnx.split(model)
        self.chunk_size = (
            int(chunk_size)
            if chunk_size is not None
            else chunk_size_for_budget(self.config, parse_bytes(memory_budget))
        )
        if self.chunk_size < 1:
            raise ConfigError(f"chunk_size must be positive; got {chunk_size}.")
        self.progress = progress
        self._condition, self._predict, self._fused = _compiled(graphdef)
        self.regional_points = int(regional_points)
        #: What the last regional prediction did (chunks, calls, shapes, sizes, plan time).
        self.regional_stats: dict[str, Any] = {}

    # -- exact path --------------------------------------------------------------------
    def condition(self, context: Points) -> Any:
        """Condition on ``context`` once; padded to a power-of-two size to limit compiles."""
        if not bool(np.any(np.asarray(context.mask))):
            raise EmptyDataError("the context holds no valid point; nothing to condition on.")
        fields = _host_fields(context)
        _check_finite(fields, "context", ("s", "t", "x", "f"))
        return self._condition(
            self.params, _host_chunk(fields, 0, context.size, _bucket(context.size))
        )

    def _padded_size(self, n: int) -> int:
        """Points per chunk for ``n`` targets, padded to a bucket size.

        As few chunks as ``chunk_size`` allows, of equal length, so that the last
        chunk is not mostly padding: 100,000 targets with a chunk size of 86,016
        make two chunks of 50,176, not 86,016 and 13,984 padded to 86,016 (1.7×
        the work).
        """
        n_chunks = -(-max(n, 1) // self.chunk_size)
        return min(self.chunk_size, _bucket(-(-max(n, 1) // n_chunks), minimum=64))

    def predict_state(self, state: Any, targets: Points) -> tuple[np.ndarray, np.ndarray]:
        """Predict ``targets`` in fixed-size chunks against a conditioned ``state``."""
        fields = _host_fields(targets)
        _check_finite(fields, "target", ("s", "t", "x"))
        size = self._padded_size(targets.size)
        mean = np.zeros((*targets.mask.shape, fields["f"].shape[-1]), np.float32)
        std = np.zeros_like(mean)
        pending: list[tuple[int, int, Any, Any]] = []
        spans = [(a, min(a + size, targets.size)) for a in range(0, targets.size, size)]
        for start, stop in tqdm(spans, desc="predicting", disable=not self.progress):
            chunk = _host_chunk(fields, start, stop, size)
            # dispatch is asynchronous: prepare the next chunk while this one runs
            pending.append((start, stop, *self._predict(self.params, state, chunk)))
            if len(pending) > 1:
                _copy_back(mean, std, *pending.pop(0))
        for item in pending:
            _copy_back(mean, std, *item)
        return mean, std

    def predict(
        self, context: Points, targets: Points, *, context_radius_km: float | str | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Mean and std ``[B, Nt, Dy]`` (numpy) of ``targets`` given ``context``.

        With ``context_radius_km`` (batch size 1 only), each chunk conditions on
        the context within that great-circle distance of it.
        """
        if context_radius_km is None:
            return self.predict_state(self.condition(context), targets)
        # (locations: checked by regional_plan)
        _check_finite(_host_fields(context), "context", ("t", "x", "f"))
        _check_finite(_host_fields(targets), "target", ("t", "x"))
        return self._predict_regional(context, targets, parse_distance_km(context_radius_km))

    # -- regional path -----------------------------------------------------------------
    def regional_plan(
        self, context: Points, targets: Points, context_radius_km: float | str
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """The regional split: ``(target indices, context indices)`` per chunk.

        Targets are cut into compact chunks (:func:`compact_chunks`); a chunk's
        context is every valid context point within ``context_radius_km`` of the
        cap that holds the chunk, so each target sees at least the context within
        the radius of itself.  Indices are sorted and refer to the points of the
        (single) set in ``context`` and ``targets``.
        """
        radius_km = parse_distance_km(context_radius_km)
        if context.batch_size != 1 or targets.batch_size != 1:
            raise ShapeError("regional prediction takes one context set (batch size 1).")
        if is_planar(self.config):
            raise ConfigError(
                "context_radius is a great-circle distance, but this model works on planar "
                "coordinates; predict without context_radius."
            )
        valid = np.flatnonzero(np.asarray(context.mask[0]))
        if valid.size == 0:
            raise EmptyDataError("the context holds no valid point; nothing to condition on.")
        # only real targets are planned (padding would pull chunks towards it)
        real = np.flatnonzero(np.asarray(targets.mask[0]))
        _check_finite(_host_fields(context), "context", ("s",))
        _check_finite(_host_fields(targets), "target", ("s",))
        ctx_xyz = unit_vectors(np.asarray(context.s[0])[valid])
        xyz = unit_vectors(np.asarray(targets.s[0])[real])
        if real.size == 0:
            return []
        tree = cKDTree(ctx_xyz)
        chunks = [real[idx] for idx in compact_chunks(xyz, self.regional_chunk, radius_km)]
        xyz = unit_vectors(np.asarray(targets.s[0]))
        caps = [_cap(xyz[idx]) for idx in chunks]
        centres = np.stack([c for c, _ in caps])
        angles = np.minimum([a + radius_km / EARTH_RADIUS_KM for _, a in caps], np.pi)
        found = tree.query_ball_point(centres, 2.0 * np.sin(angles / 2.0) + 1e-9)
        plan = []
        for idx, centre, near in zip(chunks, centres, found, strict=True):
            if not near:
                raise EmptyDataError(
                    f"no context point lies within {radius_km:g} km of the targets near "
                    f"lat={np.rad2deg(np.arcsin(centre[2])):.2f}; increase context_radius."
                )
            plan.append((np.sort(idx), valid[np.sort(np.asarray(near))]))
        return plan

    def _group_size(self, n_context: int, n_target: int, n_chunks: int) -> int:
        """Chunks per call: about ``regional_points`` points, a power of two."""
        per_call = max(1, self.regional_points // (n_context + n_target))
        size = 1 << int(math.log2(per_call))
        return min(size, 1 << math.ceil(math.log2(n_chunks)))

    def _predict_regional(
        self, context: Points, targets: Points, radius_km: float
    ) -> tuple[np.ndarray, np.ndarray]:
        start_time = time.perf_counter()
        plan = self.regional_plan(context, targets, radius_km)
        plan_s = time.perf_counter() - start_time
        ctx, tgt = _with_dummy(context), _with_dummy(targets)
        n_ctx, n_tgt = context.size, targets.size
        groups: dict[tuple[int, int], list[int]] = {}
        for i, (t_idx, c_idx) in enumerate(plan):
            key = (_bucket(c_idx.size, minimum=64), _bucket(t_idx.size, 64))
            groups.setdefault(key, []).append(i)
        calls = []
        for (c_pad, t_pad), members in _merge_small_groups(groups).items():
            g = self._group_size(c_pad, t_pad, len(members))
            for first in range(0, len(members), g):
                batch = members[first : first + g]
                batch += batch[-1:] * (g - len(batch))  # repeats: same values written twice
                c_index = np.full((g, c_pad), n_ctx)
                t_index = np.full((g, t_pad), n_tgt)
                for row, i in enumerate(batch):
                    t_idx, c_idx = plan[i]
                    t_index[row, : t_idx.size] = t_idx
                    c_index[row, : c_idx.size] = c_idx
                calls.append((c_index, t_index))
        self.regional_stats = {
            "chunks": len(plan),
            "calls": len(calls),
            "plan_s": plan_s,
            "context": np.array([c.size for _, c in plan]),
            "targets": np.array([t.size for t, _ in plan]),
            "shapes": dict(Counter((*c.shape, t.shape[1]) for c, t in calls)),
        }
        mean = np.zeros((n_tgt + 1, tgt["f"].shape[-1]), np.float32)
        std = np.zeros_like(mean)
        pending: list[tuple[np.ndarray, Any, Any]] = []
        for c_index, t_index in tqdm(calls, desc="predicting", disable=not self.progress):
            sub = Points(**_gather(ctx, c_index))
            chunk = Points(**_gather(tgt, t_index))
            # dispatch is asynchronous: gather the next call while this one runs
            pending.append((t_index, *self._fused(self.params, sub, chunk)))
            if len(pending) > 1:
                _scatter(mean, std, *pending.pop(0))
        for item in pending:
            _scatter(mean, std, *item)
        return mean[None, :n_tgt], std[None, :n_tgt]


def _merge_small_groups(
    groups: dict[tuple[int, int], list[int]], minimum: int = 64
) -> dict[tuple[int, int], list[int]]:
    """Move the chunks of rare padded shapes into the nearest larger common shape.

    Every (context, target) shape costs a compilation (seconds for a paper-size
    model), far more than padding a few dozen chunks a little further.  A group
    of fewer than ``minimum`` chunks joins the smallest group at least as large in
    both sizes that has ``minimum`` or more; if there is none it stays.

    Examples
    --------
    >>> _merge_small_groups({(128, 128): [0], (192, 128): list(range(1, 70))}).keys()
    dict_keys([(192, 128)])
    """
    common = sorted(k for k, v in groups.items() if len(v) >= minimum)
    merged: dict[tuple[int, int], list[int]] = {k: list(groups[k]) for k in common}
    for key, members in groups.items():
        if key in merged:
            continue
        larger = [k for k in common if k[0] >= key[0] and k[1] >= key[1]]
        target = min(larger, key=lambda k: k[0] * k[1]) if larger else key
        merged.setdefault(target, []).extend(members)
    return merged


def _scatter(mean: np.ndarray, std: np.ndarray, index: np.ndarray, m: Any, s: Any) -> None:
    """Write ``[G, n, Dy]`` outputs to rows ``index`` (padding goes to the dummy last row)."""
    mean[index.ravel()] = np.asarray(m).reshape(index.size, -1)
    std[index.ravel()] = np.asarray(s).reshape(index.size, -1)
