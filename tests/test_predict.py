import warnings

import dask
import numpy as np
import pandas as pd
import pytest
import xarray as xr
from strategies import curvilinear_dataset, grid_dataset, projected_dataset, station_dataset

from xnp.api.predict import predict
from xnp.data.normalise import Normaliser
from xnp.data.tasks import ForecastTasks
from xnp.errors import ConfigError, CoordinateError, EmptyDataError, XnpWarning
from xnp.models.config import BSATNPConfig
from xnp.neural_process import NeuralProcess
from xnp.neural_process import load as xnp_load
from xnp.testing import ComputeCounter


@pytest.fixture(scope="module")
def data():
    return grid_dataset(nt=3, ny=8, nx=10, nan_fraction=0.2)


@pytest.fixture(scope="module")
def model(data):
    cfg = BSATNPConfig.tiny(q_chunk=64, k_chunk=64)
    return NeuralProcess.init(cfg, Normaliser.fit(data, "t2m"), ["t2m"], seed=0)


def grid(ny=12, nx=15):
    return xr.Dataset(
        coords={"lat": np.linspace(49.5, 54.5, ny), "lon": np.linspace(-3.5, 2.5, nx)}
    )


def test_gridded_targets_are_labelled(model, data):
    t0 = data.time.values[1]
    out = predict(model, data, grid(), time=t0)
    assert set(out.data_vars) == {"t2m_mean", "t2m_std"}
    assert out["t2m_mean"].dims == ("lat", "lon")
    assert out["t2m_mean"].attrs["units"] == "K"
    assert out["t2m_std"].attrs["long_name"].startswith("predictive standard deviation")
    assert "xnp_version" in out.attrs
    assert np.isfinite(out["t2m_mean"]).all()
    assert (out["t2m_std"] > 0).all()
    assert float(out.time) == float(t0.astype("datetime64[ns]").astype(float))


def test_predicted_coordinates_carry_cf_attributes(model, data, forecaster):
    template = grid()  # coordinates without attributes, as a dict of arrays makes them
    out = predict(model, data, template, time=data.time.values[1])
    assert out.lat.attrs == {"standard_name": "latitude", "units": "degrees_north", "axis": "Y"}
    assert out.lon.attrs["units"] == "degrees_east"
    assert out.lon.attrs["axis"] == "X"
    assert out.time.attrs["standard_name"] == "time"
    assert template.lat.attrs == {}  # the user's template is not modified
    own = template.assign_coords(lat=template.lat.assign_attrs(units="degree_north"))
    assert predict(model, data, own, time=data.time.values[1]).lat.attrs["units"] == "degree_north"
    frames = grid_dataset(nt=5, ny=6, nx=7)
    fc = predict(forecaster, frames, grid(3, 4))
    assert fc.init_time.attrs["standard_name"] == "forecast_reference_time"
    assert fc.lead_time.attrs["standard_name"] == "forecast_period"
    assert fc.valid_time.attrs["standard_name"] == "time"


def test_lazy_equals_eager_and_builds_without_computing(model, data):
    t0 = data.time.values[0]
    eager = predict(model, data, grid(), time=t0)
    counter = ComputeCounter()
    with dask.config.set(scheduler=counter):
        lazy = predict(model, data, grid(), time=t0, chunks={"lat": 5, "lon": 8})
        assert counter.calls == 0
        assert lazy["t2m_mean"].chunks == ((5, 5, 2), (8, 7))
        computed = lazy.compute()
    assert counter.calls == 1
    xr.testing.assert_allclose(computed, eager, atol=1e-4)


def test_chunked_template_and_zarr_round_trip(model, data, tmp_path):
    t0 = data.time.values[2]
    template = grid().assign(dummy=lambda d: d.lat * d.lon).chunk({"lat": 4})
    lazy = predict(model, data, template, time=t0)
    assert lazy["t2m_mean"].chunks is not None
    lazy.to_zarr(tmp_path / "pred.zarr", consolidated=False)
    back = xr.open_zarr(tmp_path / "pred.zarr", consolidated=False).load()
    xr.testing.assert_allclose(back, predict(model, data, grid(), time=t0), atol=1e-4)


def test_gap_filling_every_time(model, data):
    out = predict(model, data)
    assert out["t2m_mean"].dims == ("time", "lat", "lon")
    assert out.sizes == data.sizes
    assert np.isfinite(out["t2m_mean"]).all()


def test_station_and_curvilinear_targets(model, data):
    stations = station_dataset(n_stations=7).drop_vars("t2m").isel(time=0, drop=True)
    out = predict(model, data, stations, time=data.time.values[0])
    assert out["t2m_mean"].dims == ("station",)
    assert out.sizes["station"] == 7
    curvi = curvilinear_dataset().drop_vars(list(curvilinear_dataset().data_vars))
    out = predict(model, data, curvi, time=data.time.values[0])
    assert out["t2m_mean"].dims == curvi["nav_lat"].dims


def test_regional_with_large_radius_equals_exact(model, data):
    t0 = data.time.values[0]
    exact = predict(model, data, grid(), time=t0)
    regional = predict(model, data, grid(), time=t0, context_radius="20000km")
    xr.testing.assert_allclose(regional, exact, atol=1e-4)


def test_targets_beyond_the_context_radius_are_refused_before_any_work(model, data):
    # the grid plus a column 20° east of the data: no context within 300 km there, so
    # the answer must not depend on how the targets are chunked (eager or lazy)
    t0 = data.time.values[0]
    far = xr.Dataset(coords={"lat": grid().lat, "lon": np.r_[grid().lon.values, 25.0]})
    for chunks in (None, {"lon": 4}):
        counter = ComputeCounter()
        refused = pytest.raises(EmptyDataError, match=r"12 of 192 target points .*=300 km")
        with dask.config.set(scheduler=counter), refused:
            predict(model, data, far, time=t0, context_radius="300km", chunks=chunks)
        assert counter.calls == 0
    near = predict(model, data, grid(), time=t0, context_radius="300km", chunks={"lon": 4})
    assert np.isfinite(near["t2m_mean"].values).all()


def test_distributed_local_cluster(model, data):
    distributed = pytest.importorskip("distributed")
    t0 = data.time.values[0]
    eager = predict(model, data, grid(), time=t0)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster):  # fmt: skip
        lazy = predict(model, data, grid(), time=t0, chunks={"lat": 6})
        xr.testing.assert_allclose(lazy.compute(), eager, atol=1e-4)


def test_clear_errors(model, data):
    empty = data.copy(deep=True)
    empty["t2m"][1] = np.nan
    with pytest.raises(EmptyDataError, match="no observation"):
        predict(model, empty)
    with pytest.raises(CoordinateError):
        predict(model, data, xr.Dataset(coords={"a": [1.0, 2.0]}), time=data.time.values[0])
    with pytest.raises(ConfigError, match="no variable"):
        predict(model, data.rename(t2m="temp"))
    with pytest.raises(ConfigError, match="lead_time is for forecast models"):
        predict(model, data, lead_time=6)
    assert np.isnan(empty["t2m"][1]).all()  # the user's data is untouched by us


def test_accessor_and_estimator_style_agree(model, data):
    t0 = data.time.values[0]
    ref = predict(model, data, grid(), time=t0)
    xr.testing.assert_allclose(data.np.predict(model, grid(), time=t0), ref)
    xr.testing.assert_allclose(data["t2m"].np.predict(model, grid(), time=t0), ref)
    xr.testing.assert_allclose(model.predict(data, grid(), time=t0), ref)


def test_another_region_gives_the_same_answer(model, data):
    # great-circle bias, no location embedding: moving context and targets together
    # along the equator-parallel by 70° (a rotation about the pole) changes nothing
    t0 = data.time.values[0]
    ref = predict(model, data, grid(), time=t0)
    moved = predict(model, data.assign_coords(lon=data.lon + 70.0),
                    grid().assign_coords(lon=grid().lon + 70.0), time=t0)  # fmt: skip
    np.testing.assert_allclose(moved["t2m_mean"].values, ref["t2m_mean"].values, atol=1e-3)
    np.testing.assert_allclose(moved["t2m_std"].values, ref["t2m_std"].values, atol=1e-3)


@pytest.fixture(scope="module")
def forecaster(model):
    cfg = model.config.replace(temporal_bias=True)
    task = ForecastTasks(frames=2, step=6.0, lead=6.0)
    return NeuralProcess.init(cfg, model.normaliser, ["t2m"], task=task, seed=1)


def test_forecast_has_init_lead_and_valid_time(forecaster):
    data = grid_dataset(nt=5, ny=6, nx=7, nan_fraction=0.1)
    out = predict(forecaster, data, grid(5, 6))
    # every time with two frames 6 h apart ending at it is an init time: all but the first
    np.testing.assert_array_equal(out.init_time.values, data.time.values[1:])
    assert out["t2m_mean"].dims == ("init_time", "lat", "lon")
    assert out.lead_time.values == np.timedelta64(6, "h")
    np.testing.assert_array_equal(
        out.valid_time.values, data.time.values[1:] + np.timedelta64(6, "h")
    )
    assert np.isfinite(out["t2m_mean"]).all()
    assert (out["t2m_std"] > 0).all()
    assert "time" not in out.coords

    one = predict(forecaster, data, grid(5, 6), time=data.time.values[3], lead_time=["6h", 3])
    assert one["t2m_mean"].dims == ("lead_time", "lat", "lon")
    assert one.init_time.values == data.time.values[3]
    assert one.lead_time.values.tolist() == [np.timedelta64(6, "h"), np.timedelta64(3, "h")]
    six = one.sel(lead_time="6h").drop_vars("valid_time")
    xr.testing.assert_allclose(six, out.isel(init_time=2).drop_vars("valid_time"), atol=1e-5)
    # the lead enters the model (through the temporal bias): another lead, another forecast
    assert not np.allclose(one["t2m_mean"][0], one["t2m_mean"][1])


def test_forecast_uses_exactly_the_context_frames(forecaster):
    data = grid_dataset(nt=5, ny=6, nx=7, nan_fraction=0.1)
    t0 = data.time.values[2]
    ref = predict(forecaster, data, grid(5, 6), time=t0)
    changed = data.copy(deep=True)
    changed["t2m"][0] += 10.0  # outside the two frames ending at t0
    changed["t2m"][3:] -= 10.0  # in the future of t0
    xr.testing.assert_allclose(predict(forecaster, changed, grid(5, 6), time=t0), ref)
    changed["t2m"][1] += 1.0  # a context frame
    assert not np.allclose(predict(forecaster, changed, grid(5, 6), time=t0)["t2m_mean"],
                           ref["t2m_mean"])  # fmt: skip


def test_forecast_lazy_and_regional_agree_with_eager(forecaster):
    data = grid_dataset(nt=3, ny=6, nx=7, nan_fraction=0.1)
    eager = predict(forecaster, data, grid(5, 6), lead_time=[6, 3])
    lazy = predict(forecaster, data, grid(5, 6), lead_time=[6, 3], chunks={"lat": 2})
    assert lazy["t2m_mean"].chunks is not None
    xr.testing.assert_allclose(lazy.compute(), eager, atol=1e-4)
    regional = predict(forecaster, data, grid(5, 6), lead_time=[6, 3], context_radius="20000km")
    xr.testing.assert_allclose(regional, eager, atol=1e-4)


def test_forecast_errors(forecaster):
    data = grid_dataset(nt=3, ny=6, nx=7)
    with pytest.raises(EmptyDataError, match="lacks some of them"):
        predict(forecaster, data, time=data.time.values[0])
    with pytest.raises(EmptyDataError, match="context frames"):
        predict(forecaster, data.isel(time=[0, 2]))
    with pytest.raises(ConfigError, match="no time dimension"):
        predict(forecaster, data.isel(time=0))
    with pytest.raises(ConfigError, match="cannot read lead_time"):
        predict(forecaster, data, time=data.time.values[1], lead_time="soon")
    with pytest.warns(XnpWarning, match="beyond"):
        predict(forecaster, data, grid(3, 3), time=data.time.values[1], lead_time=24)


def test_zero_shot_model_predicts_any_variable_in_its_units(model, data):
    zero_shot = NeuralProcess.init(
        model.config, Normaliser.fit(data, "t2m"), ["value"], normalise="context", seed=2
    )
    t0 = data.time.values[0]
    kelvin = predict(zero_shot, data["t2m"], grid(4, 5), time=t0)
    assert set(kelvin.data_vars) == {"t2m_mean", "t2m_std"}
    assert kelvin["t2m_mean"].attrs["units"] == "K"
    # standardised by the context itself: equivariant to affine changes of units
    fahrenheit = (data["t2m"] - 273.15) * 1.8 + 32.0
    fahrenheit = fahrenheit.assign_attrs(units="degF").rename("tf")
    out = predict(zero_shot, fahrenheit, grid(4, 5), time=t0)
    np.testing.assert_allclose(out["tf_mean"], (kelvin["t2m_mean"] - 273.15) * 1.8 + 32.0,
                               rtol=1e-5, atol=1e-3)  # fmt: skip
    np.testing.assert_allclose(out["tf_std"], kelvin["t2m_std"] * 1.8, rtol=1e-4)
    assert out["tf_std"].attrs["units"] == "degF"
    with pytest.raises(ConfigError, match="zero-shot"):
        predict(zero_shot, data.assign(other=data["t2m"]), time=t0)
    assert "zero-shot" in repr(zero_shot)


def test_zero_shot_flag_survives_save_and_load(model, tmp_path):
    zero_shot = NeuralProcess.init(model.config, model.normaliser, ["v"], normalise="context")
    assert xnp_load(zero_shot.save(tmp_path / "m")).normalise == "context"
    assert xnp_load(model.save(tmp_path / "f")).normalise == "fitted"
    with pytest.raises(ConfigError, match="normalise"):
        NeuralProcess.init(model.config, model.normaliser, ["v"], normalise="sometimes")


def test_coordinate_names_of_the_training_data_are_hints_not_requirements(model, data):
    named = NeuralProcess(
        model.config, model.params_, normaliser=model.normaliser, variables=["t2m"],
        coords={"lat": "latitude", "lon": "longitude"},
    )  # fmt: skip
    t0 = data.time.values[0]
    xr.testing.assert_allclose(predict(named, data, grid(), time=t0),
                               predict(model, data, grid(), time=t0))  # fmt: skip
    renamed = data.rename(lat="latitude", lon="longitude")
    out = predict(named, renamed, grid().rename(lat="latitude", lon="longitude"), time=t0)
    assert out["t2m_mean"].dims == ("latitude", "longitude")


# -- labels and inputs users really pass ---------------------------------------------------


def test_template_with_its_own_scalar_time_takes_the_context_time(model, data):
    # a frame of the data used as the grid must not relabel predictions for other times
    out = predict(model, data, data.isel(time=0))
    np.testing.assert_array_equal(out.time.values, data.time.values)
    one = predict(model, data.isel(time=0), data.isel(time=2))
    assert one.time.values == data.time.values[0]


def test_scalar_context_time_labels_targets_without_time(model, data):
    frame = data.isel(time=1)
    out = predict(model, frame, {"lat": frame.lat.values, "lon": frame.lon.values})
    assert out.time.values == frame.time.values


def test_template_time_dimension_selects_the_times(model, data):
    out = predict(model, data, data.isel(time=[0, 2]))
    np.testing.assert_array_equal(out.time.values, data.time.values[[0, 2]])


def test_absent_times_raise_xnp_errors(model, data):
    with pytest.raises(CoordinateError, match="not in the data"):
        predict(model, data, grid(), time=np.datetime64("1990-01-01"))
    with pytest.raises(EmptyDataError, match="no time of the data"):
        predict(model, data, grid(), time=slice("1990-01-01", "1990-02-01"))
    with pytest.raises(CoordinateError, match="not in the data"):
        predict(model, data.isel(time=[0, 1]), data.isel(time=[1, 2]))


def test_scalar_targets_chunks_and_dtypes(model, data):
    frame = data.isel(time=0)
    one = predict(model, frame, {"lat": 51.0, "lon": 0.5})
    assert one["t2m_mean"].shape == (1, 1)
    sites = predict(model, frame, {"lat": ("site", [50.0, 52.0]), "lon": ("site", [0.0, 1.0])})
    assert sites["t2m_mean"].dims == ("site",)
    assert np.isfinite(one["t2m_mean"]).all()
    eager = predict(model, frame, grid())
    lazy = predict(model, frame, grid(), chunks=5)
    assert lazy["t2m_mean"].chunks == ((5, 5, 2), (5, 5, 5))
    assert eager["t2m_mean"].dtype == lazy["t2m_mean"].dtype == np.float32
    with pytest.raises(ConfigError, match="do not have"):
        predict(model, frame, grid(), chunks={"latitude": 3})
    with pytest.raises(ConfigError, match="chunks must be"):
        predict(model, frame, grid(), chunks=[3])


def test_model_by_path_or_name_and_unnamed_arrays(model, data, tmp_path):
    frame = data.isel(time=0)
    model.save(tmp_path / "m")
    by_path = predict(str(tmp_path / "m"), frame, grid())
    xr.testing.assert_allclose(by_path, predict(model, frame, grid()))
    unnamed = predict(model, frame["t2m"].rename(None), grid())
    assert set(unnamed.data_vars) == {"t2m_mean", "t2m_std"}
    with pytest.raises(ConfigError, match="neither a saved model directory"):
        predict("no-such-model", frame, grid())
    with pytest.raises(ConfigError, match="must be a NeuralProcess"):
        predict(42, frame, grid())


def test_a_context_that_cannot_tell_targets_apart_warns(model, data):
    # one observation, or several alike, or several at one place: the attention sees
    # the same token(s) from every target, and every target gets the same answer
    frame = data.isel(time=0)
    far = {"lat": ("s", [50.0, 50.2, 20.0, -60.0]), "lon": ("s", [-3.0, -2.8, 90.0, -170.0])}
    with pytest.warns(XnpWarning, match=r"'t2m' at .* is one observation.*same mean"):
        one = predict(model, frame.isel(lat=0, lon=0), far)
    assert np.ptp(one["t2m_mean"].values) == 0.0  # what the warning is about
    assert np.ptp(one["t2m_std"].values) == 0.0
    alike = xr.full_like(frame, 280.0)
    with pytest.warns(XnpWarning, match=r"\d+ observations, all equal"):
        predict(model, alike, far)
    sites = xr.Dataset(
        {"t2m": ("station", [280.0, 284.0], {"units": "K"})},
        coords={"lat": ("station", [51.0, 51.0]), "lon": ("station", [0.0, 0.0]),
                "time": frame.time},
    )  # fmt: skip
    with pytest.warns(XnpWarning, match="2 observations, all at one place"):
        predict(model, sites, far)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        predict(model, frame, far)  # an ordinary context: no warning


def test_a_context_far_outside_the_training_values_warns(model, data):
    # degC given to a model trained in K, without a units attribute to catch it: the
    # values sit ~70 training standard deviations away, and the answer is a flat field
    frame = data.isel(time=0)
    celsius = frame.assign(t2m=(frame.t2m - 273.15).assign_attrs(units=None))
    celsius["t2m"].attrs.pop("units")
    with pytest.warns(XnpWarning, match=r"far outside the values the model was trained on.*units"):
        predict(model, celsius, grid(3, 3))
    packed = frame.assign(t2m=(frame.t2m * 100.0).assign_attrs(frame.t2m.attrs))
    with pytest.warns(XnpWarning, match="scale_factor"):
        predict(model, packed, grid(3, 3))
    near = frame.assign(t2m=frame.t2m + 3.0)  # a warmer day is not a warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        predict(model, near, grid(3, 3))


def test_a_zero_shot_context_without_units_warns(model, data):
    zero_shot = NeuralProcess.init(model.config, model.normaliser, ["value"],
                                   normalise="context")  # fmt: skip
    frame = data["t2m"].isel(time=0)
    bare = frame.copy()
    bare.attrs.pop("units")
    with pytest.warns(XnpWarning, match=r"no 'units' attribute.*attrs\['units'\]"):
        out = predict(zero_shot, bare, grid(4, 5))
    assert "units" not in out["t2m_mean"].attrs


def test_zero_shot_context_without_spread_is_refused(model, data):
    zero_shot = NeuralProcess.init(model.config, model.normaliser, ["value"],
                                   normalise="context")  # fmt: skip
    frame = data["t2m"].isel(time=0)
    with pytest.raises(EmptyDataError, match="all equal"):
        predict(zero_shot, xr.full_like(frame, 280.0), grid(4, 5))
    single = frame.where((frame.lat == frame.lat[0]) & (frame.lon == frame.lon[0]))
    with pytest.raises(EmptyDataError, match="1 observation"):
        predict(zero_shot, single, grid(4, 5))


def test_numpy_timedelta_lead_times(forecaster):
    data = grid_dataset(nt=5, ny=6, nx=7, nan_fraction=0.1)
    t0 = data.time.values[3]
    by_hours = predict(forecaster, data, grid(5, 6), time=t0, lead_time=[6, 3])
    by_numpy = predict(forecaster, data, grid(5, 6), time=t0,
                       lead_time=np.array([6, 3], "timedelta64[h]"))  # fmt: skip
    xr.testing.assert_identical(by_numpy, by_hours)
    again = predict(forecaster, data, grid(5, 6), time=t0, lead_time=by_numpy.lead_time.values)
    xr.testing.assert_identical(again, by_hours)
    one = predict(forecaster, data, grid(5, 6), time=t0, lead_time=np.timedelta64(6, "h"))
    assert one.lead_time.values == np.timedelta64(6, "h")


def test_targets_beyond_the_trained_distance_warn(model, data):
    zero_shot = NeuralProcess.init(
        model.config, model.normaliser, ["value"], normalise="context",
        training={"max_distance_km": 500.0},
    )  # fmt: skip
    frame = data["t2m"].isel(time=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        predict(zero_shot, frame, grid(4, 5))  # inside the observed region: silent
    far = xr.Dataset(coords={"lat": [51.0, -30.0], "lon": [0.0, 140.0]})
    with pytest.warns(XnpWarning, match=r"3 of 4 target points lie more than 500 km"):
        predict(zero_shot, frame, far)


def test_lazy_covariates_are_read_per_block_and_missing_ones_give_nan(data):
    # a covariate given as a data variable of the targets: lazy (dask) values are read
    # when the result is computed, not at graph build, and targets where it is missing
    # (NaN) are NaN in the prediction, in the same places as the eager path
    with_land = data.assign(land=(("lat", "lon"), np.linspace(0.0, 1.0, 80).reshape(8, 10)))
    model = NeuralProcess.init(
        BSATNPConfig.tiny(q_chunk=64, k_chunk=64, dim_x=1),
        Normaliser.fit(with_land, "t2m", covariates=["land"]), ["t2m"], covariates=["land"],
    )  # fmt: skip
    land = np.linspace(0.0, 1.0, 180).reshape(12, 15)
    land[3, 4:9] = np.nan  # five targets without the covariate
    template = grid().assign(land=(("lat", "lon"), land))
    t0 = data.time.values[0]
    # targets without the covariate are left out with a warning (per block when lazy)
    with pytest.warns(XnpWarning, match="5 of 180 points have a missing .* left out"):
        eager = predict(model, with_land, template, time=t0)
    assert int(eager["t2m_mean"].isnull().sum()) == 5
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "[0-9,]+ of [0-9,]+ points have a missing", XnpWarning)
        counter = ComputeCounter()
        lazy_land = template.assign(land=template.land.chunk({"lon": 4}))  # other chunks
        with dask.config.set(scheduler=counter):
            lazy = predict(model, with_land, lazy_land, time=t0, chunks={"lat": 5, "lon": 6})
            assert counter.calls == 0
            computed = lazy.compute()
        assert counter.calls == 1
        xr.testing.assert_allclose(computed, eager, atol=1e-5)
        # an in-memory covariate on a chunked template (the chunks come from it)
        chunked = predict(model, with_land, template.chunk({"lat": 4}), time=t0).compute()
        xr.testing.assert_allclose(chunked, eager, atol=1e-5)
        # a covariate over fewer dims than the targets is broadcast along the others
        stations = template.stack(point=("lat", "lon")).reset_index("point")
        by_point = predict(model, with_land, stations, time=t0, chunks={"point": 50}).compute()
        np.testing.assert_allclose(
            by_point["t2m_mean"].values, eager["t2m_mean"].values.ravel(), atol=1e-5
        )


def test_templates_as_users_open_them(model, data):
    frame = data.isel(time=0)
    # a chunked template whose first data variable has a dim the targets lack (bounds)
    g = grid(4, 5)
    bounds = np.stack([g.lat.values - 0.5, g.lat.values + 0.5], -1)
    cmip = g.assign(
        lat_bnds=(("lat", "bnds"), bounds), tas=(("lat", "lon"), np.zeros((4, 5)))
    ).chunk({"lat": 2})
    lazy = predict(model, frame, cmip)
    assert lazy["t2m_mean"].chunks == ((2, 2), (5,))
    xr.testing.assert_allclose(lazy.compute(), predict(model, frame, g), atol=1e-5)
    # the result follows the template variable's dim order, not its coordinates'
    lon_first = xr.Dataset(
        {"t2m": (("lat", "lon"), frame.t2m.values, {"units": "K"})},
        coords={"lon": frame.lon.values, "lat": frame.lat.values},
    )
    assert predict(model, lon_first)["t2m_mean"].dims == ("lat", "lon")
    assert predict(model, frame, lon_first.t2m)["t2m_mean"].dims == ("lat", "lon")
    # a projected grid whose CF grid mapping is a data variable (as open_dataset gives)
    projected = projected_dataset()
    context = projected.assign(t2m=projected.t2m + 285.0 + projected.x / projected.x.max())
    assert predict(model, context)["t2m_mean"].dims == ("y", "x")
    assert predict(model, frame, projected)["t2m_mean"].dims == ("y", "x")
    # stations whose latitude and longitude are data variables (as from a table)
    sites = xr.Dataset({"lat": ("site", [50.5, 52.0, 53.5]), "lon": ("site", [-2.0, 0.0, 1.5])})
    out = predict(model, frame, sites)
    assert out["t2m_mean"].dims == ("site",)
    np.testing.assert_allclose(out.lat, sites.lat)
    # a second scalar time of a frame used as the grid does not label the predictions
    two_clocks = data.assign_coords(valid_time=("time", data.time.values))
    assert "valid_time" not in predict(model, two_clocks, two_clocks.isel(time=0)).coords
    assert predict(model, frame, grid(3, 3), chunks={"lat": "auto"})["t2m_mean"].chunks


def test_times_that_cannot_be_honoured_raise(model, data):
    frame = data.isel(time=0)  # a scalar time
    with pytest.raises(CoordinateError, match="not in the data"):
        predict(model, frame, grid(3, 3), time=data.time.values[2])
    same = predict(model, frame, grid(3, 3), time=data.time.values[0])
    assert same.time.values == data.time.values[0]
    with pytest.raises(ConfigError, match="no time coordinate"):
        predict(model, frame.drop_vars("time"), grid(3, 3), time=data.time.values[0])
    rng = np.random.default_rng(0)
    obs = xr.Dataset(
        {"t2m": ("obs", 285.0 + rng.normal(size=40), {"units": "K"})},
        coords={
            "lat": ("obs", rng.uniform(50, 57, 40)),
            "lon": ("obs", rng.uniform(-3, 6, 40)),
            "time": ("obs", data.time.values[0] + np.arange(40) * np.timedelta64(1, "m")),
        },
    )
    with pytest.raises(ConfigError, match="one time per observation"):
        predict(model, obs, grid(3, 3))


def test_elevation_covariate_at_the_targets(data):
    # the elevation as a data variable under another name, in km in the targets
    rng = np.random.default_rng(0)
    metres = rng.uniform(0.0, 2000.0, (8, 10))
    with_orog = data.assign(orog=(("lat", "lon"), metres, {"units": "m"}))
    model = NeuralProcess.init(
        BSATNPConfig.tiny(q_chunk=64, k_chunk=64, dim_x=1),
        Normaliser.fit(with_orog, "t2m", covariates=["elevation"]), ["t2m"],
        covariates=["elevation"],
    )  # fmt: skip
    frame = with_orog.isel(time=0)
    filled = predict(model, frame)
    assert np.isfinite(filled["t2m_mean"]).all()
    as_coord = predict(model, frame, frame.drop_vars("t2m").set_coords("orog"))
    xr.testing.assert_allclose(filled, as_coord.drop_vars("orog"), atol=1e-6)
    in_km = xr.Dataset(
        {"orog": (("lat", "lon"), metres / 1000.0, {"units": "km"})},
        coords={"lat": frame.lat, "lon": frame.lon},
    )
    eager = predict(model, frame, in_km)
    xr.testing.assert_allclose(eager, filled, atol=1e-5)
    lazy = predict(model, frame, in_km, chunks={"lat": 3}).compute()
    xr.testing.assert_allclose(lazy, eager, atol=1e-5)
    # no target has the covariate: NaN everywhere, eager as lazy, with a warning
    nowhere = in_km.assign(orog=in_km.orog * np.nan)
    with pytest.warns(XnpWarning, match="80 of 80 points have a missing .*'elevation'"):
        assert predict(model, frame, nowhere)["t2m_mean"].isnull().all()
    with pytest.warns(XnpWarning, match="points have a missing .*'elevation'"):
        assert predict(model, frame, nowhere, chunks=4)["t2m_mean"].isnull().all()


def test_targets_and_context_at_a_single_place(model, data):
    frame = data.isel(time=0)
    grid_point = predict(model, frame, grid(3, 3).isel(lat=1, lon=2))  # ds.sel(lat=.., lon=..)
    assert grid_point["t2m_mean"].dims == ()
    assert float(grid_point.lat) == grid(3, 3).lat[1]
    assert "time" in grid_point.coords
    ref = predict(model, frame, grid(3, 3))["t2m_mean"][1, 2]
    np.testing.assert_allclose(grid_point["t2m_mean"], ref, atol=1e-5)
    lazy = predict(model, frame, grid(3, 3).isel(lat=1, lon=2), chunks={})
    xr.testing.assert_identical(lazy, grid_point)
    # 0-d arrays in a dict are scalars, as numbers are: a grid of one point
    zero_d = predict(model, frame, {"lat": np.array(52.0), "lon": frame.lon[3]})
    assert zero_d["t2m_mean"].shape == (1, 1)
    # one station's time series as targets: one prediction per time
    sites = xr.Dataset(coords={"lat": ("station", [51.0, 52.0]), "lon": ("station", [0.0, 1.0])})
    one_station = predict(model, data, sites.isel(station=1))
    assert one_station["t2m_mean"].dims == ("time",)
    assert np.isfinite(one_station["t2m_mean"]).all()
    # a single observation is a context too (of a fitted model), but it cannot tell
    # the targets apart: said in a warning
    with pytest.warns(XnpWarning, match="is one observation: the model cannot tell"):
        single = predict(model, frame.isel(lat=2, lon=3), grid(3, 3))
    assert np.isfinite(single["t2m_mean"]).all()
    # a lazy block without targets (an empty dim) is empty, not an error
    empty = predict(model, frame, {"lat": np.array([]), "lon": [0.0]}, chunks=2).compute()
    assert empty["t2m_mean"].shape == (0, 1)


def test_forecast_time_selections(forecaster):
    data = grid_dataset(nt=5, ny=6, nx=7, nan_fraction=0.1)
    window = predict(forecaster, data, grid(3, 3), time=slice(data.time.values[2], None))
    assert window["t2m_mean"].dims == ("init_time", "lat", "lon")
    np.testing.assert_array_equal(window.init_time.values, data.time.values[2:])
    with pytest.raises(CoordinateError, match="not in the data"):
        predict(forecaster, data, grid(3, 3), time="2019-03-01T03")
    with pytest.raises(EmptyDataError, match="no time of the data"):
        predict(forecaster, data, grid(3, 3), time=slice("2020-01-01", "2020-02-01"))


def test_bad_target_arguments_raise_config_errors(model, data):
    frame = data.isel(time=0)
    for chunks in (0, -2, {"lat": 0}, {"lat": -5}, {"lat": "many"}, {"lat": 2.5}, {"lat": (1, 1)}):
        with pytest.raises(ConfigError, match="chunk"):
            predict(model, frame, grid(3, 3), chunks=chunks)
    assert predict(model, frame, grid(3, 3), chunks={"lat": (1, 2)})["t2m_mean"].chunks
    with pytest.raises(ConfigError, match="equal length"):
        predict(model, frame, {"lat": ("site", [50.0, 51.0]), "lon": ("site", [0.0, 1.0, 2.0])})
    with pytest.raises(ConfigError, match="from_dataframe"):
        predict(model, frame, pd.DataFrame({"lat": [51.0], "lon": [0.0]}))


def test_projected_predictions_name_their_grid_mapping(model, data):
    # as the template's variables do: CF tools (and xnp) find the projection of x/y
    projected = projected_dataset()
    for out in (predict(model, data.isel(time=0), projected),
                predict(model, data.isel(time=0), projected, chunks={"x": 2})):  # fmt: skip
        assert out["t2m_mean"].attrs["grid_mapping"] == "crs"
        assert out["t2m_std"].attrs["grid_mapping"] == "crs"
        assert "grid_mapping_name" in out["crs"].attrs
    assert "grid_mapping" not in predict(model, data.isel(time=0), grid(2, 2))["t2m_mean"].attrs


def test_multivariate_context_without_joint_observations_says_why(data):
    both = data.assign(u=(data.t2m * 0.1).assign_attrs(units="m s-1"))
    two = NeuralProcess.init(BSATNPConfig.tiny(q_chunk=64, k_chunk=64, dim_y=2),
                             Normaliser.fit(both, ["t2m", "u"]), ["t2m", "u"])  # fmt: skip
    frame = both.isel(time=0).assign(u=lambda d: d.u * np.nan)  # t2m observed, u nowhere
    with pytest.raises(EmptyDataError, match=r"all of the model's variables.*'u': 0"):
        predict(two, frame, grid(3, 3))
