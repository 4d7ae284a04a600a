"""One context of a placement: its observations, the sites added so far, and its scores.

:func:`xnp.placement.place_sensors` designs for one time, or for several: a network
serves many future maps, and a design chosen on one time's context can fit that
time's quirks.  Each time is a :class:`Frame`, read and normalised on its own (a
zero-shot model standardises each context by its own statistics), and a candidate's
score is the mean of its scores over the frames.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import xarray as xr

from xnp.arrays import Points
from xnp.data.coords import find_coords
from xnp.data.flatten import PointSet
from xnp.errors import ConfigError, XnpError
from xnp.infer.chunks import real_points
from xnp.placement.reading import truth_at
from xnp.placement.scoring import Region, score_region, try_candidates
from xnp.prediction.context import Options, build_context, coord_names, model_points, prior_std

__all__ = ["Frame", "frames_of", "truth_of"]


def frames_of(model: Any, data: xr.Dataset) -> tuple[str | None, list[xr.Dataset]]:
    """The name of ``data``'s time dimension and its times, one Dataset each.

    Data without a time dimension, or with one time, is one frame (as given).
    """
    try:
        t = find_coords(data, model.variables[0], **coord_names(model, data)).time
    except XnpError:  # no time to split by: one frame
        return None, [data]
    if t is None or t not in data.dims or data.sizes[t] < 2:
        return None, [data]
    return t, [data.isel({t: i}) for i in range(data.sizes[t])]


@dataclasses.dataclass(eq=False)
class Frame:
    """One time's context as placement grows it, with the arrays its scoring needs."""

    ctx: Any  # the normalised context (xnp.prediction.context.Context)
    scale: np.ndarray  # [Dy] normalised std -> the variables' units
    cand: dict[str, np.ndarray]  # the model's arrays (s, t, x) of the candidates
    cand_points: Points  # the candidates as targets [1, C, .]
    region: Region
    grown: dict[str, np.ndarray]  # the context so far, [1, N, .]
    truth_c: np.ndarray | None  # [C, Dy] true values at the candidates (the oracles)
    true_fill: np.ndarray | None  # the same, normalised (as the network sees them)
    site_trend: np.ndarray | None  # [C, Dy] the context's trend at the candidates
    # set by condition(): the state of the context so far, the std [C, Dy] at the
    # candidates and the values [C, Dy] they would be added with (normalised)
    state: Any = None
    std_c: np.ndarray | None = None
    fill: np.ndarray | None = None

    @classmethod
    def read(cls, model, data, trend, cand_ps: PointSet, region_ps: PointSet, truth, share):
        """The frame of the observations ``data`` (one time).

        ``share`` is each region point's share of the region acquisitions (or None),
        the same at every time, so read once by the caller.
        """
        ctx = build_context(model, data, Options(None, {}, "1GiB", False, trend=trend))
        model = ctx.model
        cand = real_points(model_points(cand_ps, model, values=False))
        reg = real_points(model_points(region_ps, model, values=False))
        truth_c = truth_r = true_fill = site_trend = None
        if truth is not None:
            truth_c, truth_r = (truth_at(truth, ps, model) for ps in (cand_ps, region_ps))
            if ctx.trend is not None:  # the network sees the residuals of the trend
                site_trend = ctx.trend.at(cand["s"])[0]
                truth_c = truth_c - site_trend
            true_fill = model.normaliser.transform(truth_c, list(model.variables))
        scale = prior_std(model)
        cand_points = Points.from_arrays(**{k: cand[k][None] for k in ("s", "t", "x")},
                                         dim_y=len(scale))  # fmt: skip
        region = Region(reg, truth_r, share, ctx.trend)
        grown = {k: v[None] for k, v in real_points(ctx.points).items()}
        return cls(ctx, scale, cand, cand_points, region, grown, truth_c, true_fill, site_trend)

    @property
    def model(self) -> Any:
        """The model as set for this context (a zero-shot model: its standardisation)."""
        return self.ctx.model

    def condition(self) -> None:
        """Condition on the context so far; predict the candidates and their fill.

        The fill ``[C, Dy]`` is the value each candidate would be added with: the
        model's mean given the context so far, or for the oracles the truth (both
        normalised, as the network sees them).
        """
        self.state = self.ctx.predictor.condition(Points.from_arrays(**self.grown))
        mean_c, std_c = self.ctx.predictor.predict_state(self.state, self.cand_points, tight=True)
        mean_c, self.std_c = mean_c[0], std_c[0]
        self.fill = mean_c if self.true_fill is None else self.true_fill

    def candidate_std(self) -> np.ndarray:
        """The predictive std ``[C]`` at each candidate (variables' units, with the trend's)."""
        std_u = self.std_c * self.scale
        trend = self.ctx.trend
        if trend is not None:  # and the trend's, known from the context so far
            cov = trend.covariance_with(self.grown["s"][0])[0]
            design = trend.design_at(self.cand["s"])
            var = np.einsum("np,jpq,nq->nj", design, cov, design)
            std_u = np.sqrt(std_u**2 + np.minimum(1.0, self.std_c**2) * var)
        return std_u.mean(-1)

    def region_score(self, acquisition: str) -> float:
        """The region's score given the context so far (no new site)."""
        return float(score_region(self.ctx, self.state, self.region, acquisition, self.scale,
                                  self.grown["s"][0], None)[0])  # fmt: skip

    def attempt(self, which: np.ndarray, acquisition: str, batch_size: int) -> np.ndarray:
        """The region's score ``[C]`` with each candidate in ``which`` added (NaN elsewhere)."""
        return try_candidates(self.ctx, self.grown, self.cand, self.fill, self.region,
                              acquisition, self.scale, which, batch_size)  # fmt: skip

    def add(self, pick: int) -> np.ndarray:
        """Candidate ``pick`` joins the context; returns its value ``[Dy]`` (variables' units).

        It joins with its fill (the model's mean, or for the oracles the truth); the
        value returned is the map's there (with the context's trend, if any).
        """
        fill, std = self.fill[pick], self.std_c[pick]
        new = {k: self.cand[k][pick] for k in ("s", "t", "x")}
        new["f"] = np.asarray(fill, np.float32)
        self.grown = {k: np.concatenate([self.grown[k], new[k][None, None]], axis=1)
                      for k in self.grown}  # fmt: skip
        trend = self.ctx.trend
        if self.truth_c is not None:  # the oracles: the true value
            return self.truth_c[pick] + (0.0 if trend is None else self.site_trend[pick])
        value = self.model.denormalise(fill[None, None], std[None, None])[0][0, 0]
        if trend is not None:  # the map's value there: with the trend
            site_std = (std * self.scale)[None]
            return trend.add_to(self.cand["s"][pick][None], value[None], site_std,
                                self.scale)[0][0]  # fmt: skip
        return value


def truth_of(truth: Any, time: str | None, frame: xr.Dataset) -> Any:
    """The truth of one frame: ``truth`` at the frame's time when the context has several."""
    if truth is None or time is None:
        return truth
    if time not in truth.dims:
        raise ConfigError(
            f"the context has several times along {time!r} and the oracles score each "
            f"against its truth; give truth= with the same {time!r} dimension."
        )
    try:
        return truth.sel({time: frame[time].values})
    except KeyError as err:
        raise ConfigError(
            f"truth= has no time {frame[time].values} of the context; give it at every "
            "time of the context."
        ) from err
