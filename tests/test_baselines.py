from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from strategies import grid_dataset, hourly_times, station_dataset

from xnp.baselines import (
    GaussianProcess,
    GPHyperparameters,
    InverseDistanceWeighting,
    OrdinaryKriging,
    Persistence,
)
from xnp.baselines.gaussian_process import _neg_log_marginal
from xnp.errors import ConfigError, CoordinateError, EmptyDataError, XnpError
from xnp.geo import great_circle_distance
from xnp.geo.distance import EARTH_RADIUS_KM
from xnp.scoring.evaluation import evaluate

R = EARTH_RADIUS_KM


def haversine_km(lat1, lon1, lat2, lon2):
    """Great-circle distance by the haversine formula (the slow, independent reference)."""
    p1, p2 = np.deg2rad(lat1), np.deg2rad(lat2)
    dp, dl = p2 - p1, np.deg2rad(lon2 - lon1)
    a = np.sin(dp / 2) ** 2 + np.cos(p1) * np.cos(p2) * np.sin(dl / 2) ** 2
    return 2 * R * np.arcsin(np.sqrt(np.clip(a, 0, 1)))


def stations(lat, lon, values, name="t"):
    return xr.Dataset(
        {name: ("station", np.asarray(values, float), {"units": "K"})},
        coords={"station": np.arange(len(lat)), "lat": ("station", lat), "lon": ("station", lon)},
    )


def random_stations(n, seed=0, lat=(40, 50), lon=(-5, 5)):
    rng = np.random.default_rng(seed)
    la, lo = rng.uniform(*lat, n), rng.uniform(*lon, n)
    return la, lo, rng


# --------------------------------------------------------------------------- IDW


def test_idw_is_exact_at_the_data_and_matches_a_brute_force_reference():
    lat, lon, rng = random_stations(30)
    obs = stations(lat, lon, rng.normal(size=30))
    at_data = InverseDistanceWeighting().predict(obs, obs.drop_vars("t"))
    np.testing.assert_allclose(at_data.t_mean, obs.t, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(at_data.t_std, 0.0)
    tlat, tlon = rng.uniform(40, 50, 7), rng.uniform(-5, 5, 7)
    idw = InverseDistanceWeighting(power=3.0, neighbours=None)
    pred = idw.predict(obs, stations(tlat, tlon, np.zeros(7)).drop_vars("t"))
    for i in range(7):
        d = np.array([haversine_km(tlat[i], tlon[i], a, b) for a, b in zip(lat, lon, strict=True)])
        w = d**-3.0 / np.sum(d**-3.0)
        mean = np.sum(w * obs.t.values)
        assert float(pred.t_mean[i]) == pytest.approx(mean, rel=1e-9)
        assert float(pred.t_std[i]) == pytest.approx(
            np.sqrt(np.sum(w * (obs.t.values - mean) ** 2)), rel=1e-7
        )


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    n=st.integers(1, 20),
    power=st.floats(0.5, 4),
    neighbours=st.one_of(st.none(), st.integers(1, 25)),
)
def test_idw_stays_within_the_range_of_the_data(seed, n, power, neighbours):
    lat, lon, rng = random_stations(n, seed, lat=(-89, 89), lon=(-180, 180))
    values = rng.normal(size=n) * 10
    targets = {"lat": rng.uniform(-90, 90, 4), "lon": rng.uniform(-180, 180, 5)}
    pred = InverseDistanceWeighting(power, neighbours).predict(stations(lat, lon, values), targets)
    assert pred.t_mean.dims == ("lat", "lon")
    assert np.all(pred.t_mean >= values.min() - 1e-9)
    assert np.all(pred.t_mean <= values.max() + 1e-9)
    assert np.all(pred.t_std >= 0)
    assert np.all(pred.t_std <= (values.max() - values.min()) / 2 + 1e-9)


def test_idw_uses_great_circle_distance_across_the_antimeridian():
    obs = stations(np.array([0.0, 0.0]), np.array([179.0, 170.0]), [1.0, 5.0])
    pred = InverseDistanceWeighting(neighbours=1).predict(obs, {"lat": [0.0], "lon": [-179.5]})
    assert float(pred.t_mean.squeeze()) == 1.0


def test_idw_predicts_every_time_like_xnp_predict_and_leaves_data_alone():
    data = grid_dataset(nt=3, ny=4, nx=5, nan_fraction=0.3)
    before = data.copy(deep=True)
    pred = InverseDistanceWeighting().predict(data)
    assert pred.t2m_mean.dims == ("time", "lat", "lon")
    observed = data.t2m.notnull()
    np.testing.assert_allclose(pred.t2m_mean.where(observed), data.t2m, atol=1e-9)
    assert bool(pred.t2m_mean.notnull().all())  # gaps filled
    assert pred.t2m_mean.attrs["units"] == "K"
    assert "inverse distance weighting" in pred.attrs["source"]
    one = InverseDistanceWeighting().predict(
        data, {"lat": [50.5], "lon": [0.0]}, time=data.time.values[1]
    )
    assert "time" not in one.t2m_mean.dims
    assert one.time.values == data.time.values[1]
    xr.testing.assert_identical(data, before)
    empty = data.copy()
    empty["t2m"] = empty.t2m.where(empty.time != empty.time[1])
    with pytest.raises(EmptyDataError, match="at time"):
        InverseDistanceWeighting().predict(empty)
    with pytest.raises(ConfigError):
        InverseDistanceWeighting(power=0)


def test_baselines_return_the_same_layout_as_xnp_predict():
    from xnp.api.predict import predict
    from xnp.data.normalise import Normaliser
    from xnp.models.config import BSATNPConfig
    from xnp.neural_process import NeuralProcess

    data = grid_dataset(nt=2, ny=4, nx=5, nan_fraction=0.2)
    model = NeuralProcess.init(
        BSATNPConfig.tiny(q_chunk=64, k_chunk=64), Normaliser.fit(data, "t2m"), ["t2m"], seed=0
    )
    targets = station_dataset(n_stations=5, nt=2).drop_vars("t2m")
    reference = predict(model, data, targets)
    for baseline in (InverseDistanceWeighting(), GaussianProcess(fit=False)):
        out = baseline.predict(data, targets)
        assert out.t2m_mean.dims == reference.t2m_mean.dims
        assert set(out.coords) == set(reference.coords)
        for name in reference.coords:
            xr.testing.assert_identical(out[name], reference[name])
        assert out.t2m_std.attrs["long_name"] == reference.t2m_std.attrs["long_name"]


# --------------------------------------------------------------------------- Gaussian process


def reference_gp(lat, lon, y, tlat, tlon, hp: GPHyperparameters, kernel="rbf"):
    """Textbook GP posterior with numpy.linalg.solve (chord distance from the haversine)."""

    def cov(la1, lo1, la2, lo2):
        d = haversine_km(la1[:, None], lo1[:, None], la2[None, :], lo2[None, :])
        r = 2 * R * np.sin(d / (2 * R))  # chord of the great-circle arc
        if kernel == "rbf":
            return hp.variance * np.exp(-(r**2) / (2 * hp.lengthscale_km**2))
        a = np.sqrt(5) * r / hp.lengthscale_km
        return hp.variance * (1 + a + a**2 / 3) * np.exp(-a)

    k = cov(lat, lon, lat, lon) + hp.noise**2 * np.eye(len(y))
    ks = cov(tlat, tlon, lat, lon)
    mean = hp.mean + ks @ np.linalg.solve(k, y - hp.mean)
    var = hp.variance - np.einsum("ij,ji->i", ks, np.linalg.solve(k, ks.T)) + hp.noise**2
    return mean, np.sqrt(var)


@pytest.mark.parametrize("kernel", ["rbf", "matern52"])
def test_gp_agrees_with_a_numpy_reference_for_fixed_hyperparameters(kernel):
    lat, lon, rng = random_stations(25, seed=1)
    y = rng.normal(size=25) + 3
    hp = GPHyperparameters(lengthscale_km=300.0, variance=2.0, noise=0.3, mean=2.5)
    gp = GaussianProcess(kernel, lengthscale_km=300.0, variance=2.0, noise=0.3, mean=2.5)
    tlat, tlon = rng.uniform(40, 50, 9), rng.uniform(-5, 5, 9)
    pred = gp.predict(stations(lat, lon, y), stations(tlat, tlon, np.zeros(9)).drop_vars("t"))
    mean, std = reference_gp(lat, lon, y, tlat, tlon, hp, kernel)
    np.testing.assert_allclose(pred.t_mean, mean, rtol=1e-8)
    np.testing.assert_allclose(pred.t_std, std, rtol=1e-8)
    assert gp.hyperparameters(lat, lon, y) == hp  # all fixed: nothing fitted


def test_gp_marginal_likelihood_matches_scipy_and_ignores_padding():
    lat, lon, rng = random_stations(12, seed=2)
    y = rng.normal(size=12)
    ell, var, noise, mean = 400.0, 1.5, 0.2, 0.1
    d = haversine_km(lat[:, None], lon[:, None], lat[None, :], lon[None, :])
    r = 2 * R * np.sin(d / (2 * R))
    k = var * np.exp(-(r**2) / (2 * ell**2)) + noise**2 * np.eye(12)
    expected = -stats.multivariate_normal(np.full(12, mean), k).logpdf(y) / 12
    params = {"log_lengthscale": np.log(ell), "log_variance": np.log(var),
              "log_noise": np.log(noise), "mean": mean}  # fmt: skip
    r_pad, y_pad, mask = np.zeros((16, 16)), np.zeros(16), np.zeros(16)
    r_pad[:12, :12], y_pad[:12], mask[:12] = r, y, 1.0
    r_pad[12:, :] = r_pad[:, 12:] = 123.0  # garbage in the padding must not matter
    with jax.enable_x64(True):
        args = {k: jnp.asarray(v, jnp.float64) for k, v in params.items()}
        arrays = (jnp.asarray(a) for a in (r_pad, y_pad, mask))
        got = _neg_log_marginal(args, *arrays, "rbf")
        assert float(got) == pytest.approx(expected, rel=1e-10)


def test_gp_recovers_a_known_lengthscale_and_interpolates_noiseless_data():
    n = 60
    lat, lon, rng = random_stations(n, seed=3, lat=(30, 60), lon=(-30, 30))
    hp = GPHyperparameters(lengthscale_km=600.0, variance=4.0, noise=0.05, mean=10.0)
    d = haversine_km(lat[:, None], lon[:, None], lat[None, :], lon[None, :])
    r = 2 * R * np.sin(d / (2 * R))
    k = hp.variance * np.exp(-(r**2) / (2 * hp.lengthscale_km**2))
    y = hp.mean + np.linalg.cholesky(k + 1e-8 * np.eye(n)) @ rng.normal(size=n)
    y_noisy = y + hp.noise * rng.normal(size=n)
    fitted = GaussianProcess().hyperparameters(lat, lon, y_noisy)
    assert 450 < fitted.lengthscale_km < 800  # 614 km with this seed
    assert 2.0 < fitted.variance < 8.0
    assert 0.03 < fitted.noise < 0.08
    # with (almost) no noise the posterior mean goes through a training point
    gp = GaussianProcess(
        lengthscale_km=fitted.lengthscale_km,
        variance=fitted.variance,
        mean=fitted.mean,
        noise=1e-3,
        observation_noise=False,
    )
    pred = gp.predict(stations(lat, lon, y), stations(lat[:5], lon[:5], y[:5]).drop_vars("t"))
    np.testing.assert_allclose(pred.t_mean, y[:5], atol=5e-3)
    assert float(pred.t_std.max()) < 5e-3


def test_gp_limits_and_errors():
    lat, lon, rng = random_stations(30, seed=4)
    obs = stations(lat, lon, rng.normal(size=30))
    with pytest.raises(ConfigError, match="max_context"):
        GaussianProcess(fit=False, max_context=10).predict(obs)
    with pytest.raises(ConfigError, match="kernel"):
        GaussianProcess("cosine")
    with pytest.raises(ConfigError, match="positive"):
        GaussianProcess(noise=-1.0)
    # fit=False: data-based values (median distance, sample variance, 0.1 · std, mean)
    default = GaussianProcess(fit=False).hyperparameters(lat, lon, obs.t.values)
    assert default.variance == pytest.approx(obs.t.values.var())
    assert default.mean == pytest.approx(obs.t.values.mean())


# --------------------------------------------------------------------------- kriging


def test_ordinary_kriging_interpolates_and_is_uncertain_away_from_data():
    pytest.importorskip("pykrige", reason="pykrige (the 'kriging' extra) is not installed")
    lat, lon, rng = random_stations(40, seed=5)
    obs = stations(lat, lon, np.sin(lat / 3) + np.cos(lon / 2) + 0.01 * rng.normal(size=40))
    ok = OrdinaryKriging("spherical")
    at_data = ok.predict(obs, obs.drop_vars("t"))
    np.testing.assert_allclose(at_data.t_mean, obs.t, atol=1e-8)
    assert float(at_data.t_std.max()) < 1e-6
    far = ok.predict(obs, {"lat": [45.0, 60.0], "lon": [0.0]})
    assert far.t_mean.dims == ("lat", "lon")
    std = far.t_std.squeeze("lon")
    assert float(std.sel(lat=60.0)) > float(std.sel(lat=45.0)) > 0
    assert "ordinary kriging" in far.attrs["source"]
    # a constant field (a dry day) has no variogram to fit: its value, with no doubt
    dry = ok.predict(obs.assign(t=obs.t * 0.0), {"lat": [45.0, 60.0], "lon": [0.0]})
    np.testing.assert_array_equal(dry.t_mean, 0.0)
    np.testing.assert_array_equal(dry.t_std, 0.0)


def test_ordinary_kriging_merges_observations_at_one_place():
    pytest.importorskip("pykrige", reason="pykrige (the 'kriging' extra) is not installed")
    lat, lon, _ = random_stations(30, seed=2)
    smooth = lambda la, lo: np.sin(la / 3) + np.cos(lo / 2)  # noqa: E731
    obs = stations(lat, lon, smooth(lat, lon))
    targets = {"lat": [44.0, 47.0], "lon": [1.0, 3.0]}
    plain = OrdinaryKriging().predict(obs, targets)
    # a second station in the first one's place: a singular kriging matrix, silently
    # inverted by pykrige, gave values far outside the data
    twin = stations(np.append(lat, lat[0]), np.append(lon, lon[0]), np.append(obs.t, obs.t[0]))
    np.testing.assert_allclose(OrdinaryKriging().predict(twin, targets).t_mean, plain.t_mean,
                               atol=1e-6)  # fmt: skip
    # every longitude of a pole is one place (a grid's polar row)
    lat_p, lon_p = np.append(lat, [90.0] * 5), np.append(lon, np.linspace(-180, 144, 5))
    polar = stations(lat_p, lon_p, np.append(obs.t, [0.5] * 5))
    got = OrdinaryKriging().predict(polar, targets).t_mean.values
    assert np.all((got > float(polar.t.min()) - 1) & (got < float(polar.t.max()) + 1))
    with pytest.raises(EmptyDataError, match="3 or more distinct places"):
        OrdinaryKriging().predict(stations([45.0] * 4, [2.0] * 4, [1.0, 2.0, 3.0, 4.0]), targets)
    with pytest.raises(ConfigError, match="variogram_model must be one of"):
        OrdinaryKriging("Spherical")
    with pytest.raises(ConfigError, match="nlags must be a positive integer"):
        OrdinaryKriging(nlags=0)


def test_idw_takes_numpy_counts_and_large_powers():
    lat, lon, rng = random_stations(20, seed=3)
    obs = stations(lat, lon, rng.normal(size=20))
    far = {"lat": [-30.0], "lon": [120.0]}  # thousands of km from every station
    pred = InverseDistanceWeighting(power=110, neighbours=np.int64(4)).predict(obs, far)
    # every d**-110 underflows to 0 here: the weights were 0/0 = NaN; in logs they are not
    km = np.asarray(
        great_circle_distance(-30.0, 120.0, obs.lat.values, obs.lon.values), np.float64
    )
    near = np.argsort(km)[:4]
    log_w = -110 * np.log(km[near])
    w = np.exp(log_w - log_w.max())
    np.testing.assert_allclose(pred.t_mean.item(), np.sum(w * obs.t.values[near]) / w.sum(),
                               rtol=1e-4)  # fmt: skip
    assert GaussianProcess(fit_points=np.int64(50)).fit_points == 50
    for bad in (0, 2.5, True):
        with pytest.raises(ConfigError, match="neighbours must be a positive integer"):
            InverseDistanceWeighting(neighbours=bad)
    with pytest.raises(ConfigError, match="power must be a positive finite number"):
        InverseDistanceWeighting(power=np.inf)


def test_baselines_select_times_like_xnp_predict():
    data = station_dataset(nt=3)
    idw = InverseDistanceWeighting()
    with pytest.raises(CoordinateError, match="not in the data"):
        idw.predict(data, time=np.datetime64("1990-01-01"))
    out = idw.predict(data, data.isel(time=0).drop_vars("t2m"))
    np.testing.assert_array_equal(out.time.values, data.time.values)


def test_ordinary_kriging_without_pykrige_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "pykrige", None)
    monkeypatch.setitem(sys.modules, "pykrige.ok", None)
    with pytest.raises(XnpError, match=r"pip install 'xnp\[kriging\]'") as info:
        OrdinaryKriging()
    assert isinstance(info.value, ImportError)


# --------------------------------------------------------------------------- persistence


def persistence_data():
    times = hourly_times(5)
    values = np.array([[0.0, 10.0], [1.0, np.nan], [3.0, 12.0], [2.0, np.nan], [4.0, np.nan]])
    return xr.Dataset(
        {"t": (("time", "station"), values, {"units": "K"})},
        coords={"time": times, "station": ["a", "b"],
                "lat": ("station", [0.0, 10.0]), "lon": ("station", [0.0, 10.0])},
    )  # fmt: skip


def test_persistence_persists_the_last_observation_with_lag_rms_std():
    data = persistence_data()
    t = data.time.values
    pred = Persistence().predict(data, time=t[4])
    assert pred.t_mean.values.tolist() == [4.0, 12.0]
    # a: observed now (lag 0); b: last seen 12 h ago, changes over 12 h: 12 − 10 only
    assert pred.t_std.values.tolist() == [0.0, 2.0]
    fc = Persistence().predict(data, time=t[2], lead_time=["6h", 12])
    assert fc.t_mean.dims == ("lead_time", "station")
    np.testing.assert_array_equal(fc.valid_time.values, t[3:5])
    assert fc.t_mean.values.tolist() == [[3.0, 12.0], [3.0, 12.0]]
    # a: changes up to the init time, over 6 h 1, 2 and over 12 h 3; b: none over 6 h → pooled
    np.testing.assert_allclose(fc.t_std.sel(station="a"), [np.sqrt(2.5), 3.0])
    np.testing.assert_allclose(fc.t_std.sel(station="b"), [np.sqrt(2.5), 2.0])
    # nothing after the init time is used
    changed = data.copy(deep=True)
    changed["t"][3:] = 99.0
    xr.testing.assert_identical(Persistence().predict(changed, time=t[2], lead_time=[6, 12]), fc)


def test_persistence_reads_a_string_time_in_the_data_calendar():
    times = xr.date_range("2000-01-01", periods=4, freq="6h", calendar="noleap", use_cftime=True)
    obs = xr.Dataset(
        {"t": (("time", "station"), np.arange(8.0).reshape(4, 2))},
        coords={"time": times, "lat": ("station", [0.0, 10.0]), "lon": ("station", [0.0, 10.0])},
    )
    now = Persistence().predict(obs, time="2000-01-01T12")
    assert now.t_mean.values.tolist() == [4.0, 5.0]
    ahead = Persistence().predict(obs, time="2000-01-01T12", lead_time=6)
    assert ahead.t_mean.values.ravel().tolist() == [4.0, 5.0]
    with pytest.raises(CoordinateError, match="'noleap' calendar"):
        Persistence().predict(obs, time="2000-02-29T00", lead_time=6)


def test_persistence_forecasts_beyond_the_data_and_at_other_places():
    data = persistence_data()
    later = data.time.values[-1] + np.timedelta64(6, "h")
    pred = Persistence().predict(data, {"lat": [1.0], "lon": [1.0, 9.0]}, time=[later])
    assert pred.t_mean.dims == ("time", "lat", "lon")
    assert pred.t_mean.values.tolist() == [[[4.0, 12.0]]]  # nearest station's last value
    full = Persistence().predict(data, lead_time=6)
    assert full.t_mean.dims == ("init_time", "station")
    assert full.sizes["init_time"] == 5
    with pytest.raises(ConfigError, match="time dimension"):
        Persistence().predict(data.isel(time=0))
    with pytest.raises(EmptyDataError, match="at or before"):
        Persistence().predict(data, time=data.time.values[0] - np.timedelta64(1, "h"))


def test_baselines_are_scored_like_a_model():
    data = station_dataset(n_stations=12, nt=4, seed=8)
    train, test = data.isel(station=slice(0, 8)), data.isel(station=slice(8, None))
    scores = {
        name: evaluate(b.predict(train, test.drop_vars("t2m")), test)
        for name, b in {
            "idw": InverseDistanceWeighting(),
            "gp": GaussianProcess("matern52", fit=False),
        }.items()
    }
    for s in scores.values():
        assert int(s.t2m_n) == 16
        assert np.isfinite(float(s.t2m_crps))
