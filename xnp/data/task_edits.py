"""What the task sampler does to the points it draws.

Further input channels, a trend removed, standardising by the context, and a
forecast baseline kept between draws.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np
from scipy.spatial import cKDTree

from xnp.data.batch import TaskPoints
from xnp.data.trend import DEGREES, Trend
from xnp.errors import EmptyDataError
from xnp.geo.sphere import unit_vectors

__all__ = ["BaselineField", "by_context", "detrended", "with_channels"]


@dataclasses.dataclass(frozen=True, eq=False)
class BaselineField:
    """A forecast baseline at every point of one anchor's target frame, kept between tasks.

    With every context point observed and no window, an anchor's context and target
    frame are the same on each draw, so its baseline is too; the tasks that draw the
    anchor again read it here instead of recomputing it (the spatial baselines cost
    more than the rest of a task).  A point elsewhere (another source's, or a cell
    the target frame lacks) is computed afresh.
    """

    values: np.ndarray  # [N, Dy] at the target frame's points, in their order
    where: np.ndarray  # [N, 3] their unit vectors

    @functools.cached_property
    def tree(self) -> cKDTree:
        """A search tree of the frame's points."""
        return cKDTree(self.where)

    def at(self, s: np.ndarray, compute: Any) -> np.ndarray:
        """The baseline ``[M, Dy]`` at points ``s`` ``[M, 2]``; ``compute(s)`` for the others."""
        dist, row = self.tree.query(unit_vectors(s))
        same = dist < 1e-9
        out = self.values[np.where(same, row, 0)].copy()
        if not same.all():
            out[~same] = compute(s[~same])
        return out


def by_context(context: TaskPoints, targets: TaskPoints) -> tuple[TaskPoints | None, TaskPoints]:
    """Context and targets standardised by the context values' mean and std.

    None for a context whose values do not vary (nothing to scale by).
    """
    with np.errstate(invalid="ignore"):
        mean = np.nanmean(context.f, axis=0)
        std = np.nanstd(context.f, axis=0)
    if not (np.isfinite(std).all() and (std > 0).all()):
        return None, targets
    scale = lambda p: dataclasses.replace(p, f=((p.f - mean) / std).astype(p.f.dtype))  # noqa: E731
    return scale(context), scale(targets)


def with_channels(points: TaskPoints, values: np.ndarray) -> TaskPoints:
    """``points`` with ``values`` ``[N, k]`` appended to their covariates."""
    x = np.concatenate([points.x, values.astype(points.x.dtype)], axis=1)
    return dataclasses.replace(points, x=x)


def detrended(
    context: TaskPoints, targets: TaskPoints, trend: str
) -> tuple[TaskPoints | None, TaskPoints]:
    """Context and targets less the context's GLS trend (None: it cannot be fitted)."""
    try:
        fitted = Trend.fit(context.s, context.f, spherical=True, degree=DEGREES[trend])
    except EmptyDataError:
        return None, targets
    less = lambda p: dataclasses.replace(p, f=(p.f - fitted.at(p.s)[0]).astype(p.f.dtype))  # noqa: E731
    return less(context), less(targets)
