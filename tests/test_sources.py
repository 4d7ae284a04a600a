"""Multi-source models: context from several datasets, each point tagged with its source."""

import numpy as np
import pytest
import xarray as xr
from strategies import grid_dataset, station_dataset

import xnp
from xnp.api.sizes import fixed_batch as _fixed
from xnp.data.normalise import Normaliser
from xnp.data.sampler import TaskSampler
from xnp.data.tasks import ForecastTasks, SpatialTasks
from xnp.errors import ConfigError, VariableNotFoundError
from xnp.models.config import BSATNPConfig
from xnp.neural_process import NeuralProcess


@pytest.fixture(scope="module")
def grid():
    return grid_dataset(nt=4, ny=6, nx=7, nan_fraction=0.3)


@pytest.fixture(scope="module")
def stations():
    st = station_dataset(n_stations=9, nt=4, seed=3)
    return st.drop_vars("elevation")


@pytest.fixture(scope="module")
def model(grid):
    cfg = BSATNPConfig.tiny(dim_x=2, q_chunk=64, k_chunk=64)
    return NeuralProcess.init(
        cfg, Normaliser.fit(grid, "t2m"), ["t2m"], sources=["data", "stations"], seed=0
    )


TARGETS = {"lat": np.linspace(50.5, 54.5, 4), "lon": np.linspace(-2.5, 2.5, 5)}


def test_training_batches_carry_one_hot_source_channels(grid, stations):
    sampler = TaskSampler(
        {"data": grid, "stations": stations}, "t2m", SpatialTasks(), batch_size=2,
        target_source="data",
    )  # fmt: skip
    batch = _fixed(sampler.batch(0), 64, 64, n_sources=2)
    x = np.asarray(batch.context.x)
    ids = np.asarray(batch.context_source)
    real = np.asarray(batch.context.mask)
    assert x.shape[-1] == 2
    np.testing.assert_array_equal(x[real], np.eye(2)[ids[real]])
    assert (ids[real] == 1).any()
    assert (ids[real] == 0).any()
    target = np.asarray(batch.target.x)[np.asarray(batch.target.mask)]
    np.testing.assert_array_equal(target, np.tile([1.0, 0.0], (len(target), 1)))


def test_station_context_joins_at_the_same_time_only(model, grid, stations):
    frame = grid.isel(time=1)
    alone = frame.np.predict(model, TARGETS)
    both = frame.np.predict(model, TARGETS, context_sources={"stations": stations})
    assert not np.allclose(alone.t2m_mean, both.t2m_mean)
    # other times of the stations are not context: changing them changes nothing
    other = stations.copy(deep=True)
    other["t2m"][{"time": [0, 2, 3]}] += 10.0
    same = frame.np.predict(model, TARGETS, context_sources={"stations": other})
    xr.testing.assert_allclose(same, both)
    # the matching time is: changing it changes the prediction
    moved = stations.copy(deep=True)
    moved["t2m"][{"time": 1}] += 10.0
    changed = frame.np.predict(model, TARGETS, context_sources={"stations": moved})
    assert not np.allclose(changed.t2m_mean, both.t2m_mean)
    # the user's data is untouched
    assert float(stations.t2m[1, 0]) == float(station_dataset(9, 4, seed=3).t2m[1, 0])


def test_sources_in_every_prediction_path(model, grid, stations):
    src = {"stations": stations}
    eager = grid.np.predict(model, TARGETS, context_sources=src)
    lazy = grid.np.predict(model, TARGETS, chunks={"lat": 2}, context_sources=src)
    xr.testing.assert_allclose(lazy.compute(), eager, atol=1e-5)
    regional = grid.np.predict(model, TARGETS, context_radius="20000km", context_sources=src)
    xr.testing.assert_allclose(regional, eager, atol=1e-4)
    forecaster = NeuralProcess.init(
        model.config.replace(temporal_bias=True), model.normaliser, ["t2m"],
        task=ForecastTasks(frames=2, step=6.0, lead=6.0), sources=model.sources, seed=1,
    )  # fmt: skip
    a = grid.np.predict(forecaster, TARGETS, time=grid.time[1], context_sources=src)
    b = grid.np.predict(forecaster, TARGETS, time=grid.time[1])
    assert a.t2m_mean.shape == (4, 5)
    assert not np.allclose(a.t2m_mean, b.t2m_mean)


def test_save_load_keeps_the_sources(model, grid, stations, tmp_path):
    model.save(tmp_path / "m")
    loaded = xnp.load(tmp_path / "m")
    assert loaded.sources == ("data", "stations")
    assert "sources:     data, stations" in repr(loaded)
    src = {"stations": stations}
    xr.testing.assert_equal(
        grid.isel(time=0).np.predict(loaded, TARGETS, context_sources=src),
        grid.isel(time=0).np.predict(model, TARGETS, context_sources=src),
    )


def test_clear_errors(model, grid, stations):
    with pytest.raises(ConfigError, match="unknown context source 'buoys'"):
        grid.np.predict(model, TARGETS, context_sources={"buoys": stations})
    single = NeuralProcess.init(BSATNPConfig.tiny(), model.normaliser, ["t2m"])
    with pytest.raises(ConfigError, match="single source"):
        grid.np.predict(single, TARGETS, context_sources={"stations": stations})
    with pytest.raises(VariableNotFoundError, match=r"has no variable.*rename"):
        grid.np.predict(model, TARGETS, context_sources={"stations": stations.rename(t2m="temp")})
    with pytest.raises(ConfigError, match="must be a Dataset or DataArray"):
        grid.np.predict(model, TARGETS, context_sources={"stations": [1.0, 2.0]})
    with pytest.raises(ConfigError, match="other than 'data'"):
        grid.np.fit("t2m", context_sources={"data": stations}, steps=1)
    with pytest.raises(VariableNotFoundError, match="rename"):
        grid.np.fit("t2m", context_sources={"st": stations.rename(t2m="temp")}, steps=1)


def test_fit_with_a_station_source(grid, stations):
    model = grid.np.fit(
        "t2m", model="bsa-tnp-tiny", tasks=SpatialTasks(), steps=4, batch_size=2,
        progress=False, validation=0.25,
        context_sources={"stations": stations},
        config=xnp.TrainConfig(log_every=2, validate_every=2, validation_batches=1),
    )  # fmt: skip
    assert model.sources == ("data", "stations")
    assert model.config.dim_x == 2
    # the stations add to the context of every task: the padded size makes room for them
    assert model.training["context_size"] >= 6 * 7 - 1 + 9
    assert model.training["sources"] == ["data", "stations"]
    out = grid.isel(time=3).np.predict(model, TARGETS, context_sources={"stations": stations})
    assert np.isfinite(out.t2m_mean).all()
    assert (out.t2m_std > 0).all()


def test_swin_tnp_reads_the_source_channels_too(grid, stations):
    from xnp.models.swin_config import SwinTNPConfig

    cfg = SwinTNPConfig.tiny(dim_x=2, extent=((49.0, 59.0), (-11.0, 5.0)))  # holds the stations
    swin = NeuralProcess.init(
        cfg, Normaliser.fit(grid, "t2m"), ["t2m"], sources=["data", "stations"], seed=0
    )
    frame = grid.isel(time=2)
    alone = frame.np.predict(swin, TARGETS)
    both = frame.np.predict(swin, TARGETS, context_sources={"stations": stations})
    assert np.isfinite(both.t2m_mean).all()
    assert not np.allclose(alone.t2m_mean, both.t2m_mean)
