"""Forecasting by persistence: :class:`Persistence`.

The last observation before the forecast is issued, with a std from the
history of changes over the same lag.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr
from scipy.spatial import cKDTree

from xnp.baselines.base import as_dataset, as_variable_names, label_source, variables_to_predict
from xnp.data.coords import find_coords, latlon
from xnp.data.flatten import PointSet, predictions_to_xarray, to_points
from xnp.data.times import match_hours, time_hours
from xnp.errors import ConfigError, CoordinateError, DimensionError, EmptyDataError
from xnp.geo.sphere import unit_vectors
from xnp.prediction.forecast import add_hours, forecast_layout, lead_hours
from xnp.prediction.frames import at_time
from xnp.prediction.templates import template_of

__all__ = ["Persistence"]


class Persistence:
    """Forecast by persistence: the last observation before the forecast is issued.

    The prediction for a place is the most recent observation, at or before the
    time the forecast is issued, of the nearest observed place (great-circle; the
    place itself when it has been observed).  Its std is the root-mean-square
    change of that place's series over the same lag, ``sqrt(mean (x(τ + L) −
    x(τ))²)`` over all pairs of observations ``L`` hours apart known when the
    forecast is issued, where ``L`` is the time from the persisted observation to
    the valid time.  Without such pairs at that place the changes of every place
    are pooled; without any, the std is ``√2`` times the std of the history (the
    long-lag limit for a stationary series).  Lag 0 (a valid time that is
    observed, without ``lead_time``) has std 0.

    Parameters
    ----------
    variables : str or list of str, optional
        Variables to predict; default every data variable (except elevation).

    Examples
    --------
    >>> import numpy as np, xarray as xr
    >>> times = np.array(["2020-01-01T00", "2020-01-01T06", "2020-01-01T12"], "datetime64[ns]")
    >>> obs = xr.Dataset(
    ...     {"t": (("time", "station"), [[0.0], [1.0], [3.0]])},
    ...     coords={"time": times, "lat": ("station", [0.0]), "lon": ("station", [0.0])},
    ... )
    >>> pred = Persistence().predict(obs, time=times[-1], lead_time="6h")
    >>> pred.t_mean.values.tolist(), pred.t_std.values.round(3).tolist()
    ([3.0], [1.581])
    >>> str(pred.valid_time.values)
    '2020-01-01T18:00:00.000000000'
    """

    name = "persistence"

    def __init__(self, *, variables: str | Sequence[str] | None = None) -> None:
        self.variables = as_variable_names(variables)

    def predict(
        self,
        data: xr.Dataset | xr.DataArray,
        targets: xr.Dataset | xr.DataArray | dict[str, Any] | None = None,
        *,
        time: Any = None,
        lead_time: Any = None,
    ) -> xr.Dataset:
        """Persistence forecast at ``targets``, laid out as :func:`xnp.predict`'s.

        Parameters
        ----------
        data : Dataset or DataArray
            The observed history, with a time axis; never modified.
        targets : Dataset, DataArray or dict of coordinates, optional
            Where to predict; default the places of ``data``.
        time : optional
            With ``lead_time``: the initialisation (issue) time(s), default every
            time of ``data``.  Without: the valid time(s) to predict from the
            observations at or before each (may lie after the end of ``data``);
            default the targets' times, else every time of ``data``.  A scalar
            gives no time dimension, as in :func:`xnp.predict`.
        lead_time : optional
            Hours after ``time`` to forecast (a number, a timedelta, a string such
            as ``"6h"``, or a list); the result then has ``init_time``,
            ``lead_time`` and ``valid_time`` as a forecast model's prediction does.

        Returns
        -------
        Dataset
            ``{var}_mean`` and ``{var}_std``.
        """
        data = as_dataset(data)
        variables = variables_to_predict(data, self.variables)
        layout = find_coords(data, variables[0])
        if layout.time is None or layout.time_dim is None:
            raise ConfigError(
                "Persistence needs data with a time dimension (the history to persist); "
                f"found time={layout.time!r} without a time axis."
            )
        expected = {layout.time_dim, *layout.point_dims}
        for v in variables:
            if set(map(str, data[v].dims)) != expected:
                raise DimensionError(
                    f"{v!r} has dims {data[v].dims}; Persistence needs exactly time and space "
                    f"{tuple(expected)}. Select along the other dims first."
                )
        where = template_of(targets, data)
        template = where.points
        if targets is None:
            template = template.isel({layout.time_dim: 0}, drop=True)
        history = _History(data, variables, layout)
        if lead_time is not None:
            spatial = template.drop_dims(
                [d for d in (layout.time_dim,) if d in template.dims]
            ).drop_vars([layout.time], errors="ignore")
            return where.arrange(self._forecast(history, spatial, time, lead_time))
        tmpl_time = find_coords(template).time
        times, scalar = _valid_times(data, template, layout, tmpl_time, time)
        results = []
        for t in times:
            tmpl = at_time(template, xr.Dataset(coords={layout.time: t}), layout, tmpl_time)
            results.append(self._frame(history, tmpl, t, t))
        return where.arrange(results[0] if scalar else xr.concat(results, dim=layout.time_dim))

    def _frame(
        self, history: _History, template: xr.Dataset, issued: Any, valid: Any
    ) -> xr.Dataset:
        targets = to_points(template, None)
        pairs = [history.persist(v, targets, issued, valid) for v in history.variables]
        mean = np.stack([p[0] for p in pairs], -1)
        std = np.stack([p[1] for p in pairs], -1)
        out = predictions_to_xarray(targets, mean, std, history.variables, attrs=history.attrs)
        return label_source(out, self.name)

    def _forecast(
        self, history: _History, spatial: xr.Dataset, time: Any, lead_time: Any
    ) -> xr.Dataset:
        leads, scalar_lead = lead_hours(lead_time)
        if time is None:
            inits, scalar_init = history.times, False
        else:
            inits, scalar_init = _as_times(time, history.times)
        lead_index = pd.Index(pd.to_timedelta(leads, unit="h"), name="lead_time")
        results = []
        for t0 in inits:
            per_lead = [self._frame(history, spatial, t0, add_hours(t0, float(h))) for h in leads]
            results.append(xr.concat(per_lead, dim=lead_index).expand_dims(init_time=[t0]))
        return forecast_layout(results, leads, scalar_init=scalar_init, scalar_lead=scalar_lead)


def _as_times(time: Any, times: np.ndarray) -> tuple[np.ndarray, bool]:
    """``time`` as an array of the type of the data's ``times``, and whether it was a scalar.

    Strings are parsed as numpy datetimes, or in the data's cftime calendar.
    """
    values = np.asarray(time)
    if np.issubdtype(times.dtype, np.datetime64):
        return np.atleast_1d(values.astype(times.dtype)), values.ndim == 0
    calendar = getattr(times.flat[0], "calendar", None) if times.size else None
    if calendar and values.dtype.kind in "USO":
        parsed = []
        for v in values.ravel():
            if isinstance(v, str | np.str_):
                try:
                    v = xr.date_range(str(v), periods=1, calendar=calendar, use_cftime=True)[0]
                except (ValueError, TypeError) as err:
                    raise CoordinateError(
                        f"time {str(v)!r} is not a date of the data's {calendar!r} calendar "
                        f"({err}); give it as 'YYYY-MM-DDTHH' or as a cftime datetime."
                    ) from err
            parsed.append(v)
        out = np.empty(len(parsed), object)
        out[:] = parsed
        return out, values.ndim == 0
    return np.atleast_1d(values), values.ndim == 0


def _valid_times(
    data: xr.Dataset, template: xr.Dataset, layout: Any, tmpl_time: Any, time: Any
) -> tuple[np.ndarray, bool]:
    if time is not None:
        return _as_times(time, data[layout.time].values)
    if tmpl_time is not None:
        values = template[tmpl_time].values
        return np.atleast_1d(values), values.ndim == 0
    return data[layout.time].values, False


class _History:
    """The observed series of every place, as ``[time, place]`` arrays."""

    def __init__(self, data: xr.Dataset, variables: list[str], layout: Any) -> None:
        self.variables = variables
        self.times = data[layout.time].values
        self.hours = time_hours(self.times)
        lat, lon = latlon(data, layout)
        self.lat, self.lon = lat.ravel(), lon.ravel()
        dims = (layout.time_dim, *layout.point_dims)
        self.series = {
            v: np.asarray(data[v].transpose(*dims).values, np.float64).reshape(self.hours.size, -1)
            for v in variables
        }
        self.attrs = {v: dict(data[v].attrs) for v in variables}

    def persist(
        self, variable: str, targets: PointSet, issued: Any, valid: Any
    ) -> tuple[np.ndarray, np.ndarray]:
        """Persisted value and its std at the targets."""
        x, axis = self.series[variable], self.hours
        issue_h = float(time_hours(np.asarray(issued)))
        valid_h = float(time_hours(np.asarray(valid)))
        observed = np.isfinite(x) & (axis <= issue_h)[:, None]
        last = np.where(observed, np.arange(axis.size)[:, None], -1).max(0)
        places = np.flatnonzero(last >= 0)
        if places.size == 0:
            raise EmptyDataError(
                f"no observation of {variable!r} at or before {issued}; persistence has "
                "nothing to persist."
            )
        xyz = unit_vectors(np.stack([self.lat[places], self.lon[places]], -1))
        _, nearest = cKDTree(xyz).query(unit_vectors(targets.s), k=1)
        source = places[np.reshape(nearest, (-1,))]
        value = x[last[source], source]
        lag = valid_h - axis[last[source]]
        std = np.empty(len(targets))
        for age in np.unique(lag):
            sel = lag == age
            std[sel] = _lag_rms(x, axis, float(age), issue_h)[source[sel]]
        return value, std


def _lag_rms(x: np.ndarray, axis: np.ndarray, lag: float, until: float) -> np.ndarray:
    """Per place RMS of ``x(τ + lag) − x(τ)`` over pairs up to ``until``, with fallbacks."""
    if lag == 0:
        return np.zeros(x.shape[1])
    later = match_hours(axis, axis + lag)
    ok = later >= 0
    ok[ok] = axis[later[ok]] <= until
    diff = x[later[ok]] - x[ok]
    finite = np.isfinite(diff)
    count = finite.sum(0)
    total = np.where(finite, diff * diff, 0.0).sum(0)
    if count.sum() > 0:
        pooled = total.sum() / count.sum()
        per_place = np.where(count > 0, total / np.maximum(count, 1), pooled)
        return np.sqrt(per_place)
    past = x[axis <= until]
    past = past[np.isfinite(past)]
    return np.full(x.shape[1], np.sqrt(2.0) * (past.std() if past.size else 0.0))
