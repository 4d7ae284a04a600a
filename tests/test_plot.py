import sys

import numpy as np
import pytest
import xarray as xr
from strategies import curvilinear_dataset, grid_dataset, station_dataset

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")

from matplotlib.figure import Figure  # noqa: E402

from xnp import plot  # noqa: E402
from xnp.data.flatten import predictions_to_xarray, to_points  # noqa: E402
from xnp.data.normalise import Normaliser, Stats  # noqa: E402
from xnp.errors import DimensionError, VariableNotFoundError, XnpError  # noqa: E402
from xnp.history import history_dataset  # noqa: E402
from xnp.models.build import params_template  # noqa: E402
from xnp.models.config import BSATNPConfig  # noqa: E402
from xnp.neural_process import NeuralProcess  # noqa: E402
from xnp.plot import (  # noqa: E402
    MissingDependencyError,
    plot_history,
    plot_prediction,
    plot_stations,
)
from xnp.testing import ComputeCounter  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"


def render(fig, path):
    fig.savefig(path, dpi=40)
    assert path.read_bytes()[:8] == PNG
    return fig


def titles(fig):
    return [ax.get_title() for ax in fig.axes if ax.get_title()]


def colorbar_labels(fig):
    return [ax.get_ylabel() for ax in fig.axes if ax.get_label() == "<colorbar>"]


def fake_prediction(template, time):
    """What ``predict`` returns at the points of ``template`` (smooth made-up values)."""
    ps = to_points(template)
    mean = 280.0 + 3.0 * np.sin(np.radians(8 * ps.lat) + np.radians(5 * ps.lon))
    std = 0.5 + 0.1 * np.abs(ps.lon)
    attrs = {"t2m": {"units": "K", "long_name": "2 m temperature"}}
    pred = predictions_to_xarray(ps, mean[:, None], std[:, None], ["t2m"], attrs=attrs)
    return pred.assign_coords(time=time)


@pytest.fixture(scope="module")
def obs():
    return grid_dataset(nt=2, ny=6, nx=7, nan_fraction=0.3)


@pytest.fixture(scope="module")
def gridded(obs):
    grid = xr.Dataset(
        coords={"lat": np.linspace(49.5, 54.5, 9), "lon": np.linspace(-3.5, 2.5, 11)}
    )
    return fake_prediction(grid, obs.time.values[1])


@pytest.fixture(scope="module")
def stations(obs):
    targets = station_dataset(n_stations=9).drop_vars("t2m").isel(time=0, drop=True)
    return fake_prediction(targets, obs.time.values[0])


def test_gridded_prediction_with_and_without_context(gridded, obs, tmp_path):
    fig = render(plot_prediction(gridded, coastlines=False), tmp_path / "grid.png")
    assert isinstance(fig, Figure)
    assert titles(fig) == ["Predictive mean", "Predictive standard deviation"]
    assert colorbar_labels(fig) == ["2 m temperature [K]", "standard deviation [K]"]
    assert fig.get_suptitle().startswith("2 m temperature at 2019-03-01 06:00")
    assert fig.axes[0].get_xlabel() == "longitude (°E)"

    # the context has two times: the prediction's own is picked
    fig = render(plot_prediction(gridded, "t2m", context=obs, coastlines=False),
                 tmp_path / "grid-context.png")  # fmt: skip
    n_obs = int(obs.t2m.isel(time=1).count())
    assert titles(fig)[0] == f"Context ({n_obs} observations)"
    assert len(titles(fig)) == 3
    assert len(colorbar_labels(fig)) == 3
    # context and mean share one colour scale
    context_artist = fig.axes[0].collections[0]
    mean_artist = fig.axes[1].collections[0]
    assert context_artist.get_clim() == mean_artist.get_clim()


def test_station_prediction_with_and_without_context(stations, obs, tmp_path):
    fig = render(plot_prediction(stations, coastlines=False), tmp_path / "st.png")
    assert titles(fig) == ["Predictive mean", "Predictive standard deviation"]
    # scattered targets are drawn as points, one per station
    assert fig.axes[0].collections[0].get_offsets().shape == (9, 2)
    context = station_dataset(n_stations=5, nt=1).isel(time=0)
    fig = render(plot_prediction(stations, context=context["t2m"], coastlines=False),
                 tmp_path / "st-context.png")  # fmt: skip
    assert titles(fig)[0] == "Context (5 observations)"


def test_curvilinear_and_several_times(tmp_path):
    curvi = curvilinear_dataset()
    pred = xr.Dataset(
        {"sst_mean": (("y", "x"), curvi.sst.values, {"units": "degC"}),
         "sst_std": (("y", "x"), np.ones((4, 5)), {"units": "degC"})},
        coords=curvi.coords,
    )  # fmt: skip
    render(plot_prediction(pred, coastlines=False), tmp_path / "curvi.png")

    times = np.array(["2020-01-01T00", "2020-01-01T06"], dtype="datetime64[ns]")
    both = xr.concat([pred, pred + 1], dim=xr.DataArray(times, dims="time", name="time"))
    with pytest.raises(DimensionError, match="2 times; choose one with time="):
        plot_prediction(both, coastlines=False)
    fig = plot_prediction(both, time="2020-01-01T06", coastlines=False)
    assert fig.get_suptitle().endswith("2020-01-01 06:00")
    with pytest.raises(XnpError, match="not among"):
        plot_prediction(both, time="2021-01-01", coastlines=False)


def test_clear_errors(gridded, obs, monkeypatch):
    with pytest.raises(VariableNotFoundError, match="no u10_mean"):
        plot_prediction(gridded, "u10")
    with pytest.raises(VariableNotFoundError, match="context has no variable 't2m'"):
        plot_prediction(gridded, context=obs.rename(t2m="temp"), coastlines=False)
    with pytest.raises(XnpError, match="Dataset that predict returns"):
        plot_prediction(gridded["t2m_mean"])
    member = gridded.expand_dims(member=2)
    with pytest.raises(DimensionError, match=r"\['member'\]"):
        plot_prediction(member, coastlines=False)


def test_missing_matplotlib_names_the_extra(gridded, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'xnp\[plot\]'") as info:
        plot_prediction(gridded, coastlines=False)
    assert isinstance(info.value, ImportError)
    assert isinstance(info.value, XnpError)


def test_coastlines_need_cartopy(gridded, monkeypatch):
    monkeypatch.setitem(sys.modules, "cartopy", None)
    monkeypatch.setitem(sys.modules, "cartopy.crs", None)
    with pytest.raises(MissingDependencyError, match="needs cartopy"):
        plot_prediction(gridded, coastlines=True)
    # by default, without cartopy, plain longitude/latitude axes
    fig = plot_prediction(gridded)
    assert fig.axes[0].get_xlabel() == "longitude (°E)"


def test_plot_stations(tmp_path):
    data = station_dataset(n_stations=8, nt=3)
    fig = render(plot_stations(data, coastlines=False), tmp_path / "stations.png")
    assert titles(fig) == ["t2m: 8 stations (mean over 3 times)"]
    assert colorbar_labels(fig) == ["t2m [K]"]
    fig = plot_stations(data["t2m"], time=data.time.values[1], coastlines=False)
    assert titles(fig) == ["t2m: 8 stations at 2019-03-01 06:00"]
    with pytest.raises(VariableNotFoundError, match="no variable 'u10'"):
        plot_stations(data, "u10")


def test_plot_history_delegates_to_the_model(tmp_path):
    history = history_dataset(
        {"step": [10, 20], "train_nll": [1.0, 0.5], "val_nll": [1.1, 0.7],
         "val_coverage": [0.9, 0.95], "learning_rate": [1e-3, 1e-3],
         "steps_per_second": [5.0, 5.0], "val_rmse": [[2.0], [1.5]]},
        ["t2m"], ["K"],
    )  # fmt: skip
    normaliser = Normaliser({"t2m": Stats(280.0, 5.0, "K")})
    config = BSATNPConfig.tiny()  # parameter shapes suffice: the plot reads the history
    trained = NeuralProcess(config, params_template(config), normaliser=normaliser,
                            variables=["t2m"], history=history)  # fmt: skip
    fig = render(plot_history(trained), tmp_path / "history.png")
    (ax,) = fig.axes
    assert [line.get_label() for line in ax.lines] == ["train_nll", "val_nll"]
    assert ax.get_xlabel() == "step"
    fig = plot_history(trained, metrics=["val_rmse"])
    assert [line.get_label() for line in fig.axes[0].lines] == ["val_rmse"]


def test_history_of_several_variables_keeps_each_ones_units(tmp_path):
    history = history_dataset(
        {"step": [10, 20], "train_nll": [1.0, 0.5], "val_nll": [1.1, 0.7],
         "val_coverage": [0.9, 0.95], "learning_rate": [1e-3, 1e-3],
         "steps_per_second": [5.0, 5.0], "val_rmse": [[2.0, 0.5], [1.5, 0.4]]},
        ["t2m", "u10"], ["K", None],
    )  # fmt: skip
    assert history.val_rmse.dims == ("step", "variable")
    assert history.val_rmse.sel(variable="t2m")["units"].item() == "K"
    assert history.val_rmse.sel(variable="u10")["units"].item() == ""
    normaliser = Normaliser({"t2m": Stats(280.0, 5.0, "K"), "u10": Stats(0.0, 3.0)})
    config = BSATNPConfig.tiny(dim_y=2)
    trained = NeuralProcess(config, params_template(config), normaliser=normaliser,
                            variables=["t2m", "u10"], history=history)  # fmt: skip
    fig = render(plot_history(trained, metrics=["val_rmse"]), tmp_path / "rmse.png")
    labels = [line.get_label() for line in fig.axes[0].lines]
    assert labels == ["val_rmse t2m (K)", "val_rmse u10"]


def test_plot_calibration_is_one_function_in_plot(gridded, tmp_path):
    # the implementation moved from xnp.scoring.evaluation to xnp.plot.diagnostics:
    # there is no wrapper left to delegate, so check that there is one function
    diagnostics = pytest.importorskip("xnp.plot.diagnostics")
    evaluation = pytest.importorskip("xnp.scoring.evaluation")
    assert plot.plot_calibration is diagnostics.plot_calibration
    assert not hasattr(evaluation, "plot_calibration")

    truth = gridded["t2m_mean"].rename("t2m").to_dataset()
    hist_ax, _ = plot.plot_calibration(gridded, truth, bins=5)
    render(hist_ax.figure, tmp_path / "calibration.png")
    import matplotlib.pyplot as plt

    plt.close(hist_ax.figure)


def test_a_grid_of_one_row_draws_its_points(obs, tmp_path):
    row = xr.Dataset(coords={"lat": [50.0], "lon": np.linspace(-3.0, 2.0, 6)})
    fig = render(plot_prediction(fake_prediction(row, obs.time.values[0]), coastlines=False),
                 tmp_path / "row.png")  # fmt: skip
    assert len(fig.axes[0].collections[0].get_offsets()) == 6  # not an empty mesh


def test_a_lazy_prediction_is_computed_once(gridded, tmp_path):
    import dask

    counter = ComputeCounter()
    lazy = gridded.chunk({"lat": 3})
    with dask.config.set(scheduler=counter):
        render(plot_prediction(lazy, coastlines=False), tmp_path / "lazy.png")
    assert counter.calls == 1


@pytest.mark.parametrize("convention", ["-180..180", "0..360"])
def test_a_region_across_the_antimeridian_is_one_map(convention, tmp_path):
    lon = np.arange(170.0, 195.0, 2.5)  # Fiji: 170°E to 165°W
    lon = (lon + 180.0) % 360.0 - 180.0 if convention == "-180..180" else lon
    grid = xr.Dataset(coords={"lat": np.linspace(-25.0, -10.0, 7), "lon": lon})
    pred = fake_prediction(grid, np.datetime64("2020-01-01"))
    context = xr.Dataset(
        {"t2m": ("station", [290.0, 291.0, 292.0], {"units": "K"})},
        coords={"lat": ("station", [-18.0, -17.0, -20.0]),
                "lon": ("station", [178.4, -179.9, -175.2])},
    )  # fmt: skip
    fig = render(plot_prediction(pred, context=context, coastlines=False), tmp_path / "fiji.png")
    for ax in [a for a in fig.axes if a.get_label() != "<colorbar>"]:
        lo, hi = ax.get_xlim()
        assert 160.0 < lo < 170.0
        assert 192.5 < hi < 200.0
    # tick labels in the usual −180…180 convention
    labels = fig.axes[0].xaxis.get_major_formatter()
    assert [labels(x, None) for x in (175.0, 180.0, 190.0)] == ["175", "-180", "-170"]
    context_dots = fig.axes[0].collections[0].get_offsets()
    np.testing.assert_allclose(context_dots[:, 0], [178.4, 180.1, 184.8])
    mesh = fig.axes[2].collections[0]  # the mean panel (after context and its colorbar)
    assert np.all(np.diff(mesh.get_coordinates()[0, :, 0]) > 0)
    # stations across the antimeridian too; a region away from it keeps −180…180
    fig = plot_stations(context, coastlines=False)
    lo, hi = fig.axes[0].get_xlim()
    assert 170.0 < lo < 178.4
    assert 184.8 < hi < 190.0
    # points over more than half the globe keep the usual frame
    spread = context.isel(station=[0, 1, 2, 0, 1, 2, 0])
    spread = spread.assign_coords(
        lon=("station", [-160.0, -100.0, -50.0, 0.0, 50.0, 100.0, 150.0])
    )
    lo, hi = plot_stations(spread, coastlines=False).axes[0].get_xlim()
    assert -180.0 <= lo < -160.0
    assert 150.0 < hi <= 180.0
    west = context.assign_coords(lon=("station", [-10.0, -5.0, 1.0]))
    lo, hi = plot_stations(west, coastlines=False).axes[0].get_xlim()
    assert -12.0 < lo < -10.0
    assert 1.0 < hi < 3.0


def test_layouts_times_and_inputs_as_users_give_them(tmp_path):
    from strategies import projected_dataset

    from xnp.errors import ConfigError, CoordinateError

    # a curvilinear grid of one row draws points, not an empty mesh
    j, i = np.meshgrid(np.arange(1.0), np.arange(5.0), indexing="ij")
    row = xr.Dataset(
        {
            "t_mean": (("y", "x"), np.arange(5.0).reshape(1, 5)),
            "t_std": (("y", "x"), np.ones((1, 5))),
        },
        coords={"nav_lat": (("y", "x"), 40 + j + 0.1 * i), "nav_lon": (("y", "x"), 350 + i + j)},
    )
    fig = render(plot_prediction(row, coastlines=False), tmp_path / "row.png")
    assert len(fig.axes[0].collections[0].get_offsets()) == 5
    # a grid mapping, or lat/lon of a table, kept as data variables
    render(plot_stations(projected_dataset(), "t2m", coastlines=False), tmp_path / "bng.png")
    table = xr.Dataset(
        {"lat": ("row", [50.0, 51.0]), "lon": ("row", [0.0, 1.0]), "t2m": ("row", [280.0, 281.0])}
    )
    fig = render(plot_stations(table, coastlines=False), tmp_path / "table.png")
    assert fig.axes[0].collections[0].get_array().tolist() == [280.0, 281.0]
    # grids get the same coordinate checks as stations
    bad = xr.Dataset(
        {"t_mean": (("lat", "lon"), np.ones((2, 2))), "t_std": (("lat", "lon"), np.ones((2, 2)))},
        coords={"lat": [100.0, 120.0], "lon": [0.0, 1.0]},
    )
    with pytest.raises(CoordinateError, match="outside"):
        plot_prediction(bad, coastlines=False)
    # time= must be the time of a single-time prediction, and the context follows it
    t = np.array(["2020-01-01T00", "2020-01-02T00"], "datetime64[ns]")
    pred = xr.Dataset(
        {
            "t_mean": (("lat", "lon"), np.full((3, 4), 10.0)),
            "t_std": (("lat", "lon"), np.ones((3, 4))),
        },
        coords={"time": t[1], "lat": [50.0, 51.0, 52.0], "lon": [0.0, 1.0, 2.0, 3.0]},
    )
    context = xr.Dataset(
        {"t": (("time", "station"), [[1.0, 2.0], [30.0, 40.0]])},
        coords={"time": t, "lat": ("station", [50.0, 51.0]), "lon": ("station", [1.0, 2.0])},
    )
    with pytest.raises(CoordinateError, match="is at 2020-01-02"):
        plot_prediction(pred, context=context, time="2020-01-01T00", coastlines=False)
    fig = plot_prediction(pred, context=context, time="2020-01-02", coastlines=False)
    assert fig.axes[0].collections[0].get_array().tolist() == [30.0, 40.0]
    with pytest.raises(CoordinateError, match="has no time"):
        plot_prediction(pred.drop_vars("time"), time="1999-01-01", coastlines=False)
    with pytest.raises(ConfigError, match="Dataset or DataArray"):
        plot_stations(np.zeros(3))


def test_plot_stations_does_not_ignore_time():
    from xnp.errors import CoordinateError

    data = station_dataset(n_stations=4, nt=2)
    at_one = data.isel(time=1)  # a scalar time coordinate: 2019-03-01 06:00
    with pytest.raises(CoordinateError, match="was asked for, but the data is at 2019-03-01"):
        plot_stations(at_one, time="2020-01-01", coastlines=False)
    with pytest.raises(CoordinateError, match="the data has no time"):
        plot_stations(at_one.drop_vars("time"), time="2020-01-01", coastlines=False)
    fig = plot_stations(at_one, time="2019-03-01T06", coastlines=False)
    assert titles(fig) == ["t2m: 4 stations at 2019-03-01 06:00"]


def test_a_time_of_a_cftime_axis_selects_one_map():
    from xnp.errors import CoordinateError

    # a date string selects a slice of length 1 on a cftime axis, not one time
    times = xr.date_range("2000-01-01", periods=2, freq="6h", calendar="noleap", use_cftime=True)
    obs = grid_dataset(nt=2, ny=3, nx=4).assign_coords(time=times)
    pred = xr.Dataset({"t2m_mean": obs.t2m, "t2m_std": obs.t2m * 0.0 + 1.0})
    fig = plot_prediction(pred, time="2000-01-01T06", context=obs, coastlines=False)
    assert fig.get_suptitle().endswith("at 2000-01-01 06:00:00")
    assert len(fig.axes[0].collections[0].get_offsets()) == 12  # the context at that time
    fig = plot_stations(obs, time="2000-01-01T06", coastlines=False)
    assert titles(fig) == ["t2m: 12 stations at 2000-01-01 06:00:00"]
    with pytest.raises(CoordinateError, match="not among the 2 times"):
        plot_prediction(pred, time=slice("2001-01-01", "2001-02-01"), coastlines=False)


def test_a_polar_grid_is_not_smeared_across_the_map():
    # a polar stereographic grid: its longitudes go round the pole (no seamless window)
    x = np.linspace(-1500e3, 1500e3, 6)
    xx, yy = np.meshgrid(x, x)
    lat = 90.0 - np.degrees(np.hypot(xx, yy) / 6371e3)
    lon = np.degrees(np.arctan2(yy, xx))
    pred = xr.Dataset(
        {"v_mean": (("y", "x"), lat), "v_std": (("y", "x"), np.ones_like(lat))},
        coords={"lat": (("y", "x"), lat), "lon": (("y", "x"), lon)},
    )
    fig = plot_prediction(pred, coastlines=False)  # (matplotlib warned of the seam: an error)
    dots = fig.axes[0].collections[0].get_offsets()  # one dot per point, not a mesh
    np.testing.assert_allclose(np.sort(dots[:, 1]), np.sort(lat.ravel()))
    # a curvilinear grid away from the seam stays a mesh
    curvi = curvilinear_dataset()
    pred = xr.Dataset({"sst_mean": curvi.sst, "sst_std": curvi.sst * 0.0 + 1.0})
    fig = plot_prediction(pred, coastlines=False)
    assert type(fig.axes[0].collections[0]).__name__ == "QuadMesh"
