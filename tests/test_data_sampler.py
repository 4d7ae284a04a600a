from __future__ import annotations

import dask
import dask.array
import numpy as np
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import curvilinear_dataset, grid_dataset, projected_dataset, station_dataset

from xnp.data.normalise import Normaliser
from xnp.data.sampler import TaskSampler
from xnp.data.tasks import ForecastTasks, SpatialTasks, WindowTasks, in_window
from xnp.errors import ConfigError, EmptyDataError, IncompatibleUnitsError


@pytest.fixture(scope="module")
def grid() -> xr.Dataset:
    return grid_dataset(nt=20, ny=8, nx=9, nan_fraction=0.1)


def absolute_times(task) -> tuple[np.ndarray, np.ndarray]:
    return task.context.t + task.reference_time, task.target.t + task.reference_time


def test_sampler_is_reproducible_for_a_seed(grid):
    a = TaskSampler(grid, "t2m", batch_size=3, seed=7, num_batches=2)
    b = TaskSampler(grid, "t2m", batch_size=3, seed=7, num_batches=2)
    batches_a, batches_b = list(a), list(b)
    assert len(batches_a) == len(a) == 2
    for x, y in zip(batches_a, batches_b, strict=True):
        np.testing.assert_array_equal(x.context.s, y.context.s)
        np.testing.assert_array_equal(x.y, y.y)
    np.testing.assert_array_equal(a.batch(1).target.s, batches_a[1].target.s)
    other = TaskSampler(grid, "t2m", batch_size=3, seed=8).batch(0)
    assert not np.array_equal(other.context.s, batches_a[0].context.s)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**16), fraction=st.floats(0.01, 0.99))
def test_context_and_targets_never_share_a_point(seed, fraction):
    ds = grid_dataset(nt=3, ny=4, nx=5, nan_fraction=0.2, seed=3)
    sampler = TaskSampler(
        ds, "t2m", SpatialTasks(context_fraction=fraction), batch_size=2, seed=seed
    )
    for task in sampler.tasks(0):
        context = {tuple(p) for p in task.context.s}
        target = {tuple(p) for p in task.target.s}
        assert context.isdisjoint(target)
        assert len(context) == len(task.context)
        assert np.all(task.context.t == 0)
        assert np.all(task.target.t == 0)


def test_context_count_and_caps(grid):
    spec = SpatialTasks(context_count=(5, 6), max_targets=10)
    for task in TaskSampler(grid, "t2m", spec, batch_size=4).tasks(0):
        assert len(task.context) in (5, 6)
        assert len(task.target) == 10
    batch = TaskSampler(grid, "t2m", batch_size=4, buckets=[8, 32]).batch(0)
    assert batch.context.size in (8, 32)
    assert batch.target.size == 32


def test_clustered_contexts_leave_gaps():
    ds = grid_dataset(nt=2, ny=20, nx=24, seed=1)

    def spacing(tasks):  # mean distance from each target to its nearest context point
        from scipy.spatial import cKDTree

        return np.mean([cKDTree(t.context.s).query(t.target.s)[0].mean() for t in tasks])

    kw = {"context_count": 40, "max_targets": 4096}
    uniform = TaskSampler(ds, "t2m", SpatialTasks(**kw), batch_size=16, seed=2).tasks(0)
    clustered = TaskSampler(ds, "t2m", SpatialTasks(**kw, clustered=1.0), batch_size=16,
                            seed=2).tasks(0)  # fmt: skip
    assert spacing(clustered) > 1.5 * spacing(uniform)
    for task in clustered:  # still a partition of the points into context and targets
        context = {tuple(p) for p in task.context.s}
        assert len(context) == 40
        assert context.isdisjoint({tuple(p) for p in task.target.s})
        assert len(task.target) == ds.lat.size * ds.lon.size - 40
    for bad in (-0.1, 1.5, True):
        with pytest.raises(ConfigError, match="clustered"):
            SpatialTasks(clustered=bad)


def test_batches_use_a_bounded_number_of_shapes(grid):
    sampler = TaskSampler(grid, "t2m", SpatialTasks(context_fraction=(0.01, 0.99)), batch_size=2)
    shapes = {(sampler.batch(k).context.size, sampler.batch(k).target.size) for k in range(8)}
    assert all(c in (16, 32, 64, 128) and t in (16, 32, 64, 128) for c, t in shapes)


def test_validation_split_never_leaks_target_times(grid):
    cut_hours = float(
        (grid.time[18] - np.datetime64("1970-01-01")) / np.timedelta64(1, "h")
    )  # 20 times: the last 2 are held out
    for task_spec in (SpatialTasks(), ForecastTasks(frames=2)):
        train = TaskSampler(grid, "t2m", task_spec, batch_size=6, seed=1)
        for task in train.tasks(0) + train.tasks(1):
            context_t, target_t = absolute_times(task)
            assert context_t.max() < cut_hours
            assert target_t.max() < cut_hours
        valid = TaskSampler(
            grid, "t2m", task_spec, batch_size=6, split="validation", normaliser=train.normaliser
        )
        for task in valid.tasks(0):
            assert absolute_times(task)[1].min() >= cut_hours
    assert train.normaliser == TaskSampler(grid, "t2m", split="validation").normaliser


def test_forecast_tasks_use_the_requested_offsets(grid):
    spec = ForecastTasks(frames=3, step=12.0, lead=6.0)
    for task in TaskSampler(grid, "t2m", spec, batch_size=3).tasks(0):
        assert set(np.unique(task.context.t)) <= {-24.0, -12.0, 0.0}
        assert set(np.unique(task.target.t)) == {6.0}
    with pytest.raises(EmptyDataError, match=r"time step is 6\.0 h"):
        TaskSampler(grid, "t2m", ForecastTasks(frames=4, step=7.0))


@pytest.mark.parametrize(("size", "units"), [(3.0, "deg"), (250.0, "km")])
def test_window_tasks_stay_inside_the_window(grid, size, units):
    spec = WindowTasks(size=size, units=units, min_points=2)
    sampler = TaskSampler(grid, "t2m", spec, batch_size=4, seed=2)
    for task in sampler.tasks(0):
        points = np.concatenate([task.context.s, task.target.s])
        centre = points.mean(axis=0)
        half = spec.half_widths(float(centre[0]))
        assert np.ptp(points[:, 0]) <= 2 * half[0] + 1e-9
        assert np.ptp(points[:, 1]) <= 2 * half[1] + 1e-9
        if units == "deg":
            assert len(points) <= 16


def test_in_window_across_the_dateline():
    lat = np.zeros(4)
    lon = np.array([178.0, -179.0, -175.0, 170.0])
    inside = in_window(lat, lon, (0.0, 180.0), (1.0, 3.0))
    assert inside.tolist() == [True, True, False, False]


def test_multi_source_context_carries_source_ids(grid):
    stations = station_dataset(n_stations=6, nt=20)
    stations = stations.assign_coords(time=grid.time)
    sampler = TaskSampler(
        {"stations": stations, "era5": grid},
        "t2m",
        SpatialTasks(context_fraction=0.5),
        target_source="stations",
        batch_size=3,
    )
    batch = sampler.batch(0)
    sources = np.asarray(batch.context_source)[np.asarray(batch.context.mask)]
    assert set(sources.tolist()) == {0, 1}
    assert (np.asarray(batch.target_source)[np.asarray(batch.target.mask)] == 0).all()
    per_frame = set(grid.t2m.notnull().sum(["lat", "lon"]).values.tolist())
    for task in sampler.tasks(0):
        assert len(task.target) == 3  # the stations not used as context
        assert (task.context.source == 1).sum() in per_frame  # the whole grid frame


def test_multi_source_units_must_match(grid):
    stations = station_dataset(nt=20).assign_coords(time=grid.time)
    stations["t2m"].attrs["units"] = "degC"
    with pytest.raises(IncompatibleUnitsError, match="degC"):
        TaskSampler({"stations": stations, "era5": grid}, "t2m")


def test_covariate_units_must_match_between_sources(grid):
    stations = station_dataset(nt=20).assign_coords(time=grid.time)
    sst = lambda ds, units: xr.full_like(ds.t2m, 10.0).assign_attrs(units=units)  # noqa: E731
    sources = {"era5": grid.assign(sst=sst(grid, "degC")),
               "stations": stations.assign(sst=sst(stations, "K"))}  # fmt: skip
    with pytest.raises(IncompatibleUnitsError, match=r"sst.*'degC'.*'K'"):
        TaskSampler(sources, "t2m", covariates=["sst"])
    sources["stations"]["sst"].attrs["units"] = "deg C"  # another spelling of the same unit
    TaskSampler(sources, "t2m", covariates="sst", batch_size=2).batch(0)


def test_one_place_only_is_named_as_the_problem():
    ds = station_dataset(nt=20).isel(station=0)  # scalar lat/lon, as ds.sel(station=...) gives
    with pytest.raises(EmptyDataError, match="one place only"):
        TaskSampler(ds, "t2m", ForecastTasks(frames=2))


def test_task_specs_check_their_fractions():
    assert SpatialTasks(context_fraction=[0.1, 0.5]).context_fraction == (0.1, 0.5)
    assert SpatialTasks(context_count=[3, 5]).context_count == (3, 5)
    for bad in ((0.2, 0.8), 0.0, [0.5], True):
        with pytest.raises(ConfigError, match=r"ForecastTasks\.context_fraction"):
            ForecastTasks(context_fraction=bad)
    with pytest.raises(ConfigError, match="context_fraction"):
        SpatialTasks(context_fraction="half")


def test_config_errors(grid):
    with pytest.raises(ConfigError, match="target_source"):
        TaskSampler({"a": grid}, "t2m", target_source="b")
    with pytest.raises(ConfigError, match="context_fraction"):
        SpatialTasks(context_fraction=1.5)
    with pytest.raises(ConfigError, match="units"):
        WindowTasks(units="miles")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="window holds"):
        WindowTasks(task=WindowTasks())  # type: ignore[arg-type]
    for bad in (
        lambda: ForecastTasks(frames=2.5),  # would put a frame after the reference time
        lambda: ForecastTasks(frames=True),
        lambda: SpatialTasks(context_count=2.5),
        lambda: SpatialTasks(max_context=10.5),
        lambda: WindowTasks(min_points=0.5),
    ):
        with pytest.raises(ConfigError, match="positive integer"):
            bad()
    with pytest.raises(ConfigError, match="positive number"):
        ForecastTasks(step=float("inf"))
    assert ForecastTasks(frames=np.int64(3)).offsets.tolist() == [-12.0, -6.0, 0.0]
    with pytest.raises(ConfigError, match="task must be"):
        TaskSampler(grid, "t2m", "spatial")  # type: ignore[arg-type]
    static = grid.isel(time=0, drop=True)
    with pytest.raises(ConfigError, match="no time dimension"):
        TaskSampler(static, "t2m", ForecastTasks())
    assert len(TaskSampler(static, "t2m", batch_size=2).tasks(0)) == 2
    with pytest.raises(IncompatibleUnitsError):
        TaskSampler(grid, "t2m", normaliser=Normaliser.from_json(_degc_normaliser()))
    with pytest.raises(TypeError, match="endless"):
        len(TaskSampler(grid, "t2m"))


def _degc_normaliser() -> dict:
    return {
        "format": "xnp.normaliser/1",
        "stats": {"t2m": {"mean": 7.0, "std": 5.0, "units": "degC"}},
    }


def test_covariates_and_normalisation_reach_the_batch(grid):
    sampler = TaskSampler(grid, "t2m", covariates=["hour_of_day"], batch_size=2)
    batch = sampler.batch(0)
    assert batch.context.x.shape[-1] == 2
    values = np.asarray(batch.context.f)[np.asarray(batch.context.mask)]
    assert abs(values.mean()) < 1.0
    assert 0.3 < values.std() < 3.0


def test_sampling_a_dask_dataset_reads_only_the_frames_it_needs():
    ds = grid_dataset(nt=12).chunk({"time": 1})
    reads = []

    def counting(block: np.ndarray) -> np.ndarray:
        if block.size:
            reads.append(block.shape)
        return block

    ds["t2m"] = ds.t2m.copy(data=dask.array.map_blocks(counting, ds.t2m.data, dtype=float))
    before = ds.copy()
    norm = Normaliser.fit(grid_dataset(nt=12), "t2m")
    # data beyond the load budget (here: none) are read frame by frame for each task
    with dask.config.set(scheduler="sync"):
        TaskSampler(ds, "t2m", batch_size=2, normaliser=norm, load_budget=None).batch(0)
        assert len(reads) == 2  # one frame per spatial task
        reads.clear()
        TaskSampler(ds, "t2m", ForecastTasks(frames=2), batch_size=1, normaliser=norm,
                    load_budget=None).batch(0)  # fmt: skip
        assert len(reads) == 3  # two context frames and the target frame
        reads.clear()
        TaskSampler(ds, "t2m", batch_size=2, normaliser=norm).batch(0)  # within the budget
        assert len(reads) == 12  # every frame once, read into memory
    xr.testing.assert_identical(ds, before)
    assert isinstance(ds.t2m.data, dask.array.Array)


def test_sampler_never_modifies_the_data(grid):
    before = grid.copy(deep=True)
    dem = xr.DataArray(
        np.ones((3, 4)), coords={"lat": [40.0, 55.0, 70.0], "lon": [-20.0, -5.0, 10.0, 25.0]}
    )
    TaskSampler(grid, "t2m", covariates=["elevation"], dem=dem, batch_size=2).batch(0)
    xr.testing.assert_identical(grid, before)


@pytest.mark.parametrize("make", [curvilinear_dataset, projected_dataset])
def test_windows_on_curvilinear_and_projected_grids(make):
    ds = make()
    variable = next(iter(v for v in ds.data_vars if v != "crs"))
    ds[variable] = ds[variable] + np.random.default_rng(0).normal(size=ds[variable].shape)
    spec = WindowTasks(size=400.0, units="km", min_points=2)
    tasks = TaskSampler(ds, variable, spec, batch_size=3, seed=1).tasks(0)
    for task in tasks:
        points = np.concatenate([task.context.s, task.target.s])
        assert np.ptp(points[:, 0]) <= 400.0 / 111.195 + 1e-9


def test_multi_source_forecast_context_comes_from_the_context_times(grid):
    stations = station_dataset(n_stations=5, nt=20).assign_coords(time=grid.time)
    spec = ForecastTasks(frames=2, step=6.0, lead=12.0)
    sampler = TaskSampler({"grid": grid, "stations": stations}, "t2m", spec, batch_size=3)
    for task in sampler.tasks(0):
        from_stations = task.context.source == 1
        assert from_stations.sum() == 10  # 5 stations at each of the 2 context frames
        assert set(np.unique(task.context.t[from_stations])) == {-6.0, 0.0}
        assert set(np.unique(task.target.t)) == {12.0}
        assert (task.target.source == 0).all()


def test_mostly_empty_times_still_make_every_batch():
    # 3 of 40 times observed: a fixed step of training must not fail on such data
    ds = grid_dataset(nt=40, ny=6, nx=7)
    observed = np.zeros(40, bool)
    observed[[3, 17, 31]] = True
    ds["t2m"] = ds.t2m.where(xr.DataArray(observed, dims="time"))
    sampler = TaskSampler(ds, "t2m", SpatialTasks(), batch_size=8, seed=0)
    hours = sampler._target.hours[[3, 17, 31]]
    for k in range(40):
        for task in sampler.tasks(k):
            assert task.reference_time in hours
    empty = ds.where(xr.DataArray(np.arange(40) == 5, dims="time"))
    empty["t2m"][5] = np.nan
    with pytest.raises(EmptyDataError, match="dropna"):
        TaskSampler(empty, "t2m", SpatialTasks(), batch_size=2, normaliser=sampler.normaliser
                    ).batch(0)  # fmt: skip
