"""The context's linear trend for zero-shot prediction (``trend="linear"``)."""

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from strategies import DATA_DIR, requires_data

import xnp
from xnp.data.trend import LinearTrend, declustering_weights
from xnp.errors import ConfigError, EmptyDataError
from xnp.infer import _xyz as _unit_vectors
from xnp.validation import BlockKFold, cross_validate


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
    trend = LinearTrend.fit(s, _tangent_plane(s, _unit_vectors(s).mean(0))[:, None],
                            spherical=True)  # fmt: skip
    new = np.array([[45.0, 179.5], [40.0, -175.0], [58.0, 175.0]])
    mean, var = trend.at(new)
    np.testing.assert_allclose(mean[:, 0], _tangent_plane(new, _unit_vectors(s).mean(0)),
                               atol=1e-9)  # fmt: skip
    assert np.all(var < 1e-18)


def test_the_estimate_and_its_variance_are_those_of_weighted_least_squares():
    rng = np.random.default_rng(1)
    s = np.concatenate([rng.uniform(0, 10, (30, 2)), rng.uniform(0, 1, (30, 2))])  # a cluster
    f = 1.0 + 0.5 * s[:, 0] - 0.2 * s[:, 1] + rng.normal(0, 0.3, 60)
    trend = LinearTrend.fit(s, f[:, None], spherical=False)
    w = declustering_weights(s)
    assert w[30:].mean() < 0.2 * w[:30].mean()  # the cluster weighs less
    a = np.column_stack([np.ones(60), s])
    normal = np.linalg.inv(a.T @ (w[:, None] * a))
    coef = normal @ a.T @ (w * f)
    sigma2 = np.sum((f - a @ coef) ** 2) / (60 - 3)
    x = np.array([[1.0, 20.0, -5.0]])  # far outside: the variance grows
    mean, var = trend.at(x[:, 1:])
    np.testing.assert_allclose(mean[0, 0], x[0] @ coef, rtol=1e-10)
    expected = sigma2 * x[0] @ normal @ (a.T @ ((w * w)[:, None] * a)) @ normal @ x[0]
    np.testing.assert_allclose(var[0, 0], expected, rtol=1e-8)
    inside = trend.at(np.array([[5.0, 5.0]]))[1]
    assert var[0, 0] > 10 * inside[0, 0]
    # on an even design the weights are equal away from the edges (ordinary least
    # squares there), and no weight exceeds the cap of 4 × the median
    grid = np.stack(np.meshgrid(np.arange(10.0), np.arange(10.0)), -1).reshape(-1, 2)
    wg = declustering_weights(grid).reshape(10, 10)
    np.testing.assert_allclose(wg[2:-2, 2:-2], wg[5, 5])
    assert wg.max() <= 4.0 * np.median(wg) + 1e-12
    # add_to: the trend onto the mean, its variance onto the predictive variance
    m, sd = trend.add_to(x[:, 1:], np.zeros((1, 1), np.float32), np.ones((1, 1), np.float32))
    assert m.dtype == sd.dtype == np.float32
    np.testing.assert_allclose(sd[0, 0], np.sqrt(1.0 + var[0, 0]), rtol=1e-6)
    # with the residuals' spread: the share of the prior variance left at the target
    # (a quarter here), at most all of it
    std = np.array([[0.5], [3.0]], np.float32)
    _, sd = trend.add_to(np.repeat(x[:, 1:], 2, axis=0), np.zeros((2, 1)), std, np.array([1.0]))
    np.testing.assert_allclose(sd[:, 0], np.sqrt(std[:, 0] ** 2 + [0.25 * var[0, 0], var[0, 0]]),
                               rtol=1e-6)  # fmt: skip


def test_points_around_the_globe_use_the_three_unit_vector_components():
    rng = np.random.default_rng(2)
    s = np.stack([np.rad2deg(np.arcsin(rng.uniform(-1, 1, 200))), rng.uniform(-180, 180, 200)],
                 -1)  # fmt: skip
    f = 2.0 + _unit_vectors(s) @ np.array([1.0, -3.0, 0.5])
    trend = LinearTrend.fit(s, f[:, None], spherical=True)
    assert trend.coef.shape == (4, 1)
    np.testing.assert_allclose(trend.at(s)[0][:, 0], f, atol=1e-9)


def test_too_few_or_collinear_observations_are_a_clear_error():
    with pytest.raises(EmptyDataError, match="at least 4 observations"):
        LinearTrend.fit(np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]]), np.ones((3, 1)),
                        spherical=False)  # fmt: skip
    line = np.stack([np.arange(6.0), 2 * np.arange(6.0)], -1)
    with pytest.raises(EmptyDataError, match="on one line"):
        LinearTrend.fit(line, np.arange(6.0)[:, None], spherical=False)
    # a variable's own missing values count
    s = np.random.default_rng(3).uniform(0, 1, (6, 2))
    f = np.column_stack([np.arange(6.0), [1.0, np.nan, np.nan, np.nan, 2.0, 3.0]])
    with pytest.raises(EmptyDataError, match="variable 1"):
        LinearTrend.fit(s, f, spherical=False)


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
    plain = context.np.predict(model, grid)
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
    ds = xr.Dataset({"v": (("lat", "lon"), values)}, coords={"lat": lat, "lon": lon})
    pred = ds.np.predict(model, {"lat": [45.5], "lon": [5.5]}, trend="linear")
    expected = _tangent_plane(np.array([[45.5, 5.5]]), centre)[0]
    np.testing.assert_allclose(float(pred.v_mean.squeeze()), expected, atol=1e-4)


def test_trend_is_only_for_zero_shot_models_and_only_linear(model):
    ds = gradient_field().isel(time=0)
    with pytest.raises(ConfigError, match="None or 'linear'"):
        ds.np.predict(model, trend="quadratic")
    fitted = model.with_normaliser(model.normaliser, ["field"])  # a copy
    fitted.normalise = "fitted"
    with pytest.raises(ConfigError, match="zero-shot models"):
        ds.np.predict(fitted, trend="linear")
    few = ds[["field"]].where(ds.lon < -9)  # one meridian of points: a line on the sphere
    with pytest.raises(EmptyDataError, match=r"trend='linear'.*variable 'field'"):
        few.np.predict(model, ds.drop_vars("field"), trend="linear")


@requires_data
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
    assert 0.85 < float(linear.t_coverage_95) <= 1.0
