"""Figures and map panels: what the plots of :mod:`xnp.plot` draw on.

The matplotlib :class:`~matplotlib.figure.Figure` class, imported lazily with an
error naming the ``plot`` extra when matplotlib is missing; the cartopy projection
(Plate Carrée with coastlines when cartopy and its coastlines are on disk, else
plain longitude/latitude axes); new figures of map panels and their limits, labels
and aspect; and one variable over space (:class:`Field`) drawn as a mesh or as dots.

This module imports :mod:`xnp.data`, :mod:`xnp.geo`, :mod:`xnp.errors`, xarray and
numpy; matplotlib and cartopy only inside functions.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np
import xarray as xr

from xnp.data.coords import find_coords, latlon
from xnp.errors import MissingDependencyError
from xnp.geo.sphere import into_frame

if TYPE_CHECKING:  # pragma: no cover - typing only
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["Field", "figure_class", "finish_axes", "map_projection", "new_figure", "scatter"]


def figure_class() -> type[Figure]:
    """The Figure class of matplotlib, or a clear error naming the extra to install.

    Returns
    -------
    type
        :class:`matplotlib.figure.Figure`, imported now.

    Raises
    ------
    MissingDependencyError
        If matplotlib is not installed (``pip install 'xnp[plot]'``).
    """
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


def map_projection(coastlines: bool | None) -> Any:
    """The PlateCarree projection of cartopy when coastlines are drawn, else None (plain axes).

    Parameters
    ----------
    coastlines : bool or None
        True: draw coastlines (cartopy may download them); False: plain axes; None:
        coastlines when cartopy and its 110m Natural Earth coastlines are on disk.

    Returns
    -------
    cartopy.crs.PlateCarree or None

    Raises
    ------
    MissingDependencyError
        If ``coastlines`` is True and cartopy is not installed.
    """
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


class Field:
    """One variable over space at one time: gridded (``mesh``) or scattered points.

    Parameters
    ----------
    obj : Dataset
        Holds the variable at one time, with its latitude/longitude coordinates.
    name : str
        The variable.

    Attributes
    ----------
    lon, lat, values : numpy.ndarray
        Longitudes (in the frame of :meth:`wrap_to`, first ``[-180, 180)``),
        latitudes and values: 1-D axes and a 2-D array for a grid, else per point.
    mesh : bool
        Whether the values are drawn as a mesh (a grid of at least 2 × 2).
    columns : bool
        Whether ``lon`` is a 1-D axis along the columns of ``values``.
    attrs : dict
        The variable's attributes.
    """

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
            artist = scatter(ax, lon, lat, values, size=size, **style)
        return artist


def scatter(
    ax: Axes,
    lon: np.ndarray,
    lat: np.ndarray,
    values: np.ndarray,
    *,
    size: float | None,
    **style: Any,
) -> Any:
    """Dots coloured by value, smaller when there are many.

    Parameters
    ----------
    ax : matplotlib Axes
        Where to draw.
    lon, lat, values : numpy.ndarray
        The points and their values.
    size : float or None
        Marker area in points² (default: between 6 and 60, smaller for more points).
    **style
        Passed to ``ax.scatter`` (colour map, limits, transform).

    Returns
    -------
    matplotlib.collections.PathCollection
        The dots, for a colorbar.
    """
    n = max(int(np.size(values)), 1)
    size = size if size is not None else float(np.clip(6000.0 / n, 6.0, 60.0))
    return ax.scatter(np.ravel(lon), np.ravel(lat), c=np.ravel(values), s=size,
                      edgecolors="k", linewidths=0.3, **style)  # fmt: skip


def finish_axes(
    ax: Axes, lon: np.ndarray, lat: np.ndarray, projection: Any, central: float = 0.0
) -> None:
    """Limits, labels and aspect of a map panel covering ``lon``/``lat``.

    Parameters
    ----------
    ax : matplotlib Axes
        The panel (cartopy axes when ``projection`` is not None).
    lon, lat : numpy.ndarray
        Every point drawn on the panel, in the frame of the map.
    projection : cartopy.crs.PlateCarree or None
        The projection of :func:`map_projection`.
    central : float
        The central longitude of cartopy axes (see :func:`new_figure`).
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


def new_figure(
    n_panels: int, projection: Any, figsize: tuple[float, float] | None, central: float = 0.0
) -> tuple[Figure, list[Axes]]:
    """A figure of ``n_panels`` maps; cartopy axes are centred on longitude ``central``.

    Parameters
    ----------
    n_panels : int
        The number of maps, side by side.
    projection : cartopy.crs.PlateCarree or None
        The projection of :func:`map_projection`; None for plain axes.
    figsize : (float, float) or None
        Figure size in inches (default: about 4.6 × 4 per panel).
    central : float
        The central longitude of cartopy axes.

    Returns
    -------
    (Figure, list of Axes)
        The figure, made without pyplot, and its panels.
    """
    figure = figure_class()
    fig = figure(figsize=figsize or (4.6 * n_panels + 0.6, 4.0), layout="constrained")
    kw = {}
    if projection is not None:  # the data stay in PlateCarree(); the axes are turned
        kw["projection"] = type(projection)(central_longitude=central)
    axes = [fig.add_subplot(1, n_panels, i + 1, **kw) for i in range(n_panels)]
    return fig, axes
