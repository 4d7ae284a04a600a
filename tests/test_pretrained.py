"""The pretrained zero-shot model shipped in the package."""

import numpy as np
import pytest
import xarray as xr

import xnp
from xnp.errors import ConfigError


@pytest.fixture(scope="module")
def model():
    return xnp.pretrained("gp-sphere")


def field(lon0: float = 0.0) -> xr.Dataset:
    ds = xnp.datasets.gp_sphere(n_lat=16, n_lon=16, lat_range=(35.0, 55.0),
                                lon_range=(lon0 - 10.0, lon0 + 10.0), lengthscale_km=1000.0,
                                n_time=1, noise=0.05, seed=3).isel(time=0)  # fmt: skip
    # the kernel depends on chord distances only: the same seed gives the same values
    # wherever the box is placed along a parallel
    return ds


def test_shipped_model_is_small_safe_and_zero_shot(model):
    assert "gp-sphere" in xnp.available_pretrained()
    assert model.normalise == "context"
    assert model.config.spatial_bias == "great_circle"
    weights = list((xnp.pretrained.__globals__["_root"]() / "gp-sphere").glob("*"))
    assert {p.name for p in weights} >= {"config.json", "params.safetensors"}
    assert sum(p.stat().st_size for p in weights) < 5 * 2**20
    with pytest.raises(ConfigError, match="no pretrained model"):
        xnp.pretrained("nope")


def test_every_shipped_model_is_small_and_zero_shot():
    from xnp.shipped import DEFAULT, _root

    names = xnp.available_pretrained()
    assert {
        "gp-sphere",
        "gp-sphere-bank",
        "gp-sphere-dense-bank",
        "gp-sphere-cluster-bank",
    } <= set(names)
    assert DEFAULT in names
    for name in names:
        files = list((_root() / name).glob("*"))
        assert sum(p.stat().st_size for p in files) < 20 * 2**20, name  # issue 28's limit
        shipped = xnp.pretrained(name)
        assert shipped.normalise == "context", name
        assert shipped.training["context_rms_km"] > 0, name
    # the dense bank extends gp-sphere-bank's: its first members are the same GPs
    small = xnp.pretrained("gp-sphere-bank").config.gp_bank
    dense = xnp.pretrained("gp-sphere-dense-bank").config.gp_bank
    assert dense[: len(small)] == small
    assert len(dense) == 26
    # the clustered-design fine-tune is the dense bank's network and bank
    assert (
        xnp.pretrained("gp-sphere-cluster-bank").config
        == xnp.pretrained("gp-sphere-dense-bank").config
    )


def test_pretrained_names_ignore_case(model):
    from xnp.shipped import resolve_model

    assert xnp.pretrained("GP-Sphere").config == model.config
    assert resolve_model("gp_sphere").config == model.config
    with pytest.raises(ConfigError, match="no pretrained model None"):
        xnp.pretrained(None)


def test_zero_shot_interpolation_beats_the_context_mean(model):
    ds = field()
    mask = xr.DataArray(np.random.default_rng(0).random((16, 16)) < 0.25, dims=("lat", "lon"))
    pred = xnp.predict(model, ds["field"].where(mask), ds.drop_vars("field"))
    held_out = ~mask
    err = (pred.field_mean - ds.field).where(held_out)
    rmse = float(np.sqrt((err**2).mean()))
    baseline = float(
        np.sqrt(((ds.field.where(mask).mean() - ds.field).where(held_out) ** 2).mean())
    )
    assert rmse < 0.8 * baseline
    assert pred.field_mean.attrs["units"] == "K"
    # without any fitting, better calibrated than inverse-distance weighting
    truth = ds.where(held_out)
    idw = xnp.baselines.InverseDistanceWeighting().predict(ds[["field"]].where(mask),
                                                           ds.drop_vars("field"))  # fmt: skip
    ours = xnp.evaluate(pred.where(held_out), truth)
    assert float(ours.field_nll) < float(xnp.evaluate(idw.where(held_out), truth).field_nll)
    assert 0.85 < float(ours.field_coverage_95) < 0.99  # nominal 0.95, two-sided


def test_zero_shot_predictions_move_with_the_field(model):
    # no coordinates are embedded, only great-circle distances: the model is invariant to
    # moving the data (and the targets) around the sphere along a parallel
    mask = xr.DataArray(np.random.default_rng(1).random((16, 16)) < 0.25, dims=("lat", "lon"))
    a, b = field(0.0), field(120.0)
    np.testing.assert_allclose(a.field, b.field, atol=1e-3)
    assert not np.allclose(a.lon, b.lon)
    pa = xnp.predict(model, a["field"].where(mask), a.drop_vars("field"))
    pb = xnp.predict(model, b["field"].where(mask), b.drop_vars("field"))
    np.testing.assert_allclose(pa.field_mean, pb.field_mean, atol=2e-3)
    np.testing.assert_allclose(pa.field_std, pb.field_std, atol=2e-3)


def test_context_statistics_reuse_the_model_structure():
    # zero-shot prediction makes one model object per context set (its own statistics);
    # rebuilding the module's structure for each took half a second per time step
    fresh = xnp.pretrained("gp-sphere")
    copies = [fresh.with_normaliser(fresh.normaliser, fresh.variables) for _ in range(2)]
    assert copies[0].graphdef is copies[1].graphdef is fresh.graphdef
    assert copies[0].params_ is fresh.params_


def test_zero_shot_context_with_coordinates_as_data_variables(model):
    # a station table (lat/lon as data variables, as from pandas): one variable to predict
    rng = np.random.default_rng(0)
    table = xr.Dataset(
        {
            "lat": ("row", rng.uniform(50, 54, 30)),
            "lon": ("row", rng.uniform(-3, 2, 30)),
            "t2m": ("row", 280.0 + rng.normal(size=30), {"units": "K"}),
        }
    )
    out = xnp.predict(model, table)
    assert list(out.data_vars) == ["t2m_mean", "t2m_std"]
    assert np.isfinite(out.t2m_mean).all()


def test_a_dataarray_without_its_coordinates_is_told_how_to_keep_them(model):
    # lat/lon as data variables stay behind when one variable is taken as a DataArray
    rng = np.random.default_rng(0)
    table = xr.Dataset(
        {
            "latitude": ("row", rng.uniform(50, 54, 30)),
            "longitude": ("row", rng.uniform(-3, 2, 30)),
            "t2m": ("row", 280.0 + rng.normal(size=30), {"units": "K"}),
        }
    )
    with pytest.raises(xnp.errors.CoordinateError, match=r"ds\.set_coords\(\['latitude'"):
        xnp.predict(model, table.t2m, {"lat": [51.0], "lon": [0.0]})
    kept = table.set_coords(["latitude", "longitude"]).t2m
    assert np.isfinite(xnp.predict(model, kept, {"lat": [51.0], "lon": [0.0]}).t2m_mean).all()


def _fixed_size(model: xnp.NeuralProcess) -> xnp.NeuralProcess:
    """A copy of ``model`` that is never rescaled to its working size."""
    other = model.with_normaliser(model.normaliser, model.variables)
    other.training = {k: v for k, v in model.training.items() if k != "context_rms_km"}
    return other


def _stations(rng: np.random.Generator, half_width: float, n: int = 60) -> xr.Dataset:
    lat, lon = rng.uniform(-half_width, half_width, (2, n))
    return xr.Dataset({"t": ("station", rng.normal(size=n), {"units": "K"})},
                      coords={"lat": ("station", lat), "lon": ("station", lon)})  # fmt: skip


def test_rescaled_rates_are_a_longer_spatial_scale(model):
    import dataclasses

    rng = np.random.default_rng(2)
    context = _stations(rng, 5.0)
    targets = _stations(rng, 5.0, 25).drop_vars("t")
    plain = _fixed_size(model)
    reference = xnp.NeuralProcess(
        dataclasses.replace(model.config, spatial_scale=model.config.spatial_scale * 0.6),
        model.params_, normaliser=model.normaliser, variables=model.variables,
        normalise="context",
    )  # fmt: skip
    fast = plain.with_distance_scale(0.6)
    assert fast.graphdef is plain.graphdef  # nothing to recompile
    assert fast.training["max_distance_km"] == pytest.approx(
        0.6 * model.training["max_distance_km"]
    )
    plain_trend = {"trend": "none"}  # (the reference built here records no trend of its own)
    a = xnp.predict(fast, context, targets, **plain_trend)
    b = xnp.predict(reference, context, targets, **plain_trend)
    np.testing.assert_allclose(a.t_mean, b.t_mean, atol=1e-5)
    np.testing.assert_allclose(a.t_std, b.t_std, atol=1e-5)
    unscaled = xnp.predict(plain, context, targets, **plain_trend)
    assert not np.allclose(a.t_mean, unscaled.t_mean, atol=1e-3)
    with pytest.raises(ConfigError, match="positive finite"):
        plain.with_distance_scale(0.0)
    embedded = plain.with_normaliser(plain.normaliser, plain.variables)
    embedded.config = dataclasses.replace(model.config, embed_s=True)
    with pytest.raises(ConfigError, match="embed_s=True"):
        embedded.with_distance_scale(2.0)


def test_every_context_is_seen_at_the_working_size(model):
    rng = np.random.default_rng(3)
    context = _stations(rng, 3.0)
    targets = _stations(rng, 3.0, 25).drop_vars("t")
    # the rms distance of the stations from their centre, against the model's 450 km
    from xnp.geo.distance import EARTH_RADIUS_KM, latlon_to_xyz

    xyz = np.asarray(latlon_to_xyz(context.lat.values, context.lon.values), np.float64)
    rms = EARTH_RADIUS_KM * np.sqrt(np.mean(np.sum((xyz - xyz.mean(0)) ** 2, axis=1)))
    assert model.training["context_rms_km"] == 450.0
    expected = _fixed_size(model).with_distance_scale(rms / 450.0)
    auto = xnp.predict(model, context, targets)
    np.testing.assert_allclose(auto.t_mean, xnp.predict(expected, context, targets).t_mean,
                               atol=1e-5)  # fmt: skip
    # so the same network at twice the size (near the equator: distances double) gets the
    # same predictions at the targets moved with it
    big = context.assign_coords(lat=2 * context.lat, lon=2 * context.lon)
    moved = targets.assign_coords(lat=2 * targets.lat, lon=2 * targets.lon)
    twice = xnp.predict(model, big, moved)
    np.testing.assert_allclose(twice.t_mean, auto.t_mean, atol=5e-3)
    np.testing.assert_allclose(twice.t_std, auto.t_std, atol=5e-3)
    fixed = xnp.predict(_fixed_size(model), big, moved)
    assert not np.allclose(fixed.t_mean, auto.t_mean, atol=5e-2)
