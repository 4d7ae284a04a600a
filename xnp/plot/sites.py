"""The plot of a sensor placement (:func:`xnp.placement.place_sensors`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import xarray as xr

from xnp.errors import ConfigError
from xnp.geo.sphere import into_frame, longitude_frame
from xnp.plot.canvas import finish_axes, map_projection, new_figure, scatter

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["plot_placement"]


def plot_placement(
    result: xr.Dataset,
    *,
    step: int = 1,
    coastlines: bool | None = None,
    cmap: str = "magma_r",
    figsize: tuple[float, float] | None = None,
) -> Figure:
    """Map the acquisition over the candidates at one step, with the chosen sites.

    Parameters
    ----------
    result : Dataset
        What :func:`xnp.placement.place_sensors` returned.
    step : int
        The step whose acquisition map is drawn (1: scores of the first site).
    coastlines : bool, optional
        As in :func:`xnp.plot.plot_prediction`.
    cmap : str
        Colour map of the acquisition.
    figsize : (float, float), optional
        Figure size in inches.

    Returns
    -------
    matplotlib.figure.Figure
        One map: the candidates coloured by their score, every chosen site numbered
        in the order chosen, and a title with the score before and after.

    Examples
    --------
    >>> import xarray as xr
    >>> result = xr.Dataset(
    ...     {
    ...         "site_lat": ("step", [51.0]),
    ...         "site_lon": ("step", [0.5]),
    ...         "acquisition": ("step", [0.8]),
    ...         "acquisition_before": 1.0,
    ...         "acquisition_map": (("step", "candidate"), [[0.9, 0.8]]),
    ...     },
    ...     coords={
    ...         "step": [1],
    ...         "candidate_lat": ("candidate", [50.0, 51.0]),
    ...         "candidate_lon": ("candidate", [0.0, 0.5]),
    ...     },
    ...     attrs={"acquisition": "mean_std"},
    ... )
    >>> plot_placement(result, coastlines=False).axes[0].get_title()
    'mean_std: 1 → 0.8 after 1 site'
    """
    needed = ("site_lat", "site_lon", "acquisition_map", "candidate_lat", "acquisition")
    missing = [k for k in needed if k not in result.variables]
    if missing:
        raise ConfigError(f"not a placement result (no {missing}); pass what "
                          "xnp.placement.place_sensors returned.")  # fmt: skip
    if step not in result.step.values:
        raise ConfigError(f"step must be one of {result.step.values.tolist()}; got {step!r}.")
    lat = np.asarray(result.candidate_lat)
    start, central = longitude_frame(np.asarray(result.candidate_lon))
    lon = into_frame(np.asarray(result.candidate_lon), start)
    score = np.asarray(result.acquisition_map.sel(step=step))
    projection = map_projection(coastlines)
    fig, (ax,) = new_figure(1, projection, figsize or (6.5, 4.5), central)
    transform = {"transform": projection} if projection is not None else {}
    ok = np.isfinite(score)
    artist = scatter(ax, lon[ok], lat[ok], score[ok], size=None, cmap=cmap, **transform)
    name = result.attrs.get("acquisition", "acquisition")
    fig.colorbar(artist, ax=ax, label=f"{name} with a site there (step {step})", shrink=0.85)
    site_lon = into_frame(np.asarray(result.site_lon), start)
    ax.scatter(site_lon, result.site_lat, marker="*", s=140, c="cyan", edgecolors="k",
               linewidths=0.6, zorder=3, **transform)  # fmt: skip
    for i, (x, y) in enumerate(zip(site_lon, np.asarray(result.site_lat), strict=True)):
        ax.annotate(str(i + 1), (x, y), xytext=(4, 4), textcoords="offset points",
                    fontsize=8, zorder=4)  # fmt: skip
    finish_axes(ax, lon, lat, projection, central)
    n = result.sizes["step"]
    last = float(result.acquisition.isel(step=-1))
    ax.set_title(f"{name}: {float(result.acquisition_before):.3g} → {last:.3g} after {n} "
                 f"site{'s' if n > 1 else ''}")  # fmt: skip
    return fig
