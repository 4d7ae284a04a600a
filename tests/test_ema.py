"""The moving average of the parameters (``TrainConfig(ema=...)``): its step, fit and resume.

The fits use the data shape, model and batch size of tests/test_fit.py and
tests/test_checkpoint.py, so the compiled steps are shared within a session.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import xnp
from xnp import files as ckpt
from xnp.api.sizes import fixed_batch
from xnp.data import SpatialTasks, TaskSampler
from xnp.errors import CheckpointError, ConfigError
from xnp.models.build import build_model
from xnp.models.config import BSATNPConfig
from xnp.train import TrainConfig, TrainState, averaged_fit_step, fit_step, train
from xnp.train.checkpoints import CheckpointDir
from xnp.train.steps import moving_average

CONFIG = TrainConfig(log_every=25, validate_every=50, validation_batches=4, checkpoint_every=25)
ARGS = {"model": "bsa-tnp-tiny", "learning_rate": 5e-3, "progress": False}


def gp_data():
    return xnp.datasets.gp_sphere(n_lat=6, n_lon=12, n_time=40, lengthscale_km=3000.0)


def leaves(tree):
    return [np.asarray(a) for a in jax.tree.leaves(tree)]


def test_the_decay_warms_up_and_bad_values_are_refused():
    config = TrainConfig(ema=0.95)
    assert config.ema_decay(0) == pytest.approx(0.1)
    assert config.ema_decay(8) == pytest.approx(0.5)
    assert config.ema_decay(1000) == 0.95
    assert TrainConfig().ema_decay(1000) == 0.0
    for bad in (1.0, -0.1, float("nan")):
        with pytest.raises(ConfigError, match="ema"):
            TrainConfig(ema=bad)


def test_moving_average_keeps_dtypes_and_moves_by_one_minus_decay():
    average = {"w": jnp.zeros(3), "h": jnp.ones(2, jnp.bfloat16)}
    params = {"w": jnp.arange(3.0), "h": jnp.zeros(2, jnp.bfloat16)}
    out = moving_average(average, params, jnp.float32(0.9))
    np.testing.assert_allclose(out["w"], 0.1 * np.arange(3.0), rtol=1e-6)
    assert out["h"].dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(out["h"], np.float32), 0.9, rtol=1e-2)


@pytest.fixture(scope="module")
def setup():
    graphdef, params = nnx.split(build_model(BSATNPConfig.tiny(), rngs=nnx.Rngs(0)), nnx.Param)
    sampler = TaskSampler(gp_data(), "field", SpatialTasks(max_context=64, max_targets=32),
                          batch_size=8, seed=1)  # fmt: skip
    batches = [fixed_batch(sampler.batch(k), 64, 32) for k in range(6)]
    return graphdef, params, batches


def test_the_averaged_step_is_the_plain_step_then_the_average(setup):
    # reference: fit_step, then the average by hand in float64
    graphdef, params, batches = setup
    config = TrainConfig()
    copy = lambda t: jax.tree.map(jnp.copy, t)  # noqa: E731 (the steps donate their inputs)
    p_ref, o_ref = copy(params), config.init_optimizer(params)
    p, o, a = copy(params), config.init_optimizer(params), copy(params)
    reference = [np.asarray(x, np.float64) for x in leaves(params)]
    plain = fit_step(graphdef, config.clip_norm, config.weight_decay)
    averaged = averaged_fit_step(graphdef, config.clip_norm, config.weight_decay)
    lr = np.float32(1e-3)
    for k, batch in enumerate(batches[:3]):
        d = TrainConfig(ema=0.9).ema_decay(k)
        p_ref, o_ref, loss_ref = plain(p_ref, o_ref, batch, lr)
        p, o, a, loss = averaged(p, o, a, batch, lr, np.float32(d))
        reference = [d * r + (1 - d) * np.asarray(x, np.float64)
                     for r, x in zip(reference, leaves(p_ref), strict=True)]  # fmt: skip
        assert float(loss) == float(loss_ref)
        for x, y in zip(leaves(p), leaves(p_ref), strict=True):
            np.testing.assert_array_equal(x, y)  # training itself is unchanged
    for x, y in zip(leaves(a), reference, strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
    assert any(not np.allclose(x, y) for x, y in zip(leaves(a), leaves(p), strict=True))


def test_train_keeps_the_average_across_calls(setup):
    # one call of 6 steps = 6 calls of one step each (constant learning rate)
    graphdef, params, batches = setup
    config = TrainConfig(ema=0.8, warmup_fraction=0.0, final_lr_ratio=1.0, log_every=1,
                         validate_every=1, checkpoint_every=1, prefetch=0)  # fmt: skip
    args = {"learning_rate": 1e-3, "config": config, "batch_size": 8, "progress": False}

    def fresh():
        p = jax.tree.map(jnp.copy, params)
        return TrainState(step=0, params=p, opt_state=config.init_optimizer(p))

    whole = train(graphdef, fresh(), batches.__getitem__, steps=6, **args)
    state = fresh()
    raw = []
    for k in range(6):
        state = train(graphdef, state, batches.__getitem__, steps=k + 1, **args)
        raw.append([np.asarray(x, np.float64) for x in leaves(state.params)])
    reference = [np.asarray(x, np.float64) for x in leaves(params)]
    for k in range(6):
        d = config.ema_decay(k)
        reference = [d * r + (1 - d) * x for r, x in zip(reference, raw[k], strict=True)]
    for x, y in zip(leaves(whole.ema_params), reference, strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
    for x, y in zip(leaves(whole.averaged), leaves(state.ema_params), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7)


def test_fit_returns_the_average_and_resumes_to_the_uninterrupted_result(tmp_path):
    config = dataclasses.replace(CONFIG, ema=0.9)
    ckdir = tmp_path / "run"
    full = gp_data().np.fit("field", steps=30, config=config, checkpoint_dir=ckdir,
                            validation=None, **ARGS)  # fmt: skip
    steps = CheckpointDir(ckdir).steps()
    assert (steps[-1] / "ema_params.safetensors").is_file()
    assert full.training["train_config"]["ema"] == 0.9
    # the checkpoint's model holds the raw parameters (what resuming continues from);
    # the fitted model holds their average
    raw = xnp.load(steps[-1])
    assert any(not np.allclose(x, y) for x, y in
               zip(leaves(full.params_), leaves(raw.params_), strict=True))  # fmt: skip
    plain = gp_data().np.fit("field", steps=30, config=CONFIG, validation=None, **ARGS)
    for x, y in zip(leaves(plain.params_), leaves(raw.params_), strict=True):
        np.testing.assert_array_equal(x, y)  # averaging does not change training
    assert "ema" not in plain.training["train_config"]  # (old checkpoints still resume)
    # the run died after step 25: its last checkpoint (step 30) never landed
    for leftover in (steps[-1], ckdir / "LATEST"):
        ckpt.shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()
    resumed = gp_data().np.fit("field", steps=30, config=config, checkpoint_dir=ckdir,
                               resume=True, validation=None, **ARGS)  # fmt: skip
    for x, y in zip(leaves(full.params_), leaves(resumed.params_), strict=True):
        np.testing.assert_array_equal(x, y)
    with pytest.raises(CheckpointError, match="different fit"):
        gp_data().np.fit("field", steps=30, config=dataclasses.replace(config, ema=0.5),
                         checkpoint_dir=ckdir, resume=True, validation=None, **ARGS)  # fmt: skip


def test_validation_judges_and_keeps_the_average(tmp_path):
    config = dataclasses.replace(CONFIG, ema=0.9, validate_every=25)
    model = gp_data().np.fit("field", steps=50, config=config, checkpoint_dir=tmp_path, **ARGS)
    best = model.training["best_step"]
    at = lambda step: tmp_path / f"step-{step:08d}"  # noqa: E731
    kept = ckpt.read_arrays(at(50) / "best_params.safetensors")
    average = ckpt.read_arrays(at(best) / "ema_params.safetensors")
    assert kept.keys() == average.keys()
    for name in kept:  # the best parameters are the average of the best step
        np.testing.assert_array_equal(kept[name], average[name])
    fitted = ckpt.tree_to_arrays(model.params_)
    for name in kept:  # and they are what the fitted model holds
        np.testing.assert_array_equal(fitted[name], kept[name])
