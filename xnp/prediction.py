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
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import dask
import dask.array as da
import numpy as np
import xarray as xr

from xnp.data.coords import find_coords
from xnp.data.points import PointSet, prediction_attrs, predictions_to_xarray, to_points
from xnp.data.tasks import ForecastTasks
from xnp.errors import ConfigError, EmptyDataError
from xnp.infer import Predictor, parse_distance_km
from xnp.points import Points

__all__ = ["predict"]


def _as_dataset(data: xr.Dataset | xr.DataArray, what: str) -> xr.Dataset:
    if isinstance(data, xr.DataArray):
        if data.name is None:
            return data.to_dataset(name="_xnp_values")
        return data.to_dataset()
    if not isinstance(data, xr.Dataset):
        raise ConfigError(f"{what} must be an xarray Dataset or DataArray; got {type(data)}.")
    return data


def _template(targets: Any, data: xr.Dataset) -> xr.Dataset:
    """The target coordinates as a Dataset (data variables dropped)."""
    if targets is None:
        return data.drop_vars(list(data.data_vars))
    if isinstance(targets, Mapping) and not isinstance(targets, xr.Dataset):
        return xr.Dataset(coords=dict(targets))
    tmpl = _as_dataset(targets, "targets")
    # keep the chunks of the first data variable, if any, for the lazy path
    chunks = next((v.chunksizes for v in tmpl.data_vars.values() if v.chunks), None)
    tmpl = tmpl.drop_vars(list(tmpl.data_vars))
    return tmpl.assign_attrs(_xnp_chunks=dict(chunks)) if chunks else tmpl


def _points(ps: PointSet, model: Any, *, values: bool) -> Points:
    """Normalised, batch-of-one :class:`Points` of a point set (spatial task: t = 0)."""
    x = model.normaliser.transform(ps.x, ps.covariates) if ps.covariates else ps.x
    n = len(ps)
    f = model.normaliser.transform(ps.f, ps.variables) if values else None
    return Points.from_arrays(
        s=ps.s[None],
        x=np.asarray(x, np.float32).reshape(1, n, -1),
        f=None if f is None else np.asarray(f, np.float32)[None],
        dim_y=len(model.variables),
    )


@dataclasses.dataclass(eq=False)
class _Payload:
    """What every dask block needs; enters the graph once."""

    predictor: Predictor
    state: Any
    targets: PointSet
    context: Points | None
    radius_km: float | None
    model: Any

    def block(self, index: np.ndarray) -> np.ndarray:
        """Predict the targets ``index`` (any shape) → ``index.shape + (2·Dy,)``."""
        flat = index.ravel()
        out = np.full((flat.size, 2 * len(self.model.variables)), np.nan, np.float32)
        if flat.size:
            tgt = _points(self.targets.take(flat), self.model, values=False)
            if self.radius_km is None:
                mean, std = self.predictor.predict_state(self.state, tgt)
            else:
                mean, std = self.predictor.predict(
                    self.context, tgt, context_radius_km=self.radius_km
                )
            mean, std = self.model.denormalise(mean, std)
            out = np.concatenate([mean[0], std[0]], axis=-1).astype(np.float32)
        return out.reshape(*index.shape, -1)


def _lazy(
    payload: _Payload, targets: PointSet, chunks: Mapping[str, Any], attrs: Mapping
) -> xr.Dataset:
    block_chunks = tuple(chunks.get(d, -1) for d in targets.dims)
    index = da.from_array(np.arange(int(np.prod(targets.shape))).reshape(targets.shape),
                          chunks=block_chunks)  # fmt: skip
    dy = len(payload.model.variables)
    shipped = dask.delayed(payload, pure=True)
    out = da.map_blocks(
        lambda idx, payload: payload.block(idx),
        index,
        payload=shipped,
        dtype=np.float32,
        new_axis=index.ndim,
        chunks=(*index.chunks, (2 * dy,)),
        meta=np.empty((0,) * (index.ndim + 1), np.float32),
    )
    data = {}
    for j, name in enumerate(payload.model.variables):
        for k, kind in ((j, "mean"), (dy + j, "std")):
            data[f"{name}_{kind}"] = xr.DataArray(
                out[..., k], dims=targets.dims, coords=targets.coords,
                attrs=prediction_attrs(name, kind, attrs.get(name, {})),
            )  # fmt: skip
    return xr.Dataset(data, attrs=prediction_attrs(None, None, {}))


def _one_time(
    model: Any,
    data: xr.Dataset,
    template: xr.Dataset,
    *,
    radius_km: float | None,
    chunks: Mapping[str, Any] | None,
    memory_budget: str | int,
    progress: bool,
) -> xr.Dataset:
    variables = list(model.variables)
    for v in variables:
        model.normaliser.check_units(v, data[v].attrs.get("units"), "context")
    ctx_ps = to_points(data, variables, covariates=model.covariates, **_names(model))
    tgt_ps = to_points(template, None, covariates=model.covariates, **_names(model))
    context = _points(ctx_ps, model, values=True)
    predictor = Predictor(model.module, memory_budget=memory_budget, progress=progress)
    attrs = {v: dict(data[v].attrs) for v in variables}
    if chunks:
        state = None if radius_km is not None else predictor.condition(context)
        payload = _Payload(predictor, state, tgt_ps, context, radius_km, model)
        return _lazy(payload, tgt_ps, chunks, attrs)
    mean, std = predictor.predict(
        context, _points(tgt_ps, model, values=False), context_radius_km=radius_km
    )
    mean, std = model.denormalise(mean, std)
    return predictions_to_xarray(tgt_ps, mean[0], std[0], variables, attrs=attrs)


def _names(model: Any) -> dict[str, Any]:
    """Explicit coordinate names recorded at fit time (lat/lon/elevation), if any."""
    coords = getattr(model, "coords", {}) or {}
    return {k: coords[k] for k in ("lat", "lon", "elevation") if isinstance(coords.get(k), str)}


def predict(
    model: Any,
    data: xr.Dataset | xr.DataArray,
    targets: xr.Dataset | xr.DataArray | Mapping[str, Any] | None = None,
    *,
    time: Any = None,
    context_radius: str | float | None = None,
    chunks: Mapping[str, int] | None = None,
    memory_budget: str | int = "1GiB",
    progress: bool = False,
) -> xr.Dataset:
    """Predictive mean and standard deviation of ``model``'s variables at ``targets``.

    Parameters
    ----------
    model : NeuralProcess
        A fitted (or loaded) model.
    data : Dataset or DataArray
        Observations used as context (missing values are skipped); never modified.
    targets : Dataset, DataArray or dict of coordinates, optional
        Where to predict.  Default: every point of ``data`` (gap filling).
        A dask-chunked template gives a lazy result.
    time : optional
        Time(s) to predict, selected from ``data`` with ``.sel``; default all.
    context_radius : str or float, optional
        E.g. ``"500km"``: each chunk conditions only on context within that
        great-circle distance.
    chunks : dict, optional
        Dask chunks of the target dims, e.g. ``{"lat": 64}``; makes the result
        lazy even for an in-memory template.
    memory_budget : str or int
        Memory a chunk of targets may use (sets the chunk size).
    progress : bool
        Progress bar over chunks (eager path).

    Returns
    -------
    xr.Dataset
        ``{variable}_mean`` and ``{variable}_std`` on the target coordinates (and
        ``time``), with ``units``, ``long_name`` and provenance attributes.
    """
    if isinstance(getattr(model, "task", None), ForecastTasks):
        raise ConfigError(
            "this model was trained on forecast tasks; prediction for forecast models "
            "(init_time/lead_time/valid_time) is not available yet — fit with spatial "
            "tasks to interpolate."
        )
    data = _as_dataset(data, "data")
    missing = [v for v in model.variables if v not in data.data_vars]
    if missing:
        raise ConfigError(
            f"the context has no variable {missing}; the model predicts {list(model.variables)} "
            f"and the data holds {list(data.data_vars)}."
        )
    template = _template(targets, data)
    chunks = dict(chunks or template.attrs.pop("_xnp_chunks", {}) or {})
    radius_km = None if context_radius is None else parse_distance_km(context_radius)
    kwargs = {"radius_km": radius_km, "chunks": chunks, "memory_budget": memory_budget,
              "progress": progress}  # fmt: skip

    layout = find_coords(data, model.variables[0], **_names(model))
    if layout.time is None or layout.time_dim is None:
        return _one_time(model, data, template, **kwargs)
    data_t = data if time is None else data.sel({layout.time: time})
    tmpl_time = find_coords(template).time if template.data_vars or template.coords else None
    if layout.time_dim not in data_t.dims:  # one time selected
        return _one_time(model, data_t, _at_time(template, data_t, layout, tmpl_time), **kwargs)
    results = []
    for i in range(data_t.sizes[layout.time_dim]):
        frame = data_t.isel({layout.time_dim: i})
        if all(int(frame[v].count()) == 0 for v in model.variables):
            raise EmptyDataError(
                f"no observation of {list(model.variables)} at time "
                f"{frame[layout.time].values}; drop that time or choose another."
            )
        results.append(_one_time(model, frame, _at_time(template, frame, layout, tmpl_time),
                                 **kwargs))  # fmt: skip
    return xr.concat(results, dim=layout.time_dim)


def _at_time(template: xr.Dataset, frame: xr.Dataset, layout: Any, tmpl_time: Any) -> xr.Dataset:
    """The target template at the frame's time (selected, or added as a scalar coord)."""
    t = frame[layout.time].values
    if tmpl_time is not None and tmpl_time in template.dims:
        return template.sel({tmpl_time: t})
    if tmpl_time is None:
        return template.assign_coords({layout.time: t})
    return template
