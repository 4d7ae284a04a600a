"""Inference at scale: condition once, predict target chunks, regional context.

Array-level (no xarray): :class:`Predictor` wraps a model that has the split API
(``condition(context) -> state``, ``predict(state, targets) -> (mean, std)``).

* **Exact path.**  The context is conditioned once; targets are cut into chunks
  of one fixed size (the last chunk padded), so ``predict`` compiles once and
  peak memory is set by the chunk size, which is chosen from a memory budget.
  Targets are conditionally independent given the context, so the result equals
  one-shot prediction.
* **Regional path.**  With ``context_radius_km``, targets are cut into compact
  chunks (:mod:`xnp.infer.regional`), each conditioned only on the context
  points within the radius of the chunk's bounding cap (scipy KD-tree on
  unit-sphere xyz).  Context subsets are padded on the host to a few bucket
  sizes (2^k and 1.5·2^k from 64 to 1024, then multiples of the 1024-point
  attention tile), so compilations stay few and padding wastes little; chunks of
  the same padded sizes are stacked along the batch axis and run as one call
  (condition and predict fused), so a million small regional problems become a
  few thousand calls large enough to keep the cores busy.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from typing import Any

import jax
import numpy as np
from flax import nnx
from scipy.spatial import cKDTree
from tqdm import tqdm

from xnp.arrays import Points
from xnp.errors import ConfigError, EmptyDataError, ShapeError
from xnp.geo.distance import EARTH_RADIUS_KM
from xnp.geo.sphere import unit_vectors
from xnp.infer.chunks import (
    bucket,
    check_finite,
    chunk_size_for_budget,
    compiled,
    copy_back,
    gather,
    host_chunk,
    host_fields,
    with_dummy,
)
from xnp.infer.regional import (
    REGIONAL_CHUNK,
    bounding_cap,
    compact_chunks,
    merge_small_groups,
    scatter,
)
from xnp.units import parse_bytes, parse_distance_km

__all__ = ["Predictor", "is_planar"]


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
        self.regional_chunk = int(chunk_size) if chunk_size is not None else REGIONAL_CHUNK
        graphdef, self.params = nnx.split(model)
        self.chunk_size = (
            int(chunk_size)
            if chunk_size is not None
            else chunk_size_for_budget(self.config, parse_bytes(memory_budget))
        )
        if self.chunk_size < 1:
            raise ConfigError(f"chunk_size must be positive; got {chunk_size}.")
        self.progress = progress
        self._condition, self._predict, self._fused = compiled(graphdef)
        self._graphdef, self._condition_added = graphdef, None
        self.regional_points = int(regional_points)
        #: What the last regional prediction did (chunks, calls, shapes, sizes, plan time).
        self.regional_stats: dict[str, Any] = {}

    # -- exact path --------------------------------------------------------------------
    def condition(self, context: Points) -> Any:
        """Condition on ``context`` once; padded to a power-of-two size to limit compiles."""
        if not bool(np.any(np.asarray(context.mask))):
            raise EmptyDataError("the context holds no valid point; nothing to condition on.")
        fields = host_fields(context)
        check_finite(fields, "context", ("s", "t", "x", "f"))
        return self._condition(
            self.params, host_chunk(fields, 0, context.size, bucket(context.size))
        )

    def condition_added(self, base: Points, added: Points, *, refactor: bool = False) -> Any:
        """Condition on ``base`` (one context) plus each point of ``added`` ``[B, 1]``.

        The state of the ``B`` contexts ``base ∪ added[b]``, as :meth:`condition` of
        each.  A model with a GP bank grows its bank by a block update
        (:meth:`xnp.models.bsa_tnp.BSATNP.condition_added`: ``O(K N²)`` per added
        point instead of a refactorisation, and the base's terms at targets shared
        by the batch, its lengthscales held at ``base``'s); any other model, or
        ``refactor=True`` (the slow reference), conditions on the unions, built on
        the host.
        """
        fields, new = host_fields(base), host_fields(added)
        if not bool(np.all(new["mask"])) or new["mask"].shape[1] != 1:
            raise ShapeError("condition_added adds one real point per batch entry ([B, 1]).")
        check_finite(new, "context", ("s", "t", "x", "f"))
        if refactor or not getattr(self.config, "gp_inputs", False):
            b = new["mask"].shape[0]
            union = {k: np.concatenate([np.repeat(fields[k], b, 0), new[k]], axis=1)
                     for k in fields}  # fmt: skip
            return self.condition(Points(**union))
        if not bool(np.any(fields["mask"])):
            raise EmptyDataError("the context holds no valid point; nothing to condition on.")
        check_finite(fields, "context", ("s", "t", "x", "f"))
        if self._condition_added is None:
            graphdef = self._graphdef
            self._condition_added = jax.jit(
                lambda p, b, a: nnx.merge(graphdef, p).condition_added(b, a)
            )
        padded = host_chunk(fields, 0, base.size, bucket(base.size))
        return self._condition_added(self.params, padded, Points(**new))

    def _padded_size(self, n: int, tight: bool = False) -> int:
        """Points per chunk for ``n`` targets, padded to a bucket size.

        As few chunks as ``chunk_size`` allows, of equal length, so that the last
        chunk is not mostly padding: 100,000 targets with a chunk size of 86,016
        make two chunks of 50,176, not 86,016 and 13,984 padded to 86,016 (1.7×
        the work).  ``tight``: to a multiple of 8 instead of a bucket size.
        """
        n_chunks = -(-max(n, 1) // self.chunk_size)
        per_chunk = -(-max(n, 1) // n_chunks)
        padded = -(-per_chunk // 8) * 8 if tight else bucket(per_chunk, minimum=64)
        return min(self.chunk_size, padded)

    def predict_state(
        self, state: Any, targets: Points, *, tight: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """Predict ``targets`` in fixed-size chunks against a conditioned ``state``.

        Chunks are padded to a few bucket sizes, so that target sets of many sizes
        share compilations; ``tight=True`` pads them to a multiple of 8 only, for
        one target set predicted against many states (placement's region: 1,617
        points are 1,624, not 2,048, and one compilation serves every call).
        """
        fields = host_fields(targets)
        check_finite(fields, "target", ("s", "t", "x"))
        size = self._padded_size(targets.size, tight)
        mean = np.zeros((*targets.mask.shape, fields["f"].shape[-1]), np.float32)
        std = np.zeros_like(mean)
        pending: list[tuple[int, int, Any, Any]] = []
        spans = [(a, min(a + size, targets.size)) for a in range(0, targets.size, size)]
        for start, stop in tqdm(spans, desc="predicting", disable=not self.progress):
            chunk = host_chunk(fields, start, stop, size)
            # dispatch is asynchronous: prepare the next chunk while this one runs
            pending.append((start, stop, *self._predict(self.params, state, chunk)))
            if len(pending) > 1:
                copy_back(mean, std, *pending.pop(0))
        for item in pending:
            copy_back(mean, std, *item)
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
        check_finite(host_fields(context), "context", ("t", "x", "f"))
        check_finite(host_fields(targets), "target", ("t", "x"))
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
        check_finite(host_fields(context), "context", ("s",))
        check_finite(host_fields(targets), "target", ("s",))
        ctx_xyz = unit_vectors(np.asarray(context.s[0])[valid])
        xyz = unit_vectors(np.asarray(targets.s[0])[real])
        if real.size == 0:
            return []
        tree = cKDTree(ctx_xyz)
        chunks = [real[idx] for idx in compact_chunks(xyz, self.regional_chunk, radius_km)]
        xyz = unit_vectors(np.asarray(targets.s[0]))
        caps = [bounding_cap(xyz[idx]) for idx in chunks]
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
        ctx, tgt = with_dummy(context), with_dummy(targets)
        n_ctx, n_tgt = context.size, targets.size
        groups: dict[tuple[int, int], list[int]] = {}
        for i, (t_idx, c_idx) in enumerate(plan):
            key = (bucket(c_idx.size, minimum=64), bucket(t_idx.size, 64))
            groups.setdefault(key, []).append(i)
        calls = []
        for (c_pad, t_pad), members in merge_small_groups(groups).items():
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
            sub = Points(**gather(ctx, c_index))
            chunk = Points(**gather(tgt, t_index))
            # dispatch is asynchronous: gather the next call while this one runs
            pending.append((t_index, *self._fused(self.params, sub, chunk)))
            if len(pending) > 1:
                scatter(mean, std, *pending.pop(0))
        for item in pending:
            scatter(mean, std, *item)
        return mean[None, :n_tgt], std[None, :n_tgt]
