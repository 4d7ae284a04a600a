from __future__ import annotations

import numpy as np
import pyproj
import pytest
import xarray as xr
from strategies import (
    curvilinear_dataset,
    grid_dataset,
    hourly_times,
    projected_dataset,
    station_dataset,
)

from xnp.data.coords import VariableNotFoundError, find_coords, latlon, resolve_variables
from xnp.data.times import check_time_axis, day_and_year_fractions, time_hours, validation_cut
from xnp.errors import ConfigError, CoordinateError, DimensionError, EmptyDataError, XnpError


def test_regular_grid_layout():
    layout = find_coords(grid_dataset(), "t2m")
    assert layout.kind == "grid"
    assert (layout.lat, layout.lon, layout.time) == ("lat", "lon", "time")
    assert layout.point_dims == ("lat", "lon")
    assert layout.time_dim == "time"
    assert layout.extra_dims == ()


def test_fallback_names_without_attributes():
    ds = grid_dataset().rename(lat="latitude", lon="longitude", time="valid_time")
    for name in ("latitude", "longitude"):
        ds[name].attrs = {}
    layout = find_coords(ds, "t2m")
    assert (layout.lat, layout.lon, layout.time) == ("latitude", "longitude", "valid_time")


def test_explicit_names_override_discovery():
    ds = grid_dataset().rename(lat="phi", lon="lam")
    for name in ("phi", "lam"):
        ds[name].attrs = {}
    with pytest.raises(CoordinateError, match="phi"):
        find_coords(ds, "t2m")
    layout = find_coords(ds, "t2m", lat="phi", lon="lam")
    assert layout.point_dims == ("phi", "lam")


def test_curvilinear_layout_and_wrapped_longitudes():
    ds = curvilinear_dataset()
    layout = find_coords(ds, "sst")
    assert layout.kind == "curvilinear"
    assert layout.point_dims == ("y", "x")
    lat, lon = latlon(ds, layout)
    assert lat.shape == (4, 5)
    assert lon.min() >= -180.0
    assert lon.max() < 180.0
    np.testing.assert_allclose(lon[0, 0], -10.0)


def test_projected_grid_from_grid_mapping_matches_pyproj():
    ds = projected_dataset()
    layout = find_coords(ds, "t2m")
    assert layout.kind == "projected"
    assert layout.point_dims == ("y", "x")
    lat, lon = latlon(ds, layout)
    to_geo = pyproj.Transformer.from_crs(27700, 4326, always_xy=True)
    ref_lon, ref_lat = to_geo.transform(350_000.0, 600_000.0)
    np.testing.assert_allclose([lat[1, 1], lon[1, 1]], [ref_lat, ref_lon], atol=1e-9)


def test_projected_grid_with_explicit_crs_and_km_units():
    ds = projected_dataset(with_mapping=False)
    with pytest.raises(CoordinateError, match="crs="):
        find_coords(ds, "t2m")
    km = ds.assign_coords(x=ds.x / 1000, y=ds.y / 1000)
    km.x.attrs["units"] = km.y.attrs["units"] = "km"
    lat_m, lon_m = latlon(ds, find_coords(ds, "t2m", crs="EPSG:27700"))
    lat_k, lon_k = latlon(km, find_coords(km, "t2m", crs="EPSG:27700"))
    np.testing.assert_allclose(lat_m, lat_k)
    np.testing.assert_allclose(lon_m, lon_k)


def test_station_layout_with_elevation():
    layout = find_coords(station_dataset(), "t2m")
    assert layout.kind == "station"
    assert layout.point_dims == ("station",)
    assert layout.elevation == "elevation"


def test_elevation_from_geopotential_and_scalar_height_ignored():
    ds = grid_dataset().assign_coords(height=2.0)
    assert find_coords(ds, "t2m").elevation is None  # scalar 2 m height is not terrain
    zs = xr.DataArray(np.full((5, 6), 9.80665 * 100), dims=("lat", "lon"))
    zs.attrs = {"units": "m**2 s**-2", "standard_name": "surface_geopotential"}
    layout = find_coords(ds.assign(zs=zs), "t2m")
    assert layout.elevation == "zs"
    assert layout.elevation_scale == pytest.approx(1 / 9.80665)


def test_extra_dims_are_reported():
    ds = grid_dataset().expand_dims(member=3)
    assert find_coords(ds, "t2m").extra_dims == ("member",)


def test_missing_latlon_lists_present_coordinates():
    ds = xr.Dataset({"v": (("a", "b"), np.zeros((2, 2)))}, coords={"a": [0, 1], "b": [0, 1]})
    with pytest.raises(CoordinateError, match=r"'a', 'b'") as info:
        find_coords(ds, "v")
    assert isinstance(info.value, XnpError)


def test_unknown_variable_lists_variables():
    with pytest.raises(VariableNotFoundError, match="'t2m'") as info:
        resolve_variables(grid_dataset(), "tas")
    assert isinstance(info.value, KeyError)


def test_latitude_out_of_range():
    ds = grid_dataset().assign_coords(lat=np.linspace(80, 120, 5))
    with pytest.raises(CoordinateError, match=r"outside \[-90, 90\]"):
        latlon(ds, find_coords(ds, "t2m"))


@pytest.mark.parametrize(
    ("times", "what"),
    [
        (hourly_times(3)[[0, 1, 1]], "duplicate"),
        (hourly_times(3)[[0, 2, 1]], "decreasing"),
    ],
)
def test_duplicate_or_unsorted_times(times, what):
    ds = grid_dataset(nt=3, times=times)
    with pytest.raises(CoordinateError, match=what):
        find_coords(ds, "t2m")


def test_time_not_datetime_is_not_time():
    ds = grid_dataset().assign_coords(time=np.arange(8))
    assert find_coords(ds, "t2m").time is None
    with pytest.raises(CoordinateError, match="not datetimes"):
        find_coords(ds, "t2m", time="time")


@pytest.mark.parametrize("calendar", ["noleap", "360_day", "standard"])
def test_cftime_and_numpy_give_the_same_hours(calendar):
    cf = xr.date_range("2001-02-27", periods=10, freq="6h", calendar=calendar, use_cftime=True)
    np_times = hourly_times(10, start="2001-02-27")
    cf_hours, np_hours = time_hours(np.asarray(cf)), time_hours(np_times)
    # Relative hours agree in every calendar; hours since 1970 count the calendar's own days.
    np.testing.assert_array_equal(cf_hours - cf_hours[0], np_hours - np_hours[0])
    if calendar == "standard":
        np.testing.assert_array_equal(cf_hours, np_hours)
    ds = grid_dataset(nt=10, times=np.asarray(cf))
    assert find_coords(ds, "t2m").time_dim == "time"


def test_day_and_year_fractions_respect_the_calendar():
    cf = xr.date_range("2001-12-30T12", periods=1, calendar="360_day", use_cftime=True)
    day, year = day_and_year_fractions(np.asarray(cf))
    assert day[0] == 0.5
    assert year[0] == pytest.approx((359 + 0.5) / 360)


def test_check_time_axis_accepts_increasing():
    check_time_axis(np.array([0.0, 1.0, 5.0]), "time")


def test_validation_cut():
    assert validation_cut(10, 0.1) == 9
    assert validation_cut(10, 0.0) == 10
    with pytest.raises(ConfigError):
        validation_cut(10, 1.0)
    with pytest.raises(EmptyDataError):
        validation_cut(1, 0.5)


def test_time_on_spatial_dims_is_per_point():
    ds = station_dataset().isel(time=0, drop=True)
    ds = ds.assign_coords(time=("station", hourly_times(12)))
    layout = find_coords(ds, "t2m")
    assert layout.time == "time"
    assert layout.time_dim is None


def test_two_dimensional_time_is_rejected():
    ds = grid_dataset(nt=2).expand_dims(step=2)
    ds = ds.assign_coords(valid=(("step", "time"), np.tile(hourly_times(2), (2, 1))))
    with pytest.raises(DimensionError, match="valid"):
        find_coords(ds.drop_vars("time"), "t2m")
