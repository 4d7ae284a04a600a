"""Which times to predict: frames of the context, selected and labelled.

:func:`predict_each_time` runs a prediction for each selected time of the
context and concatenates the results; the baselines share it, so that every
predictor selects and labels times alike.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import xarray as xr

from xnp.data.coords import find_coords
from xnp.data.times import is_datetime
from xnp.errors import (
    ConfigError,
    CoordinateError,
    EmptyDataError,
)

__all__ = ["at_time", "predict_each_time", "select_times"]


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

    The time logic shared by :func:`xnp.predict` and the baselines: ``time`` selects
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
            select_times(data.set_coords(layout.time).expand_dims(layout.time), layout, time)
        return one_time(data, at_time(template, data, layout, tmpl_time))
    if time is None and tmpl_time is not None and tmpl_time in template.dims:
        time = template[tmpl_time].values  # the template asks for these times
    data_t = data if time is None else select_times(data, layout, time)
    if layout.time_dim not in data_t.dims:  # one time selected
        return one_time(data_t, at_time(template, data_t, layout, tmpl_time))
    results = []
    for i in range(data_t.sizes[layout.time_dim]):
        frame = data_t.isel({layout.time_dim: i})
        if require and all(int(frame[v].count()) == 0 for v in require):
            raise EmptyDataError(
                f"no observation of {list(require)} at time "
                f"{frame[layout.time].values}; drop that time or choose another."
            )
        results.append(one_time(frame, at_time(template, frame, layout, tmpl_time)))
    return xr.concat(results, dim=layout.time_dim)


def select_times(data: xr.Dataset, layout: Any, time: Any) -> xr.Dataset:
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


def at_time(template: xr.Dataset, frame: xr.Dataset, layout: Any, tmpl_time: Any) -> xr.Dataset:
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
        str(k) for k, v in template.coords.items() if v.ndim == 0 and is_datetime(v.values)
    ]
    return template.drop_vars(scalar_times).assign_coords({layout.time: t})
