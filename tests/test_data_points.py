from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from hypothesis import given, settings
from strategies import (
    curvilinear_dataset,
    grid_dataset,
    grids,
    hourly_times,
    projected_dataset,
    station_dataset,
)

import xnp
from xnp.data.covariates import covariate_channels, interpolate_dem
from xnp.data.flatten import predictions_to_xarray, to_points
from xnp.errors import (
    CoordinateError,
    DimensionError,
    EmptyDataError,
    IncompatibleUnitsError,
    ShapeError,
    VariableNotFoundError,
    XnpWarning,
)


@settings(max_examples=40, deadline=None)
@given(grids())
def test_grid_to_points_to_grid_round_trips_exactly(ds):
    before = ds.copy(deep=True)
    points = to_points(ds, "v")
    assert len(points) == int(np.isfinite(ds.v.values).sum())
    assert np.all((points.lon >= -180) & (points.lon < 180))
    back = points.scatter(points.f[:, 0], name="v", attrs=ds.v.attrs)
    xr.testing.assert_identical(back, ds.v)
    xr.testing.assert_identical(ds, before)  # the user's data is untouched


def test_points_of_a_grid_have_the_right_coordinates_and_times():
    ds = grid_dataset(nt=2, ny=2, nx=3)
    points = to_points(ds, "t2m")
    assert points.s.shape == (12, 2)
    assert points.dims == ("time", "lat", "lon")
    first = ds.t2m.isel(time=1, lat=1, lon=2)
    i = int(np.flatnonzero(points.index == 1 * 6 + 1 * 3 + 2)[0])
    assert points.s[i].tolist() == [float(first.lat), float(first.lon)]
    assert points.f[i, 0] == float(first)
    assert points.time[i] - points.time[0] == 6.0
    assert points.has_time


def test_missing_values_are_dropped_and_all_missing_is_an_error():
    ds = grid_dataset(nan_fraction=0.3, seed=1)
    assert len(to_points(ds, "t2m")) == int(ds.t2m.notnull().sum())
    assert len(to_points(ds, "t2m", dropna=False)) == ds.t2m.size
    with pytest.raises(EmptyDataError, match="missing"):
        to_points(ds * np.nan, "t2m")


def test_unknown_variable_lists_the_variables():
    with pytest.raises(VariableNotFoundError, match=r"'t2m'"):
        to_points(grid_dataset(), "tas")


def test_coordinates_only_targets_cover_every_location():
    grid = xr.Dataset(coords={"lat": [50.0, 51.0], "lon": [0.0, 1.0, 2.0]})
    points = to_points(grid)
    assert len(points) == 6
    assert points.f.shape == (6, 0)
    assert not points.has_time


def test_dataarray_input():
    da = grid_dataset().t2m
    assert len(to_points(da)) == da.size


def test_extra_dims_raise_or_flatten():
    ds = grid_dataset(nt=2).expand_dims(member=3)
    with pytest.raises(DimensionError, match=r"member.*isel") as info:
        to_points(ds, "t2m")
    assert "to_points and TaskSampler can instead" in str(info.value)  # not a fit argument
    points = to_points(ds, "t2m", extra_dims="flatten")
    assert len(points) == ds.t2m.size
    xr.testing.assert_equal(points.scatter(points.f[:, 0]), ds.t2m.drop_attrs())


def test_undecoded_time_is_reported_as_time_by_to_points_and_fit():
    ds = grid_dataset().assign_coords(time=np.arange(8))
    with pytest.raises(CoordinateError, match="not datetimes"):
        to_points(ds, "t2m")
    with pytest.raises(CoordinateError, match="not datetimes"):  # before any training
        ds.np.fit("t2m", model="bsa-tnp-tiny", steps=1, progress=False)


def test_time_dimension_without_coordinate_says_how_to_add_one():
    ds = grid_dataset().drop_vars("time")
    with pytest.raises(DimensionError, match="no time dimension") as info:
        to_points(ds, "t2m")
    found = re.search(r"give it datetimes: (.*?)\. Otherwise", str(info.value))
    assert found
    scope = {"ds": ds, "pd": pd}
    exec(found.group(1), scope)  # the recommended code runs as written
    assert to_points(scope["ds"], "t2m").has_time


def test_missing_station_coordinates_are_not_called_out_of_range():
    ds = station_dataset()
    ds["lon"].values[0] = np.nan  # used to pass silently: only latitude was checked
    with pytest.raises(CoordinateError, match="missing latitude/longitude"):
        to_points(ds, "t2m")


def test_several_variables_give_several_channels():
    ds = grid_dataset()
    ds["u"] = ds.t2m * 0 + 1.0
    ds["u"][0, 0, 0] = np.nan
    points = to_points(ds, ["t2m", "u"])
    assert points.f.shape == (ds.t2m.size - 1, 2)
    assert points.variables == ("t2m", "u")


def test_station_points_scatter_back_on_the_station_dim():
    ds = station_dataset()
    points = to_points(ds, "t2m")
    back = points.scatter(points.f[:, 0])
    assert back.dims == ("time", "station")
    xr.testing.assert_identical(back.coords.to_dataset(), ds.t2m.coords.to_dataset())


def test_curvilinear_and_projected_points():
    curvi = to_points(curvilinear_dataset(), "sst")
    assert len(curvi) == 20
    assert curvi.s[0].tolist() == [40.0, -10.0]
    proj = to_points(projected_dataset(), "t2m")
    assert len(proj) == 6
    assert np.all((proj.lat > 49) & (proj.lat < 56))


def test_cftime_noleap_gives_the_same_relative_hours_and_features():
    cf = np.asarray(
        xr.date_range("2001-03-01", periods=4, freq="6h", calendar="noleap", use_cftime=True)
    )
    covariates = ["hour_of_day", "day_of_year"]
    a = to_points(grid_dataset(nt=4, times=cf), "t2m", covariates=covariates)
    b = to_points(
        grid_dataset(nt=4, times=hourly_times(4, "2001-03-01")), "t2m", covariates=covariates
    )
    np.testing.assert_array_equal(a.time - a.time[0], b.time - b.time[0])
    np.testing.assert_allclose(a.x, b.x, atol=1e-12)  # 2001 is not a leap year


def test_time_covariates_have_the_expected_values():
    times = np.array(["2019-01-01T06:00"], "datetime64[ns]")
    ds = grid_dataset(nt=1, times=times, lon0=90.0)
    points = to_points(ds, "t2m", covariates=["hour_of_day", "solar_time", "day_of_year"])
    assert points.covariates == covariate_channels(["hour_of_day", "solar_time", "day_of_year"])
    np.testing.assert_allclose(points.x[0, :2], [1.0, 0.0], atol=1e-12)  # 06 UTC
    np.testing.assert_allclose(points.x[0, 2:4], [0.0, -1.0], atol=1e-12)  # 12 local at 90°E
    angle = 2 * np.pi * 0.25 / 365
    np.testing.assert_allclose(points.x[0, 4:], [np.sin(angle), np.cos(angle)])


def test_time_covariate_without_time_is_an_error():
    with pytest.raises(CoordinateError, match="needs a time"):
        to_points(grid_dataset().isel(time=0, drop=True), "t2m", covariates=["day_of_year"])


def test_elevation_from_coordinate_variable_and_user_covariate():
    ds = station_dataset()
    points = to_points(ds, "t2m", covariates=["elevation"])
    station = points.index % ds.sizes["station"]
    np.testing.assert_array_equal(points.x[:, 0], ds.elevation.values[station])
    grid = grid_dataset()
    grid["orog"] = (("lat", "lon"), np.full((5, 6), 1.5), {"units": "km"})
    grid["soil"] = (("lat", "lon"), np.arange(30.0).reshape(5, 6))
    points = to_points(grid, "t2m", covariates=["elevation", "soil"])
    assert points.covariates == ("elevation", "soil")
    assert np.all(points.x[:, 0] == 1500.0)
    with pytest.raises(VariableNotFoundError, match="neither built in"):
        to_points(grid, "t2m", covariates=["rain"])
    with pytest.raises(CoordinateError, match="elevation"):
        to_points(grid_dataset(), "t2m", covariates=["elevation"])


def test_points_with_a_missing_covariate_are_left_out_with_a_warning():
    grid = grid_dataset(nt=2)
    soil = np.arange(30.0).reshape(5, 6)
    soil[0, :2] = np.nan  # e.g. no soil over the sea
    grid["soil"] = (("lat", "lon"), soil)
    with pytest.warns(XnpWarning, match=r"4 of 60 points .* \['soil'\] .* left out"):
        points = to_points(grid, "t2m", covariates=["soil"])
    assert len(points) == 56
    assert np.isfinite(points.x).all()


def synthetic_dem(lon: np.ndarray) -> xr.DataArray:
    lat = np.arange(-90.0, 90.1, 1.0)
    terrain = 100.0 * lat[:, None] + 10.0 * np.cos(np.deg2rad(lon))[None, :]
    return xr.DataArray(terrain, coords={"lat": lat, "lon": lon}, dims=("lat", "lon"))


def test_dem_interpolation_is_bilinear_and_wraps_globally():
    dem = synthetic_dem(np.arange(0.0, 360.0, 1.0))
    lat = np.array([10.5, -20.25, 0.0, 0.0])
    lon = np.array([-170.5, 45.0, 359.5, -0.5])
    expected = 100.0 * lat + 10.0 * np.array(
        [np.cos(np.deg2rad(a)) * 0.5 + np.cos(np.deg2rad(b)) * 0.5 for a, b in
         [(189.0, 190.0), (45.0, 45.0), (359.0, 0.0), (359.0, 0.0)]]
    )  # fmt: skip
    np.testing.assert_allclose(interpolate_dem(dem, lat, lon), expected)
    shifted = synthetic_dem(np.arange(-180.0, 180.0, 1.0))
    np.testing.assert_allclose(interpolate_dem(shifted, lat, lon), expected)


def test_dem_covariate_and_points_outside_the_dem_are_dropped():
    regional = synthetic_dem(np.arange(-10.0, 0.5, 0.5)).sel(lat=slice(40, 60))
    ds = grid_dataset(lon0=-3.0)  # lon -3..2: the last two columns lie outside the DEM
    with pytest.warns(XnpWarning, match=r"\['elevation'\] and are left out"):
        points = to_points(ds, "t2m", covariates=["elevation"], dem=regional)
    assert len(points) == ds.sizes["time"] * 5 * 4
    np.testing.assert_allclose(
        points.x[:, 0], 100 * points.lat + 10 * np.cos(np.deg2rad(points.lon)), rtol=1e-3
    )
    with pytest.raises(DimensionError, match="DEM"):
        interpolate_dem(regional.expand_dims(band=2), np.zeros(1), np.zeros(1))
    # a DEM in feet is converted; one in units that are not a length is refused
    feet = (regional / 0.3048).assign_attrs(units="ft")
    with pytest.warns(XnpWarning, match="left out"):
        in_feet = to_points(ds, "t2m", covariates="elevation", dem=feet)
    np.testing.assert_allclose(in_feet.x, points.x, rtol=1e-6)
    with pytest.raises(IncompatibleUnitsError, match="not a length"):
        to_points(ds, "t2m", covariates=["elevation"], dem=regional.assign_attrs(units="degC"))


def test_one_place_with_scalar_coordinates():
    ds = station_dataset(nt=5).isel(station=1)  # as ds.sel(station="X") gives
    points = to_points(ds, "t2m", covariates="hour_of_day")
    assert len(points) == 5
    np.testing.assert_array_equal(points.lat, float(ds.lat))
    np.testing.assert_allclose(points.lon, float(ds.lon), rtol=1e-12)


def test_coordinates_that_are_not_numbers_are_refused():
    ds = station_dataset(nt=2)
    as_text = ds.assign_coords(lat=ds.lat.astype(str))  # as a CSV read without dtypes gives
    with pytest.raises(CoordinateError, match=r"'lat' holds <U.* not numbers.*astype\(float\)"):
        to_points(as_text, "t2m")


def test_predictions_to_xarray_on_a_grid():
    ds = grid_dataset(nt=1)
    targets = to_points(xr.Dataset(coords={"lat": ds.lat, "lon": ds.lon}))
    mean = np.arange(30.0)[:, None]
    out = predictions_to_xarray(targets, mean, mean * 0 + 2, ["t2m"], attrs={"t2m": ds.t2m.attrs})
    assert set(out.data_vars) == {"t2m_mean", "t2m_std"}
    assert out.t2m_mean.dims == ("lat", "lon")
    xr.testing.assert_identical(out.t2m_mean.lat, ds.lat)
    assert out.t2m_mean.attrs["units"] == "K"
    assert out.t2m_mean.attrs["long_name"] == "predictive mean of 2 m temperature"
    assert out.t2m_std.attrs["long_name"] == "predictive standard deviation of 2 m temperature"
    assert out.t2m_std.attrs["xnp_version"] == xnp.__version__
    assert xnp.__version__ in out.attrs["source"]
    with pytest.raises(ShapeError):
        predictions_to_xarray(targets, mean[:3], mean[:3], ["t2m"])


def test_predictions_on_stations_keep_station_coords():
    stations = station_dataset().isel(time=0)
    targets = to_points(stations.drop_vars("t2m").drop_vars("time"))
    out = predictions_to_xarray(targets, np.ones((12, 1)), np.ones((12, 1)), ["t2m"])
    assert out.t2m_mean.dims == ("station",)
    xr.testing.assert_identical(out.t2m_mean.elevation, stations.elevation.drop_vars("time"))
    assert "units" not in out.t2m_mean.attrs


def test_per_observation_times():
    ds = station_dataset().isel(time=0, drop=True)
    ds = ds.assign_coords(time=("station", hourly_times(12, step_hours=1)))
    points = to_points(ds, "t2m", covariates=["hour_of_day"])
    np.testing.assert_array_equal(points.time - points.time[0], np.arange(12.0))
    np.testing.assert_allclose(points.x[1], [np.sin(np.pi / 12), np.cos(np.pi / 12)])


def test_elevation_coordinate_in_other_length_units():
    ds = station_dataset(nt=2)
    metres = np.linspace(0.0, 900.0, ds.sizes["station"])
    in_m = to_points(ds.assign_coords(elevation=("station", metres, {"units": "m"})), "t2m",
                     covariates=["elevation"])  # fmt: skip
    for units, factor in (("ft", 0.3048), ("km", 1000.0), ("cm", 0.01)):
        other = ds.assign_coords(elevation=("station", metres / factor, {"units": units}))
        got = to_points(other, "t2m", covariates=["elevation"])
        np.testing.assert_allclose(got.x, in_m.x, rtol=1e-9, atol=1e-9)
    odd = ds.assign_coords(elevation=("station", metres, {"units": "degC"}))
    to_points(odd, "t2m")  # not used as a covariate: no error
    with pytest.raises(IncompatibleUnitsError, match="not a length"):
        to_points(odd, "t2m", covariates=["elevation"])
