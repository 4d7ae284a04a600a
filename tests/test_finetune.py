"""Fine-tuning from a pretrained model (issue 28, item 1)."""

import warnings

import numpy as np
import pytest
import xarray as xr
from strategies import grid_dataset

import xnp
from xnp.cli import main
from xnp.data import ForecastTasks, SpatialTasks
from xnp.data.sampler import TaskSampler
from xnp.errors import ConfigError
from xnp.train import TrainConfig

CONFIG = TrainConfig(log_every=1, validate_every=1, validation_batches=1, checkpoint_every=1)
#: A learning rate that moves no float32 parameter: the model after one step is the start.
FROZEN = {"steps": 1, "learning_rate": 1e-30, "batch_size": 2, "progress": False,
          "config": CONFIG, "validation": None}  # fmt: skip


@pytest.fixture(scope="module")
def field():
    return xnp.datasets.gp_sphere(n_lat=10, n_lon=12, n_time=3, seed=2)


def frame_prediction(model, frame):
    # the network's own std (the default calibration would rescale it per model)
    return xnp.predict(model, frame[["field"]], frame[["field"]].drop_vars("field"),
                       calibrate=False)  # fmt: skip


@pytest.mark.parametrize(
    ("name", "covariates"),
    [
        ("gp-sphere", []),
        pytest.param("gp-sphere", ["hour_of_day"], marks=pytest.mark.slow),
        # the covariates' zero channels go before the GP bank's inputs
        ("gp-sphere-bank", ["hour_of_day"]),
    ],
)
def test_at_step_zero_it_predicts_what_the_pretrained_model_predicts(field, name, covariates):
    tuned = field.np.fit("field", model=name, covariates=covariates, **FROZEN)
    assert tuned.normalise == "context"
    assert tuned.training["fine_tuned_from"]["from"] == name
    # new channels (hour of day: its sine and cosine), whose weights start at zero
    assert tuned.config.dim_x == 2 * len(covariates)
    assert tuned.config.gp_bank == xnp.pretrained(name).config.gp_bank
    frame = field.isel(time=1)  # the full network: the scale fine-tuning fixed
    a = frame_prediction(xnp.pretrained(name), frame)
    b = frame_prediction(tuned, frame)
    np.testing.assert_allclose(b.field_mean, a.field_mean, atol=1e-5)
    np.testing.assert_allclose(b.field_std, a.field_std, atol=1e-5)
    assert f"fine-tuned from {name}" in repr(tuned)


def test_fine_tuning_defaults_and_a_model_object(field):
    base = xnp.pretrained("gp-sphere")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tuned = field.np.fit("field", model=base, steps=2, batch_size=2, progress=False,
                             validation=None, config=TrainConfig(log_every=1))  # fmt: skip
    assert tuned.training["learning_rate"] == 1e-4
    assert isinstance(tuned.task, SpatialTasks)  # interpolation tasks by default
    assert np.isfinite(frame_prediction(tuned, field.isel(time=2)).field_mean).all()


def test_the_sampler_standardises_by_the_context(field):
    sampler = TaskSampler(field, "field", standardise="context", batch_size=3, seed=1)
    for task in sampler.tasks(0):
        np.testing.assert_allclose(task.context.f.mean(), 0.0, atol=1e-5)
        np.testing.assert_allclose(task.context.f.std(), 1.0, atol=1e-5)
    with pytest.raises(ConfigError, match="standardise"):
        TaskSampler(field, "field", standardise="global")


def test_what_cannot_map_is_a_clear_error(field):
    two = field.assign(other=field.field * 2)
    with pytest.raises(ConfigError, match="one model per variable"):
        two.np.fit(["field", "other"], model="gp-sphere", **FROZEN)
    with pytest.raises(ConfigError, match="no temporal attention"):
        field.np.fit("field", model="gp-sphere", tasks=ForecastTasks(frames=1), **FROZEN)
    with pytest.raises(ConfigError, match="context sources"):
        field.np.fit("field", model="gp-sphere", context_sources={"more": field}, **FROZEN)
    fitted = field.np.fit("field", model="bsa-tnp-tiny", **FROZEN)
    with pytest.raises(ConfigError, match="zero-shot"):
        field.np.fit("field", model=fitted, **FROZEN)


@pytest.mark.slow
def test_projected_data_map_through_their_grid_mapping():
    ds = grid_dataset(nt=2, ny=6, nx=7)  # lat/lon ...
    import pyproj

    crs = pyproj.CRS.from_epsg(27700)
    to_xy = pyproj.Transformer.from_crs(4326, crs, always_xy=True)
    x, _ = to_xy.transform(ds.lon.values, np.full(ds.lon.size, 52.0))
    _, y = to_xy.transform(np.full(ds.lat.size, -1.0), ds.lat.values)
    projected = xr.Dataset(
        {"t2m": (("time", "y", "x"), ds.t2m.values, {"units": "K", "grid_mapping": "crs"})},
        coords={"time": ds.time, "x": ("x", x, {"standard_name": "projection_x_coordinate",
                                               "units": "m"}),
                "y": ("y", y, {"standard_name": "projection_y_coordinate", "units": "m"})},
    ).assign(crs=xr.DataArray(0, attrs=crs.to_cf()))  # fmt: skip
    tuned = projected.np.fit("t2m", model="gp-sphere", **FROZEN)
    out = xnp.predict(tuned, projected.isel(time=0))
    assert np.isfinite(out.t2m_mean).all()


def test_cli_fine_tunes_from_a_name(capsys, tmp_path, field):
    field.to_netcdf(tmp_path / "field.nc")
    status = main(["fit", str(tmp_path / "field.nc"), "field", "--from", "gp-sphere",
                   "--out", str(tmp_path / "m"), "--steps", "1", "--batch-size", "2",
                   "--validation", "0", "--no-progress", "--quiet"])  # fmt: skip
    assert status == 0, capsys.readouterr().err
    model = xnp.load(tmp_path / "m")
    assert model.training["fine_tuned_from"]["from"] == "gp-sphere"
    assert model.normalise == "context"
    assert model.training["trend"] == "linear"  # gp-sphere's own, kept for prediction
    status = main(["fit", str(tmp_path / "field.nc"), "field", "--from", "gp-sphere",
                   "--out", str(tmp_path / "plain"), "--steps", "1", "--batch-size", "2",
                   "--validation", "0", "--no-progress", "--quiet",
                   "--trend", "none"])  # fmt: skip
    assert status == 0, capsys.readouterr().err
    assert xnp.load(tmp_path / "plain").training["trend"] is None


def test_the_sampler_removes_each_contexts_trend(field):
    from xnp.data.trend import Trend

    plain = TaskSampler(field, "field", standardise="context", batch_size=3, seed=4)
    trended = TaskSampler(field, "field", standardise="context", trend="linear",
                          batch_size=3, seed=4)  # fmt: skip
    for a, b in zip(plain.tasks(0), trended.tasks(0), strict=True):
        fitted = Trend.fit(a.context.s, a.context.f, spherical=True, degree=1)
        resid_c = a.context.f - fitted.at(a.context.s)[0]
        resid_t = a.target.f - fitted.at(a.target.s)[0]
        mean, std = resid_c.mean(), resid_c.std()
        np.testing.assert_allclose(b.context.f, (resid_c - mean) / std, atol=1e-4)
        np.testing.assert_allclose(b.target.f, (resid_t - mean) / std, atol=1e-4)
    with pytest.raises(ConfigError, match="trend"):
        TaskSampler(field, "field", trend="linear")  # not context-standardised
    with pytest.raises(ConfigError, match="trend"):
        TaskSampler(field, "field", standardise="context", trend="quadratic")


def test_a_model_fine_tuned_with_a_trend_predicts_with_it(field, tmp_path):
    tuned = field.np.fit("field", model="gp-sphere", trend="linear", **FROZEN)
    assert tuned.training["trend"] == "linear"
    frame = field.isel(time=1)
    own = frame_prediction(tuned, frame)
    assert own.attrs["xnp_trend"].startswith("linear")
    base = xnp.pretrained("gp-sphere")
    explicit = xnp.predict(base, frame[["field"]], frame[["field"]].drop_vars("field"),
                           trend="linear")  # fmt: skip
    np.testing.assert_allclose(own.field_mean, explicit.field_mean, atol=1e-5)  # step 0
    off = xnp.predict(tuned, frame[["field"]], frame[["field"]].drop_vars("field"), trend="none")
    assert "xnp_trend" not in off.attrs
    assert not np.allclose(off.field_mean, own.field_mean)
    loaded = xnp.load(tuned.save(tmp_path / "m"))
    np.testing.assert_array_equal(frame_prediction(loaded, frame).field_mean, own.field_mean)


def test_a_default_fine_tune_keeps_the_pretrained_models_own_trend_for_prediction(field):
    base = xnp.pretrained("gp-sphere")
    assert base.training["trend"] == "linear"
    tuned = field.np.fit("field", model="gp-sphere", **FROZEN)
    # learnt on plain contexts, predicts with gp-sphere's own trend
    assert tuned.training["trend"] == "linear"
    assert tuned.training["trend_in_training"] is None
    frame = field.isel(time=1)
    a, b = frame_prediction(base, frame), frame_prediction(tuned, frame)  # both by default
    assert b.attrs["xnp_trend"].startswith("linear")
    np.testing.assert_allclose(b.field_mean, a.field_mean, atol=1e-5)  # step 0
    np.testing.assert_allclose(b.field_std, a.field_std, atol=1e-5)
    # trend="none": no trend in training or at prediction
    plain = field.np.fit("field", model="gp-sphere", trend="none", **FROZEN)
    assert plain.training["trend"] is None
    assert "xnp_trend" not in frame_prediction(plain, frame).attrs
    # a trend other than "none" is for fine-tuning only
    with pytest.raises(ConfigError, match="fine-tuning"):
        field.np.fit("field", model="bsa-tnp-tiny", trend="constant", **FROZEN)


def test_a_trend_is_for_fine_tuning_interpolation(field):
    with pytest.raises(ConfigError, match="fine-tuning"):
        field.np.fit("field", model="bsa-tnp-tiny", trend="linear", **FROZEN)
    with pytest.raises(ConfigError, match="baseline"):
        field.np.fit("field", model="gp-sphere", trend="linear",
                     tasks=ForecastTasks(frames=1), **FROZEN)  # fmt: skip
    with pytest.raises(ConfigError, match="'constant' or 'linear'"):
        field.np.fit("field", model="gp-sphere", trend="plane", **FROZEN)
