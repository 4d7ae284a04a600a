"""The context's trend for zero-shot prediction (``trend="constant"`` / ``"linear"``)."""

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from strategies import DATA_DIR, requires_data

import xnp
import xnp.data.trend as trend_module
from xnp.data.trend import _NUGGET, _RANGE, Trend, gls_covariance
from xnp.errors import ConfigError, EmptyDataError
from xnp.geo.sphere import unit_vectors as _unit_vectors
from xnp.scoring.cross_validation import BlockKFold, cross_validate


def _tangent_plane(s: np.ndarray, centre: np.ndarray, slopes=(3.0, -2.0), offset=5.0):
    """A field exactly linear in the tangent-plane coordinates at ``centre``."""
    c = centre / np.linalg.norm(centre)
    u = np.cross(c, [0.0, 0.0, 1.0])
    u /= np.linalg.norm(u)
    w = np.cross(c, u)
    p = _unit_vectors(s) - c
    return offset + slopes[0] * (p @ u) + slopes[1] * (p @ w)


def test_a_plane_on_the_sphere_is_recovered_exactly_with_no_variance():
    rng = np.random.default_rng(0)
    s = np.stack([rng.uniform(30, 60, 50), rng.uniform(170, 200, 50)], -1)  # across 180°
    s[:, 1] = (s[:, 1] + 180) % 360 - 180
    trend = Trend.fit(s, _tangent_plane(s, _unit_vectors(s).mean(0))[:, None], spherical=True)
    new = np.array([[45.0, 179.5], [40.0, -175.0], [58.0, 175.0]])
    mean, var = trend.at(new)
    np.testing.assert_allclose(mean[:, 0], _tangent_plane(new, _unit_vectors(s).mean(0)),
                               atol=1e-9)  # fmt: skip
    assert np.all(var < 1e-18)
    np.testing.assert_allclose(trend.shift, 0.0, atol=1e-9)


def _clustered(rng: np.random.Generator) -> np.ndarray:
    """30 points spread over [0, 10]², then 30 in a corner cell of [0, 1]²."""
    return np.concatenate([rng.uniform(0, 10, (30, 2)), rng.uniform(0, 1, (30, 2))])


def test_the_estimate_and_its_variance_are_those_of_generalised_least_squares():
    rng = np.random.default_rng(1)
    s = _clustered(rng)
    f = 1.0 + 0.5 * s[:, 0] - 0.2 * s[:, 1] + rng.normal(0, 0.3, 60)
    trend = Trend.fit(s, f[:, None], spherical=False)
    c = gls_covariance(s, _RANGE, _NUGGET)
    a = np.column_stack([np.ones(60), s])
    normal = np.linalg.inv(a.T @ np.linalg.solve(c, a))
    coef = normal @ a.T @ np.linalg.solve(c, f)
    resid = f - a @ coef
    x = np.array([[1.0, 20.0, -5.0]])  # far outside: the variance grows
    mean, var = trend.at(x[:, 1:])
    np.testing.assert_allclose(mean[0, 0], x[0] @ coef, rtol=1e-10)
    expected = resid @ resid / (60 - 3) * x[0] @ normal @ x[0]
    np.testing.assert_allclose(var[0, 0], expected, rtol=1e-8)
    np.testing.assert_allclose(trend.shift[0], -resid.mean(), rtol=1e-10)
    assert var[0, 0] > 10 * trend.at(np.array([[5.0, 5.0]]))[1][0, 0]


def test_covariance_with_one_more_point_is_that_of_the_refitted_estimate():
    """The rank-one update against the slow reference: GLS refitted on n + 1 points."""
    rng = np.random.default_rng(2)
    s = _clustered(rng)
    f = 1.0 + 0.5 * s[:, :1] - 0.2 * s[:, 1:] + rng.normal(0, 0.3, (60, 1))
    trend = Trend.fit(s, f, spherical=False)
    np.testing.assert_allclose(trend.covariance_with(s)[0], trend.cov, rtol=1e-10)
    new = np.array([[5.0, 5.0], [0.5, 0.5], [20.0, -5.0], [s[3, 0], s[3, 1]]])
    fast = trend.covariance_with(s, new)
    assert fast.shape == (4, 1, 3, 3)
    r = _RANGE * trend_module.rms_spread(s)  # the known points' range, kept for the new one
    for m, point in enumerate(new):
        both = np.concatenate([s, point[None]])
        d = np.linalg.norm(both[:, None] - both[None], axis=-1)
        c = np.exp(-d / r) + _NUGGET * np.eye(len(both))
        a = np.column_stack([np.ones(len(both)), both - s.mean(0)])
        slow = trend.sill[0] * np.linalg.inv(a.T @ np.linalg.solve(c, a))
        np.testing.assert_allclose(fast[m, 0], slow, rtol=1e-8, atol=1e-14)
    # one more observation never makes the estimate less certain, and far out it helps most
    x = trend.design_at(np.array([[25.0, -10.0]]))[0]
    before = x @ trend.cov[0] @ x
    after = np.einsum("p,mpq,q->m", x, fast[:, 0], x)
    assert np.all(after <= before * (1 + 1e-12))
    assert np.argmin(after) == 2


def test_a_dense_cluster_does_not_set_the_mean():
    rng = np.random.default_rng(2)
    s = _clustered(rng)
    f = np.where(np.arange(60) < 30, 0.0, 3.0) + rng.normal(0, 0.1, 60)  # the cluster is warm
    trend = Trend.fit(s, f[:, None], spherical=False, degree=0)
    assert trend.coef.shape == (1, 1)
    assert trend.basis.shape == (2, 0)
    gls_mean = float(trend.coef[0, 0])
    assert float(f.mean()) > 1.4  # the plain mean, half of it the cluster's
    assert abs(gls_mean) < 0.8
    np.testing.assert_allclose(trend.shift[0], -(f - gls_mean).mean(), rtol=1e-12)
    # the same everywhere, and on an even design about the plain mean
    np.testing.assert_allclose(trend.at(np.array([[50.0, -3.0]]))[0][0, 0], gls_mean)
    even = Trend.fit(s[:30], f[:30, None] + 1.0, spherical=False, degree=0)
    assert abs(float(even.coef[0, 0]) - float(f[:30].mean() + 1.0)) < 0.05
    # all observations at one place: one value, whatever the covariance's range
    one = Trend.fit(np.zeros((4, 2)), np.array([[1.0], [2.0], [3.0], [6.0]]), spherical=False,
                    degree=0)  # fmt: skip
    np.testing.assert_allclose(one.coef[0, 0], 3.0)


def test_add_to_moves_the_prediction_to_the_trend_where_the_observations_leave_it():
    rng = np.random.default_rng(3)
    s = _clustered(rng)
    f = np.where(np.arange(60) < 30, 0.0, 3.0) + rng.normal(0, 0.1, 60)
    trend = Trend.fit(s, f[:, None], spherical=False, degree=0)
    where = np.array([[5.0, 5.0], [5.0, 5.0], [40.0, 40.0]])
    t, var = trend.at(where)
    mean = np.zeros((3, 1), np.float32)
    std = np.array([[0.5], [3.0], [3.0]], np.float32)
    # without the residuals' spread: all of the shift and of the variance
    m, sd = trend.add_to(where, mean, std)
    assert m.dtype == sd.dtype == np.float32
    np.testing.assert_allclose(m[:, 0], t[:, 0] + trend.shift[0], rtol=1e-6)
    np.testing.assert_allclose(sd[:, 0], np.sqrt(std[:, 0] ** 2 + var[:, 0]), rtol=1e-6)
    # with it (1 here): the share of the prior variance left, a quarter, then all
    m, sd = trend.add_to(where, mean, std, np.array([1.0]))
    share = np.array([0.25, 1.0, 1.0])
    np.testing.assert_allclose(m[:, 0], t[:, 0] + share * trend.shift[0], rtol=1e-6)
    np.testing.assert_allclose(sd[:, 0], np.sqrt(std[:, 0] ** 2 + share * var[:, 0]),
                               rtol=1e-6)  # fmt: skip


def test_large_contexts_are_fitted_on_a_fixed_subset(monkeypatch):
    monkeypatch.setattr(trend_module, "_MAX_POINTS", 40)
    rng = np.random.default_rng(4)
    s = rng.uniform(0, 10, (100, 2))
    f = (s @ [1.0, -2.0] + rng.normal(0, 1.0, 100))[:, None]
    first = Trend.fit(s, f, spherical=False)
    again = Trend.fit(s, f, spherical=False)
    np.testing.assert_array_equal(first.coef, again.coef)  # the same subset every time
    full = np.column_stack([np.ones(100), s - s.mean(0)])
    sub = np.sort(np.random.default_rng(0).choice(100, 40, replace=False))
    c = gls_covariance(s[sub], _RANGE, _NUGGET)
    a = full[sub]
    expected = np.linalg.solve(a.T @ np.linalg.solve(c, a), a.T @ np.linalg.solve(c, f[sub, 0]))
    np.testing.assert_allclose(first.coef[:, 0], expected, rtol=1e-8)
    resid = f[:, 0] - full @ first.coef[:, 0]
    np.testing.assert_allclose(first.shift[0], -resid.mean())  # over every point


def test_points_around_the_globe_use_the_three_unit_vector_components():
    rng = np.random.default_rng(2)
    s = np.stack([np.rad2deg(np.arcsin(rng.uniform(-1, 1, 200))), rng.uniform(-180, 180, 200)],
                 -1)  # fmt: skip
    f = 2.0 + _unit_vectors(s) @ np.array([1.0, -3.0, 0.5])
    trend = Trend.fit(s, f[:, None], spherical=True)
    assert trend.coef.shape == (4, 1)
    np.testing.assert_allclose(trend.at(s)[0][:, 0], f, atol=1e-9)


def test_too_few_or_collinear_observations_are_a_clear_error():
    with pytest.raises(EmptyDataError, match="at least 4 observations"):
        Trend.fit(np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]]), np.ones((3, 1)),
                  spherical=False)  # fmt: skip
    line = np.stack([np.arange(6.0), 2 * np.arange(6.0)], -1)
    with pytest.raises(EmptyDataError, match="on one line"):
        Trend.fit(line, np.arange(6.0)[:, None], spherical=False)
    # a line is enough for a constant, one observation is not
    assert Trend.fit(line, np.arange(6.0)[:, None], spherical=False, degree=0).coef.shape == (1, 1)
    with pytest.raises(EmptyDataError, match="trend='constant' needs at least 2"):
        Trend.fit(line[:1], np.ones((1, 1)), spherical=False, degree=0)
    with pytest.raises(ConfigError, match="degree must be 0"):
        Trend.fit(line, np.arange(6.0)[:, None], spherical=False, degree=2)
    # a variable's own missing values count
    s = np.random.default_rng(3).uniform(0, 1, (6, 2))
    f = np.column_stack([np.arange(6.0), [1.0, np.nan, np.nan, np.nan, 2.0, 3.0]])
    with pytest.raises(EmptyDataError, match="variable 1"):
        Trend.fit(s, f, spherical=False)


# ------------------------------------------------------------------- with the shipped model


@pytest.fixture(scope="module")
def model():
    return xnp.pretrained("gp-sphere")


def gradient_field() -> xr.Dataset:
    """A smooth GP field (std ≈ 4 K) plus a north-south gradient of 2 K per degree."""
    ds = xnp.datasets.gp_sphere(n_lat=14, n_lon=14, lat_range=(35.0, 55.0),
                                lon_range=(-10.0, 10.0), lengthscale_km=1500.0, n_time=2,
                                noise=0.05, seed=4)  # fmt: skip
    return ds.assign(field=(ds.field + 2.0 * (ds.lat - 45.0)).assign_attrs(ds.field.attrs))


def test_a_gradient_is_extrapolated_with_the_trend_and_not_without(model):
    ds = gradient_field()
    south = (ds.lat < 47).broadcast_like(ds.field)
    rng = np.random.default_rng(0)
    context = ds[["field"]].where(south & (rng.random(ds.field.shape) < 0.5))
    grid = ds.drop_vars("field").drop_dims("time")
    before = context.copy(deep=True)
    plain = context.np.predict(model, grid, trend="none")
    pred = context.np.predict(model, grid, trend="linear")
    north = ds.lat > 50

    def rmse(p):
        return float(np.sqrt(((p.field_mean - ds.field).where(north) ** 2).mean()))

    assert rmse(pred) < 0.5 * rmse(plain)
    assert pred.field_mean.dims == ("time", "lat", "lon")
    assert "linear" in pred.attrs["xnp_trend"]
    assert "xnp_trend" not in plain.attrs
    assert pred.field_mean.attrs["units"] == plain.field_mean.attrs["units"] == "K"
    assert np.isfinite(pred.field_std).all()
    # gp-sphere's own trend is the linear one: the default prediction is this one
    xr.testing.assert_identical(context.np.predict(model, grid), pred)
    assert (pred.field_std > 0).all()
    xr.testing.assert_identical(context, before)  # the context is never modified
    # lazy (dask chunks) and regional prediction give the same numbers as eager
    lazy = context.np.predict(model, grid, trend="linear", chunks={"lat": 5})
    assert lazy.field_mean.chunks is not None
    xr.testing.assert_allclose(lazy.compute(), pred)
    regional = context.np.predict(model, grid, trend="linear", context_radius="20000km")
    xr.testing.assert_allclose(regional, pred, atol=1e-4)


def test_an_exactly_planar_field_is_predicted_as_the_plane(model):
    lat, lon = np.linspace(40, 50, 8), np.linspace(0, 10, 8)
    s = np.stack(np.meshgrid(lat, lon, indexing="ij"), -1).reshape(-1, 2)
    centre = _unit_vectors(s).mean(0)
    values = _tangent_plane(s, centre).reshape(8, 8)
    ds = xr.Dataset(
        {"v": (("lat", "lon"), values, {"units": "K"})}, coords={"lat": lat, "lon": lon}
    )
    pred = ds.np.predict(model, {"lat": [45.5], "lon": [5.5]}, trend="linear")
    expected = _tangent_plane(np.array([[45.5, 5.5]]), centre)[0]
    np.testing.assert_allclose(float(pred.v_mean.squeeze()), expected, atol=1e-4)


def test_far_from_a_clustered_network_the_constant_trend_reverts_to_the_gls_mean(model):
    # 40 stations spread over 10° at about 10 K, and 60 in a warm 0.6° corner at 13 K:
    # the plain mean (11.8 K) follows the cluster, the GLS mean (10.3 K) does not
    rng = np.random.default_rng(5)
    lat = np.concatenate([rng.uniform(40, 50, 40), rng.uniform(40, 40.6, 60)])
    lon = np.concatenate([rng.uniform(0, 10, 40), rng.uniform(0, 0.6, 60)])
    v = np.where(np.arange(100) < 40, 10.0, 13.0) + rng.normal(0, 0.3, 100)
    context = xr.Dataset({"t": ("station", v, {"units": "K"})},
                         coords={"lat": ("station", lat), "lon": ("station", lon)})  # fmt: skip
    targets = xr.Dataset(coords={"lat": ("p", [45.0, 40.3]), "lon": ("p", [18.0, 0.3])})
    plain = context.np.predict(model, targets)
    const = context.np.predict(model, targets, trend="constant")
    gls = Trend.fit(np.stack([lat, lon], -1), v[:, None], spherical=True, degree=0)
    assert abs(float(gls.coef[0, 0]) - 10.3) < 0.3
    # 700 km east of the network the model's prediction moves most of the way down
    far_plain, far_const = float(plain.t_mean[0]), float(const.t_mean[0])
    assert far_const < far_plain - 0.5 * (far_plain - float(gls.coef[0, 0]))
    # inside the warm cluster the observations hold it
    assert abs(float(const.t_mean[1]) - 13.0) < 1.0
    assert const.attrs["xnp_trend"].startswith("constant: ")
    assert (const.t_std > 0).all()


def test_trend_is_only_for_zero_shot_models_and_only_linear(model):
    ds = gradient_field().isel(time=0)
    with pytest.raises(ConfigError, match="None, 'none', 'constant' or 'linear'"):
        ds.np.predict(model, trend="quadratic")
    fitted = model.with_normaliser(model.normaliser, ["field"])  # a copy
    fitted.normalise = "fitted"
    with pytest.raises(ConfigError, match="zero-shot models"):
        ds.np.predict(fitted, trend="linear")
    few = ds[["field"]].where(ds.lon < -9)  # one meridian of points: a line on the sphere
    with pytest.raises(EmptyDataError, match=r"trend='linear'.*variable 'field'"):
        few.np.predict(model, ds.drop_vars("field"), trend="linear")


@requires_data
@pytest.mark.slow  # a benchmark-like threshold on real data (benchmarks/zero_shot_trend.py)
def test_texas_stations_block_cv_is_better_with_the_trend(model):
    # the real network of ../shared/data: 186 ASOS stations, one day's mean temperature;
    # spatial blocks of 2° leave out gaps the plane helps to predict across
    df = pd.read_csv(DATA_DIR / "texas_wind_2018-02-26.csv")
    texas = xr.Dataset(
        {"t": ("station", df.air_temperature_c.to_numpy(float), {"units": "degC"})},
        coords={"lat": ("station", df.latitude.to_numpy()),
                "lon": ("station", df.longitude.to_numpy())},
    )  # fmt: skip
    cv = BlockKFold(spacing_deg=2.0, n_splits=5)
    scores = {
        trend: cross_validate(
            lambda c, t, trend=trend: xnp.predict(model, c, t, trend=trend), texas, "t", cv
        ).sel(fold="pooled")
        for trend in (None, "linear")
    }
    plain, linear = scores[None], scores["linear"]
    assert float(linear.t_rmse) < 0.95 * float(plain.t_rmse)
    assert float(linear.t_nll) < float(plain.t_nll)
    assert 0.85 < float(linear.t_coverage_95) < 0.99  # nominal 0.95, two-sided
