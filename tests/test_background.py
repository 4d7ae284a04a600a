"""``predict(..., background=)``: the departures from a background field are interpolated.

The fast path is checked against the slow reference spelt out by hand: subtract
the background at the stations (interpolated with numpy), predict the departures,
add the background at the targets.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from strategies import DATA_DIR, open_real, requires_data

import xnp
from xnp.errors import ConfigError, CoordinateError, IncompatibleUnitsError
from xnp.prediction.background import restore, subtract, values_at


@pytest.fixture(scope="module")
def model():
    return xnp.pretrained("gp-sphere")


TIMES = pd.date_range("2020-01-01", periods=3, freq="6h")  # hours 0, 6, 12


def stations(n: int = 30, seed: int = 0) -> xr.Dataset:
    """A field with a sharp fixed pattern (the background's) plus a smooth anomaly, 3 times."""
    rng = np.random.default_rng(seed)
    lat, lon = rng.uniform(41, 49, n), rng.uniform(1, 9, n)
    smooth = 0.3 * lat - 0.2 * lon + np.sin(lat / 2)
    value = np.stack([280 + h / 6 + smooth + np.cos(3 * lon) for h in TIMES.hour])
    return xr.Dataset(
        {"t": (("time", "station"), value, {"units": "K"})},
        coords={"time": TIMES, "lat": ("station", lat), "lon": ("station", lon)},
    )


def climatology() -> xr.DataArray:
    """The fixed pattern per hour of day on a 0.25° grid (read at the points by interpolation)."""
    lat, lon = np.arange(40.0, 50.01, 0.25), np.arange(0.0, 10.01, 0.25)
    hours = np.arange(0, 24, 6)
    values = 280 + hours[:, None, None] / 6 + np.cos(3 * lon)[None, None, :] + 0 * lat[:, None]
    return xr.DataArray(values, coords={"hour": hours, "lat": lat, "lon": lon},
                        dims=("hour", "lat", "lon"), attrs={"units": "K"})  # fmt: skip


def targets() -> xr.Dataset:
    return xr.Dataset(coords={"lat": np.linspace(42, 48, 4), "lon": np.linspace(2, 8, 5)})


def by_hand(clim: xr.DataArray, lat: np.ndarray, lon: np.ndarray, hours: np.ndarray) -> np.ndarray:
    """Bilinear interpolation of the climatology, in numpy: [time, point]."""
    i = np.searchsorted(clim.lat.values, lat) - 1
    j = np.searchsorted(clim.lon.values, lon) - 1
    fy = (lat - clim.lat.values[i]) / (clim.lat.values[i + 1] - clim.lat.values[i])
    fx = (lon - clim.lon.values[j]) / (clim.lon.values[j + 1] - clim.lon.values[j])
    out = []
    for h in hours:
        g = clim.sel(hour=h).values
        out.append((1 - fy) * (1 - fx) * g[i, j] + (1 - fy) * fx * g[i, j + 1]
                   + fy * (1 - fx) * g[i + 1, j] + fy * fx * g[i + 1, j + 1])  # fmt: skip
    return np.stack(out)


def test_background_prediction_is_the_departures_predicted_by_hand(model):
    data, clim, tgt = stations(), climatology(), targets()
    hours = TIMES.hour.values
    at_stations = by_hand(clim, data.lat.values, data.lon.values, hours)
    departures = data.copy(deep=True)
    departures["t"] = departures.t - at_stations
    reference = xnp.predict(model, departures, tgt, trend="linear")
    lat, lon = np.meshgrid(tgt.lat.values, tgt.lon.values, indexing="ij")
    at_targets = by_hand(clim, lat.ravel(), lon.ravel(), hours).reshape(3, *lat.shape)
    pred = xnp.predict(model, data, tgt, trend="linear", background=clim)
    np.testing.assert_allclose(pred.t_mean, reference.t_mean + at_targets, rtol=0, atol=1e-4)
    np.testing.assert_allclose(pred.t_std, reference.t_std, rtol=1e-6)
    assert pred.t_mean.attrs["units"] == "K"
    assert "background" in pred.attrs["xnp_background"]
    # and it is not the prediction without the background (the test would see no effect)
    plain = xnp.predict(model, data, tgt, trend="linear")
    assert float(abs(plain.t_mean - pred.t_mean).max()) > 0.1


def test_the_background_helps_where_it_knows_the_fixed_pattern(model):
    data, clim = stations(n=60, seed=2), climatology()
    truth = stations(n=200, seed=9)
    where = truth.drop_vars("t")
    plain = xnp.predict(model, data, where, trend="linear")
    with_bg = xnp.predict(model, data, where, trend="linear", background=clim)
    err = {k: float(np.sqrt(((p.t_mean - truth.t) ** 2).mean()))
           for k, p in (("plain", plain), ("background", with_bg))}  # fmt: skip
    assert err["background"] < 0.5 * err["plain"], err


def test_an_hourly_climatology_is_read_at_each_times_hour(model):
    data, clim, tgt = stations(), climatology(), targets()
    by_hour = xnp.predict(model, data, tgt, background=clim)
    per_time = xnp.predict(model, data, tgt, background=clim.sel(hour=data.time.dt.hour))
    np.testing.assert_allclose(by_hour.t_mean, per_time.t_mean, rtol=1e-7)


def test_a_constant_background_changes_nothing_for_a_zero_shot_model(model):
    # the zero-shot model standardises each context by its own mean: a shift moves
    # its prediction by the same amount
    data, tgt = stations(), targets()
    plain = xnp.predict(model, data, tgt)
    flat = xr.DataArray(np.full((2, 2), 5.0), coords={"lat": [40.0, 50.0], "lon": [0.0, 10.0]})
    shifted = xnp.predict(model, data, tgt, background=flat)
    np.testing.assert_allclose(shifted.t_mean, plain.t_mean, rtol=0, atol=1e-4)
    np.testing.assert_allclose(shifted.t_std, plain.t_std, rtol=1e-4)


def test_lazy_calibrated_and_sampled_predictions_take_the_background(model):
    data, clim, tgt = stations(), climatology(), targets()
    eager = xnp.predict(model, data, tgt, background=clim, calibrate=True)
    lazy = xnp.predict(model, data, tgt, background=clim, calibrate=True,
                       chunks={"lat": 2, "lon": 3})  # fmt: skip
    assert lazy.t_mean.chunks is not None
    np.testing.assert_allclose(lazy.t_mean.values, eager.t_mean.values, rtol=1e-6)
    np.testing.assert_allclose(lazy.t_std.values, eager.t_std.values, rtol=1e-5)
    # calibration cross-validates the departures: the same factors as by hand
    departures = subtract(data, {"t": clim})
    by_hand_cal = xnp.predict(model, departures, tgt, calibrate=True)
    assert by_hand_cal.attrs["xnp_calibration"] == eager.attrs["xnp_calibration"]
    # joint samples are shifted as the mean is
    one = data.isel(time=[0])
    s = xnp.predict(model, one, tgt, background=clim, samples=2, seed=1)
    s_ref = xnp.predict(model, subtract(one, {"t": clim}), tgt, samples=2, seed=1)
    shift = values_at(clim, s.t_mean)
    np.testing.assert_allclose(s.t_samples, s_ref.t_samples + shift, rtol=0, atol=1e-4)


def test_the_users_data_and_background_are_not_modified(model):
    data, clim = stations(), climatology()
    before, clim_before = data.copy(deep=True), clim.copy(deep=True)
    xnp.predict(model, data, targets(), background=clim)
    xr.testing.assert_identical(data, before)
    xr.testing.assert_identical(clim, clim_before)


def test_gap_filling_on_the_backgrounds_own_grid_is_exact_there(model):
    # on the background's nodes, linear interpolation returns its values exactly
    clim = climatology().isel(hour=0, drop=True)
    grid = clim.to_dataset(name="t").isel(lat=slice(2, 8), lon=slice(2, 8))
    np.testing.assert_array_equal(values_at(clim, grid.t).values, grid.t.values)
    pred = restore(xr.Dataset({"t_mean": xr.zeros_like(grid.t)}), {"t": clim})
    np.testing.assert_array_equal(pred.t_mean.values, grid.t.values)


def test_background_errors(model):
    data, clim, tgt = stations(), climatology(), targets()
    small = clim.sel(lat=slice(44, 46))
    with pytest.raises(ConfigError, match="no value at"):
        xnp.predict(model, data, tgt, background=small)
    with pytest.raises(ConfigError, match="lacks some"):
        xnp.predict(model, data, tgt, background=clim.sel(hour=[0, 6]))
    with pytest.raises(IncompatibleUnitsError, match="degC"):
        xnp.predict(model, data, tgt, background=clim.assign_attrs(units="degC"))
    with pytest.raises(CoordinateError, match="matches no coordinate"):
        xnp.predict(model, data, tgt, background=clim.rename(hour="level"))
    with pytest.raises(ConfigError, match="does not predict"):
        xnp.predict(model, data, tgt, background={"u": clim})
    with pytest.raises(ConfigError, match="DataArray"):
        xnp.predict(model, data, tgt, background=np.zeros(3))
    with pytest.raises(ConfigError, match="single number"):
        xnp.predict(model, data, tgt, background=xr.DataArray(1.0))


def test_a_forecast_model_refuses_a_background():
    from xnp.data import ForecastTasks

    grid = xr.Dataset(
        {"t": (("time", "lat", "lon"), np.random.default_rng(0).normal(size=(30, 4, 5)),
               {"units": "K"})},
        coords={"time": pd.date_range("2020-01-01", periods=30, freq="h"),
                "lat": np.linspace(50, 53, 4), "lon": np.linspace(0, 4, 5)},
    )  # fmt: skip
    fitted = grid.np.fit("t", model="bsa-tnp-tiny", tasks=ForecastTasks(frames=2, step=1, lead=1),
                         steps=1, batch_size=2, progress=False)  # fmt: skip
    with pytest.raises(ConfigError, match="forecast"):
        xnp.predict(fitted, grid, background=grid.t.mean("time"))


def test_a_missing_observation_needs_no_background(model):
    # a station whose value is missing may lie where the background has none
    data, clim = stations(), climatology()
    lat, lon = data.lat.values.copy(), data.lon.values.copy()
    lat[0], lon[0] = 40.1, 0.1  # near the corner node, which the background lacks
    data = data.assign_coords(lat=("station", lat), lon=("station", lon))
    holed = clim.where((clim.lat > 40.0) | (clim.lon > 0.0))
    with pytest.raises(ConfigError, match="no value at 3 of"):  # observed there: refused
        xnp.predict(model, data, targets(), background=holed)
    data["t"][:, 0] = np.nan
    pred = xnp.predict(model, data, targets(), background=holed)
    want = xnp.predict(model, data.isel(station=slice(1, None)), targets(), background=clim)
    np.testing.assert_allclose(pred.t_mean, want.t_mean, rtol=1e-6)


def test_a_dask_background_is_read_lazily_and_its_gaps_refused_when_computed(model):
    data, clim, tgt = stations(), climatology(), targets()
    eager = xnp.predict(model, data, tgt, background=clim)
    lazy_bg = xnp.predict(model, data, tgt, background=clim.chunk({"lat": 10}))
    assert lazy_bg.t_mean.chunks is None  # an eager prediction stays eager
    np.testing.assert_allclose(lazy_bg.t_mean, eager.t_mean, rtol=1e-7)
    lazy = xnp.predict(model, data, tgt, background=clim.chunk({"lat": 10}), chunks={"lat": 2})
    assert lazy.t_mean.chunks is not None
    np.testing.assert_allclose(lazy.t_mean.values, eager.t_mean.values, rtol=1e-6)
    # a gap at the targets only: found when the lazy result is computed, not NaN
    holed = clim.where((clim.lat < 47.9) | (clim.lat > 48.1)).chunk({"lat": 10})
    pred = xnp.predict(model, data.where(data.lat < 47), tgt, background=holed,
                       chunks={"lat": 2})  # fmt: skip
    with pytest.raises(ConfigError, match="no value at"):
        pred.t_mean.compute()


@requires_data
def test_era5_station_interpolation_gains_from_an_hourly_climatology(model):
    # as a user would: an hourly climatology of past days, stations on a later day
    era5 = open_real("era5_t2m_uk_2019-03-01_21.nc")
    clim = era5.t2m.isel(time=slice(0, 16 * 24)).groupby("time.hour").mean()
    sites = pd.read_csv(DATA_DIR / "hadisd_station_locations.csv")
    sites = sites[sites.latitude.between(50, 58) & sites.longitude.between(-10, 2)]
    at = {c: xr.DataArray(sites[c].to_numpy(), dims="station") for c in ("latitude", "longitude")}
    frames = era5.isel(time=[16 * 24, 16 * 24 + 12])  # day 17, 00:00 and 12:00
    obs = frames.sel(at, method="nearest")
    grid = era5.isel(time=0).drop_vars(["t2m", "time"])
    plain = obs.t2m.np.predict(model, grid, trend="linear")
    with_bg = obs.t2m.np.predict(model, grid, trend="linear", background=clim)
    by_hand = restore(xnp.predict(model, subtract(obs, {"t2m": clim}), grid, trend="linear"),
                      {"t2m": clim})  # fmt: skip
    np.testing.assert_allclose(with_bg.t2m_mean, by_hand.t2m_mean, rtol=1e-6)
    np.testing.assert_allclose(with_bg.t2m_std, by_hand.t2m_std, rtol=1e-6)
    assert "xnp_calibration" in with_bg.attrs  # zero-shot, a trend, over 200 stations
    # the default call is this one: gp-sphere's own trend is linear, hence calibrated
    xr.testing.assert_identical(obs.t2m.np.predict(model, grid, background=clim), with_bg)
    rmse = {k: float(np.sqrt(((p.t2m_mean - frames.t2m) ** 2).mean()))
            for k, p in (("plain", plain), ("background", with_bg))}  # fmt: skip
    assert rmse["background"] < 0.8 * rmse["plain"], rmse
