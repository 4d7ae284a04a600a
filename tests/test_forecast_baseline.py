"""Forecast baselines: persistence and the diurnal climatology (issue 27, item 1),
and several lead times in one model (item 3)."""

import warnings

import jax
import numpy as np
import pytest
from strategies import grid_dataset, station_dataset

import xnp
from xnp.data.baseline import ForecastBaseline, persistence
from xnp.data.coords import find_coords
from xnp.data.normalise import Normaliser
from xnp.data.sampler import TaskSampler
from xnp.data.tasks import ForecastTasks, task_from_dict, task_to_dict
from xnp.errors import ConfigError, EmptyDataError
from xnp.models.config import BSATNPConfig
from xnp.neural_process import NeuralProcess


def diurnal_grid(nt=72, ny=4, nx=5, seed=0):
    """Hourly frames: a place-dependent diurnal cycle plus noise."""
    rng = np.random.default_rng(seed)
    hour = np.arange(nt) % 24
    amp = 1.0 + np.arange(ny * nx).reshape(ny, nx) / 10.0
    cycle = amp[None] * np.sin(2 * np.pi * hour / 24.0)[:, None, None]
    values = 280.0 + cycle + 0.1 * rng.normal(size=(nt, ny, nx))
    return grid_dataset(nt=nt, ny=ny, nx=nx, step_hours=1).assign(
        t2m=(("time", "lat", "lon"), values, {"units": "K"})
    )


def test_tasks_take_leads_and_a_baseline():
    task = ForecastTasks(lead=[12, 6, 12], baseline="persistence+diurnal")
    assert task.lead == (6.0, 12.0)
    assert task.leads == (6.0, 12.0)
    assert ForecastTasks(lead=[6]).lead == 6.0
    assert task_from_dict(task_to_dict(task)) == task
    for bad in ({"baseline": "climatology"}, {"lead": []}, {"lead": [6, -1]}):
        with pytest.raises(ConfigError):
            ForecastTasks(**bad)


def test_persistence_takes_the_nearest_latest_observation():
    s = np.array([[50.0, 0.0], [50.0, 2.0], [50.0, 1.0]])
    f = np.array([[1.0, np.nan], [2.0, 5.0], [3.0, np.nan]])
    t = np.array([0.0, 0.0, -6.0])
    out = persistence(s, t, f, np.array([[50.0, 0.9], [50.0, 1.9]]))
    # variable 0: only the latest frame (t=0) counts, so 1.0 is nearest to 0.9, not 3.0
    np.testing.assert_array_equal(out, [[1.0, 5.0], [2.0, 5.0]])
    # the latest frame that has the variable: t=-6 when t=0 lacks it
    f_gap = np.array([[1.0], [2.0], [np.nan]])  # the t=0 point is missing
    out = persistence(s, np.array([-6.0, -6.0, 0.0]), f_gap, np.array([[50.0, 0.8]]))
    assert out[0, 0] == 1.0  # nearest at t=-6 (1.0 at lon 0 vs 2.0 at lon 2)
    assert persistence(s, t, np.full((3, 1), np.nan), s) is None


def test_diurnal_change_is_learned_per_place_and_hour():
    ds = diurnal_grid()
    layout = find_coords(ds, "t2m")
    base = ForecastBaseline.fit("persistence+diurnal", ds, layout, ["t2m"], [6.0], end=48)
    assert base.hours.tolist() == list(range(24))
    assert base.change.shape == (1, 24, 20, 1)
    x = ds.t2m.values[:48]
    truth = np.mean([x[i + 6] - x[i] for i in range(42) if i % 24 == 7], axis=0)
    got = base.change_at(np.array([[51.0, -1.0]]), hour=7.0, lead=6.0)
    np.testing.assert_allclose(got[0, 0], truth[1, 2], rtol=1e-5)
    # only training times count: changing the rest changes nothing
    later = ds.assign(t2m=ds.t2m.where(ds.time < ds.time[48], 0.0))
    again = ForecastBaseline.fit("persistence+diurnal", later, layout, ["t2m"], [6.0], end=48)
    np.testing.assert_array_equal(again.change, base.change)


def test_unseen_hours_places_and_leads_follow_the_documented_rules():
    ds = diurnal_grid(nt=96).isel(time=slice(0, None, 6))  # six-hourly: hours 0, 6, 12, 18
    ds = ds.assign(t2m=ds.t2m.where(~((ds.lat == 50.0) & (ds.lon == -3.0))))  # a dead cell
    base = ForecastBaseline.fit("persistence+diurnal", ds, find_coords(ds, "t2m"), ["t2m"],
                                [6.0, 12.0])  # fmt: skip
    assert base.hours.tolist() == [0.0, 6.0, 12.0, 18.0]
    at = np.array([[52.0, -1.0]])
    c6, c12 = (base.change_at(at, hour=h, lead=6.0) for h in (6.0, 12.0))
    np.testing.assert_allclose(base.change_at(at, hour=9.0, lead=6.0), (c6 + c12) / 2, rtol=1e-5)
    c0, c18 = (base.change_at(at, hour=h, lead=6.0) for h in (0.0, 18.0))
    np.testing.assert_allclose(base.change_at(at, hour=21.0, lead=6.0), (c18 + c0) / 2, rtol=1e-5)
    l6, l12 = (base.change_at(at, hour=6.0, lead=h) for h in (6.0, 12.0))
    np.testing.assert_allclose(base.change_at(at, hour=6.0, lead=9.0), (l6 + l12) / 2, rtol=1e-5)
    np.testing.assert_array_equal(base.change_at(at, hour=6.0, lead=48.0), l12)  # clamped
    dead = base.change_at(np.array([[50.0, -3.0]]), hour=6.0, lead=6.0)
    np.testing.assert_allclose(dead[0], base.change[0, 1].mean(axis=0), rtol=1e-5)
    assert np.isfinite(base.change).all()


def test_the_sampler_targets_the_change_from_the_baseline():
    ds = diurnal_grid()
    task = ForecastTasks(frames=2, step=3, lead=6, baseline="persistence+diurnal")
    sampler = TaskSampler(ds, "t2m", task, batch_size=2, seed=3)
    plain = TaskSampler(ds, "t2m", ForecastTasks(frames=2, step=3, lead=6), batch_size=2, seed=3)
    std = sampler.normaliser.stats["t2m"].std
    for with_base, without in zip(sampler.tasks(0), plain.tasks(0), strict=True):
        ref = with_base.reference_time
        obs = without.context  # the same draws: same context and targets
        raw = sampler.normaliser.inverse(obs.f, ["t2m"])
        base = sampler.baseline.at((obs.s, obs.t, raw), without.target.s,
                                   reference=ref, lead=6.0)  # fmt: skip
        ratio = sampler.baseline.scale[0] / std
        expected = (without.target.f - (base - sampler.normaliser.stats["t2m"].mean) / std) / ratio
        np.testing.assert_allclose(with_base.target.f, expected, atol=1e-4)
    # changes are smaller than the field's spread
    # in its own scale the change is of order one
    spread = np.concatenate([t.target.f for t in sampler.tasks(1)]).std()
    assert 0.5 < spread < 2.0


def test_the_sampler_draws_every_lead():
    task = ForecastTasks(frames=2, step=6, lead=(6, 12, 18))
    sampler = TaskSampler(grid_dataset(nt=20), "t2m", task, batch_size=16, seed=0)
    leads = {float(t.target.t[0]) for t in sampler.tasks(0)}
    assert leads == {6.0, 12.0, 18.0}


def zero_change(model: NeuralProcess) -> NeuralProcess:
    """The model with its mean output zeroed: it predicts no change."""

    def zero(path, leaf):
        name = jax.tree_util.keystr(path)
        if "['head']" in name and "['layers'][1]" in name:
            leaf = leaf.copy()
            leaf[..., : model.config.dim_y] = 0.0
        return leaf

    other = NeuralProcess(**{**vars_of(model)})
    other.params_ = jax.tree_util.tree_map_with_path(
        lambda p, v: zero(p, np.array(v)), model.params_
    )
    return other


def vars_of(model):
    return {"config": model.config, "params": model.params_, "normaliser": model.normaliser,
                "variables": model.variables, "task": model.task, "baseline": model.baseline,
                "coords": model.coords}  # fmt: skip


@pytest.fixture(scope="module")
def data():
    return diurnal_grid(nt=72)


@pytest.fixture(scope="module")
def fitted(data):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return data.isel(time=slice(0, 60)).np.fit(
            "t2m", model="bsa-tnp-tiny", progress=False, steps=2, batch_size=2, validation=None,
            tasks=ForecastTasks(frames=2, step=3, lead=(3, 6), baseline="persistence+diurnal"),
        )  # fmt: skip


def test_a_model_that_predicts_no_change_gives_the_baseline(data, fitted):
    model = zero_change(fitted)
    inits = data.time.values[[62, 65]]
    out = model.predict(data, time=inits, lead_time=[3, 6])
    for i, t0 in enumerate(inits):
        frame = data.t2m.sel(time=t0).values
        hour = float(t0.astype("datetime64[h]").astype(np.int64) % 24)
        for j, lead in enumerate((3.0, 6.0)):
            s = np.stack(np.meshgrid(data.lat, data.lon, indexing="ij"), -1).reshape(-1, 2)
            change = model.baseline.change_at(s, hour=hour, lead=lead).reshape(frame.shape)
            np.testing.assert_allclose(out.t2m_mean.values[i, j], frame + change, atol=2e-4)
    assert (out.t2m_std > 0).all()
    # lazy and regional paths add the same baseline
    lazy = model.predict(data, time=inits, lead_time=[3, 6], chunks={"lat": 2})
    assert lazy.t2m_mean.chunks is not None
    np.testing.assert_allclose(lazy.t2m_mean.values, out.t2m_mean.values, atol=1e-4)
    regional = model.predict(data, time=inits, lead_time=[3, 6], context_radius=2000.0)
    np.testing.assert_allclose(regional.t2m_mean.values, out.t2m_mean.values, atol=1e-4)


def test_lazy_equals_eager_and_saving_keeps_the_baseline(data, fitted, tmp_path):
    eager = fitted.predict(data, time=data.time.values[64])
    assert eager.t2m_mean.dims == ("lead_time", "lat", "lon")  # both trained leads
    lazy = fitted.predict(data, time=data.time.values[64], chunks={"lon": 2})
    np.testing.assert_allclose(lazy.t2m_mean.values, eager.t2m_mean.values, atol=1e-4)
    np.testing.assert_allclose(lazy.t2m_std.values, eager.t2m_std.values, atol=1e-4)
    loaded = xnp.load(fitted.save(tmp_path / "m"))
    assert loaded.baseline.kind == "persistence+diurnal"
    np.testing.assert_array_equal(loaded.baseline.change, fitted.baseline.change)
    again = loaded.predict(data, time=data.time.values[64])
    np.testing.assert_array_equal(again.t2m_mean.values, eager.t2m_mean.values)
    assert "baseline:    persistence+diurnal" in repr(loaded)


def test_a_thinned_context_keeps_the_whole_baseline(data, fitted):
    """``max_context`` thins what the model conditions on, never what the baseline reads."""
    model = zero_change(fitted)
    t0 = data.time.values[64]
    full = model.predict(data, time=t0, lead_time=3)
    thin = model.predict(data, time=t0, lead_time=3, max_context=5)
    # the zero-change model returns the baseline, which persists every observed cell
    np.testing.assert_allclose(thin.t2m_mean.values, full.t2m_mean.values, atol=2e-4)
    # the fitted model's own change and std do depend on the points it conditions on
    a = fitted.predict(data, time=t0, lead_time=3, max_context=5)
    b = fitted.predict(data, time=t0, lead_time=3)
    assert not np.allclose(a.t2m_std.values, b.t2m_std.values, atol=1e-5)
    # the subset is fixed by the seed and the time: reruns and the lazy path agree
    again = fitted.predict(data, time=t0, lead_time=3, max_context=5)
    np.testing.assert_array_equal(again.t2m_std.values, a.t2m_std.values)
    lazy = fitted.predict(data, time=t0, lead_time=3, max_context=5, chunks={"lon": 2})
    np.testing.assert_allclose(lazy.t2m_std.values, a.t2m_std.values, atol=1e-4)
    other = fitted.predict(data, time=t0, lead_time=3, max_context=5, seed=1)
    assert not np.allclose(other.t2m_std.values, a.t2m_std.values, atol=1e-5)
    # at least as many points as the context has: the same as no cap
    many = fitted.predict(data, time=t0, lead_time=3, max_context=10_000)
    np.testing.assert_array_equal(many.t2m_mean.values, b.t2m_mean.values)
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ConfigError, match="max_context"):
            fitted.predict(data, time=t0, lead_time=3, max_context=bad)


def test_a_missing_init_frame_persists_the_latest_observed_one(data, fitted):
    model = zero_change(fitted)
    t0 = data.time.values[63]
    gap = data.copy()
    gap["t2m"] = data.t2m.where(data.time != t0)  # the initialisation frame is missing
    out = model.predict(gap, time=t0, lead_time=3)
    earlier = data.t2m.sel(time=t0 - np.timedelta64(3, "h")).values  # step 3 h back
    s = np.stack(np.meshgrid(data.lat, data.lon, indexing="ij"), -1).reshape(-1, 2)
    hour = float(t0.astype("datetime64[h]").astype(np.int64) % 24)
    change = model.baseline.change_at(s, hour=hour, lead=3.0).reshape(earlier.shape)
    np.testing.assert_allclose(out.t2m_mean.values, earlier + change, atol=2e-4)


def test_stations_get_a_baseline_too():
    st = station_dataset(n_stations=10, nt=40)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = st.np.fit("t2m", model="bsa-tnp-tiny", steps=2, batch_size=2, progress=False,
                          tasks=ForecastTasks(frames=2, step=6, lead=6,
                                              baseline="persistence+diurnal"))  # fmt: skip
    assert model.baseline.sites.shape == (10, 2)
    out = model.predict(st, time=st.time.values[-1])
    assert out.t2m_mean.dims == ("station",)
    assert np.isfinite(out.t2m_mean).all()


def test_a_baseline_of_other_variables_is_refused(fitted):
    with pytest.raises(ConfigError, match="same variables"):
        NeuralProcess(**{**vars_of(fitted), "variables": ["u10"],
                         "normaliser": Normaliser({})})  # fmt: skip


def test_no_baseline_without_two_times_a_lead_apart():
    ds = grid_dataset(nt=6, step_hours=6)
    with pytest.raises(EmptyDataError, match="lead"):
        ForecastBaseline.fit("persistence+diurnal", ds, find_coords(ds, "t2m"), ["t2m"], [7.0])


def test_no_diurnal_baseline_with_extra_dimensions():
    ds = grid_dataset(nt=8).expand_dims(member=2).transpose("time", "member", ...)
    with pytest.raises(ConfigError, match="member"):
        ForecastBaseline.fit("persistence+diurnal", ds, find_coords(ds, "t2m"), ["t2m"], [6.0])


def test_a_zero_model_without_baseline_is_unchanged():
    """Models without a baseline save and load as before (no baseline file)."""
    ds = grid_dataset(nt=4)
    model = NeuralProcess.init(BSATNPConfig.tiny(), Normaliser.fit(ds, "t2m"), ["t2m"])
    assert model.baseline is None
    assert model.metadata()["baseline"] is None
