"""Synthetic datasets and hypothesis strategies for the data-layer tests."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import hypothesis.extra.numpy as hnp
import numpy as np
import pyproj
import pytest
import xarray as xr
from hypothesis import strategies as st

#: The real data: the folder named by $XNP_DATA, else ../shared/data beside the repository.
DATA_DIR = Path(
    os.environ.get("XNP_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data"
)

requires_data = pytest.mark.skipif(
    not DATA_DIR.is_dir(),
    reason=f"real test data folder {DATA_DIR} is absent (next to the repository, or set XNP_DATA)",
)


def open_real(name: str) -> xr.Dataset:
    """Open one of the shared real files, silencing its known decoding warnings."""
    path = DATA_DIR / name
    if not path.exists():
        pytest.skip(f"real test data file {path} is absent")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", xr.SerializationWarning)
        return xr.open_dataset(path).load()


def hourly_times(n: int, start: str = "2019-03-01", step_hours: int = 6) -> np.ndarray:
    """``n`` numpy datetimes ``step_hours`` apart."""
    return np.datetime64(start, "ns") + np.arange(n) * np.timedelta64(step_hours, "h")


def grid_dataset(
    nt: int = 8,
    ny: int = 5,
    nx: int = 6,
    *,
    seed: int = 0,
    nan_fraction: float = 0.0,
    lon0: float = -3.0,
    step_hours: int = 6,
    times: np.ndarray | None = None,
) -> xr.Dataset:
    """A small (time, lat, lon) dataset of a smooth field plus noise, with CF attributes."""
    rng = np.random.default_rng(seed)
    lat = 50.0 + np.arange(ny, dtype=np.float64)
    lon = lon0 + np.arange(nx, dtype=np.float64)
    values = 280.0 + lat[:, None] * 0.1 + lon[None, :] * 0.05 + rng.normal(size=(nt, ny, nx))
    values[rng.random(values.shape) < nan_fraction] = np.nan
    return xr.Dataset(
        {"t2m": (("time", "lat", "lon"), values, {"units": "K", "long_name": "2 m temperature"})},
        coords={
            "time": hourly_times(nt, step_hours=step_hours) if times is None else times,
            "lat": ("lat", lat, {"units": "degrees_north", "standard_name": "latitude"}),
            "lon": ("lon", lon, {"units": "degrees_east", "standard_name": "longitude"}),
        },
    )


def station_dataset(n_stations: int = 12, nt: int = 6, *, seed: int = 0) -> xr.Dataset:
    """A (time, station) dataset with lat/lon/elevation coordinates on the station dim."""
    rng = np.random.default_rng(seed)
    return xr.Dataset(
        {"t2m": (("time", "station"), 280 + rng.normal(size=(nt, n_stations)), {"units": "K"})},
        coords={
            "time": hourly_times(nt),
            "station": [f"S{i:03d}" for i in range(n_stations)],
            "lat": ("station", rng.uniform(50, 58, n_stations)),
            "lon": ("station", rng.uniform(-10, 2, n_stations)),
            "elevation": ("station", rng.uniform(0, 1000, n_stations), {"units": "m"}),
        },
    )


def curvilinear_dataset() -> xr.Dataset:
    """A (y, x) ocean-model-like field on 2-D nav_lat/nav_lon in 0..360 longitudes."""
    j, i = np.meshgrid(np.arange(4.0), np.arange(5.0), indexing="ij")
    return xr.Dataset(
        {"sst": (("y", "x"), np.arange(20.0).reshape(4, 5), {"units": "degC"})},
        coords={"nav_lat": (("y", "x"), 40 + j + 0.1 * i), "nav_lon": (("y", "x"), 350 + i + j)},
    )


def projected_dataset(with_mapping: bool = True) -> xr.Dataset:
    """A British National Grid (EPSG:27700) field, with or without a CF grid_mapping."""
    x = np.array([300_000.0, 350_000.0, 400_000.0])
    y = np.array([500_000.0, 600_000.0])
    ds = xr.Dataset(
        {"t2m": (("y", "x"), np.zeros((2, 3)), {"units": "K"})},
        coords={
            "x": ("x", x, {"standard_name": "projection_x_coordinate", "units": "m"}),
            "y": ("y", y, {"standard_name": "projection_y_coordinate", "units": "m"}),
        },
    )
    if with_mapping:
        ds["t2m"].attrs["grid_mapping"] = "crs"
        ds["crs"] = xr.DataArray(0, attrs=pyproj.CRS.from_epsg(27700).to_cf())
    return ds


@st.composite
def grids(draw: st.DrawFn) -> xr.Dataset:
    """Small gridded datasets: random sizes, NaNs, longitude convention and lat order."""
    nt = draw(st.integers(1, 3))
    ny = draw(st.integers(1, 4))
    nx = draw(st.integers(1, 5))
    values = draw(
        hnp.arrays(
            np.float64,
            (nt, ny, nx),
            elements=st.one_of(st.floats(-1e6, 1e6, allow_subnormal=False), st.just(np.nan)),
        )
    )
    if np.isnan(values).all():
        values.flat[0] = 1.0
    lat = np.linspace(-80.0, 80.0, ny) if draw(st.booleans()) else np.linspace(80.0, -80.0, ny)
    lon = (np.arange(nx) * 7.0 + draw(st.floats(-180.0, 359.0))).round(3)
    return xr.Dataset(
        {"v": (("time", "lat", "lon"), values, {"units": "m"})},
        coords={"time": hourly_times(nt), "lat": lat, "lon": lon},
    )
