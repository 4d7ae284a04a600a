"""The context: observations read, checked and normalised once per time.

:func:`build_context` turns the observations of one frame (or a forecast's
frames) into a normalised :class:`~xnp.arrays.Points` context and a
:class:`~xnp.infer.Predictor` that conditions on it at most once.  A zero-shot
model standardises each context by its own statistics (after the optional
trend) and sees it at its working size; a multi-source model adds the frames of
its further sources.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
import xarray as xr

from xnp.arrays import Points
from xnp.data.batch import source_channels
from xnp.data.coords import find_coords, source_dataset
from xnp.data.flatten import PointSet, to_points
from xnp.data.normalise import Normaliser, Stats, is_zero_shot
from xnp.data.times import match_hours, time_hours
from xnp.data.trend import DEGREES, Offset, Rescaled, Trend, rms_spread
from xnp.errors import (
    ConfigError,
    EmptyDataError,
    XnpError,
    XnpWarning,
)
from xnp.geo.distance import EARTH_RADIUS_KM
from xnp.geo.sphere import unit_vectors
from xnp.infer import Predictor, is_planar
from xnp.prediction.guards import (
    check_in_training_range,
    check_informative,
    check_units_given,
    extent_text,
    outside_grid,
)
from xnp.prediction.templates import at_one_place

__all__ = [
    "Context",
    "Options",
    "build_context",
    "check_sources",
    "context_from_points",
    "coord_names",
    "model_points",
    "prior_std",
    "working_scale",
    "zero_shot_variable",
]


@dataclasses.dataclass(frozen=True)
class Options:
    """How to predict: the arguments of :func:`xnp.predict` that every time shares."""

    radius_km: float | None
    chunks: Mapping[str, Any]
    memory_budget: str | int
    progress: bool
    #: further context of a multi-source model: (source id, Dataset) pairs
    sources: tuple[tuple[int, xr.Dataset], ...] = ()
    #: "constant" / "linear": a zero-shot model interpolates the residuals of the
    #: context's GLS mean or plane
    trend: str | None = None
    #: joint samples per prediction (None: none), targets drawn per step, their seed
    samples: int | None = None
    sample_step: int = 64
    seed: int = 0
    #: condition on at most this many of the context's own points (a random subset)
    max_context: int | None = None
    #: rescale the predictive std by the context's own cross-validation
    #: (:mod:`xnp.prediction.calibration`); None: where the default does
    calibrate: bool | None = None


def model_points(
    ps: PointSet, model: Any, *, values: bool, t: Any = None, source: int = 0
) -> Points:
    """Normalised, batch-of-one :class:`Points` of a point set.

    ``t`` is hours relative to the task's reference time (a scalar or one per
    point); default 0 (a spatial task).  ``source`` is the id of the points'
    source (multi-source models; targets come from source 0).
    """
    x = model.normaliser.transform(ps.x, ps.covariates) if ps.covariates else ps.x
    n = len(ps)
    f = model.normaliser.transform(ps.f, ps.variables) if values else None
    t = None if t is None else np.broadcast_to(np.asarray(t, np.float32), (n,)).reshape(1, n, 1)
    x = source_channels(np.asarray(x, np.float32).reshape(1, n, -1), source, len(model.sources))
    return Points.from_arrays(
        s=ps.s[None],
        t=t,
        x=x,
        f=None if f is None else np.asarray(f, np.float32)[None],
        dim_y=len(model.variables),
    )


@dataclasses.dataclass(eq=False)
class Context:
    """One normalised context set; conditioned at most once, when first needed."""

    model: Any
    predictor: Predictor
    points: Points
    attrs: dict[str, dict]
    trend: Trend | None = None
    #: the observations of the context's own data as read (raw values, before any
    #: trend): what a forecast baseline persists
    observed: PointSet | None = None
    #: ``[Dy]`` factors of the predictive std: the model's own (:func:`xnp.calibrate`),
    #: or found by cross-validation on the context (``calibrate=True``); or None
    std_scale: np.ndarray | None = None
    _state: Any = None

    @property
    def offset(self) -> Offset | None:
        """What the predictions of the model become predictions of the field by."""
        if self.std_scale is None:
            return self.trend
        return Rescaled(self.trend, self.std_scale)

    def state(self) -> Any:
        """The conditioned state of the context (conditioned on first use)."""
        if self._state is None:
            self._state = self.predictor.condition(self.points)
        return self._state

    def predict(self, targets: Points, radius_km: float | None) -> tuple[np.ndarray, np.ndarray]:
        """Denormalised mean and std ``[M, Dy]`` at ``targets``, before any offset.

        From the conditioned state, or regionally (the context within ``radius_km``
        of each target) when a radius is given.
        """
        if radius_km is None:
            mean, std = self.predictor.predict_state(self.state(), targets)
        else:
            mean, std = self.predictor.predict(self.points, targets, context_radius_km=radius_km)
        mean, std = self.model.denormalise(mean, std)
        return mean[0], std[0]


def check_sources(model: Any, sources: Mapping[str, Any] | None) -> tuple:
    """``context_sources`` as (id, Dataset) pairs, checked against the model's sources."""
    if not sources:
        return ()
    if not isinstance(sources, Mapping):
        raise ConfigError(
            f"context_sources must be a dict of name to Dataset; got {type(sources).__name__}."
        )
    known = list(getattr(model, "sources", ()))
    if not known:
        raise ConfigError(
            "this model was fitted on a single source; context_sources is for models fitted "
            "with fit(..., context_sources=...). Merge the observations into `data` instead."
        )
    out = []
    for name, src in sources.items():
        if name not in known[1:]:
            raise ConfigError(
                f"unknown context source {name!r}; this model was fitted with {known[1:]}."
            )
        out.append((known.index(name), source_dataset(name, src, model.variables)))
    return tuple(out)


def _source_points(
    model: Any, src: xr.Dataset, source: int, hours: np.ndarray | None, reference: float | None
) -> Points | None:
    """Context points of one further source at the context's times (None if it has none).

    A source with a time axis contributes its frames at ``hours`` (exact matches,
    as in training) and nothing to a time-less context; a source without one
    (e.g. static sites) contributes all its points.
    """
    layout = find_coords(src, model.variables[0], **coord_names(model, src))
    if layout.time is not None and layout.time_dim is not None:
        if hours is None:  # a time-less context takes no frames of a time series
            return None
        idx = match_hours(time_hours(src[layout.time].values), hours)
        idx = idx[idx >= 0]
        if idx.size == 0:
            return None
        src = src.isel({layout.time_dim: idx})
    for v in model.variables:
        model.normaliser.check_units(v, src[v].attrs.get("units"), f"context source {source}")
    model.normaliser.check_covariate_units(src, model.covariates, f"context source {source}")
    try:
        ps = to_points(src, list(model.variables), covariates=model.covariates, layout=layout)
    except EmptyDataError:
        return None
    if not len(ps):
        return None
    t = None
    if reference is not None:
        t = ps.time - reference if ps.has_time else np.zeros(len(ps))
    return model_points(ps, model, values=True, t=t, source=source)


def _concat(parts: list[Points]) -> Points:
    """Points of a batch of one, concatenated along the point axis."""
    if len(parts) == 1:
        return parts[0]
    return jax.tree.map(lambda *a: np.concatenate([np.asarray(x) for x in a], axis=1), *parts)


def build_context(model: Any, data: xr.Dataset, opts: Options, *, reference: float | None = None
             ) -> Context:  # fmt: skip
    """Check units, read and normalise the observations in ``data`` as one context set.

    With ``reference`` (hours since 1970), each point's time relative to it is
    the model's ``t`` (forecast context frames); otherwise ``t = 0``.
    """
    variables = list(model.variables)
    zero_shot = is_zero_shot(model)
    for v in variables:
        if not zero_shot:
            model.normaliser.check_units(v, data[v].attrs.get("units"), "context")
    model.normaliser.check_covariate_units(data, model.covariates, "context")
    one = at_one_place(data, coord_names(model, data), variables[0])  # a single observation
    try:
        ps = to_points(data if one is None else one, variables, covariates=model.covariates,
                       **coord_names(model, data))  # fmt: skip
    except EmptyDataError as err:
        if len(variables) < 2:
            raise
        counts = {v: int(data[v].count()) for v in variables}
        raise EmptyDataError(
            f"no context point has all of the model's variables {variables} observed "
            f"(observations: {counts}); each context point carries every variable, so "
            "this model needs places where all are observed at the same time."
        ) from err
    return context_from_points(model, ps, data, opts, reference=reference)


def context_from_points(
    model: Any, ps: PointSet, data: xr.Dataset, opts: Options, *, reference: float | None = None
) -> Context:
    """The :class:`Context` of the observations ``ps`` read from ``data``.

    The second half of :func:`build_context` (``data`` gives the variables'
    attributes and the time named in messages): a zero-shot model's trend and
    standardisation, thinning to ``opts.max_context``, further sources.  Cross-
    validation (:mod:`xnp.prediction.calibration`) calls it on subsets of ``ps``.
    """
    variables = list(model.variables)
    zero_shot = is_zero_shot(model)
    trend, observed = None, ps
    if zero_shot:  # standardise by this context set's own statistics, as in pretraining
        raw = ps.f
        if opts.trend is not None:  # the model sees the residuals of the context's trend
            trend = Trend.fit(ps.s, ps.f, spherical=not is_planar(model.config),
                              degree=DEGREES[opts.trend], names=variables)  # fmt: skip
            ps = dataclasses.replace(ps, f=ps.f - trend.at(ps.s)[0])
        stats = {}
        for j, v in enumerate(variables):
            ok = np.isfinite(ps.f[:, j])
            f = ps.f[:, j][ok]
            std = float(f.std()) if f.size > 1 else 0.0
            if trend is not None:  # an exactly planar field: a floor, if the values vary
                std = max(std, 1e-6 * float(raw[ok, j].std()))
            if not std > 0:
                t = find_coords(data, v, **coord_names(model, data)).time
                when = "" if t is None else f" at {data[t].values}"
                raise EmptyDataError(
                    f"the context of {v!r}{when} has {f.size} observation(s), all equal: a "
                    "zero-shot model scales its prediction by the spread of the context "
                    "values, and there is none. Give at least two different observations, "
                    "or fit a model on your data."
                )
            attrs = data[v].attrs
            stats[v] = Stats(float(f.mean()), std, attrs.get("units"), attrs.get("long_name"))
        # (covariate statistics of a fine-tuned model are kept; the values' are the context's)
        normaliser = Normaliser({**model.normaliser.stats, **stats})
        model = _at_working_size(model.with_normaliser(normaliser, variables), ps.s)
    ps = thinned(ps, opts.max_context, seed=opts.seed, reference=reference)
    t = None if reference is None else ps.time - reference
    predictor = Predictor(model.module, memory_budget=opts.memory_budget, progress=opts.progress)
    attrs = {v: dict(data[v].attrs) for v in variables}
    parts = [model_points(ps, model, values=True, t=t)]
    if opts.sources:
        hours = np.unique(ps.time) if ps.has_time else None
        for source, src in opts.sources:
            more = _source_points(model, src, source, hours, reference)
            parts += [] if more is None else [more]
    points = _concat(parts)
    when = _when(data, model)
    if zero_shot:
        check_units_given(data, variables, when)
    else:
        check_in_training_range(parts[0], variables, when)
        check_informative(points, variables, when)
    outside = outside_grid(model, np.asarray(points.s[0]))
    if outside is not None and (outside & np.asarray(points.mask[0], bool)).any():
        warnings.warn(
            f"{int(outside.sum())} context point(s) lie outside the model's grid "
            f"({extent_text(model)}) and are ignored.",
            XnpWarning,
            stacklevel=4,
        )
        points = points.replace(mask=points.mask & ~outside[None])
    scale = getattr(model, "std_scale", None)
    return Context(model, predictor, points, attrs, trend, observed, std_scale=scale)


def thinned(ps: PointSet, n: int | None, *, seed: int, reference: float | None) -> PointSet:
    """At most ``n`` of the points ``ps``: a random subset (in their order), or all of them.

    The subset depends on ``seed`` and on the context's ``reference`` time only,
    so the eager and lazy paths, and reruns, condition on the same points.
    """
    if n is None or len(ps) <= n:
        return ps
    moment = 0 if reference is None else round(float(reference) * 60.0)  # minutes
    rng = np.random.default_rng([seed, moment & 0xFFFFFFFF, moment >> 32 & 0xFFFFFFFF])
    return ps.take(np.sort(rng.choice(len(ps), size=n, replace=False)))


def _when(data: xr.Dataset, model: Any) -> str:
    """`` at <time>`` of a one-time context (for messages), else ``""``."""
    try:
        t = find_coords(data, model.variables[0], **coord_names(model, data)).time
    except XnpError:
        return ""
    return "" if t is None or data[t].ndim else f" at {data[t].values}"


#: Bounds of the distance scale of :func:`_at_working_size`.
_SCALE_BOUNDS = (1.0 / 16.0, 16.0)


def _at_working_size(model: Any, s: np.ndarray) -> Any:
    """A zero-shot model that sees the context points ``s`` at its working size.

    A model may record ``training["context_rms_km"]``: the rms distance of a
    context's points from their centre (on the unit sphere, times the Earth's
    radius) at which it is most accurate.  Its distances are then rescaled
    (:meth:`~xnp.NeuralProcess.with_distance_scale`) so that every
    context has that size: the pretraining prior draws lengthscales relative to the
    region, so the task is the same at any size, but the attention bias resolves
    some distances better than others.  The scale is bounded to
    ``_SCALE_BOUNDS``; a context at a single place is left as it is.
    """
    factor = working_scale(model, s)
    return model if factor == 1.0 else model.with_distance_scale(factor)


def working_scale(model: Any, s: np.ndarray) -> float:
    """The distance scale that shows the points ``s`` ``[N, 2]`` to ``model`` at its working size.

    The rms distance of ``s`` from their centre over the model's
    ``training["context_rms_km"]``, bounded to ``_SCALE_BOUNDS``; 1 for a model
    without a working size or great-circle bias, and for points at one place.
    """
    size = (getattr(model, "training", None) or {}).get("context_rms_km")
    if not size or getattr(model.config, "spatial_bias", None) != "great_circle" or not len(s):
        return 1.0
    rms_km = EARTH_RADIUS_KM * rms_spread(unit_vectors(np.asarray(s, np.float64)))
    if not rms_km > 0:
        return 1.0
    return float(np.clip(rms_km / float(size), *_SCALE_BOUNDS))


def prior_std(model: Any) -> np.ndarray:
    """The spread ``[Dy]`` by which each variable's context was standardised."""
    return np.array([model.normaliser.stats[v].std for v in model.variables])


def coord_names(model: Any, data: xr.Dataset) -> dict[str, Any]:
    """Coordinate names recorded at fit time (lat/lon/elevation) that ``data`` has.

    They disambiguate (e.g. two latitude-like coordinates); data that name their
    coordinates differently from the training data fall back to detection.
    """
    coords = getattr(model, "coords", {}) or {}
    present = set(map(str, data.variables))
    return {
        k: coords[k]
        for k in ("lat", "lon", "elevation")
        if isinstance(coords.get(k), str) and coords[k] in present
    }


def zero_shot_variable(model: Any, data: xr.Dataset) -> Any:
    """A zero-shot model renamed to predict the one variable of ``data``."""
    names = list(data.data_vars)
    if len(model.variables) == 1 and len(names) == 1:
        return model.with_normaliser(model.normaliser, names)
    if all(v in names for v in model.variables):
        return model
    raise ConfigError(
        f"this zero-shot model predicts {len(model.variables)} variable(s) and takes them "
        f"from the context, which holds {names}; pass a DataArray or a Dataset with just "
        "the variable to predict, e.g. ds[['t2m']]."
    )
