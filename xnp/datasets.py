"""Small synthetic xarray datasets for examples, doctests and tests (no network).

Every dataset is built inside a function from a seed, so importing this module
costs nothing and the same arguments always give the same data.

:func:`gp_sphere` draws a space-time Gaussian-process field on a latitude/longitude
grid: the ground truth for checking that a fitted neural process has learnt
something (its statistics are known exactly).
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from xnp.errors import ConfigError

__all__ = ["gp_sphere"]

_EARTH_RADIUS_KM = 6371.0
#: Largest grid (``n_lat * n_lon``) and number of times :func:`gp_sphere` draws: its
#: dense covariances take 800 MB and a few seconds at 10,000 points.
_MAX_GRID_POINTS = 10_000
_MAX_TIMES = 5_000


def _rbf_cholesky(d2: np.ndarray, lengthscale: float, jitter: float = 1e-6) -> np.ndarray:
    """Lower Cholesky factor of ``exp(-d² / 2ℓ²)`` (float64, with a small jitter)."""
    k = np.exp(-0.5 * d2 / lengthscale**2)
    return np.linalg.cholesky(k + jitter * np.eye(k.shape[0]))


def gp_sphere(
    *,
    n_lat: int = 12,
    n_lon: int = 24,
    n_time: int = 40,
    lat_range: tuple[float, float] = (-90.0, 90.0),
    lon_range: tuple[float, float] = (-180.0, 180.0),
    lengthscale_km: float = 2000.0,
    timescale_hours: float = 24.0,
    step_hours: float = 6.0,
    noise: float = 0.05,
    mean: float = 280.0,
    std: float = 5.0,
    name: str = "field",
    units: str = "K",
    seed: int = 0,
) -> xr.Dataset:
    """A Gaussian-process field on the sphere that evolves in time.

    The field is ``mean + std · (g + noise · ε)`` where ``g`` is a zero-mean,
    unit-variance GP with the separable kernel
    ``exp(-chord² / 2ℓ²) · exp(-Δt² / 2τ²)``: the RBF of the chord distance
    between points of the Earth (positive definite on the sphere, ``ℓ`` in km)
    times an RBF in time (``τ`` in hours), and ``ε`` is white noise.  The grid
    uses cell-centre latitudes, so no two grid points coincide at the poles.

    Parameters
    ----------
    n_lat, n_lon, n_time : int
        Grid size.
    lat_range, lon_range : (float, float)
        Extent of the grid in degrees (cell edges).
    lengthscale_km : float
        Spatial lengthscale ``ℓ`` in kilometres.
    timescale_hours : float
        Temporal lengthscale ``τ`` in hours.
    step_hours : float
        Hours between time steps (starting 2000-01-01 00:00).
    noise : float
        Standard deviation of the white noise, relative to the GP's.
    mean, std : float
        Mean and scale of the field in its units.
    name, units : str
        Name and ``units`` attribute of the variable.
    seed : int
        Random seed.

    Returns
    -------
    Dataset
        One variable ``name`` on ``(time, lat, lon)`` with CF attributes.

    Examples
    --------
    >>> ds = gp_sphere(n_lat=6, n_lon=12, n_time=4, seed=1)
    >>> ds.field.dims, ds.field.shape
    (('time', 'lat', 'lon'), (4, 6, 12))
    >>> ds.lat.values[:2].tolist(), ds.field.attrs["units"]
    ([-75.0, -45.0], 'K')
    """
    for label, value in (("n_lat", n_lat), ("n_lon", n_lon), ("n_time", n_time)):
        if not isinstance(value, int | np.integer) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"{label} must be a positive integer; got {value!r}.")
    n_lat, n_lon, n_time = int(n_lat), int(n_lon), int(n_time)
    for label, value in (
        ("lengthscale_km", lengthscale_km),
        ("timescale_hours", timescale_hours),
        ("step_hours", step_hours),
        ("std", std),
    ):
        if not 0 < value < np.inf:
            raise ConfigError(f"{label} must be a positive number; got {value!r}.")
    if not 0 <= noise < np.inf:
        raise ConfigError(f"noise must be a non-negative number; got {noise!r}.")
    if not (-90 <= lat_range[0] < lat_range[1] <= 90):
        raise ConfigError(f"lat_range must be (south, north) within [-90, 90]; got {lat_range!r}.")
    if not (np.isfinite(lon_range).all() and lon_range[0] < lon_range[1] <= lon_range[0] + 360):
        raise ConfigError(
            f"lon_range must be (west, east) spanning at most 360°; got {lon_range!r}."
        )
    if n_lat * n_lon > _MAX_GRID_POINTS or n_time > _MAX_TIMES:
        raise ConfigError(
            f"gp_sphere draws the field exactly, with a dense {n_lat * n_lon:,} × "
            f"{n_lat * n_lon:,} spatial and {n_time:,} × {n_time:,} temporal covariance; "
            f"at most {_MAX_GRID_POINTS:,} grid points and {_MAX_TIMES:,} times are allowed "
            "(memory grows with the square, time with the cube). Use a coarser grid, fewer "
            "times, or interpolate a coarse draw."
        )
    lat_edges = np.linspace(*lat_range, n_lat + 1)
    lon_edges = np.linspace(*lon_range, n_lon + 1)
    lat = 0.5 * (lat_edges[:-1] + lat_edges[1:])
    lon = 0.5 * (lon_edges[:-1] + lon_edges[1:])
    lat2, lon2 = np.meshgrid(np.deg2rad(lat), np.deg2rad(lon), indexing="ij")
    xyz = _EARTH_RADIUS_KM * np.stack(
        [np.cos(lat2) * np.cos(lon2), np.cos(lat2) * np.sin(lon2), np.sin(lat2)], axis=-1
    ).reshape(-1, 3)
    chord2 = np.maximum(2.0 * _EARTH_RADIUS_KM**2 - 2.0 * (xyz @ xyz.T), 0.0)
    hours = step_hours * np.arange(n_time, dtype=np.float64)
    chol_space = _rbf_cholesky(chord2, lengthscale_km)
    chol_time = _rbf_cholesky((hours[:, None] - hours[None, :]) ** 2, timescale_hours)
    rng = np.random.default_rng(seed)
    white = rng.standard_normal((n_time, n_lat * n_lon))
    field = chol_time @ white @ chol_space.T  # covariance K_time ⊗ K_space
    field = field + noise * rng.standard_normal(field.shape)
    values = (mean + std * field).reshape(n_time, n_lat, n_lon)
    times = np.datetime64("2000-01-01T00:00", "ns") + (hours * 3600e9).astype("timedelta64[ns]")
    return xr.Dataset(
        {
            name: (
                ("time", "lat", "lon"),
                values,
                {"units": units, "long_name": f"synthetic Gaussian-process {name}"},
            )
        },
        coords={
            "time": ("time", times),
            "lat": ("lat", lat, {"units": "degrees_north", "standard_name": "latitude"}),
            "lon": ("lon", lon, {"units": "degrees_east", "standard_name": "longitude"}),
        },
        attrs={
            "title": "Synthetic space-time Gaussian-process field on the sphere (xnp.datasets)",
            "lengthscale_km": lengthscale_km,
            "timescale_hours": timescale_hours,
            "noise": noise,
            "seed": seed,
        },
    )
