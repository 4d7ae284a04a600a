"""A wall-clock training budget: the schedule laid over it, a clean stop, resumable
(issue 27, item 4).  The clock is faked, so nothing here depends on the machine's speed."""

from __future__ import annotations

import numpy as np
import pytest

import xnp
from xnp.errors import ConfigError
from xnp.train import TrainConfig
from xnp.train import loop as loop_module

CONFIG = TrainConfig(log_every=2, validate_every=4, validation_batches=1, checkpoint_every=4,
                     warmup_fraction=0.1)  # fmt: skip
ARGS = {"model": "bsa-tnp-tiny", "batch_size": 2, "progress": False, "config": CONFIG}


class FakeClock:
    """``perf_counter`` that advances ``tick`` seconds at every call."""

    def __init__(self, tick: float = 1.0) -> None:
        self.now, self.tick = 0.0, tick

    def perf_counter(self) -> float:
        self.now += self.tick
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(loop_module, "time", fake)
    return fake


def data():
    return xnp.datasets.gp_sphere(n_lat=6, n_lon=12, n_time=40, lengthscale_km=3000.0)


def test_the_budget_ends_the_run_with_the_schedule_laid_over_it(clock):
    model = data().np.fit("field", time_budget="40s", **ARGS)
    run = model.training
    assert run["stopped_at_budget"]
    assert run["time_budget_s"] == 40.0
    assert 4 <= run["step"] < 40  # steps were not the limit
    assert run["train_seconds"] >= 40.0
    history = model.history_
    assert int(history.step[-1]) == run["step"]  # a last row at the stop ...
    assert np.isfinite(float(history.val_nll[-1]))  # ... with its validation
    lr = history.learning_rate.values
    assert lr.max() <= 5e-4
    assert lr[-1] < 0.5 * lr.max()
    assert run["best_step"] is not None


def test_steps_still_cap_a_budgeted_run(clock):
    model = data().np.fit("field", steps=4, time_budget="1h", **ARGS)
    assert model.training["step"] == 4
    assert not model.training["stopped_at_budget"]


def test_a_resumed_run_counts_the_time_spent_before(clock, tmp_path):
    ds = data()
    first = ds.np.fit("field", time_budget=30.0, checkpoint_dir=tmp_path, **ARGS)
    assert first.training["stopped_at_budget"]
    spent = first.training["train_seconds"]
    # the same run, resumed with its whole budget already spent: nothing more to do
    again = ds.np.fit("field", time_budget=30.0, checkpoint_dir=tmp_path, resume=True, **ARGS)
    assert again.training["step"] == first.training["step"]
    assert spent >= again.training["train_seconds"] >= 30.0  # as at its last checkpoint


@pytest.mark.parametrize("bad", ["ten minutes", "-5s", 0, "5 parsecs"])
def test_a_bad_budget_is_refused(bad):
    with pytest.raises(ConfigError, match="duration"):
        data().np.fit("field", time_budget=bad, **ARGS)


def test_the_schedule_over_a_fraction_matches_the_steps():
    config = TrainConfig(warmup_fraction=0.1, final_lr_ratio=0.2)
    by_step = config.schedule(1e-3, 100)
    for k in (0, 5, 10, 40, 99, 100):
        assert config.rate_at(1e-3, k / 100) == pytest.approx(by_step(k), rel=1e-6, abs=1e-12)
