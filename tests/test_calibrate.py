"""``predict(..., calibrate=True)``: the std rescaled by a cross-validation of the context.

The fast path (one context read, folds conditioned inside the prediction) is
checked against the slow reference: the public ``predict`` run on each fold's
stations by hand.
"""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

import xnp
from xnp.data import ForecastTasks, SpatialTasks
from xnp.errors import ConfigError
from xnp.prediction.calibration import AUTO_MIN_POINTS, FOLDS


@pytest.fixture(scope="module")
def model():
    return xnp.pretrained("gp-sphere")


def stations(n: int = 40, seed: int = 0) -> xr.Dataset:
    """A smooth field (a plane plus a wave) at ``n`` random stations over 10° × 10°."""
    rng = np.random.default_rng(seed)
    lat, lon = rng.uniform(40, 50, n), rng.uniform(0, 10, n)
    value = 280 + 0.3 * lat - 0.2 * lon + 2 * np.sin(lat / 2) * np.cos(lon / 3)
    return xr.Dataset(
        {"t": ("station", value, {"units": "K"})},
        coords={"lat": ("station", lat), "lon": ("station", lon)},
    )


def targets() -> xr.Dataset:
    return xr.Dataset(coords={"lat": np.linspace(41, 49, 5), "lon": np.linspace(1, 9, 6)})


@pytest.mark.parametrize("trend", [None, "linear"])
def test_calibration_is_the_rms_z_of_the_folds_predicted_by_hand(model, trend):
    data = stations()
    n = data.sizes["station"]
    fold = np.random.default_rng([3, 2]).permutation(n) % FOLDS
    z = []
    for k in range(FOLDS):  # the slow reference: each fold from the others, by the public API
        held, kept = np.flatnonzero(fold == k), np.flatnonzero(fold != k)
        at = data.isel(station=held)
        pred = xnp.predict(model, data.isel(station=kept), at.drop_vars("t"), trend=trend)
        z.append((at.t.values - pred.t_mean.values) / pred.t_std.values)
    factor = float(np.sqrt(np.mean(np.concatenate(z) ** 2)))
    raw = xnp.predict(model, data, targets(), trend=trend, calibrate=False)
    calibrated = xnp.predict(model, data, targets(), trend=trend, calibrate=True, seed=3)
    np.testing.assert_allclose(calibrated.t_mean, raw.t_mean, rtol=1e-6)  # the mean stays
    np.testing.assert_allclose(calibrated.t_std, factor * raw.t_std, rtol=1e-4)
    assert f"t × {factor:.3f}" in calibrated.attrs["xnp_calibration"]
    assert abs(factor - 1.0) > 0.01  # (the test would not see a factor that is not applied)


def test_lazy_calibrated_prediction_equals_eager(model):
    data = stations(seed=1)
    eager = xnp.predict(model, data, targets(), trend="linear", calibrate=True)
    lazy = xnp.predict(model, data, targets(), trend="linear", calibrate=True,
                       chunks={"lat": 2, "lon": 3})  # fmt: skip
    assert lazy.t_std.chunks is not None
    np.testing.assert_allclose(lazy.t_std.values, eager.t_std.values, rtol=1e-5)
    np.testing.assert_allclose(lazy.t_mean.values, eager.t_mean.values, rtol=1e-6)


def test_regional_calibration_predicts_the_folds_regionally(model):
    # with context_radius the folds are predicted from the observations within it, as
    # the targets are: a radius that holds every station gives the global factor
    data = stations(seed=1)
    everything = xnp.predict(model, data, targets(), calibrate=True)
    wide = xnp.predict(model, data, targets(), calibrate=True, context_radius="5000km")
    np.testing.assert_allclose(wide.t_std, everything.t_std, rtol=1e-4)
    near = xnp.predict(model, data, targets(), calibrate=True, context_radius="300km")
    assert near.attrs["xnp_calibration"] != everything.attrs["xnp_calibration"]


def test_a_scaled_field_gets_the_same_factor(model):
    # the zero-shot model standardises each context: the factor is a property of the
    # field's shape, not of its units
    data = stations(seed=2)
    a = xnp.predict(model, data, targets(), calibrate=True)
    b = xnp.predict(model, data.assign(t=data.t * 3.0 + 5.0), targets(), calibrate=True)
    np.testing.assert_allclose(b.t_std, 3.0 * a.t_std, rtol=1e-4)


def test_calibration_errors_are_clear(model):
    data = stations(n=8)
    with pytest.raises(ConfigError, match=r"has 8 point.*at least 10"):
        xnp.predict(model, data, targets(), calibrate=True)
    with pytest.raises(ConfigError, match="calibrate must be None, True or False"):
        xnp.predict(model, stations(), targets(), calibrate="yes")


@pytest.mark.parametrize("trend", [None, "linear"])
def test_calibrated_samples_spread_by_the_factor(model, trend):
    # the same seed draws the same samples; calibration scales their deviation from
    # the mean by the factor it applies to the std
    data, grid = stations(seed=4), targets().isel(lat=slice(0, 2), lon=slice(0, 3))
    args = {"trend": trend, "samples": 3, "sample_step": 2, "seed": 5}
    raw = xnp.predict(model, data, grid, calibrate=False, **args)
    cal = xnp.predict(model, data, grid, calibrate=True, **args)
    factor = float(cal.t_std.values.ravel()[0] / raw.t_std.values.ravel()[0])
    np.testing.assert_allclose(cal.t_std, factor * raw.t_std, rtol=1e-4)
    np.testing.assert_allclose(cal.t_mean, raw.t_mean, rtol=1e-6)
    want = cal.t_mean + factor * (raw.t_samples - raw.t_mean)
    np.testing.assert_allclose(cal.t_samples, want.transpose(*cal.t_samples.dims), atol=2e-3)
    assert abs(factor - 1.0) > 0.01


def test_forecasts_are_not_calibrated_on_their_context():
    ds = xnp.datasets.gp_sphere(n_lat=6, n_lon=12, n_time=40, lengthscale_km=3000.0)
    tasks = ForecastTasks(frames=2, step=6.0, lead=6.0, baseline=None)
    fitted = ds.np.fit("field", model="bsa-tnp-tiny", steps=1, progress=False, validation=None,
                       tasks=tasks)  # fmt: skip
    with pytest.raises(ConfigError, match="forecast"):
        fitted.predict(ds, time=ds.time.values[20], calibrate=True)


def test_by_default_zero_shot_predictions_with_a_trend_and_enough_observations_are_calibrated(
    model,
):
    many, few = stations(n=AUTO_MIN_POINTS, seed=6), stations(n=AUTO_MIN_POINTS - 1, seed=6)
    lin = {"trend": "linear"}
    default = xnp.predict(model, many, targets(), **lin)
    np.testing.assert_array_equal(default.t_std, xnp.predict(model, many, targets(), **lin,
                                                             calibrate=True).t_std)  # fmt: skip
    assert "cross-validation" in default.attrs["xnp_calibration"]
    raw = xnp.predict(model, many, targets(), **lin, calibrate=False)
    assert "xnp_calibration" not in raw.attrs
    assert float(abs(raw.t_std - default.t_std).max()) > 1e-3
    # without a trend: the model's own std (its far field is not what the folds see)
    plain = xnp.predict(model, many, targets(), trend="none")
    assert "xnp_calibration" not in plain.attrs
    np.testing.assert_array_equal(plain.t_std, xnp.predict(model, many, targets(), trend="none",
                                                           calibrate=False).t_std)  # fmt: skip
    # gp-sphere's own trend is linear: with no trend= the default is calibrated
    np.testing.assert_array_equal(xnp.predict(model, many, targets()).t_std, default.t_std)
    # fewer observations than the default needs: the model's own std
    small = xnp.predict(model, few, targets(), **lin)
    np.testing.assert_array_equal(small.t_std, xnp.predict(model, few, targets(), **lin,
                                                           calibrate=False).t_std)  # fmt: skip
    # per time: a time with enough observations is calibrated, one without is not
    both = xr.concat([many, many.where(many.station < AUTO_MIN_POINTS - 1)], "time")
    times = np.array(["2020-01-01T00", "2020-01-01T06"], dtype="datetime64[ns]")
    two = xnp.predict(model, both.assign_coords(time=times), targets(), **lin)
    np.testing.assert_array_equal(two.t_std.isel(time=0), default.t_std)
    np.testing.assert_allclose(two.t_std.isel(time=1), xnp.predict(
        model, many.isel(station=slice(0, AUTO_MIN_POINTS - 1)), targets(), **lin,
        calibrate=False,
    ).t_std, rtol=1e-5)  # fmt: skip


def test_by_default_a_model_fitted_on_the_data_keeps_its_std():
    ds = xnp.datasets.gp_sphere(n_lat=8, n_lon=10, n_time=3, lengthscale_km=3000.0)
    fitted = ds.np.fit("field", model="bsa-tnp-tiny", steps=1, progress=False, validation=None,
                       tasks=SpatialTasks())  # fmt: skip
    frame = ds.isel(time=0)
    default = fitted.predict(frame)
    assert "xnp_calibration" not in default.attrs
    np.testing.assert_array_equal(
        default.field_std, fitted.predict(frame, calibrate=False).field_std
    )
    assert "xnp_calibration" in fitted.predict(frame, calibrate=True).attrs
