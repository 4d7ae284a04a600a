"""Maps of predictions and observations, learning curves, calibration (matplotlib).

Every function returns a :class:`matplotlib.figure.Figure` built without pyplot: no
window opens, nothing is registered with pyplot's figure manager (so nothing leaks
in loops), and a notebook shows the figure once, as the cell's value.  Save it with
``fig.savefig("map.png")``.

matplotlib is an optional dependency (``pip install 'xnp[plot]'``) and is imported
only when a plot is made.  When `cartopy <https://scitools.org.uk/cartopy>`_ is
importable and its Natural Earth coastlines are already on disk, maps are drawn on
a Plate Carrée projection with coastlines; otherwise on plain longitude/latitude
axes (``coastlines=True`` or ``False`` forces either, and ``True`` lets cartopy
download the coastlines).

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

import os
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import xarray as xr

from xnp.data.coords import find_coords, latlon, locators_as_coords
from xnp.data.points import to_points
from xnp.errors import (
    ConfigError,
    CoordinateError,
    DimensionError,
    MissingDependencyError,
    VariableNotFoundError,
)
from xnp.geo.sphere import into_frame, longitude_frame

if TYPE_CHECKING:  # pragma: no cover - typing only
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from xnp.neural_process import NeuralProcess

__all__ = [
    "MissingDependencyError",
    "plot_calibration",
    "plot_history",
    "plot_prediction",
    "plot_stations",
]


def _figure_class() -> type[Figure]:
    """The Figure class of matplotlib, or a clear error naming the extra to install."""
    try:
        from matplotlib.figure import Figure
    except ImportError as err:
        raise MissingDependencyError(
            "xnp's plots need matplotlib, which is not installed; install it with "
            "pip install 'xnp[plot]' (or pip install matplotlib)."
        ) from err
    return Figure


def _coastlines_on_disk() -> bool:
    """Whether cartopy is importable and has its 110m Natural Earth coastlines locally."""
    try:
        import cartopy
        from cartopy.io import Downloader
    except ImportError:
        return False
    spec = {"config": cartopy.config, "category": "physical", "name": "coastline",
            "resolution": "110m"}  # fmt: skip
    try:
        loader = Downloader.from_config(("shapefiles", "natural_earth", "physical"))
        paths = [loader.pre_downloaded_path(spec), loader.target_path(spec)]
    except (KeyError, ValueError, AttributeError):  # an unusual cartopy configuration
        return False
    return any(p and os.path.exists(p) for p in paths)


def _map_projection(coastlines: bool | None) -> Any:
    """The PlateCarree projection of cartopy when coastlines are drawn, else None (plain axes)."""
    if coastlines is False or (coastlines is None and not _coastlines_on_disk()):
        return None
    try:
        import cartopy.crs as ccrs
    except ImportError as err:
        raise MissingDependencyError(
            "coastlines=True needs cartopy, which is not installed (pip install cartopy); "
            "pass coastlines=False or leave it to the default to draw plain axes."
        ) from err
    return ccrs.PlateCarree()


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


class _Field:
    """One variable over space at one time: gridded (``mesh``) or scattered points."""

    def __init__(self, obj: xr.Dataset, name: str) -> None:
        layout = find_coords(obj, name)
        da = obj[name]
        lat_grid, lon_grid = latlon(obj, layout)  # checks units, range, NaN: xnp errors
        if layout.kind == "grid":
            lat_dim, lon_dim = obj[layout.lat].dims[0], obj[layout.lon].dims[0]
            da = da.transpose(lat_dim, lon_dim)
            self.lon = np.asarray(obj[layout.lon].values, np.float64)
            self.lat = np.asarray(obj[layout.lat].values, np.float64)
            self.values = np.asarray(da.values, np.float64)
            self.mesh = min(self.values.shape) > 1
            self.columns = self.mesh  # a 1-D longitude per column, kept increasing
            if not self.mesh:  # one row or column has no cell width: draw its points
                lon2, lat2 = np.meshgrid(self.lon, self.lat)
                self.lon, self.lat, self.values = lon2.ravel(), lat2.ravel(), self.values.ravel()
        else:
            self.columns = False
            self.lat, self.lon = lat_grid, lon_grid
            self.values = np.asarray(da.transpose(*layout.point_dims).values, np.float64)
            # a curvilinear or projected grid of one row or column has no cell height
            self.mesh = len(layout.point_dims) == 2 and min(self.values.shape) > 1
            if not self.mesh:
                self.lat, self.lon = self.lat.ravel(), self.lon.ravel()
                self.values = self.values.ravel()
        self.attrs = dict(da.attrs)
        self.wrap_to(-180.0)

    def wrap_to(self, start: float) -> None:
        """Express the longitudes in ``[start, start + 360)`` (see :func:`longitude_frame`)."""
        self.lon = into_frame(self.lon, start)
        if self.columns:
            order = np.argsort(self.lon, kind="stable")
            self.lon, self.values = self.lon[order], self.values[:, order]

    def wraps(self) -> bool:
        """Whether a 2-D (curvilinear) grid has neighbours on both sides of the map's seam.

        Around a pole, or across the edge of the longitude window, neighbouring
        cells are about 360° apart on the map: a mesh would smear them over it.
        """
        if np.ndim(self.lon) != 2:
            return False
        steps = [np.abs(np.diff(self.lon, axis=a)) for a in (0, 1)]
        return any(bool(np.any(d[np.isfinite(d)] > 180.0)) for d in steps)

    def draw(self, ax: Axes, *, size: float | None = None, **style: Any) -> Any:
        """Draw on ``ax`` (pcolormesh or scatter); return the artist, for a colorbar."""
        if self.mesh and not self.wraps():
            artist = ax.pcolormesh(self.lon, self.lat, self.values, shading="auto", **style)
        else:  # scattered points, or a grid around a pole: one dot per point
            lon, lat, values = np.ravel(self.lon), np.ravel(self.lat), np.ravel(self.values)
            artist = _scatter(ax, lon, lat, values, size=size, **style)
        return artist


def _scatter(
    ax: Axes,
    lon: np.ndarray,
    lat: np.ndarray,
    values: np.ndarray,
    *,
    size: float | None,
    **style: Any,
) -> Any:
    """Dots coloured by value, smaller when there are many."""
    n = max(int(np.size(values)), 1)
    size = size if size is not None else float(np.clip(6000.0 / n, 6.0, 60.0))
    return ax.scatter(np.ravel(lon), np.ravel(lat), c=np.ravel(values), s=size,
                      edgecolors="k", linewidths=0.3, **style)  # fmt: skip


def _finish_axes(
    ax: Axes, lon: np.ndarray, lat: np.ndarray, projection: Any, central: float = 0.0
) -> None:
    """Limits, labels and aspect of a map panel covering ``lon``/``lat``.

    ``central`` is the central longitude of cartopy axes (see :func:`_new_figure`).
    """
    lon, lat = np.ravel(lon), np.ravel(lat)
    lon0, lon1 = float(np.nanmin(lon)), float(np.nanmax(lon))
    lat0, lat1 = float(np.nanmin(lat)), float(np.nanmax(lat))
    pad_lon = max(0.03 * (lon1 - lon0), 0.5)
    pad_lat = max(0.03 * (lat1 - lat0), 0.5)
    if lon0 >= -180.0 and lon1 <= 180.0:
        lon0, lon1 = max(lon0 - pad_lon, -180.0), min(lon1 + pad_lon, 180.0)
    else:  # a window across the antimeridian (see longitude_frame)
        lon0, lon1 = lon0 - pad_lon, min(lon1 + pad_lon, lon0 - pad_lon + 360.0)
    lat0, lat1 = max(lat0 - pad_lat, -90.0), min(lat1 + pad_lat, 90.0)
    if projection is not None:
        # in the axes' own frame, centred on the data (across the antimeridian, too)
        ax.set_extent([lon0 - central, lon1 - central, lat0, lat1], crs=ax.projection)
        ax.coastlines(resolution="110m", linewidth=0.6)
        grid = ax.gridlines(draw_labels=True, linewidth=0.3, alpha=0.5)
        grid.top_labels = grid.right_labels = False
        return
    ax.set_xlim(lon0, lon1)
    ax.set_ylim(lat0, lat1)
    # degrees of longitude shrink with latitude: keep shapes right at mid-latitude
    ax.set_aspect(1.0 / max(np.cos(np.deg2rad(0.5 * (lat0 + lat1))), 0.2), adjustable="box")
    if lon1 > 180.0:  # across the antimeridian: label 190 as -170, as east longitudes
        ax.xaxis.set_major_formatter(lambda x, _: f"{(x + 180.0) % 360.0 - 180.0:g}")
    ax.set_xlabel("longitude (°E)")
    ax.set_ylabel("latitude (°N)")
    ax.grid(alpha=0.3, linewidth=0.5)


def _new_figure(
    n_panels: int, projection: Any, figsize: tuple[float, float] | None, central: float = 0.0
) -> tuple[Figure, list[Axes]]:
    """A figure of ``n_panels`` maps; cartopy axes are centred on longitude ``central``."""
    figure = _figure_class()
    fig = figure(figsize=figsize or (4.6 * n_panels + 0.6, 4.0), layout="constrained")
    kw = {}
    if projection is not None:  # the data stay in PlateCarree(); the axes are turned
        kw["projection"] = type(projection)(central_longitude=central)
    axes = [fig.add_subplot(1, n_panels, i + 1, **kw) for i in range(n_panels)]
    return fig, axes


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
    mean, std = _Field(pred, mean_name), _Field(pred, std_name)
    points = None
    if context is not None:
        points = _context_points(context, variable, _scalar_time(pred, mean_name), time)
    start, central = longitude_frame(mean.lon, *(() if points is None else (points[1],)))
    mean.wrap_to(start)
    std.wrap_to(start)
    if points is not None:
        points = (points[0], into_frame(points[1], start), points[2])

    projection = _map_projection(coastlines)
    fig, axes = _new_figure(3 if points is not None else 2, projection, figsize, central)
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
        artist = _scatter(ax, lon, lat, val, size=None, cmap=cmap, **limits, **transform)
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
        _finish_axes(ax, lon_all, lat_all, projection, central)
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
    projection = _map_projection(coastlines)
    fig, (ax,) = _new_figure(1, projection, figsize or (6.5, 4.5), central)
    transform = {"transform": projection} if projection is not None else {}
    artist = _scatter(ax, lon, ps.lat, ps.f[:, 0], size=size, cmap=cmap, **transform)
    fig.colorbar(artist, ax=ax, label=_label(data[variable].attrs, variable), shrink=0.85)
    _finish_axes(ax, lon, ps.lat, projection, central)
    when = _time_text(data, variable)
    title = f"{variable}: {len(ps)} stations{note}"
    ax.set_title(f"{title} at {when}" if when else title)
    return fig


def plot_history(
    model: NeuralProcess, *, metrics: Sequence[str] = ("train_nll", "val_nll")
) -> Figure:
    """Learning curves of a fitted model, as a new figure.

    Draws with :meth:`xnp.NeuralProcess.plot_history` on the axes of a new figure.

    Parameters
    ----------
    model : NeuralProcess
        A fitted or loaded model (its ``history_``).
    metrics : sequence of str
        Variables of ``model.history_`` to draw against the step.

    Returns
    -------
    matplotlib.figure.Figure

    Examples
    --------
    >>> from xnp.models.config import BSATNPConfig
    >>> from xnp.data.normalise import Normaliser, Stats
    >>> from xnp.neural_process import NeuralProcess
    >>> model = NeuralProcess.init(BSATNPConfig.tiny(), Normaliser({"v": Stats(0.0, 1.0)}), ["v"])
    >>> plot_history(model).axes[0].get_xlabel()
    'step'
    """
    fig = _figure_class()(figsize=(6.0, 3.5), layout="constrained")
    model.plot_history(fig.add_subplot(), metrics=metrics)
    return fig


def plot_calibration(*args: Any, **kwargs: Any) -> Any:
    """PIT histogram and reliability curve of a prediction against the truth.

    The implementation is :func:`xnp.scoring.evaluation.plot_calibration`; this is the same
    function under :mod:`xnp.plot`, so that every plot is found in one place.

    Parameters
    ----------
    *args, **kwargs
        Passed to :func:`xnp.scoring.evaluation.plot_calibration`: ``pred, truth`` and
        optionally ``ax``, ``variables``, ``bins``.

    Returns
    -------
    (Axes, Axes)
        What :func:`xnp.scoring.evaluation.plot_calibration` returns: the histogram and the
        reliability axes (``axes[0].figure`` is their figure).
    """
    from xnp.scoring.evaluation import plot_calibration as implementation

    return implementation(*args, **kwargs)
