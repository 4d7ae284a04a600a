"""Tests on the real files of ../shared/data (skipped when the folder is absent)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from strategies import DATA_DIR, open_real, requires_data

from xnp.data.coords import find_coords
from xnp.data.flatten import predictions_to_xarray, to_points
from xnp.data.sampler import TaskSampler
from xnp.data.tasks import ForecastTasks, SpatialTasks, WindowTasks
from xnp.errors import DimensionError

pytestmark = requires_data


@pytest.fixture(scope="module")
def era5() -> xr.Dataset:
    return open_real("era5_t2m_uk_2019-03-01_21.nc")


@pytest.fixture(scope="module")
def eraint() -> xr.Dataset:
    return open_real("eraint_uvz_monthly_global.nc")


@pytest.fixture(scope="module")
def uk_sites(era5) -> xr.Dataset:
    """HadISD station sites in the UK box, sampling the ERA5 field."""
    sites = pd.read_csv(DATA_DIR / "hadisd_station_locations.csv")
    box = sites.latitude.between(50, 58) & sites.longitude.between(-10, 2)
    sites = sites[box].reset_index(drop=True)
    at = {
        "latitude": xr.DataArray(sites.latitude.to_numpy(), dims="station"),
        "longitude": xr.DataArray(sites.longitude.to_numpy(), dims="station"),
    }
    return era5.sel(at, method="nearest").assign_coords(station=np.arange(len(sites)))


def test_era5_uk_grid_with_time(era5):
    layout = find_coords(era5, "t2m")
    assert layout.kind == "grid"
    assert layout.time == "time"  # found by name: its standard_name is forecast_reference_time
    assert layout.point_dims == ("latitude", "longitude")
    points = to_points(era5, "t2m", covariates=["hour_of_day", "day_of_year"])
    assert len(points) == 504 * 33 * 49
    assert points.x.shape == (len(points), 4)
    assert np.ptp(points.time) == 503.0
    xr.testing.assert_identical(
        points.scatter(points.f[:, 0], name="t2m", attrs=era5.t2m.attrs),
        era5.t2m.astype(np.float64),
    )


def test_era5_uk_forecast_tasks_follow_the_paper_setup(era5):
    sampler = TaskSampler(era5, "t2m", ForecastTasks(), batch_size=2, seed=0)
    assert sampler.validation_start == 504 - 51  # the last 10 % (51 hours) is held out
    for task in sampler.tasks(0):
        assert np.unique(task.context.t).tolist() == [-18.0, -12.0, -6.0, 0.0]
        assert np.unique(task.target.t).tolist() == [6.0]
        assert len(task.target) == 33 * 49
        assert task.reference_time + 6.0 < sampler.times[sampler.validation_start]
    batch = sampler.batch(0)
    assert batch.context.size == 8192
    assert batch.target.size == 2048
    assert sampler.normaliser.stats["t2m"].units == "K"


def test_era5_predictions_back_on_the_grid(era5):
    grid = xr.Dataset(coords={"latitude": era5.latitude, "longitude": era5.longitude})
    targets = to_points(grid)
    mean = np.full((len(targets), 1), 280.0)
    out = predictions_to_xarray(targets, mean, mean / 100, ["t2m"], attrs={"t2m": era5.t2m.attrs})
    assert out.t2m_mean.dims == ("latitude", "longitude")
    assert out.t2m_mean.attrs["units"] == "K"
    assert out.t2m_std.attrs["long_name"] == "predictive standard deviation of 2 metre temperature"
    xr.testing.assert_identical(out.t2m_mean.latitude, era5.latitude)


def test_eraint_global_poles_and_dateline(eraint):
    with pytest.raises(DimensionError, match="month"):
        to_points(eraint, "z")
    field = eraint.isel(month=0).sel(level=500)
    points = to_points(field, "z")
    assert len(points) == 241 * 480
    assert points.lat.min() == -90.0
    assert points.lat.max() == 90.0
    assert points.lon.min() == -180.0
    assert points.lon.max() < 180.0


def test_eraint_0_360_view_gives_the_same_points(eraint):
    field = eraint.isel(month=1).sel(level=850)
    shifted = field.assign_coords(longitude=field.longitude % 360).sortby("longitude")
    assert float(shifted.longitude.max()) > 180
    a, b = to_points(field, "u"), to_points(shifted, "u")

    def ordered(p):
        order = np.lexsort((p.lon, p.lat))
        return p.s[order], p.f[order]

    for x, y in zip(ordered(a), ordered(b), strict=True):
        np.testing.assert_array_equal(x, y)
    back = b.scatter(b.f[:, 0], name="u", attrs=shifted.u.attrs)
    xr.testing.assert_identical(back, shifted.u)  # scattered onto the 0..360 grid it came from


def test_eraint_windows_across_the_dateline(eraint):
    field = eraint.isel(month=0).sel(level=200)
    band = field.isel(longitude=np.r_[0:14, 466:480])  # 10° either side of the dateline
    sampler = TaskSampler(band, "u", WindowTasks(size=10.0), batch_size=8, seed=3)
    crossed = 0
    for task in sampler.tasks(0):
        lat, lon = np.concatenate([task.context.s, task.target.s]).T
        relative = (lon - lon[0] + 180.0) % 360.0 - 180.0  # longitudes seen from one point
        assert np.ptp(relative) <= 10.0
        assert np.ptp(lat) <= 10.0
        crossed += bool(lon.min() < -175 and lon.max() > 175)
    assert crossed > 0
    window = TaskSampler(field, "u", WindowTasks(size=3000.0, units="km"), batch_size=4)
    for task in window.tasks(0):
        assert np.ptp(np.concatenate([task.context.s, task.target.s])[:, 0]) <= 3000 / 111.195


def test_texas_stations_from_the_csv():
    table = pd.read_csv(DATA_DIR / "texas_wind_2018-02-26.csv")
    ds = table.set_index("station_id").to_xarray()
    ds["air_temperature_c"].attrs["units"] = "degC"
    before = ds.copy(deep=True)
    layout = find_coords(ds, "air_temperature_c")
    assert layout.kind == "station"
    assert layout.point_dims == ("station_id",)
    points = to_points(ds, "air_temperature_c")
    assert len(points) == 186
    np.testing.assert_allclose(points.lat, table.latitude)
    back = points.scatter(points.f[:, 0], "air_temperature_c", ds.air_temperature_c.attrs)
    xr.testing.assert_identical(back, ds.air_temperature_c)
    tasks = TaskSampler(ds, ["wind_speed_east_knots", "wind_speed_north_knots"], batch_size=2)
    assert tasks.batch(0).y.shape[-1] == 2
    xr.testing.assert_identical(ds, before)


def test_hadisd_sites_sample_era5_and_add_context(era5, uk_sites):
    assert uk_sites.sizes["station"] == 250
    layout = find_coords(uk_sites, "t2m")
    assert layout.kind == "station"
    points = to_points(uk_sites.isel(time=[0]), "t2m")
    grid_points = to_points(era5.isel(time=[0]), "t2m")
    on_grid = dict(zip(map(tuple, grid_points.s), grid_points.f[:, 0], strict=True))
    assert all(on_grid[tuple(s)] == f for s, f in zip(points.s, points.f[:, 0], strict=True))
    coarse = era5.coarsen(latitude=3, longitude=3, boundary="trim").mean()
    sampler = TaskSampler(
        {"stations": uk_sites, "coarse": coarse},
        "t2m",
        SpatialTasks(context_fraction=0.3),
        target_source="stations",
        batch_size=2,
    )
    for task in sampler.tasks(0):
        assert set(np.unique(task.context.source)) == {0, 1}
        assert (task.context.source == 1).sum() == coarse.sizes["latitude"] * 16
        assert len(task.target) == 250 - (task.context.source == 0).sum()
