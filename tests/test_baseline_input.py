"""ForecastTasks(baseline_input=True): the network sees the baseline forecast at each
context and target point as an input channel (issue 27)."""

import dataclasses
import warnings

import jax
import numpy as np
import pytest
from test_autoregressive_baseline import baseline_on_grid, drifting_grid
from test_forecast_baseline import zero_change

import xnp
from xnp.arrays import Points
from xnp.data.sampler import TaskSampler
from xnp.data.tasks import ForecastTasks, task_from_dict, task_to_dict
from xnp.errors import ConfigError
from xnp.prediction.forecast import BaselineShift

TASK = ForecastTasks(frames=3, step=3, lead=6, baseline="autoregressive", baseline_input=True)


def test_the_option_needs_a_baseline_and_a_bool():
    with pytest.raises(ConfigError, match="no baseline is set"):
        ForecastTasks(baseline_input=True)
    with pytest.raises(ConfigError, match="True or False"):
        ForecastTasks(baseline="persistence", baseline_input="yes")
    assert task_from_dict(task_to_dict(TASK)) == TASK
    old = task_to_dict(ForecastTasks(baseline="persistence"))
    del old["baseline_input"]  # a record written before the option existed
    assert task_from_dict(old).baseline_input is False


@pytest.fixture(scope="module")
def data():
    return drifting_grid(nt=96)


def test_each_training_point_carries_the_baseline_at_its_place(data):
    train = data.isel(time=slice(0, 80))
    sampler = TaskSampler(train, "t2m", TASK, batch_size=1, seed=3, validation_fraction=0.0)
    task = None
    rng = np.random.default_rng(0)
    while task is None:
        task = sampler._draw(rng)
    ctx, tgt = task.context, task.target
    assert ctx.x.shape[1] == tgt.x.shape[1] == 1  # no covariates: the baseline alone
    raw = sampler.normaliser.inverse(ctx.f, ["t2m"])
    observed = (ctx.s, ctx.t, raw)  # every point of every frame is kept (fraction 1)
    lead = TASK.lead
    for points in (ctx, tgt):
        base = sampler.baseline.at(observed, points.s, reference=task.reference_time, lead=lead)
        want = sampler.normaliser.transform(base, ["t2m"])
        np.testing.assert_allclose(points.x[:, 0], want[:, 0], rtol=1e-5, atol=1e-5)
    # the context points of the last frame persist themselves: the baseline there is
    # their own value plus the regression's change, so it differs from the value
    assert not np.allclose(ctx.x[:, 0], ctx.f[:, 0])


def test_a_full_context_keeps_its_baseline_between_draws_and_changes_nothing(data):
    """The memo of each anchor's baseline against the slow reference: recomputed per task."""
    train = data.isel(time=slice(0, 80))
    task = ForecastTasks(frames=3, step=3, lead=6, baseline="autoregressive+spatial",
                         baseline_input=True, max_context=64, max_targets=32)  # fmt: skip
    # a cell missing from every other frame: a context point there may lack a twin in
    # the target frame, and is computed afresh
    gappy = train.copy(deep=True)
    gappy["t2m"][::2, 0, 0] = np.nan
    for frame in (train, gappy):
        kept = TaskSampler(frame, "t2m", task, batch_size=4, seed=5, validation_fraction=0.0)
        fresh = TaskSampler(frame, "t2m", task, batch_size=4, seed=5, validation_fraction=0.0,
                            baseline=kept.baseline, normaliser=kept.normaliser)  # fmt: skip
        fresh.memoise = False
        for k in range(6):  # 24 draws of ~60 anchors: some drawn twice
            a, b = jax.tree.leaves(kept.batch(k)), jax.tree.leaves(fresh.batch(k))
            assert len(a) == len(b) > 5
            for u, v in zip(a, b, strict=True):
                np.testing.assert_array_equal(np.asarray(u), np.asarray(v))
        assert 0 < len(kept._fields) <= 24
        assert not fresh._fields
    # a thinned context differs on every draw: nothing is kept
    thin = TaskSampler(train, "t2m", dataclasses.replace(task, context_fraction=0.5),
                       batch_size=4, seed=5, validation_fraction=0.0)  # fmt: skip
    thin.batch(0)
    assert not thin._fields


def test_inputs_go_before_the_source_channels():
    s = np.array([[50.0, 0.0], [51.0, 1.0]])

    class Fixed:  # a baseline of known values
        kind, variables = "persistence", ("t2m",)

        def at(self, observed, where, *, reference, lead):
            return np.array([[280.0], [290.0]])[: len(where)]

    shift = BaselineShift(Fixed(), (s, np.zeros(2), np.zeros((2, 1))), 0.0, 6.0,
                          centre=np.array([285.0]), spread=np.array([5.0]), inputs=True,
                          covariate_channels=1)  # fmt: skip
    x = np.array([[[0.5, 1.0, 0.0], [0.7, 0.0, 1.0]]], np.float32)  # a covariate, 2 sources
    points = Points.from_arrays(s=s[None], x=x, dim_y=1)
    got = np.asarray(shift.with_inputs(points, s).x)[0]
    np.testing.assert_allclose(got, [[0.5, -1.0, 1.0, 0.0], [0.7, 1.0, 0.0, 1.0]])
    off = BaselineShift(Fixed(), shift.observed, 0.0, 6.0, shift.centre, shift.spread)
    assert off.with_inputs(points, s) is points


def test_a_forecast_forms_each_places_baseline_once():
    """The context's places and the targets' overlap: each is formed once, with the values
    of forming it alone (a place's baseline does not depend on the others asked with it)."""

    class Counting:  # a baseline of known values per place, that counts what it forms
        kind, variables = "persistence", ("t2m",)

        def __init__(self):
            self.formed = []

        def at(self, observed, where, *, reference, lead):
            self.formed.append(len(where))
            return (where[:, :1] * 10.0 + where[:, 1:]).astype(np.float64)

    grid = np.stack(np.meshgrid([50.0, 51.0, 52.0], [0.0, 1.0], indexing="ij"), -1).reshape(-1, 2)
    base = Counting()
    shift = BaselineShift(base, (grid, np.zeros(6), np.zeros((6, 1))), 0.0, 6.0,
                          centre=np.array([0.0]), spread=np.array([1.0]))  # fmt: skip
    context = np.concatenate([grid[:4], grid[:4]])  # two frames at four of the places
    np.testing.assert_array_equal(shift.at(context), base.at(None, context, reference=0.0,
                                                             lead=6.0))  # fmt: skip
    assert base.formed[-2] == 4  # the repeated places once
    np.testing.assert_array_equal(shift.at(grid[::-1]), base.at(None, grid[::-1], reference=0.0,
                                                                lead=6.0))  # fmt: skip
    assert base.formed[-2] == 2  # only the two places not formed before
    shift.at(grid)
    assert len(base.formed) == 4  # all known: nothing formed


def tiny_fit(data):
    """Two steps of a tiny BSA-TNP shown its autoregressive baseline, on days 0–80 h."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return data.isel(time=slice(0, 80)).np.fit(
            "t2m", model="bsa-tnp-tiny", progress=False, steps=2, batch_size=2,
            validation=None, tasks=TASK,
        )  # fmt: skip


@pytest.fixture(scope="module")
def fitted(data):
    return tiny_fit(data)


def test_a_fitted_model_takes_the_channel_and_forecasts_alike_eager_lazy_saved(
    data, fitted, tmp_path
):
    assert fitted.config.dim_x == 1
    assert fitted.task.baseline_input
    t0 = data.time.values[86]
    eager = fitted.predict(data, time=t0)
    lazy = fitted.predict(data, time=t0, chunks={"lat": 2}).compute()
    np.testing.assert_allclose(lazy.t2m_mean, eager.t2m_mean, atol=1e-4)
    np.testing.assert_allclose(lazy.t2m_std, eager.t2m_std, atol=1e-5)
    loaded = xnp.load(fitted.save(tmp_path / "m"))
    assert loaded.task.baseline_input
    again = loaded.predict(data, time=t0)
    np.testing.assert_array_equal(again.t2m_mean.values, eager.t2m_mean.values)
    # a model of no change forecasts the baseline itself
    none = zero_change(fitted).predict(data, time=t0)
    want = baseline_on_grid(fitted, data, t0)
    np.testing.assert_allclose(none.t2m_mean.values.ravel(), want, atol=2e-4)


def test_each_lead_conditions_on_its_own_baseline(data):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = data.isel(time=slice(0, 80)).np.fit(
            "t2m", model="bsa-tnp-tiny", progress=False, steps=2, batch_size=2,
            validation=None, tasks=ForecastTasks(frames=3, step=3, lead=(6, 12),
                                                 baseline="autoregressive", baseline_input=True),
        )  # fmt: skip
    t0 = data.time.values[80]
    both = model.predict(data, time=t0, lead_time=[6, 12])
    for lead in (6, 12):  # the same as forecasting that lead alone
        alone = model.predict(data, time=t0, lead_time=lead)
        np.testing.assert_allclose(
            both.t2m_mean.sel(lead_time=np.timedelta64(lead, "h")), alone.t2m_mean, atol=1e-5
        )
    assert not np.allclose(both.t2m_mean.isel(lead_time=0), both.t2m_mean.isel(lead_time=1))
