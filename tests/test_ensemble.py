"""Ensembles of fits (``fit(..., members=k)``, :class:`xnp.Ensemble`): the mixture of the
members' predictions, saving and loading, resuming, and the refusals."""

import json
import warnings

import numpy as np
import pytest
import xarray as xr
from test_autoregressive_baseline import drifting_grid
from test_baseline_input import TASK

import xnp
from xnp.data.normalise import Normaliser, Stats
from xnp.data.tasks import SpatialTasks
from xnp.ensemble import Ensemble
from xnp.errors import CheckpointError, ConfigError
from xnp.models.config import BSATNPConfig
from xnp.placement import place_sensors
from xnp.prediction.mixture import mixture_moments, sample_shares


def test_the_mixture_has_the_moments_of_the_members_mixed_in_equal_shares():
    rng = np.random.default_rng(0)
    means = 280.0 + rng.normal(size=(3, 50))  # large values: float32 rounding would show
    stds = rng.uniform(0.1, 0.5, size=(3, 50))
    preds = [
        xr.Dataset({"t_mean": ("x", m.astype(np.float32)), "t_std": ("x", s.astype(np.float32))})
        for m, s in zip(means, stds, strict=True)
    ]
    out = mixture_moments(preds, ["t"])
    # reference: a million draws from the mixture would do; the exact moments in float64
    m64, s64 = means.astype(np.float32).astype(float), stds.astype(np.float32).astype(float)
    mean = m64.mean(0)
    var = (s64**2 + m64**2).mean(0) - mean**2
    assert out.t_mean.dtype == out.t_std.dtype == np.float32
    np.testing.assert_allclose(out.t_mean, mean, rtol=1e-6)
    np.testing.assert_allclose(out.t_std, np.sqrt(var), rtol=1e-4)
    assert "3 members" in out.attrs["xnp_ensemble"]
    # identical members: the member itself
    same = mixture_moments([preds[0], preds[0]], ["t"])
    np.testing.assert_allclose(same.t_std, preds[0].t_std, rtol=1e-6)
    assert sample_shares(5, 2) == [3, 2]
    assert sample_shares(1, 3) == [1, 0, 0]


@pytest.fixture(scope="module")
def data():
    return drifting_grid(nt=96)


@pytest.fixture(scope="module")
def ensemble(data):
    """Two members of a tiny forecast model (2 steps each), seeds 4 and 5."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return data.isel(time=slice(0, 80)).np.fit(
            "t2m", model="bsa-tnp-tiny", progress=False, steps=2, batch_size=2,
            validation=None, tasks=TASK, seed=4, members=2,
        )  # fmt: skip


def test_members_are_fits_with_consecutive_seeds(ensemble):
    assert isinstance(ensemble, Ensemble)
    assert len(ensemble) == 2
    assert [m.training["seed"] for m in ensemble.members] == [4, 5]
    assert ensemble.training["seeds"] == [4, 5]
    a, b = (m.params_ for m in ensemble.members)
    assert not np.allclose(jax_leaf(a), jax_leaf(b))
    assert ensemble.num_params == 2 * ensemble.members[0].num_params
    assert "Ensemble of 2 models" in repr(ensemble)


def jax_leaf(params):
    import jax

    return np.asarray(jax.tree.leaves(params)[0])


def test_a_forecast_is_the_mixture_of_the_members_eager_lazy_and_saved(data, ensemble, tmp_path):
    t0 = data.time.values[86]
    eager = xnp.predict(ensemble, data, time=t0)
    parts = [m.predict(data, time=t0, seed=i) for i, m in enumerate(ensemble.members)]
    want = mixture_moments(parts, ["t2m"])
    np.testing.assert_allclose(eager.t2m_mean, want.t2m_mean, rtol=1e-6)
    np.testing.assert_allclose(eager.t2m_std, want.t2m_std, rtol=1e-6)
    assert not np.allclose(eager.t2m_mean, parts[0].t2m_mean)  # both members count
    lazy = data.np.predict(ensemble, time=t0, chunks={"lat": 2})
    assert lazy.t2m_mean.chunks is not None
    lazy = lazy.compute()
    np.testing.assert_allclose(lazy.t2m_mean, eager.t2m_mean, atol=1e-4)
    np.testing.assert_allclose(lazy.t2m_std, eager.t2m_std, atol=1e-5)
    path = ensemble.save(tmp_path / "ens")
    assert json.loads((path / "ensemble.json").read_text())["members"] == [
        "member-0",
        "member-1",
    ]
    loaded = xnp.load(path)
    assert isinstance(loaded, Ensemble)
    again = xnp.predict(str(path), data, time=t0)  # by its directory, as the CLI does
    np.testing.assert_array_equal(again.t2m_mean.values, eager.t2m_mean.values)
    ensemble.save(path)  # replacing a saved ensemble is allowed
    with pytest.raises(CheckpointError, match=r"xnp\.load"):
        xnp.NeuralProcess.load(path)  # one model's loader says where to go


def test_joint_samples_come_from_the_members_in_equal_shares():
    ds = xnp.datasets.gp_sphere(n_lat=6, n_lon=8, n_time=4, seed=1)
    norm = Normaliser({"field": Stats(float(ds.field.mean()), float(ds.field.std()))})
    members = [
        xnp.NeuralProcess.init(BSATNPConfig.tiny(), norm, ["field"], seed=s, task=SpatialTasks())
        for s in (0, 1)
    ]
    ens = Ensemble(members)
    frame = ds.isel(time=0).where(ds.lat.isel(lat=slice(0, 3)) == ds.lat)  # half observed
    out = xnp.predict(ens, frame, samples=3, sample_step=16)
    assert out.field_samples.sizes["sample"] == 3
    assert np.isfinite(out.field_samples).all()
    plain = xnp.predict(ens, frame)
    np.testing.assert_allclose(out.field_mean, plain.field_mean, rtol=1e-6)


def test_fit_resumes_each_member_from_its_checkpoints(tmp_path):
    ds = xnp.datasets.gp_sphere(n_lat=6, n_lon=12, n_time=12)
    kw = {"model": "bsa-tnp-tiny", "steps": 4, "batch_size": 2, "progress": False,
          "validation": None, "members": 2, "checkpoint_dir": tmp_path / "ck",
          "config": xnp.TrainConfig(log_every=2, checkpoint_every=2)}  # fmt: skip
    whole = ds.np.fit("field", **kw)
    assert (tmp_path / "ck" / "member-0").is_dir()
    assert (tmp_path / "ck" / "member-1").is_dir()
    again = ds.np.fit("field", resume=True, **kw)  # finished members return as they were
    for a, b in zip(whole.members, again.members, strict=True):
        np.testing.assert_array_equal(jax_leaf(a.params_), jax_leaf(b.params_))
    with pytest.raises(CheckpointError, match="resume=True"):  # never overwritten
        ds.np.fit("field", **kw)


def test_a_time_budget_is_shared_between_the_members():
    ds = xnp.datasets.gp_sphere(n_lat=6, n_lon=12, n_time=12)
    ens = ds.np.fit("field", model="bsa-tnp-tiny", steps=3, batch_size=2, progress=False,
                    validation=None, members=2, time_budget="1h")  # fmt: skip
    assert [m.training["time_budget_s"] for m in ens.members] == [1800.0, 1800.0]


def test_refusals_name_what_to_change(data, ensemble):
    ds = xnp.datasets.gp_sphere(n_lat=6, n_lon=12, n_time=12)
    for bad in (0, 1.5, "2", True):
        with pytest.raises(ConfigError, match="members must be a positive integer"):
            ds.np.fit("field", model="bsa-tnp-tiny", steps=1, members=bad, progress=False)
    with pytest.raises(ConfigError, match="at least two members"):
        Ensemble(ensemble.members[:1])
    with pytest.raises(ConfigError, match="NeuralProcess"):
        Ensemble([ensemble.members[0], "model"])
    norm = Normaliser({"t2m": Stats(280.0, 5.0, "K")})
    other = xnp.NeuralProcess.init(BSATNPConfig.tiny(), norm, ["t2m"])
    with pytest.raises(ConfigError, match=r"differs from member 0 in .*task"):
        Ensemble([ensemble.members[0], other])
    with pytest.raises(ConfigError, match="spread between its members"):
        xnp.calibrate(ensemble, data.isel(time=slice(60, 96)))
    with pytest.raises(ConfigError, match="members"):
        place_sensors(ensemble, data.isel(time=0), data.isel(time=0), data.isel(time=0), 1)
    with pytest.raises(ConfigError, match="seed must be"):
        xnp.predict(ensemble, data, time=data.time.values[86], seed=-1)
    with pytest.raises(ConfigError, match="samples"):
        xnp.predict(ensemble, data, time=data.time.values[86], samples=0)
