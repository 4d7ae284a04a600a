"""Tasks as numpy arrays, and padded batches of tasks as JAX pytrees.

A :class:`Task` is one meta-learning problem: context points and target points
(with their normalised values), times relative to the task's reference time.
:func:`collate` pads a list of tasks to a common *bucket* size and returns a
:class:`Batch` of :class:`xnp.arrays.Points`.  Bucket sizes come from a short fixed
list (by default powers of two), so ``jax.jit`` compiles a bounded number of times.

Multi-source context carries an integer source id per point in
``Batch.context_source`` (and ``Batch.target_source``): 0 for the first source
given to the sampler, 1 for the second, ...; padding has id 0 and mask False.
Models see the id through :func:`source_channels`: one-hot channels appended to
the fixed effects ``x``, which the point encoder embeds with the value and flag.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax
import numpy as np

from xnp.arrays import Batch, Points, padded_size
from xnp.errors import ShapeError

__all__ = ["Batch", "Task", "TaskPoints", "bucket_size", "collate", "source_channels"]
# (Batch is defined in xnp.arrays, with Points: the padded pytrees the models take)

Array = jax.Array | np.ndarray


@dataclasses.dataclass(frozen=True, eq=False)
class TaskPoints:
    """Unpadded points of one task (numpy).

    Attributes
    ----------
    s : ndarray, shape ``[N, 2]``
        Latitude, longitude in degrees (longitude in ``[-180, 180)``).
    t : ndarray, shape ``[N]``
        Hours relative to the task's reference time (float64).
    x : ndarray, shape ``[N, Dx]``
        Normalised covariates.
    f : ndarray, shape ``[N, Dy]``
        Normalised values (for targets: the values to predict).
    source : ndarray of int32, shape ``[N]``
        Source id of each point.
    """

    s: np.ndarray
    t: np.ndarray
    x: np.ndarray
    f: np.ndarray
    source: np.ndarray

    def __len__(self) -> int:
        return int(self.s.shape[0])

    def take(self, which: np.ndarray) -> TaskPoints:
        """Return the points selected by an integer or boolean index array."""
        return TaskPoints(*(getattr(self, k)[which] for k in ("s", "t", "x", "f", "source")))

    @staticmethod
    def concat(parts: Sequence[TaskPoints]) -> TaskPoints:
        """Concatenate point sets along the point axis."""
        fields = ("s", "t", "x", "f", "source")
        return TaskPoints(*(np.concatenate([getattr(p, k) for p in parts]) for k in fields))


@dataclasses.dataclass(frozen=True, eq=False)
class Task:
    """One task: context and target points, and the reference time (hours since 1970)."""

    context: TaskPoints
    target: TaskPoints
    reference_time: float = 0.0


def bucket_size(n: int, buckets: Sequence[int] | None = None, minimum: int = 16) -> int:
    """Smallest bucket that holds ``n`` points.

    With ``buckets=None`` the buckets are the powers of two from ``minimum`` up
    (:func:`xnp.arrays.padded_size` without tiles).

    Examples
    --------
    >>> bucket_size(100), bucket_size(3), bucket_size(300, [128, 512, 2048])
    (128, 16, 512)
    """
    if buckets is None:
        return padded_size(n, minimum=minimum, tile=None, three_quarters=False)
    for size in sorted(buckets):
        if size >= n:
            return int(size)
    raise ShapeError(
        f"{n} points do not fit in the largest bucket ({max(buckets)}). Add a larger bucket "
        "or cap the number of points per task."
    )


def _pad(parts: list[np.ndarray], n: int, dtype: type) -> np.ndarray:
    first = parts[0]
    out = np.zeros((len(parts), n, *first.shape[1:]), dtype)
    for i, a in enumerate(parts):
        out[i, : a.shape[0]] = a
    return out


def _points(parts: list[TaskPoints], n: int, zero_f: bool) -> tuple[Points, np.ndarray]:
    mask = np.zeros((len(parts), n), bool)
    for i, p in enumerate(parts):
        mask[i, : len(p)] = True
    f = _pad([p.f for p in parts], n, np.float32)
    points = Points.from_arrays(
        s=_pad([p.s for p in parts], n, np.float32),
        t=_pad([p.t[:, None] for p in parts], n, np.float32),
        x=_pad([p.x for p in parts], n, np.float32),
        f=np.zeros_like(f) if zero_f else f,
        mask=mask,
    )
    return points, f


def collate(tasks: Sequence[Task], buckets: Sequence[int] | None = None) -> Batch:
    """Pad ``tasks`` to bucket sizes and stack them into a :class:`Batch`.

    Context and targets are padded separately, each to the smallest bucket that
    holds the largest task.  Times are relative hours computed in float64 and
    cast to float32 here.

    Examples
    --------
    >>> pts = TaskPoints(
    ...     np.zeros((5, 2)), np.zeros(5), np.zeros((5, 0)), np.ones((5, 1)), np.zeros(5, np.int32)
    ... )
    >>> batch = collate([Task(pts, pts.take(np.arange(3)))])
    >>> batch.context.s.shape, batch.y.shape, int(batch.num_targets[0])
    ((1, 16, 2), (1, 16, 1), 3)
    """
    if not tasks:
        raise ShapeError("Cannot collate an empty list of tasks.")
    contexts = [t.context for t in tasks]
    targets = [t.target for t in tasks]
    nc = bucket_size(max(len(c) for c in contexts), buckets)
    nt = bucket_size(max(len(t) for t in targets), buckets)
    context, _ = _points(contexts, nc, zero_f=False)
    target, y = _points(targets, nt, zero_f=True)
    return Batch(
        context=context,
        target=target,
        y=jax.numpy.asarray(y),
        context_source=jax.numpy.asarray(_pad([c.source for c in contexts], nc, np.int32)),
        target_source=jax.numpy.asarray(_pad([t.source for t in targets], nt, np.int32)),
    )


def source_channels(x: Array, source: Array | int, n_sources: int) -> np.ndarray:
    """Append one-hot source-id channels to fixed effects ``x`` ``[..., N, Dx]``.

    ``source`` holds one id per point (``[..., N]``) or one id for all points.
    With a single source nothing is appended (``x`` is returned as float32).

    Examples
    --------
    >>> source_channels(np.zeros((1, 3, 1)), np.array([[0, 1, 1]]), 2)[0]
    array([[0., 1., 0.],
           [0., 0., 1.],
           [0., 0., 1.]], dtype=float32)
    """
    x = np.asarray(x, np.float32)
    if n_sources <= 1:
        return x
    ids = np.broadcast_to(np.asarray(source, np.int64), x.shape[:-1])
    if ids.size and (ids.min() < 0 or ids.max() >= n_sources):
        raise ShapeError(f"source ids must lie in [0, {n_sources}); got {ids.min()}..{ids.max()}.")
    one_hot = np.eye(n_sources, dtype=np.float32)[ids]
    return np.concatenate([x, one_hot], axis=-1)
