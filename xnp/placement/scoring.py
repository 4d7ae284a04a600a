"""How placement scores a map of the region: the acquisitions, tried in batches of candidates."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from xnp.arrays import Points
from xnp.data.trend import Trend

__all__ = ["Region", "acquisition_of", "lazily", "region_mean", "score_region", "try_candidates"]


@dataclasses.dataclass(frozen=True, eq=False)
class Region:
    """The points to be mapped, and what scoring a map of them needs."""

    points: dict[str, np.ndarray]  # the model's arrays (s, t, x) of the region
    truth: np.ndarray | None  # [R, Dy] true values (the oracles)
    share: np.ndarray | None  # [R] each point's weight in the means (None: equal)
    trend: Trend | None  # the context's trend (None: the network alone)

    @functools.cached_property
    def design(self) -> np.ndarray:
        """The trend's coordinates ``[R, P]`` at the region."""
        return self.trend.design_at(self.points["s"])

    @functools.cached_property
    def trend_mean(self) -> np.ndarray:
        """The trend ``[R, Dy]`` at the region."""
        return self.trend.at(self.points["s"])[0]

    def trend_variance(self, known: np.ndarray, new: np.ndarray | None) -> np.ndarray | None:
        """The trend estimate's variance ``[B, R, Dy]`` from ``known`` plus each of ``new``."""
        if self.trend is None:
            return None
        cov = self.trend.covariance_with(known, new)
        return np.einsum("rp,bjpq,rq->brj", self.design, cov, self.design)


def score_region(ctx, state, region, acquisition, scale, known, new) -> np.ndarray:
    """Scores ``[B]`` of the region predicted against a conditioned ``state`` (batch ``B``).

    ``known`` are the positions ``[N, 2]`` of the context so far and ``new`` ``[B, 2]``
    those of the candidate added in each batch entry (None: none added, ``B`` = 1):
    what the trend's variance is known from.
    """
    batch = 1 if new is None else len(new)
    tiled = Points.from_arrays(
        **{k: np.repeat(region.points[k][None], batch, 0) for k in ("s", "t", "x")},
        dim_y=len(scale),
    )
    mean, std = ctx.predictor.predict_state(state, tiled, tight=True)  # one size every step
    return acquisition_of(ctx, mean, std, acquisition, region, scale,
                  region.trend_variance(known, new))  # fmt: skip


def region_mean(x: np.ndarray, share: np.ndarray | None) -> np.ndarray:
    """The mean of ``x`` ``[B, R, Dy]`` over the region (weighted by ``share``) and variables."""
    if share is None:
        return x.mean(axis=(1, 2))
    return np.einsum("brd,r->bd", x, share).mean(-1)


def acquisition_of(ctx, mean, std, acquisition, region, scale, trend_var) -> np.ndarray:
    """The acquisition ``[B]`` of the network's normalised predictions ``[B, R, Dy]``.

    With ``trend_var`` ``[B, R, Dy]`` (a trend's), the map's: the trend estimate's
    variance added in the share ``min(1, std²)`` it keeps, as
    :meth:`~xnp.data.trend.Trend.add_to` does (``std`` is relative to the prior
    spread), and for the oracles the trend added to the mean.
    """
    share = region.share
    std_u = std * scale
    if trend_var is not None:
        keep = np.minimum(1.0, np.asarray(std, np.float64) ** 2)
        std_u = np.sqrt(std_u**2 + keep * trend_var)
    if acquisition == "mean_std":
        return region_mean(std_u, share)
    if acquisition == "mean_variance":
        return region_mean(std_u**2, share)
    mean = ctx.model.denormalise(mean, std)[0]
    if trend_var is not None:
        mean = mean + region.trend_mean + keep * region.trend.shift
    err = mean - region.truth[None]
    if acquisition == "oracle_rmse":
        return np.sqrt(region_mean(err**2, share))
    return region_mean(0.5 * np.log(2 * np.pi * std_u**2) + 0.5 * (err / std_u) ** 2, share)


def lazily(attempt, which: np.ndarray, gains: np.ndarray, now: float, batch_size: int):
    """Scores of the candidates lazy greedy retries (NaN for the others).

    ``which`` are the remaining candidates, ``gains`` their improvements at the
    step each was last tried (upper bounds of today's if improvements only
    shrink), ``now`` the score without a new site (lower is better).
    """
    order = which[np.argsort(-gains[which], kind="stable")]
    score = np.full(gains.size, np.nan)
    for start in range(0, order.size, batch_size):
        part = order[start : start + batch_size]
        score[part] = attempt(part)[part]
        best = now - np.nanmin(score)
        following = start + batch_size
        if following >= order.size or best >= gains[order[following]]:
            break
    return score


def try_candidates(ctx, grown, cand, fill, region, acquisition, scale, which, batch_size):
    """Each candidate in ``which`` added to the context in turn: its score (NaN elsewhere)."""
    score = np.full(len(cand["s"]), np.nan)
    for start in range(0, which.size, batch_size):
        part = which[start : start + batch_size]
        real = part.size
        # a short last batch repeats its last candidate: one compiled shape for every pass
        part = np.concatenate([part, np.repeat(part[-1:], batch_size - real)])
        added = {k: (cand[k] if k != "f" else fill)[part][:, None] for k in ("s", "t", "x", "f")}
        state = ctx.predictor.condition_added(Points.from_arrays(**grown),
                                              Points.from_arrays(**added))  # fmt: skip
        scores = score_region(ctx, state, region, acquisition, scale, grown["s"][0],
                               cand["s"][part])  # fmt: skip
        score[part[:real]] = scores[:real]
    return score
