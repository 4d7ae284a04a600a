"""``ds.np.predict``: labelled predictive mean and std, eager or lazy over dask chunks.

The observations in ``data`` are the context; ``targets`` holds the coordinates to
predict at (a grid, stations, a curvilinear or projected grid, or a dict of
coordinates); without ``targets`` every point of ``data`` is predicted (gap
filling).  For each requested time the context is normalised and conditioned
once (:class:`xnp.infer.Predictor`); the targets are then predicted

* eagerly, in fixed-size chunks, when the target template is in memory, or
* lazily, one dask block at a time, when the template is dask-chunked (or
  ``chunks`` is given): the model, the conditioned state and the target
  coordinates enter the dask graph once, as one task every block depends on, so
  the default threaded scheduler and ``dask.distributed`` both ship them to each
  worker once.  ``.compute()`` or ``.to_zarr()`` then runs the blocks in parallel.

With ``context_radius`` every chunk (or block) conditions only on the context
within that great-circle distance (:meth:`xnp.infer.Predictor.predict`).

A multi-source model (fitted with ``context_sources``) takes further context from
``context_sources`` (e.g. stations next to a grid): the frames of each at the
context's times, each point tagged with its source, as in training.

A model trained on forecast tasks forecasts instead: for each initialisation
time (``time``) its context is the model's frames ending at that time (times
relative to it, as in training), and the targets are predicted ``lead_time``
hours ahead; the result is labelled with ``init_time``, ``lead_time`` and
``valid_time`` (the CF/climpred convention for forecasts).
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import dask
import dask.array as da
import jax
import numpy as np
import pandas as pd
import scipy.spatial
import xarray as xr

from xnp.arrays import Points
from xnp.data.batch import source_channels
from xnp.data.coords import _is_datetime, find_coords, locators_as_coords, source_dataset
from xnp.data.normalise import Normaliser, Stats
from xnp.data.points import PointSet, prediction_attrs, predictions_to_xarray, to_points
from xnp.data.tasks import ForecastTasks, WindowTasks
from xnp.data.times import match_hours, time_hours
from xnp.data.trend import DEGREES, Trend, rms_spread
from xnp.errors import (
    ConfigError,
    CoordinateError,
    DimensionError,
    EmptyDataError,
    XnpError,
    XnpWarning,
)
from xnp.geo.distance import EARTH_RADIUS_KM
from xnp.geo.sphere import great_circle_km, unit_vectors
from xnp.infer import Predictor, is_planar
from xnp.units import parse_distance_km

__all__ = ["predict"]


def _as_dataset(data: xr.Dataset | xr.DataArray, what: str) -> xr.Dataset:
    if isinstance(data, xr.DataArray):
        if data.name is None:
            return data.to_dataset(name="_xnp_values")
        return data.to_dataset()
    if not isinstance(data, xr.Dataset):
        hint = ""
        if isinstance(data, pd.DataFrame):
            hint = (
                " For a table of sites with latitude/longitude columns, use "
                "xr.Dataset.from_dataframe(df) (or a dict such as {'lat': ('site', "
                "df.lat.values), 'lon': ('site', df.lon.values)} for targets)."
            )
        raise ConfigError(
            f"{what} must be an xarray Dataset or DataArray; got {type(data).__name__}.{hint}"
        )
    return data


def _is_scalar(value: Any) -> bool:
    """A number or a 0-d array (or DataArray): one coordinate value."""
    if isinstance(value, int | float | np.number):
        return True
    return isinstance(value, np.ndarray | xr.DataArray) and value.ndim == 0


#: The dimension a dataset at a single place (scalar latitude/longitude) is given
#: for the flattening to points, which needs a spatial dimension.
_ONE_PLACE = "_xnp_place"


def _at_one_place(ds: xr.Dataset, names: Mapping[str, Any], variable: str | None = None
                  ) -> xr.Dataset | None:  # fmt: skip
    """``ds`` along a dimension of length one when it lies at a single place, else None.

    Data at one place (``ds.sel(lat=51, lon=0)``, one station of a (station, time)
    dataset at one time) have scalar latitude/longitude and no spatial
    dimension; their scalar variables (but times and a CF grid mapping) get the
    dimension ``_xnp_place`` of length one, which the caller squeezes away.
    """
    if variable is not None and ds[variable].ndim:
        return None
    scalar = {
        k: v.set_dims(_ONE_PLACE)
        for k, v in ds.variables.items()
        if v.ndim == 0 and "grid_mapping_name" not in v.attrs and not _is_datetime(v.values)
    }
    if not scalar:  # (a quick answer for the usual grids and station sets)
        return None
    try:
        layout = find_coords(ds, variable, **names)
    except XnpError:
        return None  # the flattening says what is missing
    if layout.point_dims or (variable is None and layout.time_dim in ds.dims):
        return None
    return ds.assign_coords({k: v for k, v in scalar.items() if k in ds.coords}).assign(
        {k: v for k, v in scalar.items() if k in ds.data_vars}
    )


@dataclasses.dataclass(frozen=True)
class _Template:
    """Where to predict: the target coordinates, and how to lay out the result.

    ``points`` holds the coordinates and the data variables the model reads at the
    targets (covariates); ``chunks`` are the dask chunks of the template's data
    (for a lazy result), over the dims of ``points``; ``order`` is the dimension
    order of its main data variable, which the result follows.
    """

    points: xr.Dataset
    chunks: dict[str, Any] = dataclasses.field(default_factory=dict)
    order: tuple[str, ...] = ()

    def arrange(self, out: xr.Dataset) -> xr.Dataset:
        """``out`` with the template's dims in the template variable's order (last).

        On a projected grid, each prediction names its CF grid mapping (the
        ``grid_mapping`` attribute), as the template's variables do.
        """
        mapping = [str(k) for k, v in out.coords.items() if "grid_mapping_name" in v.attrs]
        if len(mapping) == 1:
            for v in out.data_vars.values():
                v.attrs.setdefault("grid_mapping", mapping[0])
        own = [d for d in self.order if d in out.dims]
        if len(own) < 2 or tuple(d for d in out.dims if d in own) == tuple(own):
            return out
        return out.transpose(*[d for d in out.dims if d not in own], *own)


def _template(
    targets: Any,
    data: xr.Dataset,
    keep: Sequence[str] = (),
    names: Mapping[str, Any] | None = None,
) -> _Template:
    """The targets (or, for gap filling, ``data``) as a :class:`_Template`.

    Data variables are dropped, but for the model's covariates (``keep``; e.g. a
    land fraction on the target grid, or the elevation under any name the
    coordinate discovery knows), which are read at the targets.  Variables that
    locate the points (latitude/longitude or a CF grid mapping stored as data
    variables) become coordinates.  ``names`` are coordinate names recorded at fit
    time (see :func:`_names`).  A dict of coordinates makes a grid; scalar values
    are a grid of one point.
    """
    if isinstance(targets, Mapping) and not isinstance(targets, xr.Dataset):
        coords = {
            k: np.atleast_1d(np.asarray(v)) if _is_scalar(v) else v for k, v in targets.items()
        }
        try:
            return _Template(xr.Dataset(coords=coords))
        except (ValueError, TypeError) as err:
            raise ConfigError(
                f"cannot make target coordinates of the dict with keys {list(targets)}: {err}. "
                "Give 1-D arrays for a grid, e.g. {'lat': [50.0, 51.0], 'lon': [0.0, 1.0]}, "
                "or (dim, values) pairs of equal length for scattered sites, e.g. "
                "{'lat': ('site', [50.0, 51.0]), 'lon': ('site', [0.0, 1.0])}."
            ) from err
    src = data if targets is None else _as_dataset(targets, "targets")
    main = max(src.data_vars.values(), key=lambda v: v.ndim, default=None)
    src, layout = locators_as_coords(src, names)
    kept = list(keep)
    if "elevation" in keep and layout is not None and layout.elevation:
        kept.append(layout.elevation)
    tmpl = src.drop_vars([v for v in src.data_vars if v not in kept])
    chunks = {}
    if targets is not None:  # the chunks of the first chunked data variable, for the lazy path
        first = next((v.chunksizes for v in src.data_vars.values() if v.chunks), {})
        chunks = {d: c for d, c in first.items() if d in tmpl.dims}
    order = () if main is None else tuple(str(d) for d in main.dims)
    return _Template(tmpl, chunks, order)


def _points(ps: PointSet, model: Any, *, values: bool, t: Any = None, source: int = 0) -> Points:
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
class _Context:
    """One normalised context set; conditioned at most once, when first needed."""

    model: Any
    predictor: Predictor
    points: Points
    attrs: dict[str, dict]
    trend: Trend | None = None
    _state: Any = None

    def state(self) -> Any:
        if self._state is None:
            self._state = self.predictor.condition(self.points)
        return self._state


@dataclasses.dataclass(eq=False)
class _Payload:
    """What every dask block needs; enters the graph once.

    ``template`` holds the target coordinates only (in memory); the model's
    covariates that are data variables of the targets reach each block as that
    block's slice (numpy), so lazy covariates are read block by block, when the
    result is computed, and never at graph build.
    """

    predictor: Predictor
    state: Any
    template: xr.Dataset
    names: dict[str, Any]
    dims: tuple[str, ...]
    covariates: tuple[str, ...]
    template_attrs: dict[str, dict]
    context: Points | None
    radius_km: float | None
    model: Any
    t_target: float | None = None
    trend: Trend | None = None

    def block(self, *covariates: np.ndarray, block_info: dict | None = None) -> np.ndarray:
        """Predict one block of the targets → ``block shape + (2·Dy,)``.

        Places where a covariate is missing (NaN) get NaN, as in the eager path.
        """
        assert block_info is not None  # dask passes it: the block's place in the whole
        where = block_info[None]["array-location"][: len(self.dims)]
        shape = tuple(stop - start for start, stop in where)
        sub = self.template.isel(
            {d: slice(start, stop) for d, (start, stop) in zip(self.dims, where, strict=True)}
        )
        for name, values in zip(self.covariates, covariates, strict=True):
            sub[name] = xr.Variable(self.dims, values, self.template_attrs.get(name))  # units
        self.model.normaliser.check_covariate_units(sub, self.model.covariates, "targets")
        targets = to_points(sub, None, covariates=self.model.covariates, **self.names)
        out = np.full((int(np.prod(shape)), 2 * len(self.model.variables)), np.nan, np.float32)
        if len(targets):
            tgt = _points(targets, self.model, values=False, t=self.t_target)
            if self.radius_km is None:
                mean, std = self.predictor.predict_state(self.state, tgt)
            else:
                mean, std = self.predictor.predict(
                    self.context, tgt, context_radius_km=self.radius_km
                )
            mean, std = self.model.denormalise(mean, std)
            mean, std = mean[0], std[0]
            if self.trend is not None:
                mean, std = self.trend.add_to(targets.s, mean, std, _prior(self.model))
            out[targets.index] = np.concatenate([mean, std], axis=-1)
        return out.reshape(*shape, out.shape[-1])  # (not -1: a block may be empty)


def _lazy(
    payload: _Payload, lazy_covariates: Sequence[Any], targets: PointSet,
    chunks: Mapping[str, Any], attrs: Mapping,
) -> xr.Dataset:  # fmt: skip
    """The prediction as dask arrays, one task per block of the targets' chunks."""
    block_chunks = da.core.normalize_chunks(
        tuple(chunks.get(d, -1) for d in targets.dims), targets.shape, dtype=np.float32
    )
    args = [c.rechunk(block_chunks) for c in lazy_covariates]
    if not args:  # no covariate to read: the blocks come from a placeholder
        args = [da.empty(targets.shape, chunks=block_chunks, dtype=np.int8)]
        block = lambda _, payload, block_info=None: payload.block(block_info=block_info)  # noqa: E731
    else:
        block = lambda *a, payload, block_info=None: payload.block(*a, block_info=block_info)  # noqa: E731
    dy = len(payload.model.variables)
    out = da.map_blocks(
        block,
        *args,
        payload=dask.delayed(payload, pure=True),
        dtype=np.float32,
        new_axis=len(targets.dims),
        chunks=(*block_chunks, (2 * dy,)),
        meta=np.empty((0,) * (len(targets.dims) + 1), np.float32),
    )
    data = {}
    for j, name in enumerate(payload.model.variables):
        for k, kind in ((j, "mean"), (dy + j, "std")):
            data[f"{name}_{kind}"] = xr.DataArray(
                out[..., k], dims=targets.dims, coords=targets.coords,
                attrs=prediction_attrs(name, kind, attrs.get(name, {})),
            )  # fmt: skip
    return xr.Dataset(data, attrs=prediction_attrs(None, None, {}))


def _as_dask(covariate: xr.DataArray, dims: tuple[str, ...], shape: tuple[int, ...]) -> Any:
    """A covariate of the targets as a dask array over the targets' ``dims`` (broadcast).

    Lazy values stay lazy; in-memory ones are wrapped without a copy.
    """
    extra = [str(d) for d in covariate.dims if d not in dims]
    if extra:
        raise DimensionError(
            f"covariate {covariate.name!r} has dims {covariate.dims}, which are not all among "
            f"the targets' dims {dims}. Select along {extra} first."
        )
    own = [d for d in dims if d in covariate.dims]
    values = covariate.transpose(*own).data
    values = values if isinstance(values, da.Array) else da.from_array(np.asarray(values))
    # new axes for the target dims the covariate lacks, then broadcast (no copy)
    index = tuple(slice(None) if d in covariate.dims else None for d in dims)
    return da.broadcast_to(values[index], shape)


@dataclasses.dataclass(frozen=True)
class _Options:
    radius_km: float | None
    chunks: Mapping[str, Any]
    memory_budget: str | int
    progress: bool
    #: further context of a multi-source model: (source id, Dataset) pairs
    sources: tuple[tuple[int, xr.Dataset], ...] = ()
    #: "constant" / "linear": a zero-shot model interpolates the residuals of the
    #: context's GLS mean or plane
    trend: str | None = None


def _resolve_model(model: Any) -> Any:
    """A model object from a model, a saved model directory or a shipped model's name."""
    if isinstance(model, str | os.PathLike):
        from xnp.pretrained import resolve_model  # here: xnp.estimator imports this module

        return resolve_model(model)
    if not all(hasattr(model, a) for a in ("variables", "normaliser", "params_")):
        raise ConfigError(
            f"model must be a NeuralProcess (from fit, xnp.load or xnp.pretrained), a model "
            f"directory or a pretrained model's name; got {type(model).__name__}."
        )
    return model


def _check_chunks(chunks: Any, template: xr.Dataset) -> dict[str, Any]:
    """``chunks`` as a dict over the template's dims (an int applies to every dim)."""
    if chunks is None or (isinstance(chunks, Mapping) and not chunks):
        return {}
    dims = list(template.dims)
    if isinstance(chunks, int | np.integer) and not isinstance(chunks, bool):
        if chunks < 1 and chunks != -1:
            raise ConfigError(
                f"chunks={chunks!r}: give a positive number of points per block along each "
                "target dimension (or -1 for whole dimensions), or leave chunks out for an "
                "in-memory result."
            )
        return dict.fromkeys(dims, int(chunks))
    if not isinstance(chunks, Mapping):
        raise ConfigError(
            f"chunks must be a dict of target dimension to chunk size (e.g. {{'lat': 64}}) or "
            f"one int for every dimension; got {type(chunks).__name__}."
        )
    unknown = [d for d in chunks if d not in dims]
    if unknown:
        raise ConfigError(
            f"chunks names dimension(s) {unknown} that the targets do not have; their "
            f"dimensions are {dims}."
        )
    for d, c in chunks.items():
        sizes = c if isinstance(c, tuple) else (c,)
        ok = c is None or c == -1 or c == "auto"
        ok |= all(
            isinstance(n, int | np.integer) and not isinstance(n, bool) and n > 0 for n in sizes
        ) and (not isinstance(c, tuple) or sum(c) == template.sizes[d])
        if not ok:
            raise ConfigError(
                f"chunks[{d!r}] = {c!r} is not a chunk size: give a positive int (points per "
                f"block along {d!r}), -1 for the whole dimension, 'auto', or a tuple of "
                f"positive block sizes adding up to its length {template.sizes[d]}."
            )
    return dict(chunks)


def _select_times(data: xr.Dataset, layout: Any, time: Any) -> xr.Dataset:
    """``data`` at ``time`` (``.sel``), with an xnp error when a time is absent."""
    values = data[layout.time].values
    span = f"{values.min()} to {values.max()}" if values.size else "no time"
    try:
        out = data.sel({layout.time: time})
    except (KeyError, ValueError, TypeError) as err:
        raise CoordinateError(
            f"time {time!r} is not in the data, which covers {span} "
            f"({values.size} times); pick one of data.{layout.time}.values, or select "
            f"with method='nearest' first: data.sel({layout.time}=..., method='nearest')."
        ) from err
    if layout.time_dim in out.dims and out.sizes[layout.time_dim] == 0:
        raise EmptyDataError(f"no time of the data falls in {time!r}; the data covers {span}.")
    return out


def _check_sources(model: Any, sources: Mapping[str, Any] | None) -> tuple:
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
    layout = find_coords(src, model.variables[0], **_names(model, src))
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
    return _points(ps, model, values=True, t=t, source=source)


def _concat(parts: list[Points]) -> Points:
    """Points of a batch of one, concatenated along the point axis."""
    if len(parts) == 1:
        return parts[0]
    return jax.tree.map(lambda *a: np.concatenate([np.asarray(x) for x in a], axis=1), *parts)


def _context(model: Any, data: xr.Dataset, opts: _Options, *, reference: float | None = None
             ) -> _Context:  # fmt: skip
    """Check units, read and normalise the observations in ``data`` as one context set.

    With ``reference`` (hours since 1970), each point's time relative to it is
    the model's ``t`` (forecast context frames); otherwise ``t = 0``.
    """
    variables = list(model.variables)
    zero_shot = model.normalise == "context"
    for v in variables:
        if not zero_shot:
            model.normaliser.check_units(v, data[v].attrs.get("units"), "context")
    model.normaliser.check_covariate_units(data, model.covariates, "context")
    one = _at_one_place(data, _names(model, data), variables[0])  # a single observation
    try:
        ps = to_points(data if one is None else one, variables, covariates=model.covariates,
                       **_names(model, data))  # fmt: skip
    except EmptyDataError as err:
        if len(variables) < 2:
            raise
        counts = {v: int(data[v].count()) for v in variables}
        raise EmptyDataError(
            f"no context point has all of the model's variables {variables} observed "
            f"(observations: {counts}); each context point carries every variable, so "
            "this model needs places where all are observed at the same time."
        ) from err
    trend = None
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
                t = find_coords(data, v, **_names(model, data)).time
                when = "" if t is None else f" at {data[t].values}"
                raise EmptyDataError(
                    f"the context of {v!r}{when} has {f.size} observation(s), all equal: a "
                    "zero-shot model scales its prediction by the spread of the context "
                    "values, and there is none. Give at least two different observations, "
                    "or fit a model on your data."
                )
            attrs = data[v].attrs
            stats[v] = Stats(float(f.mean()), std, attrs.get("units"), attrs.get("long_name"))
        model = _at_working_size(model.with_normaliser(Normaliser(stats), variables), ps.s)
    t = None if reference is None else ps.time - reference
    predictor = Predictor(model.module, memory_budget=opts.memory_budget, progress=opts.progress)
    attrs = {v: dict(data[v].attrs) for v in variables}
    parts = [_points(ps, model, values=True, t=t)]
    if opts.sources:
        hours = np.unique(ps.time) if ps.has_time else None
        for source, src in opts.sources:
            more = _source_points(model, src, source, hours, reference)
            parts += [] if more is None else [more]
    points = _concat(parts)
    outside = _outside_grid(model, np.asarray(points.s[0]))
    if outside is not None and (outside & np.asarray(points.mask[0], bool)).any():
        warnings.warn(
            f"{int(outside.sum())} context point(s) lie outside the model's grid "
            f"({_extent_text(model)}) and are ignored.",
            XnpWarning,
            stacklevel=4,
        )
        points = points.replace(mask=points.mask & ~outside[None])
    return _Context(model, predictor, points, attrs, trend)


#: Bounds of the distance scale of :func:`_at_working_size`.
_SCALE_BOUNDS = (1.0 / 16.0, 16.0)


def _at_working_size(model: Any, s: np.ndarray) -> Any:
    """A zero-shot model that sees the context points ``s`` at its working size.

    A model may record ``training["context_rms_km"]``: the rms distance of a
    context's points from their centre (on the unit sphere, times the Earth's
    radius) at which it is most accurate.  Its distances are then rescaled
    (:meth:`~xnp.estimator.NeuralProcess.with_distance_scale`) so that every
    context has that size: the pretraining prior draws lengthscales relative to the
    region, so the task is the same at any size, but the attention bias resolves
    some distances better than others.  The scale is bounded to
    ``_SCALE_BOUNDS``; a context at a single place is left as it is.
    """
    size = (getattr(model, "training", None) or {}).get("context_rms_km")
    if not size or getattr(model.config, "spatial_bias", None) != "great_circle" or not len(s):
        return model
    rms_km = EARTH_RADIUS_KM * rms_spread(unit_vectors(np.asarray(s, np.float64)))
    if not rms_km > 0:
        return model
    return model.with_distance_scale(float(np.clip(rms_km / float(size), *_SCALE_BOUNDS)))


def _run(ctx: _Context, template: xr.Dataset, opts: _Options, *, t_target: float | None = None
         ) -> xr.Dataset:  # fmt: skip
    """Predict the points of ``template`` given ``ctx`` (eager, or lazy with chunks)."""
    model = ctx.model
    names = _names(model, template)
    one = _at_one_place(template, names)
    if one is not None:  # targets at a single place: a scalar prediction
        return _run(ctx, one, opts, t_target=t_target).squeeze(_ONE_PLACE)
    if opts.chunks:  # the covariates are read block by block, not here
        data_covariates = tuple(map(str, template.data_vars))  # all read at the targets
        light = template.drop_vars(list(data_covariates))
        # coordinates are read here, once (the blocks slice them and never compute)
        lazy_coords = [k for k, v in light.coords.items() if v.chunks is not None]
        if lazy_coords:
            values = dask.compute(*(light[k].variable for k in lazy_coords))
            light = light.assign_coords(dict(zip(lazy_coords, values, strict=True)))
        tgt_ps = to_points(light, None, **names)
    else:
        model.normaliser.check_covariate_units(template, model.covariates, "targets")
        tgt_ps = to_points(template, None, covariates=model.covariates, **names)
    _warn_far_targets(model, ctx.points, tgt_ps)
    if opts.radius_km is not None:
        _check_within_radius(model, ctx.points, tgt_ps, opts.radius_km)
    outside = _outside_grid(model, tgt_ps.s)
    if outside is not None and outside.any():
        raise ConfigError(
            f"{int(outside.sum())} of {len(tgt_ps)} target points lie outside the model's grid "
            f"({_extent_text(model)}), where a Swin-TNP fitted on a regional domain has no "
            "pseudo-tokens; select targets inside it (e.g. targets.sel(lat=slice(...), "
            "lon=slice(...))) or fit on data covering them."
        )
    if opts.chunks:
        state = None if opts.radius_km is not None else ctx.state()
        attrs = {c: dict(template[c].attrs) for c in data_covariates}
        payload = _Payload(ctx.predictor, state, light, names, tgt_ps.dims, data_covariates,
                           attrs, ctx.points, opts.radius_km, model, t_target,
                           ctx.trend)  # fmt: skip
        lazy = [_as_dask(template[c], tgt_ps.dims, tgt_ps.shape) for c in data_covariates]
        return _lazy(payload, lazy, tgt_ps, opts.chunks, ctx.attrs)
    if not len(tgt_ps):  # every target lacks a covariate: NaN, as in the lazy path
        empty = np.full((len(tgt_ps), len(model.variables)), np.nan, np.float32)
        return predictions_to_xarray(tgt_ps, empty, empty, list(model.variables),
                                     attrs=ctx.attrs)  # fmt: skip
    targets = _points(tgt_ps, model, values=False, t=t_target)
    if opts.radius_km is None:
        mean, std = ctx.predictor.predict_state(ctx.state(), targets)
    else:
        mean, std = ctx.predictor.predict(ctx.points, targets, context_radius_km=opts.radius_km)
    mean, std = model.denormalise(mean, std)  # float32, as the model and the lazy path
    mean, std = mean[0], std[0]
    if ctx.trend is not None:
        mean, std = ctx.trend.add_to(tgt_ps.s, mean, std, _prior(model))
    return predictions_to_xarray(tgt_ps, mean.astype(np.float32), std.astype(np.float32),
                                 list(model.variables), attrs=ctx.attrs)  # fmt: skip


def _prior(model: Any) -> np.ndarray:
    """The spread ``[Dy]`` by which each variable's context was standardised."""
    return np.array([model.normaliser.stats[v].std for v in model.variables])


def _outside_grid(model: Any, s: np.ndarray) -> np.ndarray | None:
    """Which points ``[N, 2]`` (lat, lon) lie outside a regional pseudo-token grid.

    None for models without a grid (BSA-TNP).  Without this
    check a Swin-TNP would put such points on its edge cells, silently.
    """
    cfg = getattr(model, "config", None)
    if getattr(cfg, "geometry", None) != "sphere" or not len(s):
        return None
    (lat0, lat1), (lon0, lon1) = cfg.extent
    outside = (s[:, 0] < lat0) | (s[:, 0] > lat1)
    if not cfg.wrap[1]:
        outside |= (s[:, 1] - lon0) % 360.0 > lon1 - lon0  # either longitude convention
    return outside


def _extent_text(model: Any) -> str:
    (lat0, lat1), (lon0, lon1) = model.config.extent
    return f"latitude {lat0:.2f} to {lat1:.2f}, longitude {lon0:.2f} to {lon1:.2f}"


#: Targets checked against ``max_distance_km`` (a regular subsample beyond this many).
_FAR_CHECK_POINTS = 20_000


def _nearest_context_km(context: Points, s: np.ndarray) -> np.ndarray:
    """Great-circle distance (km) from each lat/lon in ``s`` to the nearest valid context point."""
    mask = np.asarray(context.mask[0], bool)
    tree = scipy.spatial.cKDTree(unit_vectors(np.asarray(context.s[0])[mask]))
    chord, _ = tree.query(unit_vectors(s), k=1)
    return great_circle_km(chord)


def _warn_far_targets(model: Any, context: Points, targets: PointSet) -> None:
    """Warn when targets lie farther from the context than the model was trained for.

    A model may record ``training["max_distance_km"]``: the largest distance from a
    target to the context points in its training tasks (the pretrained zero-shot
    models do).  Beyond it the model extrapolates, and its uncertainty is not to
    be trusted (it does not grow to the field's variance as a GP's would).
    """
    limit = (getattr(model, "training", None) or {}).get("max_distance_km")
    if not limit or not len(targets):
        return
    n = len(targets)
    stride = -(-n // _FAR_CHECK_POINTS)  # a regular subsample of large target sets
    km = _nearest_context_km(context, targets.s[::stride])
    far = int(np.sum(km > limit))
    if far:
        share = f"{far} of {n}" if stride == 1 else f"about {far / km.size:.0%} of the {n:,}"
        warnings.warn(
            f"{share} target points lie more than {limit:,.0f} km from every "
            f"context point (farthest {km.max():,.0f} km), farther than this model was "
            "trained to predict: there it extrapolates and its standard deviation is too "
            "small. Restrict the targets to the observed region or fit a model.",
            XnpWarning,
            stacklevel=4,
        )


def _check_within_radius(model: Any, context: Points, targets: PointSet, radius_km: float
                         ) -> None:  # fmt: skip
    """Refuse, before any work, targets with no context point within ``context_radius``.

    Regional prediction conditions each target chunk on the context within the
    radius; a target with none there has nothing to condition on.  Checked for
    every target up front, so that the answer does not depend on how the targets
    are chunked (eager or lazy) and a lazy computation cannot fail half-way.
    """
    if is_planar(model.config):
        return  # the regional plan says that context_radius does not apply
    if not len(targets) or not np.asarray(context.mask[0]).any():
        return
    km = _nearest_context_km(context, targets.s)
    far = km > radius_km
    if far.any():
        worst = int(np.argmax(km))
        raise EmptyDataError(
            f"{int(far.sum()):,} of {len(targets):,} target points have no context point "
            f"within context_radius={radius_km:g} km (the farthest, at lat "
            f"{targets.lat[worst]:.2f}, lon {targets.lon[worst]:.2f}, is {km[worst]:,.0f} km "
            "from the nearest): regional prediction has nothing to condition them on. "
            f"Increase context_radius (to at least {np.ceil(km.max()):,.0f} km), restrict "
            "the targets to the observed region, or predict without context_radius."
        )


def _one_time(model: Any, data: xr.Dataset, template: xr.Dataset, opts: _Options) -> xr.Dataset:
    out = _run(_context(model, data, opts), template, opts)
    if opts.trend is not None:
        out.attrs["xnp_trend"] = f"{opts.trend}: {_TREND_NOTES[opts.trend]}"
    return out


#: Provenance of a prediction made with ``trend=`` (after the trend's name).
_TREND_NOTES = {
    name: f"the context's {what}, estimated by generalised least squares under a fixed "
    "exponential covariance, was removed before the model and added back; where the "
    "observations leave the field unexplained the prediction reverts to it, and its "
    "estimation variance joins the variance in the same share"
    for name, what in (("constant", "mean"), ("linear", "plane (tangent plane at its centre)"))
}


def _names(model: Any, data: xr.Dataset) -> dict[str, Any]:
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


def predict(
    model: Any,
    data: xr.Dataset | xr.DataArray,
    targets: xr.Dataset | xr.DataArray | Mapping[str, Any] | None = None,
    *,
    time: Any = None,
    lead_time: Any = None,
    context_radius: str | float | None = None,
    chunks: Mapping[str, int] | int | None = None,
    memory_budget: str | int = "1GiB",
    progress: bool = False,
    context_sources: Mapping[str, xr.Dataset | xr.DataArray] | None = None,
    trend: str | None = None,
) -> xr.Dataset:
    """Predictive mean and standard deviation of ``model``'s variables at ``targets``.

    Parameters
    ----------
    model : NeuralProcess, path or str
        A fitted (or loaded) model, a saved model's directory, or the name of a
        pretrained model (:func:`xnp.available_pretrained`).  A zero-shot model
        standardises each context set by its own statistics and, if it records a
        working size (``training["context_rms_km"]``, as ``gp-sphere`` does), sees
        each context's distances rescaled to it
        (:meth:`~xnp.estimator.NeuralProcess.with_distance_scale`).
    data : Dataset or DataArray
        Observations used as context (missing values are skipped); never modified.
        An unnamed DataArray is taken as the model's (single) variable.
    targets : Dataset, DataArray or dict of coordinates, optional
        Where to predict.  Default: every point of ``data`` (gap filling).
        A dask-chunked template gives a lazy result.  A dict of 1-D coordinates
        is a grid (scalars: a grid of one point).  A scalar time coordinate of the
        template is ignored (predictions carry the context's time); a time
        dimension selects the times to predict.  Its data variables are ignored,
        except the model's covariates (e.g. a land fraction on the target grid),
        which are read at the targets.
    time : optional
        Time(s) to predict, selected from ``data`` with ``.sel``; default all.
        For a forecast model these are the initialisation times: the context is
        the model's frames up to and including each of them.
    lead_time : optional
        Forecast models only: hours after ``time`` to predict (a number of
        hours, a timedelta, a string such as ``"6h"``, or a list of them).
        Default: the lead the model was trained for.
    context_radius : str or float, optional
        E.g. ``"500km"``: each chunk conditions only on context within that
        great-circle distance.
    chunks : dict or int, optional
        Dask chunks of the target dims, e.g. ``{"lat": 64}`` (an int: every
        dim); makes the result lazy even for an in-memory template.
    memory_budget : str or int
        Memory a chunk of targets may use (sets the chunk size).
    progress : bool
        Progress bar over chunks (eager path).
    context_sources : dict of name to Dataset, optional
        Multi-source models: further observations under the names the model was
        fitted with (see :func:`xnp.api.fit`); their frames at the context's
        times join the context.  Sources left out simply add nothing.
    trend : {None, "constant", "linear"}
        Zero-shot models only: the context's large-scale mean, estimated before
        the model sees the values (:class:`xnp.data.trend.Trend`), per context
        set (each time; all of it, also with ``context_radius``).  ``None``: the
        model standardises the context by its plain mean, which it predicts far
        from the observations.  ``"constant"``: the mean is estimated by
        generalised least squares, with dense clusters of stations down-weighted
        as in ordinary kriging, and the prediction reverts to it where the
        observations leave the field unexplained.  ``"linear"``: a plane (on the
        sphere, in the tangent plane at the context's centre), as universal
        kriging's drift, for fields with a large-scale gradient (temperature
        across a region); the model interpolates the residuals, and the plane is
        added back.  Either way the variance of the estimate is added to the
        predictive variance in the share the observations leave.  Recommended for
        station networks with gaps (coasts, mountains); on evenly observed
        stationary fields with short correlation lengths the plane costs a little
        accuracy (see the benchmarks).

    Returns
    -------
    xr.Dataset
        ``{variable}_mean`` and ``{variable}_std`` (float32) on the target coordinates (and
        ``time``), with ``units``, ``long_name`` and provenance attributes.  For a
        forecast model: on ``init_time`` and ``lead_time`` (dimensions, or scalar
        coordinates when ``time``/``lead_time`` are scalars), with the
        ``valid_time = init_time + lead_time`` coordinate.
    """
    model = _resolve_model(model)
    if trend is not None and trend not in DEGREES:
        raise ConfigError(f"trend must be None, 'constant' or 'linear'; got {trend!r}.")
    if trend is not None and getattr(model, "normalise", "fitted") != "context":
        raise ConfigError(
            "trend= is for zero-shot models, which standardise each context set by its own "
            "statistics; a fitted model learned the large-scale structure of its training "
            "data. Predict without trend=."
        )
    if isinstance(data, xr.DataArray) and data.name is None and len(model.variables) == 1:
        data = data.rename(model.variables[0])  # an unnamed array holds the model's variable
    data = _as_dataset(data, "data")
    if getattr(model, "normalise", "fitted") == "context":
        located, _ = locators_as_coords(data, getattr(model, "coords", None))
        model = _zero_shot_variable(model, located)
    missing = [v for v in model.variables if v not in data.data_vars]
    if missing:
        raise ConfigError(
            f"the context has no variable {missing}; the model predicts {list(model.variables)} "
            f"and the data holds {list(data.data_vars)}."
        )
    where = _template(targets, data, tuple(getattr(model, "covariates", None) or ()),
                      getattr(model, "coords", None))  # fmt: skip
    template = where.points
    # the user's chunks, else those of a dask-backed template
    chunks = _check_chunks(chunks, template) or _check_chunks(where.chunks, template)
    radius_km = None if context_radius is None else parse_distance_km(context_radius)
    opts = _Options(radius_km, chunks, memory_budget, progress,
                    _check_sources(model, context_sources), trend)  # fmt: skip
    layout = find_coords(data, model.variables[0], **_names(model, data))
    task = getattr(model, "task", None)
    task = task.task if isinstance(task, WindowTasks) else task
    if isinstance(task, ForecastTasks):
        return where.arrange(
            _forecast(model, data, template, task, layout, opts, time=time, lead_time=lead_time)
        )
    if lead_time is not None:
        raise ConfigError(
            "lead_time is for forecast models; this model interpolates at the context's "
            "own time. Select times with `time=`."
        )
    return where.arrange(predict_each_time(
        data, template, layout, time,
        lambda frame, tmpl: _one_time(model, frame, tmpl, opts), require=model.variables,
    ))  # fmt: skip


def predict_each_time(
    data: xr.Dataset,
    template: xr.Dataset,
    layout: Any,
    time: Any,
    one_time: Callable[[xr.Dataset, xr.Dataset], xr.Dataset],
    *,
    require: Sequence[str] = (),
) -> xr.Dataset:
    """``one_time(frame, template at its time)`` for each selected time, concatenated.

    The time logic shared by :func:`predict` and the baselines: ``time`` selects
    frames of ``data`` (``.sel``; by default the times of a template with a time
    dimension, else all); each prediction carries its frame's time (a scalar time
    of the template is replaced).  Frames of a time series with no observation
    of any of ``require`` raise :class:`~xnp.errors.EmptyDataError`.
    """
    if layout.time is None:
        if time is not None:
            raise ConfigError(
                f"time={time!r} selects times, but the context has no time coordinate: it is "
                "one moment. Drop time=, or give a context with a time coordinate."
            )
        return one_time(data, template)
    tmpl_time = find_coords(template).time if template.data_vars or template.coords else None
    if layout.time_dim is None:  # a single frame with a scalar time: keep its label
        if data[layout.time].ndim:
            raise ConfigError(
                f"the context has one time per observation ({layout.time!r} along "
                f"{data[layout.time].dims}), not a time axis; predictions are made from the "
                "observations of one time. Give the observations a time dimension, e.g. "
                "(time, station), or select a window and drop the per-point times: "
                f"data.drop_vars({layout.time!r})."
            )
        if time is not None:
            _select_times(data.set_coords(layout.time).expand_dims(layout.time), layout, time)
        return one_time(data, _at_time(template, data, layout, tmpl_time))
    if time is None and tmpl_time is not None and tmpl_time in template.dims:
        time = template[tmpl_time].values  # the template asks for these times
    data_t = data if time is None else _select_times(data, layout, time)
    if layout.time_dim not in data_t.dims:  # one time selected
        return one_time(data_t, _at_time(template, data_t, layout, tmpl_time))
    results = []
    for i in range(data_t.sizes[layout.time_dim]):
        frame = data_t.isel({layout.time_dim: i})
        if require and all(int(frame[v].count()) == 0 for v in require):
            raise EmptyDataError(
                f"no observation of {list(require)} at time "
                f"{frame[layout.time].values}; drop that time or choose another."
            )
        results.append(one_time(frame, _at_time(template, frame, layout, tmpl_time)))
    return xr.concat(results, dim=layout.time_dim)


def _zero_shot_variable(model: Any, data: xr.Dataset) -> Any:
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


def _lead_hours(lead_time: Any) -> tuple[np.ndarray, bool]:
    """Lead times in hours (float64) and whether a scalar was given."""
    scalar = np.ndim(lead_time) == 0 and not isinstance(lead_time, list | tuple)
    values = [lead_time] if scalar else list(lead_time)
    hours = []
    for v in values:
        if isinstance(v, np.timedelta64):  # (a numpy integer subclass: test it first)
            hours.append(float(v / np.timedelta64(1, "h")) if not np.isnat(v) else np.nan)
            continue
        if isinstance(v, int | float | np.integer | np.floating) and not isinstance(v, bool):
            hours.append(float(v))
            continue
        try:
            hours.append(pd.to_timedelta(v).total_seconds() / 3600.0)
        except (ValueError, TypeError) as err:
            raise ConfigError(
                f"cannot read lead_time {v!r}; give hours as a number, a timedelta or a "
                "string such as '6h'."
            ) from err
    hours = np.asarray(hours, np.float64)
    if hours.size == 0 or not np.isfinite(hours).all():
        raise ConfigError(f"lead_time must be finite hours; got {lead_time!r}.")
    return hours, scalar


def _add_hours(t: Any, hours: float) -> Any:
    """``t + hours`` for a numpy datetime64 or a cftime datetime."""
    if isinstance(t, np.datetime64):
        return t.astype("datetime64[ns]") + np.timedelta64(round(hours * 3.6e12), "ns")
    return t + datetime.timedelta(hours=hours)


def _forecast(
    model: Any,
    data: xr.Dataset,
    template: xr.Dataset,
    task: ForecastTasks,
    layout: Any,
    opts: _Options,
    *,
    time: Any,
    lead_time: Any,
) -> xr.Dataset:
    """Forecasts from each initialisation time: context frames up to it, targets ahead."""
    if layout.time is None or layout.time_dim is None:
        raise ConfigError(
            "this model forecasts from past frames, but the context data has no time "
            "dimension; give observations over time (the model needs "
            f"{task.frames} frames {task.step:g} h apart)."
        )
    times = data[layout.time].values
    hours = time_hours(times)
    leads, scalar_lead = _lead_hours(task.lead if lead_time is None else lead_time)
    if (leads > task.lead).any():
        warnings.warn(
            f"lead_time {leads.max():g} h is beyond the {task.lead:g} h the model was trained "
            "for; its temporal attention extrapolates and the forecast may be poor.",
            XnpWarning,
            stacklevel=3,
        )
    frames = np.stack([match_hours(hours, hours + o) for o in task.offsets], axis=1)
    scalar_init = False
    if time is None:
        inits = np.flatnonzero((frames >= 0).all(axis=1))
        if inits.size == 0:
            raise EmptyDataError(
                f"no time in the data has the {task.frames} context frames {task.step:g} h "
                f"apart the model needs (the data has {hours.size} times)."
            )
    else:
        chosen = _select_times(data[[layout.time]], layout, time)[layout.time]
        scalar_init = chosen.ndim == 0  # a label, not a list, slice or day of times
        wanted = np.atleast_1d(chosen.values)
        inits = match_hours(hours, time_hours(wanted))
        for i, t in zip(inits, wanted, strict=True):
            if i < 0 or (frames[i] < 0).any():
                raise EmptyDataError(
                    f"cannot forecast from {t}: the model needs {task.frames} context frames "
                    f"{task.step:g} h apart ending at it, and the data lacks some of them."
                )
    spatial = template.drop_dims([d for d in (layout.time_dim,) if d in template.dims]).drop_vars(
        [layout.time], errors="ignore"
    )
    lead_index = pd.Index(pd.to_timedelta(leads, unit="h"), name="lead_time")
    results = []
    for i in inits:
        window = data.isel({layout.time_dim: frames[i]})
        if all(int(window[v].count()) == 0 for v in model.variables):
            raise EmptyDataError(
                f"no observation of {list(model.variables)} in the context frames ending "
                f"at {times[i]}; choose another init time."
            )
        ctx = _context(model, window, opts, reference=float(hours[i]))
        per_lead = []
        for lead in leads:
            tmpl = spatial.assign_coords({layout.time: _add_hours(times[i], float(lead))})
            out = _run(ctx, tmpl, opts, t_target=float(lead))
            per_lead.append(out.drop_vars(layout.time, errors="ignore"))
        results.append(xr.concat(per_lead, dim=lead_index).expand_dims(init_time=[times[i]]))
    return forecast_layout(results, leads, scalar_init=scalar_init, scalar_lead=scalar_lead)


def forecast_layout(
    results: list[xr.Dataset], leads: np.ndarray, *, scalar_init: bool, scalar_lead: bool
) -> xr.Dataset:
    """Concatenate per-init-time forecasts (each on ``lead_time``) and label them.

    Adds ``valid_time = init_time + lead_time`` and long names; squeezes
    ``init_time``/``lead_time`` to scalar coordinates when asked for a scalar.
    Shared by forecast models and the persistence baseline.
    """
    out = xr.concat(results, dim="init_time")
    valid = np.array([[_add_hours(t, float(h)) for h in leads] for t in out.init_time.values])
    out = out.assign_coords(valid_time=(("init_time", "lead_time"), valid))
    out["init_time"].attrs.update(long_name="forecast initialisation time (last context frame)")
    out["lead_time"].attrs.update(long_name="forecast lead time")
    out["valid_time"].attrs.update(long_name="time the forecast is valid for")
    if scalar_lead:
        out = out.squeeze("lead_time")
    if scalar_init:
        out = out.squeeze("init_time")
    return out


def _at_time(template: xr.Dataset, frame: xr.Dataset, layout: Any, tmpl_time: Any) -> xr.Dataset:
    """The target template at the frame's time (selected, or set as a scalar coord).

    A scalar time of the template (e.g. ``ds.isel(time=0)`` used as a grid) is
    replaced: the prediction is for the context's time and is labelled so.
    """
    t = frame[layout.time].values
    if tmpl_time is not None and tmpl_time in template.dims:
        try:
            return template.sel({tmpl_time: t})
        except KeyError as err:
            raise CoordinateError(
                f"the target template has a {tmpl_time!r} dimension without the time {t}; "
                "give targets without a time dimension (one grid for every time), or with "
                "the times to predict."
            ) from err
    # the template's scalar times (its time, and others such as a valid_time) would
    # label every prediction with the template's moment: dropped
    scalar_times = [
        str(k) for k, v in template.coords.items() if v.ndim == 0 and _is_datetime(v.values)
    ]
    return template.drop_vars(scalar_times).assign_coords({layout.time: t})
