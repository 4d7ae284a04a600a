from __future__ import annotations

import re

import numpy as np
import pandas as pd
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
from xnp.data.times import (
    check_time_axis,
    day_and_year_fractions,
    fractions_of_each,
    time_hours,
    validation_cut,
)
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
    with pytest.raises(CoordinateError, match="grid_mapping"):
        find_coords(ds, "t2m")
    km = ds.assign_coords(x=ds.x / 1000, y=ds.y / 1000)
    km.x.attrs["units"] = km.y.attrs["units"] = "km"
    lat_m, lon_m = latlon(ds, find_coords(ds, "t2m", crs="EPSG:27700"))
    lat_k, lon_k = latlon(km, find_coords(km, "t2m", crs="EPSG:27700"))
    np.testing.assert_allclose(lat_m, lat_k)
    np.testing.assert_allclose(lon_m, lon_k)


def test_missing_grid_mapping_recommends_a_grid_mapping_coordinate():
    ds = projected_dataset(with_mapping=False)
    with pytest.raises(CoordinateError, match="no map projection") as info:
        find_coords(ds, "t2m")
    message = str(info.value)
    assert "Pass the projection" not in message  # fit and predict take no crs=
    fixed = _fix(message, r"coordinate, e\.g\. (.*?)\. \(", ds)
    expected = latlon(projected_dataset(), find_coords(projected_dataset(), "t2m"))
    np.testing.assert_allclose(latlon(fixed, find_coords(fixed, "t2m")), expected)
    template = _fix(message, r"coordinate, e\.g\. (.*?)\. \(", xr.Dataset(coords=ds.coords))
    assert find_coords(template).kind == "projected"  # a coordinate-only target grid too


def test_latlon_named_y_x_without_attributes_recommends_cf_attributes():
    ds = grid_dataset().rename(lat="y", lon="x")
    ds["y"].attrs, ds["x"].attrs = {}, {}
    with pytest.raises(CoordinateError, match="no map projection") as info:
        find_coords(ds, "t2m")
    fixed = _fix(str(info.value), r"say so: (.*?)\. Otherwise", ds)
    layout = find_coords(fixed, "t2m")
    assert (layout.kind, layout.lat, layout.lon) == ("grid", "y", "x")


def test_grid_mapping_dropped_by_a_selection_says_to_keep_it():
    ds = projected_dataset()
    with pytest.raises(CoordinateError, match=r"set_coords\('crs'\)"):
        find_coords(ds[["t2m"]], "t2m")
    kept = ds.set_coords("crs")[["t2m"]]
    assert find_coords(kept, "t2m").kind == "projected"


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
    assert "Name them explicitly" not in str(info.value)  # fit and predict take no lat=
    nemo = curvilinear_dataset().rename(nav_lat="gphit", nav_lon="glamt")  # NEMO's own names
    with pytest.raises(CoordinateError, match=r"attrs\.update") as info:
        find_coords(nemo, "sst")
    message = str(info.value).replace("nav_lat", "gphit").replace("nav_lon", "glamt")
    fixed = _fix(message, r"CF attributes, e\.g\. (.*?), or rename", nemo)
    assert (find_coords(fixed, "sst").kind, find_coords(fixed, "sst").lat) == (
        "curvilinear",
        "gphit",
    )
    renamed = _fix(message, r"rename them: (.*?)\. \(", nemo)
    assert find_coords(renamed, "sst").lat == "lat"


def test_unknown_variable_lists_variables():
    with pytest.raises(VariableNotFoundError, match="'t2m'") as info:
        resolve_variables(grid_dataset(), "tas")
    assert isinstance(info.value, KeyError)


def test_latitude_out_of_range():
    ds = grid_dataset().assign_coords(lat=np.linspace(80, 120, 5))
    with pytest.raises(CoordinateError, match=r"outside \[-90, 90\]"):
        latlon(ds, find_coords(ds, "t2m"))


@pytest.mark.parametrize(
    ("name", "degrees"), [("lat", np.linspace(50.0, 54.0, 5)), ("lon", np.arange(-3.0, 3.0))]
)
def test_radians_by_units_are_an_error(name, degrees):
    ds = grid_dataset()
    ds = ds.assign_coords({name: (name, np.deg2rad(degrees), {"units": "radians"})})
    with pytest.raises(CoordinateError, match="radians") as info:
        latlon(ds, find_coords(ds, "t2m"))
    fixed = _fix(str(info.value), r"Convert it: (.*)\.$", ds)
    lat, lon = latlon(fixed, find_coords(fixed, "t2m"))
    np.testing.assert_allclose(lat[:, 0] if name == "lat" else lon[0], degrees)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
@pytest.mark.parametrize("name", ["lat", "lon"])
def test_missing_station_coordinates_have_their_own_message(name, bad):
    ds = station_dataset()
    ds[name].values[3] = bad
    with pytest.raises(CoordinateError, match="1 point") as info:
        latlon(ds, find_coords(ds, "t2m"))
    message = str(info.value)
    assert "missing latitude/longitude" in message
    assert "swapped" not in message
    fixed = _fix(message, r"Drop them: (.*)\.$", ds)
    assert fixed.sizes["station"] == ds.sizes["station"] - 1
    assert np.isfinite(latlon(fixed, find_coords(fixed, "t2m"))).all()


def test_missing_grid_and_curvilinear_coordinates():
    ds = grid_dataset()
    ds["lat"] = ds.lat.copy(data=np.where(np.arange(5) == 1, np.nan, ds.lat.values))
    with pytest.raises(CoordinateError, match="6 point") as info:
        latlon(ds, find_coords(ds, "t2m"))
    fixed = _fix(str(info.value), r"Drop them: (.*)\.$", ds)
    assert latlon(fixed, find_coords(fixed, "t2m"))[0].shape == (4, 6)
    curvi = curvilinear_dataset()
    curvi["nav_lat"][1, 2] = np.nan
    with pytest.raises(CoordinateError, match=r"1 point.*cannot be dropped"):
        latlon(curvi, find_coords(curvi, "sst"))


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


def _fix(message: str, pattern: str, ds: xr.Dataset) -> xr.Dataset:
    """Run the code an error message recommends (the first group of ``pattern``) on ``ds``."""
    found = re.search(pattern, message)
    assert found, f"no {pattern!r} in {message!r}"
    scope = {"ds": ds, "np": np, "pd": pd, "xr": xr, "pyproj": pyproj}
    exec(found.group(1), scope)  # the message's code must run as written
    return scope["ds"]


@pytest.mark.parametrize(
    ("name", "attrs"),
    [
        ("time", {}),
        ("t", {}),
        ("valid_time", {}),
        ("obs", {"standard_name": "time"}),
        ("obs", {"axis": "T"}),
    ],
)
def test_undecoded_time_is_an_error_not_an_extra_dimension(name, attrs):
    ds = grid_dataset().rename(time=name).assign_coords({name: (name, np.arange(8), attrs)})
    with pytest.raises(CoordinateError, match="not datetimes") as info:
        find_coords(ds, "t2m")
    message = str(info.value)
    assert "decode_cf" in message
    assert ("rename" in message) == (not attrs)  # renaming does not help when CF says time
    decoded = _fix(message, r"decode them: (.*?), or assign", ds)
    assert find_coords(decoded, "t2m").time_dim == name
    assigned = _fix(message, r"assign datetimes: (.*?)\.(?: If|$)", ds)
    assert find_coords(assigned, "t2m").time_dim == name


def test_time_with_cf_units_since_is_to_be_decoded():
    hours = ("hours", np.arange(8.0) * 6, {"units": "hours since 2019-03-01"})
    ds = grid_dataset().rename(time="hours").assign_coords(hours=hours)
    with pytest.raises(CoordinateError, match=r"xr\.decode_cf\(ds\)") as info:
        find_coords(ds, "t2m")
    assert "rename" not in str(info.value)
    layout = find_coords(xr.decode_cf(ds), "t2m")
    assert layout.time_dim == "hours"


@pytest.mark.parametrize(
    ("values", "pattern"),
    [
        (hourly_times(8) - hourly_times(8)[0], r"reference date: (.*?)\. If"),
        (np.datetime_as_string(hourly_times(8), unit="h"), r"Parse them: (.*?)\. If"),
    ],
)
def test_timedelta_or_string_time_says_how_to_convert(values, pattern):
    ds = grid_dataset().assign_coords(time=values)
    with pytest.raises(CoordinateError, match="not datetimes") as info:
        find_coords(ds, "t2m")
    assert find_coords(_fix(str(info.value), pattern, ds), "t2m").time_dim == "time"


def test_undecoded_scalar_time_and_explicit_time_are_errors():
    ds = grid_dataset().assign_coords(time=np.arange(8))
    with pytest.raises(CoordinateError, match="not datetimes"):
        find_coords(ds.isel(time=0), "t2m")
    with pytest.raises(CoordinateError, match="not datetimes"):
        find_coords(ds, "t2m", time="time")


def test_numeric_coordinate_not_named_like_time_is_not_time():
    ds = grid_dataset().rename(time="step").assign_coords(step=np.arange(8))
    layout = find_coords(ds, "t2m")
    assert layout.time is None
    assert layout.extra_dims == ("step",)
    both = grid_dataset().assign_coords(t=("time", np.arange(8)))  # a datetime time wins
    assert find_coords(both, "t2m").time == "time"


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


@pytest.mark.parametrize("calendar", ["standard", "noleap", "360_day"])
def test_fractions_of_repeated_times_are_those_of_each_time(calendar):
    """The fast path (each distinct time once) against the reference, time by time."""
    rng = np.random.default_rng(4)
    times = np.asarray(xr.date_range("2019-12-30T03", periods=40, freq="7h", calendar=calendar,
                                     use_cftime=calendar != "standard"))  # fmt: skip
    values = times[rng.integers(0, 40, (30, 7))]  # points at repeated times, 2-d
    day, year = day_and_year_fractions(values)
    ref_day, ref_year = fractions_of_each(values.ravel())
    assert day.shape == year.shape == (30, 7)
    np.testing.assert_allclose(day.ravel(), ref_day, rtol=0, atol=1e-12)
    np.testing.assert_allclose(year.ravel(), ref_year, rtol=0, atol=1e-12)
    # leap years and sub-second times (the reference counts whole seconds)
    odd = np.array(["2020-02-29T23:59:59.75", "2021-01-01", "1900-03-01T06:30"],
                   "datetime64[ms]")  # fmt: skip
    for got, want in zip(day_and_year_fractions(odd), fractions_of_each(odd), strict=True):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


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


def test_timezone_aware_time_is_an_error_with_the_fix():
    utc = pd.date_range("2019-03-01", periods=8, freq="6h", tz="UTC")
    ds = grid_dataset().assign_coords(time=utc)
    with pytest.raises(CoordinateError, match="timezone-aware") as info:
        find_coords(ds, "t2m")
    assert "ds.assign_coords(time=ds.indexes['time'].tz_convert(None))" in str(info.value)
    fixed = _fix(str(info.value), r"drop the timezone: (.*)\.$", ds)
    assert find_coords(fixed, "t2m").time_dim == "time"
    np.testing.assert_array_equal(fixed.time.values, hourly_times(8).astype(fixed.time.dtype))

    paris = pd.date_range("2020-01-01", periods=12, freq="h", tz="Europe/Paris")
    obs = station_dataset().isel(time=0, drop=True).assign_coords(time=("station", paris))
    with pytest.raises(CoordinateError, match="timezone-aware") as info:
        find_coords(obs, "t2m")
    fixed = _fix(str(info.value), r"drop the timezone: (.*)\.$", obs)
    assert find_coords(fixed, "t2m").time == "time"
    assert fixed.time.values[0] == np.datetime64("2019-12-31T23:00")


def test_time_hours_counts_in_the_unit_of_the_data():
    old = np.array(["1500-01-01T00", "1500-01-01T06"], "datetime64[s]")
    expected = (old - np.datetime64("1970-01-01", "s")).astype(np.float64) / 3600.0
    np.testing.assert_array_equal(time_hours(old), expected)
    np.testing.assert_array_equal(time_hours(old.astype("datetime64[us]")), expected)
    days = np.array(["1970-01-02", "2001-03-01"], "datetime64[D]")
    np.testing.assert_array_equal(time_hours(days), time_hours(days.astype("datetime64[ns]")))
    months = np.array(["1969-12", "1970-02"], "datetime64[M]")
    np.testing.assert_array_equal(time_hours(months), [-744.0, 744.0])

    yearly = xr.date_range("2250-01-01", periods=30, freq="YS", unit="s")
    ds = station_dataset(nt=30).assign_coords(time=yearly)
    assert ds.time.dtype == np.dtype("datetime64[s]")
    assert find_coords(ds, "t2m").time_dim == "time"
    assert (np.diff(time_hours(ds.time.values)) > 0).all()


def test_missing_times_are_named_with_the_fix():
    assert np.isnan(time_hours(np.array(["2020-01-01", "NaT"], "datetime64[ns]"))[1])
    with pytest.raises(CoordinateError, match=r"1 missing \(NaT\)"):
        check_time_axis(np.array([0.0, np.nan, 12.0]), "time")

    times = pd.DatetimeIndex(["2019-03-01T00", "2019-03-01T06", "NaT", "2019-03-01T18"])
    axis = station_dataset(nt=4).assign_coords(time=times)
    with pytest.raises(CoordinateError, match=r"1 missing \(NaT\)") as info:
        find_coords(axis, "t2m")
    assert "sortby" not in str(info.value)
    fixed = _fix(str(info.value), r"Drop those times: (.*)\.$", axis)
    assert fixed.sizes["time"] == 3
    assert find_coords(fixed, "t2m").time_dim == "time"

    per_point = pd.DatetimeIndex(["2019-03-01", "NaT", "NaT"] + ["2019-03-02"] * 9)
    obs = station_dataset().isel(time=0, drop=True).assign_coords(time=("station", per_point))
    with pytest.raises(CoordinateError, match=r"2 missing \(NaT\)") as info:
        find_coords(obs, "t2m")
    fixed = _fix(str(info.value), r"Drop those observations: (.*)\.$", obs)
    assert fixed.sizes["station"] == 10
    assert find_coords(fixed, "t2m").time == "time"


def _long_form_table() -> xr.Dataset:
    rows = [
        {"station": f"s{s}", "time": t, "lat": 50.0 + s, "lon": 1.0 + s, "t2m": float(s)}
        for s in range(3)
        for t in pd.date_range("2020-01-01", periods=5, freq="D")
        if (s, t.day) != (2, 2)
    ]
    return pd.DataFrame(rows).set_index(["station", "time"]).to_xarray()


def test_long_form_table_with_latlon_along_time_is_an_error_with_the_fix():
    ds = _long_form_table()
    assert ds["lat"].dims == ("station", "time")
    with pytest.raises(CoordinateError, match="vary along the time dimension 'time'") as info:
        find_coords(ds, "t2m")
    message = str(info.value)
    assert "Reshape" not in message
    fixed = _fix(message, r"one position per station: (.*?)\. If", ds)
    layout = find_coords(fixed, "t2m")
    assert (layout.kind, layout.point_dims, layout.time_dim) == ("station", ("station",), "time")
    np.testing.assert_array_equal(fixed["lat"].values, [50.0, 51.0, 52.0])
    stacked = _fix(message, r"each observation a point: (.*)\.$", ds)
    layout = find_coords(stacked, "t2m")
    assert (layout.point_dims, layout.time, layout.time_dim) == (("obs",), "time", None)


def test_datetime_metadata_along_the_points_is_not_time():
    installed = pd.to_datetime(["1990-01-01", "2001-05-01", "2010-07-01"] * 4)
    st = station_dataset().isel(time=0, drop=True)
    st = st.assign_coords(installed=("station", installed))
    layout = find_coords(st, "t2m")
    assert (layout.time, layout.time_dim) == (None, None)
    assert find_coords(st.assign_coords(time=station_dataset().time), "t2m").time == "time"
    with_time = station_dataset().assign_coords(installed=("station", installed))
    assert find_coords(with_time, "t2m").time == "time"
    # Named or CF-identified as time, a datetime along the points is one time per observation.
    assert find_coords(st.rename(installed="date"), "t2m").time == "date"
    st["installed"].attrs["standard_name"] = "time"
    assert find_coords(st, "t2m").time == "installed"
    # A datetime along a dimension of its own is still the time axis.
    other = st.drop_vars("installed").expand_dims(when=3, axis=0)
    other = other.assign_coords(when=hourly_times(3))
    assert find_coords(other, "t2m").time_dim == "when"
