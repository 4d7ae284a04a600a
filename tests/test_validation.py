from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import grid_dataset, hourly_times

import xnp
from xnp.baselines import InverseDistanceWeighting
from xnp.errors import ConfigError, DimensionError
from xnp.scoring.cross_validation import BlockKFold, LeaveOneOut, cross_val_predict, cross_validate
from xnp.scoring.evaluation import evaluate
from xnp.scoring.scores import METRICS


def station_data(n=40, nt=None, seed=0, nan_fraction=0.0):
    rng = np.random.default_rng(seed)
    lat, lon = rng.uniform(40, 52, n), rng.uniform(-6, 6, n)
    field = np.sin(np.deg2rad(8 * lat)) + np.cos(np.deg2rad(10 * lon))
    coords = {"station": [f"S{i:02d}" for i in range(n)],
              "lat": ("station", lat), "lon": ("station", lon)}  # fmt: skip
    if nt is None:
        values = field + 0.05 * rng.normal(size=n)
        return xr.Dataset({"t": ("station", values, {"units": "K"})}, coords=coords)
    values = field[None, :] + 0.3 * rng.normal(size=(nt, n))
    values[rng.random(values.shape) < nan_fraction] = np.nan
    coords["time"] = hourly_times(nt)
    return xr.Dataset({"t": (("time", "station"), values, {"units": "K"})}, coords=coords)


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    n=st.integers(5, 80),
    spacing=st.floats(0.5, 20),
    n_splits=st.integers(2, 5),
    shuffle=st.booleans(),
)
def test_block_folds_partition_the_points_and_hold_out_whole_blocks(
    seed, n, spacing, n_splits, shuffle
):
    rng = np.random.default_rng(seed)
    lat, lon = rng.uniform(-80, 80, n), rng.uniform(-180, 180, n)
    cv = BlockKFold(spacing_deg=spacing, n_splits=n_splits, shuffle=shuffle, seed=seed)
    labels = cv.blocks(lat, lon)
    if np.unique(labels).size < n_splits:
        with pytest.raises(ConfigError, match="non-empty blocks"):
            list(cv.split_points(lat, lon))
        return
    folds = list(cv.split_points(lat, lon))
    assert len(folds) == n_splits == cv.get_n_splits()
    tests = [test for _, test in folds]
    np.testing.assert_array_equal(np.sort(np.concatenate(tests)), np.arange(n))  # a partition
    for train, test in folds:
        np.testing.assert_array_equal(np.sort(np.concatenate([train, test])), np.arange(n))
        assert not set(labels[train]) & set(labels[test])  # no block on both sides
        assert test.size > 0
    for i in range(n_splits):  # test blocks of different folds are disjoint
        for j in range(i + 1, n_splits):
            assert not set(labels[tests[i]]) & set(labels[tests[j]])
    sizes = [t.size for t in tests]
    assert max(sizes) - min(sizes) <= np.bincount(labels).max()  # balanced


def test_blocks_are_spatial_cells_and_wrap_longitude():
    cv = BlockKFold(spacing_deg=(10.0, 20.0))
    lat, lon = np.array([1.0, 9.0, 11.0, 1.0, 1.0]), np.array([0.0, 19.0, 0.0, 190.0, -170.0])
    labels = cv.blocks(lat, lon)
    assert labels[0] == labels[1]
    assert labels[0] != labels[2]
    assert labels[3] == labels[4]  # 190°E is 170°W
    by_count = BlockKFold(n_blocks=(2, 3)).blocks(*np.meshgrid([0.0, 10.0], [0.0, 5.0, 10.0]))
    assert np.unique(by_count).size == 6


def test_folds_are_reproducible_and_balanced():
    data = station_data(200, seed=1)
    a = [t.tolist() for _, t in BlockKFold(spacing_deg=1.0, n_splits=5, seed=3).split(data)]
    b = [t.tolist() for _, t in BlockKFold(spacing_deg=1.0, n_splits=5, seed=3).split(data)]
    c = [t.tolist() for _, t in BlockKFold(spacing_deg=1.0, n_splits=5, seed=4).split(data)]
    assert a == b
    assert a != c
    assert max(map(len, a)) - min(map(len, a)) <= 2


def test_block_kfold_configuration_errors():
    with pytest.raises(ConfigError, match="exactly one"):
        BlockKFold()
    with pytest.raises(ConfigError, match="exactly one"):
        BlockKFold(1.0, n_blocks=3)
    with pytest.raises(ConfigError, match="n_splits"):
        BlockKFold(1.0, n_splits=1)
    with pytest.raises(ConfigError, match="spacing_deg"):
        BlockKFold(-1.0)
    with pytest.raises(ConfigError, match="n_blocks"):
        BlockKFold(n_blocks=0)


def test_leave_one_out():
    data = station_data(5)
    folds = list(LeaveOneOut().split(data))
    assert [t.tolist() for _, t in folds] == [[0], [1], [2], [3], [4]]
    assert folds[2][0].tolist() == [0, 1, 3, 4]


def test_cross_validate_with_idw_end_to_end():
    data = station_data(40, seed=2)
    before = data.copy(deep=True)
    cv = BlockKFold(spacing_deg=3.0, n_splits=4, seed=0)
    seen = []

    def predictor(context, targets):
        assert not targets.data_vars  # the test values are never shown to the predictor
        assert not set(context.station.values) & set(targets.station.values)
        seen.append(targets.sizes["station"])
        return InverseDistanceWeighting().predict(context, targets)

    scores = cross_validate(predictor, data, "t", cv)
    assert scores.fold.values.tolist() == ["0", "1", "2", "3", "pooled"]
    assert [f"t_{m}" for m in METRICS] == list(scores.data_vars)
    assert scores.t_n.values.tolist() == [*seen, 40]
    # per fold: evaluate on that fold; pooled: evaluate all out-of-fold predictions at once
    folds = list(cv.split(data))
    train, test = folds[1]
    pred = InverseDistanceWeighting().predict(
        data.isel(station=train), data.isel(station=test).drop_vars("t")
    )
    one = evaluate(pred, data.isel(station=test))
    assert float(scores.t_rmse.sel(fold="1")) == pytest.approx(float(one.t_rmse))
    oof = cross_val_predict(InverseDistanceWeighting().predict, data, "t", cv)
    np.testing.assert_array_equal(oof.station.values, data.station.values)
    pooled = evaluate(oof, data)
    assert float(scores.t_crps.sel(fold="pooled")) == pytest.approx(float(pooled.t_crps))
    # a smooth field: IDW beats the climatological spread
    assert float(scores.t_rmse.sel(fold="pooled")) < float(data.t.std())
    xr.testing.assert_identical(data, before)


def test_cross_validate_keeps_time_and_other_dims():
    data = station_data(24, nt=3, seed=3, nan_fraction=0.1)
    cv = BlockKFold(n_blocks=3, n_splits=3)
    scores = cross_validate(InverseDistanceWeighting().predict, data, "t", cv, dim="station")
    assert scores.t_rmse.dims == ("fold", "time")
    assert int(scores.t_n.sel(fold="pooled").sum()) == int(data.t.count())
    np.testing.assert_array_equal(
        scores.t_n.drop_sel(fold="pooled").sum("fold"), scores.t_n.sel(fold="pooled")
    )


def test_cross_validate_per_station():
    data = station_data(12, nt=3, seed=4)
    cv = BlockKFold(n_blocks=2, n_splits=2)
    scores = cross_validate(InverseDistanceWeighting().predict, data, "t", cv, dim="time")
    assert scores.t_mae.dims == ("fold", "station")
    folds = scores.t_n.drop_sel(fold="pooled")
    assert ((folds > 0).sum("fold") == 1).all()  # each station scored in exactly one fold
    np.testing.assert_array_equal(scores.t_n.sel(fold="pooled"), 3)
    # every fold carries every station's coordinates; n is 0 (not NaN) where it held none
    assert scores.t_n.dtype.kind == "i"
    np.testing.assert_array_equal(scores.lat, data.lat)
    assert np.isfinite(scores.lon).all()
    # a station dimension without a coordinate aligns by position
    bare = data.drop_vars([c for c in data.coords if "station" in data[c].dims])
    bare = bare.assign_coords(lat=("station", data.lat.values), lon=("station", data.lon.values))
    if "station" in bare.indexes:
        bare = bare.drop_indexes("station")
    same = cross_validate(InverseDistanceWeighting().predict, bare, "t", cv, dim="time")
    np.testing.assert_array_equal(same.t_n, scores.t_n)
    np.testing.assert_allclose(same.t_mae, scores.t_mae)


def test_cross_validation_needs_point_data():
    grid = grid_dataset(nt=1, ny=4, nx=5)
    with pytest.raises(DimensionError, match="stack"):
        cross_validate(InverseDistanceWeighting().predict, grid, "t2m", BlockKFold(2.0))
    with pytest.raises(ConfigError, match="must return the Dataset"):
        cross_validate(lambda c, t: None, station_data(10), "t", LeaveOneOut())


def test_cross_validate_passes_covariates_to_the_targets():
    data = station_data(30, seed=5)
    data["coast_km"] = ("station", np.linspace(0.0, 90.0, 30))  # a user covariate
    model = xnp.fit(data, "t", model="bsa-tnp-tiny", covariates=["coast_km"], steps=2,
                    batch_size=2, validation=None, progress=False)  # fmt: skip
    cv = BlockKFold(spacing_deg=4.0, n_splits=3, seed=0)

    def predictor(context, targets):
        assert not targets.data_vars
        assert list(context.data_vars) == ["t"]
        assert "coast_km" in targets.coords
        assert "coast_km" in context.coords
        return xnp.predict(model, context, targets)

    scores = cross_validate(predictor, data, "t", cv)
    assert list(scores.data_vars) == [f"t_{m}" for m in METRICS]  # covariates are not scored
    # a baseline predicts only the scored variable, whatever else the data hold
    other = data.assign(
        rh=("station", np.linspace(40, 90, 30)), name=("station", data.station.values)
    )
    idw = cross_val_predict(InverseDistanceWeighting().predict, other, "t", cv)
    assert sorted(idw.data_vars) == ["t_mean", "t_std"]
    zero_shot = cross_val_predict(lambda c, t: xnp.predict("gp-sphere", c, t), other, "t", cv)
    assert np.isfinite(zero_shot.t_mean).all()
    idw_scores = cross_validate(InverseDistanceWeighting().predict, other, "t", cv)
    assert float(idw_scores.t_n.sel(fold="pooled")) == 30
    # xnp.predict reads a covariate data variable of the targets (and of the data when
    # gap filling), and does not copy it into the prediction
    filled = xnp.predict(model, data)
    assert sorted(filled.data_vars) == ["t_mean", "t_std"]
    assert filled.t_mean.dims == ("station",)
    shifted = xnp.predict(model, data, data.drop_vars("t").assign(coast_km=data.coast_km + 50))
    assert not np.allclose(shifted.t_mean, filled.t_mean)
    assert int(scores.t_n.sel(fold="pooled")) == 30
    assert np.isfinite(scores.t_rmse).all()


def test_cross_validation_of_unusual_but_valid_setups():
    idw = InverseDistanceWeighting().predict
    # a grid stacked into points (as the module docstring suggests)
    lat, lon = np.arange(40.0, 46.0), np.arange(0.0, 8.0)
    grid = xr.Dataset(
        {"t": (("lat", "lon"), np.add.outer(lat, lon) * 0.1)}, coords={"lat": lat, "lon": lon}
    ).stack(cell=("lat", "lon"))
    scores = cross_validate(idw, grid, "t", BlockKFold(spacing_deg=2.0, n_splits=3))
    assert int(scores.t_n.sel(fold="pooled")) == 48
    # a predictor that returns its points in another order is scored per station
    data = station_data(12, nt=3, seed=4)
    cv = BlockKFold(n_blocks=2, n_splits=2)
    reverse = lambda c, t: idw(c, t).isel(station=slice(None, None, -1))  # noqa: E731
    straight = cross_validate(idw, data, "t", cv, dim="time")
    xr.testing.assert_allclose(cross_validate(reverse, data, "t", cv, dim="time"), straight)
    assert (cross_val_predict(reverse, data, "t", cv).station == data.station).all()
    with pytest.raises(ConfigError, match="exactly the targets"):
        cross_validate(lambda c, t: idw(c, t).isel(station=[0]), data, "t", cv)

    # a splitter that holds out only some points: scored on those
    class HoldOut:
        def split(self, d):
            yield np.arange(8), np.arange(8, 12)

    part = cross_validate(idw, data, "t", HoldOut(), dim="time")
    assert list(part.station.values) == list(data.station.values[8:])
    assert int(cross_validate(idw, data, "t", HoldOut()).t_n.sel(fold="pooled")) == 12
    # a fold without any valid truth has n = 0 and NaN scores; the others are scored
    gappy = station_data(6, seed=1)
    gappy["t"][2] = np.nan
    loo = cross_validate(idw, gappy, "t", LeaveOneOut())
    assert loo.t_n.values.tolist() == [1, 1, 0, 1, 1, 1, 5]
    assert np.isnan(loo.t_rmse.sel(fold="2"))
    assert np.isfinite(loo.t_rmse.sel(fold="pooled"))

    class Nothing:
        def split(self, d):
            return iter(())

    with pytest.raises(ConfigError, match="no fold"):
        cross_val_predict(idw, gappy, "t", Nothing())
    assert BlockKFold(1.0, n_splits=np.int64(3)).n_splits == 3
    with pytest.raises(ConfigError, match="pair"):
        BlockKFold(spacing_deg=(1.0, 2.0, 3.0))
