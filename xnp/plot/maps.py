"""Maps of predictions and observations: ``plot_prediction`` and ``plot_stations``.

Each function returns a :class:`matplotlib.figure.Figure` built without pyplot (see
:mod:`xnp.plot`).  When `cartopy <https://scitools.org.uk/cartopy>`_ is importable
and its Natural Earth coastlines are already on disk, maps are drawn on a Plate
Carrée projection with coastlines; otherwise on plain longitude/latitude axes
(``coastlines=True`` or ``False`` forces either, and ``True`` lets cartopy download
the coastlines).  This module picks the variable and the time to draw; the figures
and panels are :mod:`xnp.plot.canvas`'s.

Examples
--------
>>> import numpy as np, xarray as xr
>>> pred = xr.Dataset(
...     {
...         "t2m_mean": (("lat", "lon"), np.full((3, 4), 280.0), {"units": "K"}),
...         "t2m_std": (("lat", "lon"), np.ones((3, 4)), {"units": "K"}),
...     },
...     coords={"lat": [50.0, 51.0, 52.0], "lon": [0.0, 1.0, 2.0, 3.0]},
... )
>>> fig = plot_prediction(pred, coastlines=False)
>>> [ax.get_title() for ax in fig.axes[:2]]
['Predictive mean', 'Predictive standard deviation']
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

import numpy as np
import xarray as xr

from xnp.data.coords import find_coords, locators_as_coords
from xnp.data.flatten import to_points
from xnp.errors import (
    ConfigError,
    CoordinateError,
    DimensionError,
    VariableNotFoundError,
)
from xnp.geo.sphere import into_frame, longitude_frame
from xnp.plot.canvas import Field, finish_axes, map_projection, new_figure, scatter

if TYPE_CHECKING:  # pragma: no cover - typing only
    from matplotlib.figure import Figure

__all__ = ["plot_prediction", "plot_stations"]


def _label(attrs: dict[Hashable, Any], fallback: str) -> str:
    """``"long name [units]"`` from CF attributes."""
    name = str(attrs.get("long_name", fallback))
    units = attrs.get("units")
    return f"{name} [{units}]" if units else name


def _as_xarray(obj: Any, what: str) -> xr.Dataset | xr.DataArray:
    """``obj`` if it is a Dataset or DataArray; an xnp error naming ``what`` otherwise."""
    if not isinstance(obj, xr.Dataset | xr.DataArray):
        raise ConfigError(
            f"{what} must be an xarray Dataset or DataArray; got {type(obj).__name__} "
            "(a pandas table converts with .to_xarray())."
        )
    return obj


def _pick_variable(pred: xr.Dataset, variable: str | None) -> str:
    """The predicted variable (``{variable}_mean`` and ``{variable}_std`` are in ``pred``)."""
    if not isinstance(pred, xr.Dataset):
        raise ConfigError(
            f"plot_prediction takes the Dataset that predict returns; got {type(pred).__name__}."
        )
    names = {str(n) for n in pred.data_vars}
    found = sorted(n[: -len("_mean")] for n in names if n.endswith("_mean"))
    found = [v for v in found if f"{v}_std" in names]
    if variable is None:
        if len(found) != 1:
            raise VariableNotFoundError(
                f"Name the variable to plot: the prediction holds {found or 'no'} predicted "
                f"variables ({{variable}}_mean and {{variable}}_std pairs); data variables: "
                f"{sorted(names)}."
            )
        return found[0]
    if variable not in found:
        raise VariableNotFoundError(
            f"The prediction has no {variable}_mean and {variable}_std; predicted variables: "
            f"{found}."
        )
    return variable


def _same_moment(value: np.ndarray, time: Any) -> bool:
    """Whether the scalar time ``value`` is ``time`` (or falls in it, for a date string)."""
    probe = xr.DataArray([0], coords={"time": [value.item() if value.dtype == object else value]})
    try:
        return probe.sel(time=time).size > 0
    except (KeyError, TypeError, ValueError):
        return False


def _one_time(obj: xr.Dataset, name: str, time: Any, what: str) -> xr.Dataset:
    """``obj`` at one time (selected with ``time``, or its only one); check no other dims."""
    layout = find_coords(obj, name)
    tdim = layout.time_dim
    if tdim is not None and tdim in obj[name].dims:
        if time is not None:
            if layout.time not in obj.indexes:
                raise DimensionError(
                    f"The time coordinate {layout.time!r} of the {what} has no index to select "
                    f"time={time!r} with; select the time yourself (.isel({tdim}=...))."
                )
            times = obj[layout.time].values
            missing = CoordinateError(
                f"time={time!r} is not among the {times.size} times of the {what} "
                f"({_format_time(times[0])} ... {_format_time(times[-1])})."
            )
            try:
                obj = obj.sel({layout.time: time})
            except KeyError as err:
                raise missing from err
            if tdim in obj[name].dims and obj.sizes[tdim] == 0:  # an empty range
                raise missing
        elif obj.sizes[tdim] == 1:
            obj = obj.isel({tdim: 0})
        else:
            raise DimensionError(
                f"The {what} has {obj.sizes[tdim]} times; choose one with time=..., "
                f"e.g. time={_format_time(obj[str(layout.time)].values[0])!r}."
            )
        if tdim in obj[name].dims and obj.sizes[tdim] == 1:
            # a date string selects a slice on a cftime axis (partial-date indexing)
            obj = obj.isel({tdim: 0})
        if tdim in obj[name].dims:
            raise DimensionError(
                f"time={time!r} selects {obj.sizes[tdim]} times of the {what}; choose one."
            )
    elif time is not None:  # one time, or none: time= must name it
        has = layout.time is not None and obj[layout.time].ndim == 0
        same = has and _same_moment(obj[layout.time].values, time)
        if not same:
            at = f"is at {_format_time(obj[layout.time].values)}" if has else "has no time"
            raise CoordinateError(f"time={time!r} was asked for, but the {what} {at}.")
    point_dims = find_coords(obj, name).point_dims
    extra = [str(d) for d in obj[name].dims if d not in point_dims]
    if extra:
        raise DimensionError(
            f"The {what} has dimensions {extra} besides the spatial ones; select one value "
            f"of each first, e.g. .isel({extra[0]}=0)."
        )
    return obj


def _format_time(value: Any) -> str:
    """A time value as short text (minutes for numpy datetimes)."""
    value = np.asarray(value)
    if np.issubdtype(value.dtype, np.datetime64):
        return str(np.datetime_as_string(value, unit="m")).replace("T", " ")
    return str(value.item() if value.ndim == 0 else value)


def _time_text(obj: xr.Dataset | xr.DataArray, name: str) -> str:
    """The (scalar) time of ``obj``'s variable ``name`` as text, or ``""``."""
    time = find_coords(obj, name).time
    if time is None or obj[time].ndim:
        return ""
    return _format_time(obj[time].values)


def _context_points(
    context: xr.Dataset | xr.DataArray, variable: str, pred_time: Any, time: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Latitude, longitude and value of the observed context points at the plotted time."""
    context = _as_xarray(context, "the context")
    if isinstance(context, xr.DataArray):
        context = context.to_dataset(name=variable)
    context, _ = locators_as_coords(context)
    if variable not in context.data_vars:
        raise VariableNotFoundError(
            f"The context has no variable {variable!r}; it holds {sorted(map(str, context))}."
        )
    layout = find_coords(context, variable)
    if layout.time_dim is not None and layout.time_dim in context[variable].dims:
        when = time if time is not None else pred_time
        context = _one_time(context, variable, when, "context")
    ps = to_points(context, variable)
    return ps.lat, ps.lon, ps.f[:, 0]


def plot_prediction(
    pred: xr.Dataset,
    variable: str | None = None,
    *,
    context: xr.Dataset | xr.DataArray | None = None,
    time: Any = None,
    coastlines: bool | None = None,
    cmap: str = "viridis",
    std_cmap: str = "magma",
    figsize: tuple[float, float] | None = None,
) -> Figure:
    """Map the context, the predictive mean and the predictive standard deviation.

    Gridded targets (1-D latitude/longitude, curvilinear or projected grids) are
    drawn with ``pcolormesh``; station or other scattered targets as coloured dots,
    and so are the points of a curvilinear grid that wraps around the globe (e.g. a
    polar stereographic grid around a pole), which no longitude window shows whole.
    The context panel and the mean share one colour scale; the context locations
    are marked on the standard-deviation map, where the uncertainty should dip.

    Parameters
    ----------
    pred : Dataset
        What :func:`xnp.predict` returns: ``{variable}_mean`` and ``{variable}_std``.
    variable : str, optional
        The variable to plot (default: the only one predicted).
    context : Dataset or DataArray, optional
        The observations the prediction was conditioned on (the ``data`` given to
        ``predict``); adds a first panel with them coloured by value.
    time : optional
        The time to plot, when ``pred`` (or ``context``) has several (``.sel`` label).
    coastlines : bool, optional
        Draw a cartopy map with coastlines (default: when cartopy and its coastline
        data are available, so the default never downloads anything).
    cmap, std_cmap : str
        Colour maps of the values and of the standard deviation.
    figsize : (float, float), optional
        Figure size in inches (default: about 4.6 × 4 per panel).

    Returns
    -------
    matplotlib.figure.Figure
        Panels ``context`` (with ``context``), ``mean`` and ``std``, each with a
        colorbar labelled with the variable's ``long_name`` and ``units``.

    Raises
    ------
    VariableNotFoundError
        If ``variable`` was not predicted (or is missing from ``context``).
    DimensionError
        If several times (or other non-spatial dimensions) remain to choose from.

    Examples
    --------
    >>> import numpy as np, xarray as xr
    >>> pred = xr.Dataset(
    ...     {"v_mean": ("station", [1.0, 2.0]), "v_std": ("station", [0.1, 0.2])},
    ...     coords={"lat": ("station", [0.0, 5.0]), "lon": ("station", [10.0, 12.0])},
    ... )
    >>> fig = plot_prediction(pred, "v", coastlines=False)
    >>> len(fig.axes)  # two maps and their colorbars
    4
    """
    variable = _pick_variable(pred, variable)
    mean_name, std_name = f"{variable}_mean", f"{variable}_std"
    pred, _ = locators_as_coords(pred)
    pred = _one_time(pred[[mean_name, std_name]], mean_name, time, "prediction")
    pred = pred.compute()  # a lazy prediction runs once for both fields, not once each
    mean, std = Field(pred, mean_name), Field(pred, std_name)
    points = None
    if context is not None:
        points = _context_points(context, variable, _scalar_time(pred, mean_name), time)
    start, central = longitude_frame(mean.lon, *(() if points is None else (points[1],)))
    mean.wrap_to(start)
    std.wrap_to(start)
    if points is not None:
        points = (points[0], into_frame(points[1], start), points[2])

    projection = map_projection(coastlines)
    fig, axes = new_figure(3 if points is not None else 2, projection, figsize, central)
    transform = {"transform": projection} if projection is not None else {}
    finite = [mean.values[np.isfinite(mean.values)]]
    if points is not None:
        finite.append(points[2][np.isfinite(points[2])])
    values = np.concatenate([np.ravel(v) for v in finite])
    limits = {"vmin": float(values.min()), "vmax": float(values.max())} if values.size else {}
    units = mean.attrs.get("units")
    source = str(mean.attrs.get("long_name", variable)).removeprefix("predictive mean of ")
    value_label = f"{source} [{units}]" if units else source
    all_lon, all_lat = [np.ravel(mean.lon)], [np.ravel(mean.lat)]

    panels = list(axes)
    if points is not None:
        lat, lon, val = points
        ax = panels.pop(0)
        artist = scatter(ax, lon, lat, val, size=None, cmap=cmap, **limits, **transform)
        fig.colorbar(artist, ax=ax, label=value_label, shrink=0.85)
        ax.set_title(f"Context ({lat.size} observations)")
        all_lon.append(lon)
        all_lat.append(lat)
    ax_mean, ax_std = panels
    artist = mean.draw(ax_mean, cmap=cmap, **limits, **transform)
    fig.colorbar(artist, ax=ax_mean, label=value_label, shrink=0.85)
    ax_mean.set_title("Predictive mean")
    artist = std.draw(ax_std, cmap=std_cmap, **transform)
    std_units = std.attrs.get("units")
    std_label = f"standard deviation [{std_units}]" if std_units else "standard deviation"
    fig.colorbar(artist, ax=ax_std, label=std_label, shrink=0.85)
    ax_std.set_title("Predictive standard deviation")
    if points is not None:
        ax_std.plot(points[1], points[0], "k.", markersize=2, alpha=0.6, **transform)
    lon_all, lat_all = np.concatenate(all_lon), np.concatenate(all_lat)
    for ax in axes:
        finish_axes(ax, lon_all, lat_all, projection, central)
    when = _time_text(pred, mean_name)
    fig.suptitle(f"{source} at {when}" if when else source)
    return fig


def _scalar_time(obj: xr.Dataset, name: str) -> Any:
    time = find_coords(obj, name).time
    return None if time is None or obj[time].ndim else obj[time].values


def plot_stations(
    data: xr.Dataset | xr.DataArray,
    variable: str | None = None,
    *,
    time: Any = None,
    coastlines: bool | None = None,
    cmap: str = "viridis",
    size: float | None = None,
    figsize: tuple[float, float] | None = None,
) -> Figure:
    """Map observation locations coloured by their value.

    Works for any layout (stations, scattered points, or a grid shown point by
    point); missing values are left out.

    Parameters
    ----------
    data : Dataset or DataArray
        The observations.
    variable : str, optional
        The variable to colour by (default: the only data variable).
    time : optional
        The time to show (``.sel`` label).  Default: with a single time, that one;
        with several, each location's mean over time (said in the title).
    coastlines : bool, optional
        As in :func:`plot_prediction`.
    cmap : str
        Colour map.
    size : float, optional
        Marker area in points² (default: smaller for more stations).
    figsize : (float, float), optional
        Figure size in inches.

    Returns
    -------
    matplotlib.figure.Figure
        One map with a colorbar labelled with ``long_name`` and ``units``.

    Examples
    --------
    >>> import xarray as xr
    >>> obs = xr.Dataset(
    ...     {"t2m": ("station", [280.0, 284.0, 279.0], {"units": "K"})},
    ...     coords={"lat": ("station", [50.0, 52.0, 55.0]), "lon": ("station", [0.0, 2.0, -3.0])},
    ... )
    >>> plot_stations(obs, coastlines=False).axes[0].get_title()
    't2m: 3 stations'
    """
    data = _as_xarray(data, "the data")
    if isinstance(data, xr.DataArray):
        data = data.to_dataset(name=str(data.name) if data.name is not None else "value")
    data, _ = locators_as_coords(data)  # lat/lon or a grid mapping kept as data variables
    if variable is None:
        if len(data.data_vars) != 1:
            raise VariableNotFoundError(
                f"Name the variable to plot; the data holds {sorted(map(str, data.data_vars))}."
            )
        variable = str(next(iter(data.data_vars)))
    if variable not in data.data_vars:
        raise VariableNotFoundError(
            f"The data has no variable {variable!r}; it holds {sorted(map(str, data.data_vars))}."
        )
    data = data[[variable]]
    layout = find_coords(data, variable)
    note = ""
    tdim = layout.time_dim
    has_times = tdim is not None and tdim in data[variable].dims
    if has_times and time is None and data.sizes[tdim] > 1:
        note = f" (mean over {data.sizes[tdim]} times)"
        attrs = data[variable].attrs
        data = data.mean(tdim, keep_attrs=True)
        data[variable].attrs = attrs
    elif has_times or time is not None:  # time= must match data at one time, or none
        data = _one_time(data, variable, time, "data")
    ps = to_points(data, variable)
    start, central = longitude_frame(ps.lon)
    lon = into_frame(ps.lon, start)
    projection = map_projection(coastlines)
    fig, (ax,) = new_figure(1, projection, figsize or (6.5, 4.5), central)
    transform = {"transform": projection} if projection is not None else {}
    artist = scatter(ax, lon, ps.lat, ps.f[:, 0], size=size, cmap=cmap, **transform)
    fig.colorbar(artist, ax=ax, label=_label(data[variable].attrs, variable), shrink=0.85)
    finish_axes(ax, lon, ps.lat, projection, central)
    when = _time_text(data, variable)
    title = f"{variable}: {len(ps)} stations{note}"
    ax.set_title(f"{title} at {when}" if when else title)
    return fig
