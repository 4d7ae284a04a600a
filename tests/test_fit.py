"""ds.np.fit: learning on a synthetic GP field, determinism, sharding, history, errors.

Every fit here uses the same data shape, model and batch size as the doctests of
xnp.api and xnp.accessor, so the train and eval steps compile once per session.
"""

from __future__ import annotations

import dataclasses
import math
import warnings

import dask
import jax
import numpy as np
import pandas as pd
import pytest
import xarray as xr

import xnp
from xnp.data import ForecastTasks, SpatialTasks
from xnp.errors import ConfigError, EmptyDataError, VariableNotFoundError, XnpWarning
from xnp.models.config import BSATNPConfig
from xnp.models.swin_config import SwinTNPConfig
from xnp.testing import ComputeCounter
from xnp.train import TrainConfig, data_mesh

FAST = TrainConfig(log_every=25, validate_every=50, validation_batches=4)


def gp_data() -> xr.Dataset:
    return xnp.datasets.gp_sphere(n_lat=6, n_lon=12, n_time=40, lengthscale_km=3000.0)


def fit(ds: xr.Dataset | None = None, **kw) -> xnp.NeuralProcess:
    args = {"model": "bsa-tnp-tiny", "steps": 50, "learning_rate": 3e-3, "progress": False,
            "config": FAST} | kw  # fmt: skip
    return (gp_data() if ds is None else ds).np.fit("field", **args)


def leaves(model: xnp.NeuralProcess) -> list[np.ndarray]:
    return [np.asarray(a) for a in jax.tree.leaves(model.params_)]


@pytest.fixture(scope="module")
def trained() -> xnp.NeuralProcess:
    return fit(steps=200, learning_rate=5e-3)


def test_fit_learns_the_gp_field(trained):
    ds = gp_data()
    history = trained.history_
    best = history.sel(step=trained.training["best_step"])
    # Predicting the training mean and standard deviation everywhere, on the held-out times:
    norm = trained.normaliser.stats["field"]
    held_out = ds.field.isel(time=slice(36, None)).values
    z = (held_out - norm.mean) / norm.std
    baseline = float(np.mean(0.5 * z**2 + 0.5 * math.log(2 * math.pi)))
    assert baseline > 1.3
    # a forecaster's NLL is of the change from its baseline, in the baseline's scale:
    # in the field's normalised units it is larger by log(scale / std)
    ratio = 1.0 if trained.baseline is None else float(trained.baseline.ratio([norm.std])[0])
    assert float(best.val_nll) + math.log(ratio) < baseline - 0.5
    assert float(best.val_rmse) < 0.6 * float(ds.field.std())
    assert 0.75 < float(best.val_coverage) < 0.99  # nominal 0.95: neither too narrow nor too wide
    # (a forecaster of changes starts near the right scale, and the default autoregressive
    # baseline already explains much of this smooth field's change, so its loss falls less)
    assert float(history.train_nll[-1]) < float(history.train_nll[0]) - 0.03


def test_fit_defaults_follow_the_data(trained):
    assert isinstance(trained.task, ForecastTasks)
    assert (trained.task.frames, trained.task.step, trained.task.lead) == (4, 6.0, 6.0)
    cfg = trained.config
    assert cfg.temporal_bias
    assert cfg.spatial_bias == "great_circle"
    assert (cfg.dim_x, cfg.dim_y) == (0, 1)
    assert trained.coords["lat"] == "lat"
    assert trained.coords["time"] == "time"
    assert trained.training["context_size"] == 288
    assert trained.training["target_size"] == 80


def test_history_is_a_dataset_indexed_by_step(trained):
    h = trained.history_
    assert h.step.values.tolist() == [25, 50, 75, 100, 125, 150, 175, 200]
    assert set(h.data_vars) == {
        "train_nll", "val_nll", "val_rmse", "val_coverage", "learning_rate", "steps_per_second",
        "train_crps", "val_crps",
    }  # fmt: skip
    assert np.isnan(h.val_nll.sel(step=25))
    assert np.isfinite(h.val_nll.sel(step=50))
    assert np.isfinite(h.val_crps.sel(step=50))  # validation scores both objectives
    assert np.isnan(h.train_crps).all()  # the NLL was trained
    assert h.val_rmse.attrs["units"] == "K"
    assert (h.steps_per_second > 0).all()
    lr = h.learning_rate.values
    assert lr[0] > lr[-1] > 0
    assert math.isclose(lr[-1], 5e-3 * 0.2, rel_tol=0.05)


def test_fit_keeps_the_best_validation_parameters(trained):
    best = trained.training["best_step"]
    val = trained.history_.val_nll
    assert best == int(val.idxmin())
    assert trained.training["step"] == 200


def test_repr_and_plot(trained):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    text = repr(trained)
    assert text.startswith("<xnp.NeuralProcess bsa-tnp:")
    assert "field [K]" in text
    assert "ForecastTasks" in text
    assert "validation:  NLL" in text
    ax = trained.plot_history(metrics=("train_nll", "val_nll", "val_rmse"))
    assert len(ax.lines) == 3
    import matplotlib.pyplot as plt

    plt.close("all")


def test_the_progress_bar_counts_steps_run_not_steps_queued(monkeypatch):
    """At most one step runs ahead of the bar: before step k is queued, step k - 2 is done."""
    import xnp.train.loop as loop

    real, block = loop.fit_step, jax.block_until_ready
    queued, awaited = [], set()

    def fit_step(*args):
        step = real(*args)

        def counted(params, opt_state, batch, lr):
            assert all(id(loss) in awaited for loss in queued[:-1]), len(queued)
            out = step(params, opt_state, batch, lr)
            queued.append(out[2])
            return out

        return counted

    def await_(x):
        awaited.add(id(x))
        return block(x)

    monkeypatch.setattr(loop, "fit_step", fit_step)
    monkeypatch.setattr(jax, "block_until_ready", await_)
    # one device (several CPU devices await every step anyway: see xnp.train.loop); one
    # block and no temporal bias, so that its own compilation is short
    small = BSATNPConfig.tiny(n_blocks=1, temporal_bias=False)
    fit(gp_data().isel(time=0), model=small, tasks=SpatialTasks(), steps=6, validation=None,
        config=dataclasses.replace(FAST, devices=1))  # fmt: skip
    assert len(queued) == 6


def test_fit_is_deterministic_and_seeded():
    a, b, c = fit(steps=25), fit(steps=25), fit(steps=25, seed=1)
    for x, y in zip(leaves(a), leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)
    assert any(not np.array_equal(x, y) for x, y in zip(leaves(a), leaves(c), strict=True))
    np.testing.assert_array_equal(a.history_.train_nll, b.history_.train_nll)


def test_batches_are_sharded_over_the_two_fake_devices(trained):
    assert len(jax.devices()) == 2
    # the fit ran data-parallel: its parameters are replicated over both devices
    assert len(jax.tree.leaves(trained.params_)[0].sharding.device_set) == 2
    assert data_mesh(8).devices.size == 2
    assert data_mesh(3).devices.size == 1  # falls back to the devices that divide the batch
    with pytest.raises(ConfigError, match="multiple of the device count"):
        data_mesh(3, devices=2)
    with pytest.raises(ConfigError, match="multiple of the device count"):
        fit(steps=1, batch_size=3, config=TrainConfig(devices=2))


def test_dataarray_fits_its_own_name():
    model = gp_data().field.np.fit(
        model="bsa-tnp-tiny", steps=2, progress=False, validation=None,
        config=TrainConfig(log_every=1, validate_every=1),
    )  # fmt: skip
    assert model.variables == ("field",)
    assert model.history_.val_nll.isnull().all()
    # the first step compiles and is not timed: its row has no speed, the next one has
    speed = model.history_.steps_per_second.values
    assert np.isnan(speed[0])
    assert speed[1] > 0
    with pytest.raises(ConfigError, match="no name"):
        xr.DataArray(np.zeros((2, 2))).np.fit()


def test_user_config_gets_data_dependent_fields_and_timeless_data_warns():
    ds = gp_data().assign(height=lambda d: d.field.isel(time=0).drop_vars("time") * 0 + 1.0)
    args = {"model": BSATNPConfig.tiny(temporal_bias=True), "covariates": ["height"],
            "tasks": SpatialTasks(max_context=32, max_targets=32), "steps": 1,
            "config": TrainConfig(log_every=1, validate_every=1)}  # fmt: skip
    model = fit(ds, validation=None, **args)
    assert model.config.dim_x == 1
    assert not model.config.temporal_bias
    assert model.training["context_size"] == model.training["target_size"] == 32
    with pytest.warns(XnpWarning, match="no time axis"):
        timeless = fit(ds.isel(time=0), **args)
    assert isinstance(timeless.task, SpatialTasks)
    assert timeless.history_.val_nll.isnull().all()


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"variable": "t2m"}, VariableNotFoundError, "t2m"),
        ({"model": "gp-net"}, ConfigError, "Unknown model 'gp-net'; available models: bsa-tnp"),
        ({"model": 3}, ConfigError, "registered name"),
        ({"steps": 0}, ConfigError, "steps must be a positive integer"),
        ({"steps": -5}, ConfigError, "steps must be a positive integer"),
        ({"batch_size": 0}, ConfigError, "batch_size"),
        ({"learning_rate": 0.0}, ConfigError, "learning_rate"),
        ({"covariates": ["orography"]}, VariableNotFoundError, "Covariate 'orography'"),
        ({"validation": 1.5}, ConfigError, "validation must be a fraction"),
        ({"resume": True}, ConfigError, "checkpoint_dir"),
        ({"learning_rate": "1e-3"}, ConfigError, "learning_rate must be a positive finite"),
        ({"tasks": "spatial"}, ConfigError, "tasks must be a task specification"),
        ({"seed": -1}, ConfigError, "seed must be a non-negative integer"),
        ({"seed": "0"}, ConfigError, "seed must be a non-negative integer"),
        ({"validation": "last"}, ConfigError, "'last' selects no time of the data"),
        ({"validation": True}, ConfigError, "validation must be a fraction"),
        ({"validation": slice("1990", "1991")}, ConfigError, "selects 0 of the 40 times"),
        ({"validation": slice(None, None)}, ConfigError, "must leave some for training"),
        ({"validation": {"time": 3}}, ConfigError, "validation must be a fraction"),
        ({"covariates": "orography"}, VariableNotFoundError, "Covariate 'orography'"),
        ({"learning_rate": float("inf")}, ConfigError, "positive finite number"),
        ({"steps": True}, ConfigError, "steps must be a positive integer"),
        ({"batch_size": True}, ConfigError, "batch_size must be a positive integer"),
        ({"variable": []}, ConfigError, "one or more distinct variables"),
        ({"variable": ["field", "field"]}, ConfigError, "one or more distinct variables"),
        ({"config": "fast"}, ConfigError, "config must be an xnp.TrainConfig"),
    ],
)
def test_bad_arguments_raise_clear_errors(kwargs, error, match):
    args = {"variable": "field", "model": "bsa-tnp-tiny", "steps": 5, "progress": False} | kwargs
    with pytest.raises(error, match=match):
        gp_data().np.fit(args.pop("variable"), **args)


def test_validation_data_sharing_training_frames_warn():
    ds = gp_data()
    args = {"model": "bsa-tnp-tiny", "steps": 2, "progress": False, "config": FAST}
    spatial = {**args, "tasks": SpatialTasks()}
    with pytest.warns(XnpWarning, match="share 8 time"):
        ds.np.fit("field", validation=ds.isel(time=slice(32, None)), **spatial)
    # forecasts: only the validation targets count (4 frames 6 h apart, 6 h ahead: the
    # last 4 of the 8 times can be targets)
    with pytest.warns(XnpWarning, match="share 4 time"):
        ds.np.fit("field", validation=ds.isel(time=slice(32, None)), **args)
    train, held_out = ds.isel(time=slice(0, 32)), ds.isel(time=slice(32, None))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        train.np.fit("field", validation=held_out, **args)
        # other places at the same times (same grid size): a spatial split, no warning
        moved = ds.assign_coords(lat=ds.lat + 1.0).isel(time=slice(32, None))
        ds.np.fit("field", validation=moved, **args)
        # forecasts validated on later days whose first context frames are training
        # days: the targets are held out, so no warning (the user guide's own setup)
        later = ds.isel(time=slice(29, None))  # targets from time 33 on: 3 frames back
        ds.isel(time=slice(0, 33)).np.fit("field", validation=later, **args)


def test_validation_times_are_held_out_of_training():
    ds = gp_data()
    times = ds.time.values[28:36]
    config = TrainConfig(log_every=2, validate_every=2, validation_batches=1)
    args = {"model": "bsa-tnp-tiny", "steps": 4, "progress": False, "seed": 3, "config": config}
    by_times = ds.np.fit("field", validation=slice(times[0], times[-1]), **args)
    by_hand = ds.drop_sel(time=times).np.fit("field", validation=ds.sel(time=times), **args)
    for a, b in zip(leaves(by_times), leaves(by_hand), strict=True):
        np.testing.assert_array_equal(a, b)
    assert by_times.training["validation"] == "times"
    np.testing.assert_array_equal(by_times.history_.val_nll, by_hand.history_.val_nll)
    assert np.isfinite(by_times.history_.val_nll).all()
    # a list, a DataArray and a DatetimeIndex of the same times select the same
    for same in (list(times), ds.time[28:36], pd.DatetimeIndex(times)):
        again = ds.np.fit("field", validation=same, **args)
        np.testing.assert_array_equal(leaves(again)[0], leaves(by_times)[0])
    with pytest.raises(EmptyDataError, match="validation data hold no complete task"):
        ds.np.fit("field", validation=times[-1], **args)  # one frame: no forecast task
    one = pd.Timestamp(times[-1]).to_pydatetime()  # a datetime holds out one frame
    spatial = ds.np.fit("field", validation=one, tasks=SpatialTasks(), **args | {"steps": 1})
    assert spatial.training["data"]["sizes"]["time"] == ds.sizes["time"] - 1


def test_train_config_validation():
    with pytest.raises(ConfigError, match="multiple of log_every"):
        TrainConfig(log_every=10, validate_every=15)
    with pytest.raises(ConfigError, match="final_lr_ratio"):
        TrainConfig(final_lr_ratio=2.0)
    assert TrainConfig.from_dict(FAST.to_dict()) == FAST


def test_a_diverging_fit_raises_instead_of_returning_nan_parameters():
    with pytest.raises(ConfigError, match=r"diverged: the training NLL is nan at step 4.*"
                       r"Lower learning_rate"):  # fmt: skip
        fit(steps=4, learning_rate=1e6, validation=None)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: BSATNPConfig.tiny(n_blocks=True), "n_blocks must be a positive integer"),
        (lambda: BSATNPConfig.tiny(dim_x=-1), "dim_x must be an integer ≥ 0"),
        (lambda: BSATNPConfig.tiny(n_heads=3), r"dim_attn \(16\) must be divisible by n_heads"),
        (lambda: BSATNPConfig.tiny(spatial_scale="km"), "spatial_scale must be a positive finite"),
        (lambda: BSATNPConfig.tiny(temporal_scale=math.inf), "temporal_scale must be a positive"),
        (lambda: BSATNPConfig.tiny(embed_hidden=32), "embed_hidden must be a tuple of positive"),
        (lambda: BSATNPConfig.tiny(head_hidden=None), "head_hidden must be a tuple"),
        (lambda: BSATNPConfig.tiny(temporal_bias="yes"), "temporal_bias must be True or False"),
        (lambda: BSATNPConfig.tiny(min_std="0.1"), r"min_std must be a number in \[0, 1\)"),
        (lambda: SwinTNPConfig.tiny(decoder_radius=1.5), "decoder_radius must be an integer"),
        (lambda: SwinTNPConfig.tiny(n_fourier="4"), "n_fourier must be an integer"),
        (lambda: SwinTNPConfig.tiny(grid_shape=8), "grid_shape must be 2 positive integers"),
        (lambda: SwinTNPConfig.tiny(extent=None), r"extent must be \(\(lo, hi\), \(lo, hi\)\)"),
        (lambda: SwinTNPConfig.tiny(extent=((-90, "90"), (0, 360))), "extent must be"),
        (lambda: SwinTNPConfig.tiny(temporal_scale="24"), "temporal_scale must be a positive"),
        (lambda: SwinTNPConfig.tiny(embed_t=1), "embed_t must be True or False"),
        (lambda: TrainConfig(weight_decay=math.nan), "weight_decay must be a finite number"),
        (lambda: TrainConfig(warmup_fraction="0.1"), "warmup_fraction must be a number"),
        (lambda: TrainConfig(keep_checkpoints="2"), "keep_checkpoints must be a positive int"),
        (lambda: TrainConfig(prefetch=1.5), "prefetch must be an integer ≥ 0"),
        (lambda: TrainConfig(log_every=True), "log_every must be a positive integer"),
        (lambda: TrainConfig(devices=True), "devices must be a positive integer or None"),
        (lambda: TrainConfig.from_dict(None), "read from a mapping"),
        (lambda: BSATNPConfig.from_dict(["n_blocks"]), "read from a mapping"),
    ],
)
def test_invalid_config_values_raise_at_construction(make, match):
    with pytest.raises(ConfigError, match=match):
        make()


def test_configs_normalise_equivalent_values():
    cfg = BSATNPConfig.tiny(embed_hidden=[32], n_blocks=np.int64(2), spatial_scale=500)
    assert cfg == BSATNPConfig.tiny(spatial_scale=500.0)  # a list is stored as a tuple
    assert hash(cfg) == hash(BSATNPConfig.tiny(spatial_scale=500.0))
    assert type(cfg.to_dict()["n_blocks"]) is int  # JSON-serialisable
    swin = SwinTNPConfig.tiny(window=[4, 4], extent=[[-90, 90], [-180, 180]])
    assert swin == SwinTNPConfig.tiny()
    assert TrainConfig(clip_norm=math.inf).clip_norm == math.inf  # no clipping is allowed


def test_model_names_ignore_case_and_underscores():
    from xnp.models.registry import model_config

    want = model_config("bsa-tnp-tiny", dim_x=0, dim_y=1, temporal=True)
    for name in ("BSA-TNP-Tiny", " bsa_tnp_tiny ", "Bsa-Tnp-TINY"):
        assert model_config(name, dim_x=0, dim_y=1, temporal=True) == want
    with pytest.raises(ConfigError, match="Unknown model 'bsa-tnp-huge'"):
        model_config("bsa-tnp-huge", dim_x=0, dim_y=1, temporal=True)


def test_forecasts_of_held_out_times_match_validation(trained):
    ds = gp_data()
    inits = ds.time.values[35:39]  # valid times 36..39: the held-out part
    out = ds.np.predict(trained, time=inits)
    truth = ds.field.sel(time=out.valid_time)
    err = out.field_mean - truth
    rmse = float(np.sqrt((err**2).mean()))
    best = trained.history_.sel(step=trained.training["best_step"])
    # the same skill the training loop measured on its validation tasks
    assert 0.6 * float(best.val_rmse) < rmse < 1.4 * float(best.val_rmse)
    z = np.abs(err / out.field_std)
    assert 0.8 < float((z < 1.96).mean()) <= 1.0
    assert rmse < 0.6 * float(ds.field.std())


def test_default_tasks_follow_the_time_axis():
    from xnp.api.sizes import default_tasks

    ds = xnp.datasets.gp_sphere(n_lat=4, n_lon=5, n_time=36)
    six_hourly = ds.assign_coords(time=pd.date_range("2000-01-01", periods=36, freq="6h"))
    assert isinstance(default_tasks(six_hourly, "field"), ForecastTasks)
    gappy = six_hourly.drop_isel(time=[5, 6, 20])  # missing times keep the step
    assert default_tasks(gappy, "field").step == 6.0
    # calendar months differ in length: no exact forecast step, so spatial tasks
    monthly = ds.assign_coords(time=pd.date_range("2000-01-01", periods=36, freq="MS"))
    assert isinstance(default_tasks(monthly, "field"), SpatialTasks)
    assert isinstance(default_tasks(ds.isel(time=0), "field"), SpatialTasks)


def test_lazy_training_data_are_read_once_within_the_budget(caplog):
    # a dask-backed dataset (as from zarr) costs one compute per task when read through
    # dask; within the load budget it is read into memory once, as a copy
    ds = gp_data()
    lazy = ds.chunk({"time": 8})
    counter = ComputeCounter()
    with dask.config.set(scheduler=counter), caplog.at_level("INFO", logger="xnp.data"):
        model = fit(lazy, steps=6, seed=1)
    assert counter.calls <= 4, counter.calls  # normaliser, loads: not one per task
    assert "read into memory once" in caplog.text
    assert lazy.field.chunks is not None  # the user's data stay lazy
    for a, b in zip(leaves(model), leaves(fit(ds, steps=6, seed=1)), strict=True):
        np.testing.assert_array_equal(a, b)
    counter = ComputeCounter()
    with dask.config.set(scheduler=counter):
        fit(lazy, steps=2, seed=1, validation=None)  # the default budget, again
    no_budget = ComputeCounter()
    with dask.config.set(scheduler=no_budget):
        xnp.data.TaskSampler(lazy, "field", batch_size=2, load_budget=None).batch(0)
    assert no_budget.calls >= 2  # frame by frame: a compute per task


def test_boolean_data_are_refused_with_a_hint():
    ds = gp_data()
    flags = ds.assign(field=ds.field > 0)
    with pytest.raises(ConfigError, match=r"holds booleans.*astype\(float\)"):
        fit(flags, steps=2)


def test_infinite_values_are_counted_in_a_warning():
    ds = gp_data()
    bad = ds.copy(deep=True)
    bad["field"][0, 0, :3] = np.inf
    with pytest.warns(XnpWarning, match=r"3 value\(s\) of field are infinite"):
        model = fit(bad, steps=2, validation=None, tasks=SpatialTasks())
    frame = bad.isel(time=0)
    with pytest.warns(XnpWarning, match=r"3 value\(s\) of 'field' are infinite"):
        pred = xnp.predict(model, frame, frame.drop_vars("field"))
    assert np.isfinite(pred.field_mean).all()
