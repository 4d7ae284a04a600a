"""Training on the CRPS (``TrainConfig(loss="crps")``): the score, the step, fit and resume.

The fits use the data shape, model and batch size of tests/test_ema.py, so the
compiled steps are shared within a session.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from scipy import integrate, stats

import xnp
from xnp.api.sizes import fixed_batch
from xnp.data import SpatialTasks, TaskSampler
from xnp.errors import CheckpointError, ConfigError
from xnp.history import default_metrics, history_dataset
from xnp.models.build import build_model
from xnp.models.config import BSATNPConfig
from xnp.models.likelihoods import gaussian_crps
from xnp.scoring.scores import _score_crps
from xnp.train import TrainConfig, batch_loss, fit_step

CONFIG = TrainConfig(log_every=25, validate_every=25, validation_batches=4, checkpoint_every=25)
ARGS = {"model": "bsa-tnp-tiny", "learning_rate": 5e-3, "progress": False}


def gp_data():
    return xnp.datasets.gp_sphere(n_lat=6, n_lon=12, n_time=40, lengthscale_km=3000.0)


def test_the_closed_form_is_the_integral_of_the_squared_cdf_difference():
    # slow reference: CRPS(F, y) = ∫ (F(t) − 1{t ≥ y})² dt by quadrature
    rng = np.random.default_rng(0)
    mean, std, y = rng.normal(size=6), rng.uniform(0.1, 3.0, 6), rng.normal(size=6) * 2
    slow = [
        integrate.quad(lambda t, m=m, s=s, v=v: (stats.norm.cdf(t, m, s) - (t >= v)) ** 2,
                       m - 40 * s - abs(v), m + 40 * s + abs(v), points=[v], limit=400)[0]
        for m, s, v in zip(mean, std, y, strict=True)
    ]  # fmt: skip
    fast = gaussian_crps(*(jnp.asarray(a, jnp.float32)[None, :, None] for a in (mean, std, y)))
    np.testing.assert_allclose(float(fast), np.mean(slow), rtol=1e-5)
    # and the scoring code's numpy form, point by point
    each = [float(gaussian_crps(*(jnp.float32(a).reshape(1, 1, 1) for a in p)))
            for p in zip(mean, std, y, strict=True)]  # fmt: skip
    np.testing.assert_allclose(each, _score_crps(y, mean, std), rtol=1e-5)


def test_the_mask_leaves_out_padded_targets():
    mean, std = jnp.zeros((1, 3, 1)), jnp.ones((1, 3, 1))
    y = jnp.array([0.5, -1.0, 1e6]).reshape(1, 3, 1)  # the last one is padding
    mask = jnp.array([[True, True, False]])
    expected = gaussian_crps(mean[:, :2], std[:, :2], y[:, :2])
    assert float(gaussian_crps(mean, std, y, mask)) == pytest.approx(float(expected))


def test_bad_objectives_are_refused():
    with pytest.raises(ConfigError, match="loss must be one of 'nll', 'crps'"):
        TrainConfig(loss="mse")


@pytest.fixture(scope="module")
def setup():
    graphdef, params = nnx.split(build_model(BSATNPConfig.tiny(), rngs=nnx.Rngs(0)), nnx.Param)
    sampler = TaskSampler(gp_data(), "field", SpatialTasks(max_context=64, max_targets=32),
                          batch_size=8, seed=1)  # fmt: skip
    return graphdef, params, fixed_batch(sampler.batch(0), 64, 32)


def test_the_crps_step_descends_the_crps_of_the_models_predictions(setup):
    graphdef, params, batch = setup
    model = nnx.merge(graphdef, params)
    mean, std = model(batch.context, batch.target)
    by_hand = gaussian_crps(mean, std, batch.y, batch.target.mask)
    assert float(batch_loss(model, batch, "crps")) == pytest.approx(float(by_hand), rel=1e-6)
    assert float(batch_loss(model, batch)) != pytest.approx(float(by_hand), rel=1e-3)
    config = TrainConfig()
    step = fit_step(graphdef, config.clip_norm, config.weight_decay, "crps")
    copy = jax.tree.map(jnp.copy, params)
    before = float(by_hand)
    p, o = copy, config.init_optimizer(copy)
    for _ in range(5):
        p, o, loss = step(p, o, batch, np.float32(1e-3))
    assert float(loss) < before  # five steps on one batch lower its CRPS
    with pytest.raises(ConfigError, match="loss must be one of"):
        fit_step(graphdef, config.clip_norm, config.weight_decay, "mse")


def test_fit_keeps_the_best_validation_crps_and_resumes_only_the_same_objective(tmp_path):
    config = dataclasses.replace(CONFIG, loss="crps")
    model = gp_data().np.fit("field", steps=75, config=config, checkpoint_dir=tmp_path, **ARGS)
    h = model.history_
    assert model.training["train_config"]["loss"] == "crps"
    assert np.isfinite(h["train_crps"].values).all()
    assert np.isnan(h["train_nll"].values).all()
    assert np.isfinite(h["val_crps"].values).all()
    assert np.isfinite(h["val_nll"].values).all()
    best = int(h["step"].values[np.argmin(h["val_crps"].values)])
    assert model.training["best_step"] == best
    assert default_metrics(h) == ("train_crps", "val_crps")
    assert "CRPS" in repr(model)
    with pytest.raises(CheckpointError, match="different fit"):
        gp_data().np.fit("field", steps=75, config=CONFIG, checkpoint_dir=tmp_path,
                         resume=True, **ARGS)  # fmt: skip
    again = gp_data().np.fit("field", steps=75, config=config, checkpoint_dir=tmp_path,
                             resume=True, **ARGS)  # fmt: skip
    for x, y in zip(jax.tree.leaves(model.params_), jax.tree.leaves(again.params_), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_the_default_objective_is_left_out_of_the_record_and_old_histories_load():
    model = gp_data().np.fit("field", steps=25, config=CONFIG, validation=None, **ARGS)
    assert "loss" not in model.training["train_config"]  # checkpoints of before still resume
    assert np.isnan(model.history_["train_crps"].values).all()
    assert default_metrics(model.history_) == ("train_nll", "val_nll")
    old = history_dataset({"step": [25, 50], "train_nll": [1.0, 0.9]}, ["v"], ["K"])
    assert np.isnan(old["val_crps"].values).all()
    assert old.sizes["step"] == 2
