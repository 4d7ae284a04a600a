import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import xnp
import xnp.api.predict
from xnp.cli import format_table, main
from xnp.cli.defaults import DEMO_START
from xnp.cli.options import parse_chunks
from xnp.errors import XnpError
from xnp.storage import write_dataset

PNG = b"\x89PNG\r\n\x1a\n"
COMMANDS = ("demo", "fit", "predict", "evaluate", "calibrate", "place")


def run(capsys, *argv):
    """Run ``xnp argv`` in-process; return the exit status, stdout and stderr."""
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def printed_paths(out):
    """The ``name: path`` lines the commands print."""
    return dict(line.split(":", 1) for line in out.splitlines() if ":" in line)


def open_zarr(path):
    # as a user opens it: a store that is not consolidated warns, and warnings fail tests
    return xr.open_zarr(path)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A tiny gridded dataset with time, written to netCDF, and a target grid."""
    root = tmp_path_factory.mktemp("cli")
    data = xnp.datasets.gp_sphere(n_lat=6, n_lon=12, n_time=6, lat_range=(30.0, 60.0),
                                  lon_range=(-20.0, 40.0), seed=3)  # fmt: skip
    data.to_netcdf(root / "data.nc")
    grid = xr.Dataset(coords={"lat": np.linspace(32.0, 58.0, 5), "lon": np.linspace(-15, 35, 6)})
    grid.to_netcdf(root / "grid.nc")
    return root


@pytest.fixture(scope="module")
def fitted(files):
    # an odd batch size trains on one device: no cross-device collectives in tests;
    # no validation: the demo test covers it, and each compiled step costs seconds;
    # the model's name is spelt oddly on purpose (names ignore case and _ vs -)
    status = main(["fit", str(files / "data.nc"), "field", "--out", str(files / "model"),
                   "--model", "BSA_TNP-tiny", "--steps", "2", "--batch-size", "3",
                   "--max-points", "32", "--validation", "0", "--no-progress",
                   "--quiet"])  # fmt: skip
    assert status == 0
    return files / "model"


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_of_every_command(capsys, command):
    status, out, _ = run(capsys, *([command] if command else []), "--help")
    assert status == 0
    assert "exit status:" in out
    assert "--quiet" in out
    if command == "predict":
        for option in ("--time", "--context-radius", "--chunks", "--memory-budget", "--format"):
            assert option in out
        assert "(default: 1GiB)" in out
        assert "name of a pretrained model" in out
    if command == "fit":
        assert "(default: 2000," in out
        assert "bsa-tnp-tiny" in out


def test_python_dash_m_xnp():
    done = subprocess.run([sys.executable, "-m", "xnp", "--help"], capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert all(c in done.stdout for c in COMMANDS)


def test_version(capsys):
    status, out, _ = run(capsys, "--version")
    assert status == 0
    assert out.strip() == f"xnp {xnp.__version__}"


def test_demo_writes_model_prediction_and_plot(capsys, tmp_path):
    status, out, err = run(capsys, "demo", "--out", tmp_path / "demo", "--steps", "2",
                           "--resolution", "30", "--context-points", "40",
                           "--no-progress")  # fmt: skip
    assert status == 0, err
    paths = {k: v.strip() for k, v in printed_paths(out).items()}
    assert set(paths) == {"model", "prediction", "plot"}
    assert xnp.load(paths["model"]).variables == ("field",)
    pred = open_zarr(paths["prediction"])
    assert pred["field_mean"].dims == ("lat", "lon")
    assert pred["field_std"].attrs["units"] == "K"
    assert np.isfinite(pred["field_mean"].values).all()
    assert (pred["field_std"].values > 0).all()
    assert "time" in pred.coords  # the held-out time the context was taken from
    with open(paths["plot"], "rb") as fh:
        assert fh.read(8) == PNG
    assert f"xnp: fine-tuning the pretrained {DEMO_START!r} model for 2 steps" in err
    assert "held-out field: RMSE" in err
    assert f"the pretrained {DEMO_START} model zero-shot: RMSE" in err
    assert "fine-tuning changed the held-out RMSE by" in err
    assert xnp.load(paths["model"]).training["fine_tuned_from"]["from"] == DEMO_START


@pytest.mark.slow
def test_demo_from_scratch(capsys, tmp_path):
    status, _, err = run(capsys, "demo", "--out", tmp_path / "demo", "--steps", "2",
                         "--resolution", "30", "--context-points", "40", "--from-scratch",
                         "--no-progress", "--format", "netcdf")  # fmt: skip
    assert status == 0, err
    assert "xnp: fitting bsa-tnp-tiny from scratch for 2 steps" in err
    assert "fine-tuning" not in err


def test_demo_with_the_pretrained_model_fits_nothing(capsys, tmp_path):
    status, out, err = run(capsys, "demo", "--out", tmp_path / "demo", "--pretrained",
                           "gp-sphere", "--resolution", "30", "--context-points", "40",
                           "--no-progress", "--format", "netcdf")  # fmt: skip
    assert status == 0, err
    assert "xnp: fitting" not in err
    assert "pretrained 'gp-sphere' model zero-shot" in err
    paths = {k: v.strip() for k, v in printed_paths(out).items()}
    assert xnp.load(paths["model"]).normalise == "context"
    with xr.open_dataset(paths["prediction"]) as pred:
        assert np.isfinite(pred["field_mean"].values).all()
    # --model takes that saved zero-shot model (it predicts "field" though saved as "value")
    status, out, err = run(capsys, "demo", "--out", tmp_path / "again", "--model",
                           paths["model"], "--resolution", "30", "--context-points", "40",
                           "--no-progress", "--format", "netcdf", "--quiet")  # fmt: skip
    assert status == 0, err
    assert printed_paths(out)["model"].strip() == paths["model"]
    status, _, err = run(capsys, "demo", "--out", tmp_path / "x", "--pretrained", "gp-sphere",
                         "--model", str(tmp_path))  # fmt: skip
    assert status != 0
    assert "not both" in err


def test_fit_predict_evaluate_round_trip(capsys, files, fitted):
    model = xnp.load(fitted)
    assert model.variables == ("field",)
    assert model.training["steps"] == 2

    # gridded targets from a file, one time, lazy over explicit chunks, to zarr
    status, out, err = run(capsys, "predict", fitted, files / "data.nc", files / "grid.nc",
                           "--out", files / "grid-pred.zarr", "--time", "2000-01-02T00:00",
                           "--chunks", "lat=2,lon=4", "--context-radius", "3000km",
                           "--no-progress")  # fmt: skip
    assert status == 0, err
    pred = open_zarr(files / "grid-pred.zarr")
    assert pred["field_mean"].dims == ("lat", "lon")
    assert pred["field_mean"].encoding["chunks"] == (2, 4)
    assert str(pred.time.values)[:16] == "2000-01-02T00:00"
    assert np.isfinite(pred["field_std"].values).all()

    # gap filling over a time range (default chunks), to netCDF
    status, out, err = run(capsys, "predict", fitted, files / "data.nc", "--out",
                           files / "fill.nc", "--time", "2000-01-01T12:00..2000-01-01T18:00",
                           "--no-progress")  # fmt: skip
    assert status == 0, err
    assert printed_paths(out)["prediction"].strip() == str(files / "fill.nc")
    with xr.open_dataset(files / "fill.nc") as fill:
        assert fill["field_mean"].sizes == {"time": 2, "lat": 6, "lon": 12}
        assert "xnp_version" in fill.attrs
    assert not list(files.glob(".fill.nc.tmp-*"))  # written atomically: no leftovers

    # an existing output is kept unless --overwrite
    status, _, err = run(capsys, "predict", fitted, files / "data.nc", "--out", files / "fill.nc")
    assert status == 1
    assert "pass --overwrite" in err

    # a thinned context: the seeded subset the Python API takes
    status, _, err = run(capsys, "predict", fitted, files / "data.nc", "--out",
                         files / "thin.nc", "--time", "2000-01-01T12:00", "--max-context", "5",
                         "--seed", "3", "--no-progress")  # fmt: skip
    assert status == 0, err
    with xr.open_dataset(files / "thin.nc") as thin, xr.open_dataset(files / "data.nc") as d:
        want = model.predict(d, time="2000-01-01T12:00", max_context=5, seed=3)
        np.testing.assert_allclose(thin["field_std"].values, want["field_std"].values, rtol=1e-5)
        full = model.predict(d, time="2000-01-01T12:00")
        assert not np.allclose(thin["field_std"].values, full["field_std"].values)

    # the demo on a file, with the saved model, quietly, as netCDF
    status, out, err = run(capsys, "demo", "--data", files / "data.nc", "--variable", "field",
                           "--model", fitted, "--out", files / "demo", "--resolution", "10",
                           "--format", "netcdf", "--quiet")  # fmt: skip
    assert status == 0, err
    assert err == ""
    paths = {k: v.strip() for k, v in printed_paths(out).items()}
    assert paths == {"model": str(fitted), "prediction": str(files / "demo" / "prediction.nc"),
                     "plot": str(files / "demo" / "prediction.png")}  # fmt: skip
    with xr.open_dataset(paths["prediction"]) as regional:  # a grid over the data's region
        assert [regional.lon.values[i] for i in (0, -1)] == [-17.5, 37.5]
        assert [regional.lat.values[i] for i in (0, -1)] == [32.5, 57.5]
        assert np.isfinite(regional["field_mean"].values).all()

    pytest.importorskip("xnp.scoring.evaluation")
    status, out, err = run(capsys, "evaluate", files / "fill.nc", files / "data.nc",
                           "--out", files / "scores.nc")  # fmt: skip
    assert status == 0, err
    assert "field_rmse" in out
    assert "field_crps" in out
    with xr.open_dataset(files / "scores.nc") as scores:
        assert int(scores["field_n"]) == 2 * 6 * 12
    status, out, err = run(capsys, "evaluate", files / "fill.nc", files / "data.nc",
                           "--dim", "lat,lon")  # fmt: skip
    assert status == 0, err
    assert "time" in out.splitlines()[1]  # a table with one row per time


def test_clear_errors_without_traceback(capsys, files, fitted, tmp_path):
    def fails(status_expected, *argv, match):
        status, _, err = run(capsys, *argv)
        assert status == status_expected, err
        assert match in err
        assert "Traceback" not in err
        return err

    err = fails(1, "fit", tmp_path / "missing.nc", "t2m", "--out", tmp_path / "m",
                match="data file not found")  # fmt: skip
    assert err.startswith("xnp: error:")
    assert "missing.nc" in err
    fails(1, "fit", files / "data.nc", "t2m", "--out", tmp_path / "m",
          match="the data has no variable 't2m'; it holds 'field'")  # fmt: skip
    fails(1, "predict", tmp_path / "no-model", files / "data.nc", "--out", tmp_path / "p.nc",
          match="xnp: error:")  # fmt: skip
    (tmp_path / "junk.nc").write_text("not a netCDF file")
    fails(1, "predict", fitted, tmp_path / "junk.nc", "--out", tmp_path / "p.nc",
          match="cannot read the context")  # fmt: skip
    fails(1, "predict", fitted, files / "data.nc", "--out", tmp_path / "p.nc",
          "--chunks", "station=4", match="not dimensions of the targets")  # fmt: skip

    # usage errors: exit status 2
    fails(2, "fit", files / "data.nc", "field", "--out", tmp_path / "m", "--steps", "0",
          match="expected a positive integer")  # fmt: skip
    fails(2, "predict", fitted, files / "data.nc", "--out", tmp_path / "p.nc",
          "--chunks", "lat:4", match="DIM=SIZE")  # fmt: skip
    fails(2, "predict", fitted, files / "data.nc", "--out", tmp_path / "p.txt",
          match="cannot tell the output format")  # fmt: skip
    fails(2, "fit", files / "data.nc", "field", "--out", tmp_path / "m", "--resume",
          match="--resume needs --checkpoint-dir")  # fmt: skip
    fails(2, "demo", "--data", files / "data.nc", "--out", tmp_path / "d",
          match="--data needs --variable")  # fmt: skip
    fails(2, "frobnicate", match="invalid choice")
    fails(2, "fit", files / "data.nc", "field", "--out", tmp_path / "m", "--baseline",
          "persistence", match="add --tasks forecast")  # fmt: skip
    fails(2, "fit", files / "data.nc", "field", "--out", tmp_path / "m", "--baseline-input",
          match="add --tasks forecast")  # fmt: skip
    fails(2, "fit", files / "data.nc", "field", "--out", tmp_path / "m", "--tasks", "forecast",
          "--time-budget", "soon", match="duration")  # fmt: skip
    fails(2, "fit", files / "data.nc", "field", "--out", tmp_path / "m", "--tasks", "forecast",
          "--lead", "6,-6", match="positive number")  # fmt: skip
    fails(2, "predict", fitted, files / "data.nc", "--out", tmp_path / "p.nc",
          "--memory-budget", "lots", match="memory size")  # fmt: skip
    fails(2, "predict", fitted, files / "data.nc", "--out", tmp_path / "p.nc",
          "--context-radius", "far", match="distance")  # fmt: skip
    # a directory that is not a zarr store is never replaced, checked before any work
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    fails(1, "predict", fitted, files / "data.nc", "--out", tmp_path / "mine", "--format",
          "zarr", "--overwrite", match="refusing to replace")  # fmt: skip
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"
    assert not (tmp_path / "m").exists()


def test_fit_a_forecast_of_changes_for_several_leads(capsys, tmp_path):
    data = xnp.datasets.gp_sphere(n_lat=4, n_lon=6, n_time=16, seed=4)
    data.to_netcdf(tmp_path / "series.nc")
    status, _, err = run(capsys, "fit", tmp_path / "series.nc", "field", "--out", tmp_path / "m",
                         "--model", "bsa-tnp-tiny", "--tasks", "forecast", "--lead", "12,6",
                         "--baseline", "autoregressive", "--baseline-input", "--steps", "2",
                         "--batch-size", "3", "--validation", "0", "--ema", "0.9",
                         "--loss", "crps", "--no-progress", "--quiet")  # fmt: skip
    assert status == 0, err
    model = xnp.load(tmp_path / "m")
    assert model.training["train_config"]["loss"] == "crps"
    assert np.isfinite(model.history_["train_crps"].values).all()
    assert model.task.baseline_input
    assert model.config.dim_x == 1
    assert model.training["train_config"]["ema"] == 0.9
    assert model.task.leads == (6.0, 12.0)
    assert model.baseline.kind == "autoregressive"
    assert model.baseline.leads.tolist() == [6.0, 12.0]
    assert model.baseline.coef.shape[:2] == (2, model.baseline.hours.size)


def test_forecast_tasks_keep_the_datas_default_baseline_unless_told():
    import argparse

    from xnp.api.sizes import default_tasks
    from xnp.cli.fit_command import forecast_tasks

    data = xnp.datasets.gp_sphere(n_lat=4, n_lon=6, n_time=16, seed=4)
    default = default_tasks(data, "field", 0.1).baseline
    assert default is not None

    def tasks(baseline):
        args = argparse.Namespace(tasks="forecast", lead=None, baseline=baseline)
        return forecast_tasks(args, data, "field", 0.1)

    assert tasks(None).baseline == default
    assert tasks("none").baseline is None
    assert tasks("autoregressive").baseline == "autoregressive"


def test_debug_shows_the_traceback(tmp_path):
    with pytest.raises(FileNotFoundError):
        main(["--debug", "fit", str(tmp_path / "missing.nc"), "v", "--out", str(tmp_path / "m")])


def test_write_dataset_replaces_atomically(tmp_path):
    ds = xr.Dataset({"a": ("x", np.arange(4.0))}).chunk(x=2)
    path = write_dataset(ds, tmp_path / "a.zarr")
    with pytest.raises(FileExistsError):
        write_dataset(ds, path)
    write_dataset(ds + 1, path, overwrite=True)
    assert open_zarr(path).a.values.tolist() == [1.0, 2.0, 3.0, 4.0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.zarr"]
    # a zarr v2 store (as older tools write) is a store too
    ds.to_zarr(tmp_path / "v2.zarr", zarr_format=2, consolidated=False)
    write_dataset(ds * 3, tmp_path / "v2.zarr", overwrite=True)
    assert open_zarr(tmp_path / "v2.zarr").a.values.tolist() == [0.0, 3.0, 6.0, 9.0]


def test_format_table_and_chunks():
    scores = xr.Dataset(
        {"t2m_rmse": ("time", [1.0, 2.5], {"units": "K"}), "t2m_n": ((), 10)},
        coords={"time": [0, 1]},
    )
    lines = format_table(scores).splitlines()
    assert lines[0] == "t2m_n  10"
    assert lines[2].split() == ["t2m_rmse"]
    assert lines[4].split() == ["0", "1"]
    assert parse_chunks("lat=8") == {"lat": 8}


def test_validation_option_takes_a_fraction_or_dates(capsys):
    from xnp.cli.options import parse_validation

    assert parse_validation("0.2") == 0.2
    assert parse_validation("2019-03-17/2019-03-18") == slice("2019-03-17", "2019-03-18")
    assert parse_validation("2019-03-17/") == slice("2019-03-17", None)
    assert parse_validation("2019-03-20") == "2019-03-20"
    assert parse_validation("2019") == "2019"  # a year, not a fraction
    for bad in ("1.5", "a/b/c", "/"):
        assert main(["fit", "data.nc", "t2m", "--validation", bad]) == 2
        assert "argument --validation: expected a" in capsys.readouterr().err


def test_fit_and_predict_with_a_context_source(capsys, files, tmp_path):
    data = xr.open_dataset(files / "data.nc")
    sites = {"lat": xr.DataArray([1, 2, 4], dims="station"),
             "lon": xr.DataArray([0, 5, 9], dims="station")}  # fmt: skip
    data.isel(sites).to_netcdf(tmp_path / "stations.nc")
    source = f"stations={tmp_path / 'stations.nc'}"
    status, _, err = run(capsys, "fit", files / "data.nc", "field", "--out", tmp_path / "m",
                         "--model", "bsa-tnp-tiny", "--steps", "2", "--batch-size", "3",
                         "--max-points", "32", "--validation", "0", "--tasks", "spatial",
                         "--context-source", source, "--no-progress")  # fmt: skip
    assert status == 0, err
    assert xnp.load(tmp_path / "m").sources == ("data", "stations")
    status, out, err = run(capsys, "predict", tmp_path / "m", files / "data.nc",
                           files / "grid.nc", "--time", "2000-01-01T06", "--out",
                           tmp_path / "p.nc", "--context-source", source)  # fmt: skip
    assert status == 0, err
    with xr.open_dataset(printed_paths(out)["prediction"].strip()) as pred:
        assert np.isfinite(pred["field_mean"].values).all()
    buoys = f"buoys={files / 'data.nc'}"
    status, _, err = run(capsys, "predict", tmp_path / "m", files / "data.nc", "--out",
                         tmp_path / "q.nc", "--context-source", buoys)  # fmt: skip
    assert status != 0
    assert "unknown context source 'buoys'" in err


def test_predict_one_variable_of_a_station_table(capsys, files, tmp_path):
    # latitude/longitude as data variables (a table from pandas): --variable keeps them
    rng = np.random.default_rng(0)
    table = pd.DataFrame({
        "latitude": rng.uniform(35, 55, 40), "longitude": rng.uniform(-10, 30, 40),
        "t2m": 280 + rng.normal(size=40), "rh": rng.uniform(0, 1, 40),
    })  # fmt: skip
    ds = table.to_xarray()
    ds["t2m"].attrs["units"] = "K"
    ds.to_netcdf(tmp_path / "table.nc")
    status, _, err = run(capsys, "predict", "gp-sphere", tmp_path / "table.nc",
                         files / "grid.nc", "--variable", "t2m", "--out", tmp_path / "p.nc",
                         "--no-progress")  # fmt: skip
    assert status == 0, err
    with xr.open_dataset(tmp_path / "p.nc") as pred:
        assert pred["t2m_mean"].dims == ("lat", "lon")
        assert np.isfinite(pred["t2m_mean"].values).all()


def test_predict_with_a_pretrained_model_zero_shot(capsys, files, tmp_path, monkeypatch):
    # saved (as `xnp demo --pretrained` does): the zero-shot model predicts the context's
    # one variable ("field"), whatever the name of the variable it was saved with ("value")
    xnp.pretrained("gp-sphere").save(tmp_path / "zero-shot")
    status, out, err = run(capsys, "predict", tmp_path / "zero-shot", files / "data.nc",
                           "--time", "2000-01-01T06", "--out", tmp_path / "q.nc",
                           "--no-progress")  # fmt: skip
    assert status == 0, err
    with xr.open_dataset(tmp_path / "q.nc") as pred:
        assert pred["field_std"].sizes == {"lat": 6, "lon": 12}
    # by name
    status, out, err = run(capsys, "predict", "gp-sphere", files / "data.nc", files / "grid.nc",
                           "--time", "2000-01-01T06", "--out", tmp_path / "p.nc",
                           "--no-progress")  # fmt: skip
    assert status == 0, err
    assert "pretrained 'gp-sphere'" in err
    with xr.open_dataset(printed_paths(out)["prediction"].strip()) as pred:
        assert pred["field_mean"].dims == ("lat", "lon")
        assert np.isfinite(pred["field_mean"].values).all()
    # with the context's linear trend
    status, out, err = run(capsys, "predict", "gp-sphere", files / "data.nc", files / "grid.nc",
                           "--time", "2000-01-01T06", "--trend", "linear", "--out",
                           tmp_path / "t.nc", "--no-progress")  # fmt: skip
    assert status == 0, err
    with xr.open_dataset(tmp_path / "t.nc") as pred:
        assert pred.attrs["xnp_trend"].startswith("linear")
        assert np.isfinite(pred["field_mean"].values).all()
    # calibrated on the context: the same numbers as the Python API's
    status, out, err = run(capsys, "predict", "gp-sphere", files / "data.nc", files / "grid.nc",
                           "--time", "2000-01-01T06", "--calibrate", "--seed", "2", "--out",
                           tmp_path / "c.nc", "--no-progress")  # fmt: skip
    assert status == 0, err
    with xr.open_dataset(tmp_path / "c.nc") as pred, xr.open_dataset(files / "data.nc") as d, \
            xr.open_dataset(files / "grid.nc") as grid:  # fmt: skip
        assert "cross-validation" in pred.attrs["xnp_calibration"]
        want = xnp.predict("gp-sphere", d.field, grid, time="2000-01-01T06", calibrate=True,
                           seed=2)  # fmt: skip
        np.testing.assert_allclose(pred["field_std"], want["field_std"], rtol=1e-5)
    # calibrated by default (a zero-shot model with a trend, 72 observations); not with
    # --no-calibrate
    with xr.open_dataset(tmp_path / "t.nc") as pred:
        assert "xnp_calibration" in pred.attrs
    status, out, err = run(capsys, "predict", "gp-sphere", files / "data.nc", files / "grid.nc",
                           "--time", "2000-01-01T06", "--trend", "linear", "--no-calibrate",
                           "--out", tmp_path / "n.nc", "--no-progress")  # fmt: skip
    assert status == 0, err
    with xr.open_dataset(tmp_path / "n.nc") as pred, xr.open_dataset(files / "data.nc") as d, \
            xr.open_dataset(files / "grid.nc") as grid:  # fmt: skip
        assert "xnp_calibration" not in pred.attrs
        want = xnp.predict("gp-sphere", d.field, grid, time="2000-01-01T06", trend="linear",
                           calibrate=False)  # fmt: skip
        np.testing.assert_allclose(pred["field_std"], want["field_std"], rtol=1e-5)
    # departures from a background (an hourly climatology): the Python API's numbers
    with xr.open_dataset(files / "data.nc") as d:
        d.field.groupby("time.hour").mean().rename("clim").to_netcdf(tmp_path / "clim.nc")
    status, out, err = run(capsys, "predict", "gp-sphere", files / "data.nc", "--time",
                           "2000-01-01T06", "--background", tmp_path / "clim.nc", "--out",
                           tmp_path / "b.nc", "--no-progress")  # fmt: skip
    assert status == 0, err
    with xr.open_dataset(tmp_path / "b.nc") as pred, xr.open_dataset(files / "data.nc") as d, \
            xr.open_dataset(tmp_path / "clim.nc") as clim:  # fmt: skip
        assert "background" in pred.attrs["xnp_background"]
        want = xnp.predict("gp-sphere", d.field, time="2000-01-01T06", background=clim.clim)
        np.testing.assert_allclose(pred["field_mean"], want["field_mean"], rtol=1e-6)
    with xr.open_dataset(files / "data.nc") as d:
        xr.Dataset({"a": d.field.mean("time"), "b": d.field.std("time")}).to_netcdf(
            tmp_path / "two_bg.nc"
        )
    status, _, err = run(capsys, "predict", "gp-sphere", files / "data.nc", "--background",
                         tmp_path / "two_bg.nc", "--out", tmp_path / "bb.nc")  # fmt: skip
    assert status == 1
    assert "--background" in err
    assert "'a', 'b'" in err
    # a path that exists wins over a pretrained model of the same name
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gp-sphere").mkdir()
    status, _, err = run(capsys, "predict", "gp-sphere", files / "data.nc", "--out", "r.nc")
    assert status == 1
    assert "not an xnp model directory" in err
    status, _, err = run(capsys, "predict", "gp-spere", files / "data.nc", "--out", "r.nc")
    assert status == 1
    assert "neither a saved model directory nor a pretrained model" in err
    assert "gp-sphere" in err
    # a file with several variables: choose one with --variable
    with xr.open_dataset(files / "data.nc") as data:
        data.assign(other=data["field"] * 2.0).to_netcdf(tmp_path / "two.nc")
    status, _, err = run(capsys, "predict", tmp_path / "zero-shot", tmp_path / "two.nc",
                         "--time", "2000-01-01T06", "--out", tmp_path / "v.nc")  # fmt: skip
    assert status == 1
    assert "--variable" in err
    status, _, err = run(capsys, "predict", tmp_path / "zero-shot", tmp_path / "two.nc",
                         "--time", "2000-01-01T06", "--variable", "other", "--out",
                         tmp_path / "v.nc", "--no-progress")  # fmt: skip
    assert status == 0, err
    with xr.open_dataset(tmp_path / "v.nc") as pred, xr.open_dataset(tmp_path / "q.nc") as q:
        assert set(pred.data_vars) == {"other_mean", "other_std"}
        np.testing.assert_allclose(pred["other_mean"], 2.0 * q["field_mean"], rtol=1e-4)


@pytest.mark.parametrize(
    ("when", "match"),
    [
        ("2010-01-01", "--time 2010-01-01 is not a time of the context (6 times, "
                       "2000-01-01T00:00:00 .. 2000-01-02T06:00:00)"),
        ("2010-01-01..2010-02-01", "--time 2010-01-01..2010-02-01 selects no time"),
        ("noon..2000-01-02", "cannot select --time noon..2000-01-02 from the context"),
    ],
)  # fmt: skip
def test_a_time_not_in_the_context_is_a_clear_error(capsys, files, fitted, tmp_path, when,
                                                     match):  # fmt: skip
    status, _, err = run(capsys, "predict", fitted, files / "data.nc", "--out",
                         tmp_path / "p.nc", "--time", when)  # fmt: skip
    assert status == 1, err
    assert err.startswith("xnp: error: ")
    assert match in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "p.nc").exists()


def test_any_xnp_error_is_one_line_but_bugs_keep_their_traceback(capsys, files, tmp_path,
                                                                 monkeypatch):  # fmt: skip
    class TimeNotFound(XnpError, KeyError):
        """A KeyError-derived xnp error, which str() would quote."""

    def raise_(error):
        def predict(*args, **kwargs):
            raise error

        return predict

    argv = ("predict", "gp-sphere", files / "data.nc", "--out", tmp_path / "p.nc")
    monkeypatch.setattr(xnp.api.predict, "predict", raise_(TimeNotFound("no time\n'2010'")))
    status, _, err = run(capsys, *argv)
    assert status == 1
    assert err.splitlines()[-1] == "xnp: error: no time '2010'"
    for bug in (KeyError("time"), ValueError("oops"), RuntimeError("bug")):
        monkeypatch.setattr(xnp.api.predict, "predict", raise_(bug))
        with pytest.raises(type(bug)):
            main([str(a) for a in argv])


def test_outputs_are_checked_before_any_work(capsys, files, tmp_path, monkeypatch):
    import importlib

    import xnp.api.fit
    import xnp.api.predict

    def never(*args, **kwargs):
        raise AssertionError("the output should have been refused before this work")

    evaluate = importlib.import_module("xnp.scoring.evaluation")
    for module, name in ((xnp.api.fit, "fit"), (xnp.api.predict, "predict"),
                         (evaluate, "evaluate")):  # fmt: skip
        monkeypatch.setattr(module, name, never)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    (tmp_path / "a-file").write_text("keep")
    data, fit = files / "data.nc", ("--steps", "2", "--no-progress")

    def fails(status_expected, *argv, match):
        status, out, err = run(capsys, *argv)
        assert status == status_expected, err
        assert match in err
        assert out == ""  # nothing computed, nothing printed
        return err

    # fit and demo: a folder that is not a model, or a file in the way
    fails(1, "fit", data, "field", "--out", mine, *fit, match="refusing to replace")
    fails(1, "fit", data, "field", "--out", tmp_path / "a-file" / "m", *fit,
          match="a file is in the way of its folder")  # fmt: skip
    fails(1, "demo", "--out", tmp_path / "a-file", *fit, match="--out is a file")
    for name in ("model", "prediction.zarr"):  # folders of the user's, in the demo's way
        (tmp_path / "demo" / name).mkdir(parents=True)
        (tmp_path / "demo" / name / "notes.txt").write_text("keep")
        fails(1, "demo", "--out", tmp_path / "demo", *fit, match="refusing to replace")
        (tmp_path / "demo" / name).rename(tmp_path / "demo" / f"{name}-kept")
    # predict: a netCDF file cannot replace a folder; the inputs are never replaced
    fails(1, "predict", "gp-sphere", data, "--out", mine, "--format", "netcdf", "--overwrite",
          match="the output is a directory")  # fmt: skip
    fails(1, "predict", "gp-sphere", data, "--out", data, "--overwrite",
          match="is the CONTEXT; xnp never writes over its input data")  # fmt: skip
    # evaluate: --out is checked before the scores are computed and printed
    fails(2, "evaluate", data, data, "--out", tmp_path / "scores.txt",
          match="cannot tell the output format")  # fmt: skip
    fails(1, "evaluate", data, data, "--out", tmp_path / "a-file", "--format", "netcdf",
          match="pass --overwrite")  # fmt: skip
    fails(1, "evaluate", data, data, "--out", data, "--overwrite", match="is the PRED")
    fails(2, "evaluate", data, data, "--format", "zarr", match="--format is the format of --out")
    assert (mine / "notes.txt").read_text() == "keep"
    assert (tmp_path / "a-file").read_text() == "keep"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "demo", "mine"]


def test_targets_may_name_their_coordinates_unlike_the_training_data(capsys, files, fitted,
                                                                     tmp_path):  # fmt: skip
    # fitted on lat/lon; stations with latitude/longitude (as the Texas file has them)
    sites = xr.Dataset(coords={"latitude": ("station", [35.0, 50.0, 55.0]),
                               "longitude": ("station", [0.0, 10.0, 20.0])})  # fmt: skip
    sites.to_netcdf(tmp_path / "sites.nc")
    status, _, err = run(capsys, "predict", fitted, files / "data.nc", tmp_path / "sites.nc",
                         "--time", "2000-01-01T06", "--out", tmp_path / "p.nc",
                         "--no-progress")  # fmt: skip
    assert status == 0, err
    with xr.open_dataset(tmp_path / "p.nc") as pred:
        assert pred["field_mean"].dims == ("station",)
        assert np.isfinite(pred["field_mean"].values).all()


@pytest.mark.filterwarnings("default")  # as for a user: shown, not raised
def test_warnings_are_one_line_messages(capsys, files, tmp_path, monkeypatch):
    import warnings

    from xnp.errors import XnpWarning

    def predict(*args, **kwargs):
        warnings.warn("3 targets lie far\nfrom the context", XnpWarning, stacklevel=2)
        warnings.warn("odd _FillValue", RuntimeWarning, stacklevel=2)
        raise XnpError("stop here")

    monkeypatch.setattr(xnp.api.predict, "predict", predict)
    status, _, err = run(capsys, "predict", "gp-sphere", files / "data.nc", "--out",
                         tmp_path / "p.nc", "--quiet")  # fmt: skip
    assert status == 1
    assert err.splitlines() == [
        "xnp: warning: 3 targets lie far from the context",
        "xnp: warning: RuntimeWarning: odd _FillValue",
        "xnp: error: stop here",
    ]


def test_the_demo_plot_is_written_atomically(tmp_path):
    from xnp.storage import save_figure

    class Interrupted:
        def savefig(self, path, **kwargs):
            with open(path, "wb") as fh:
                fh.write(PNG[:4])  # half an image, then ^C
            raise KeyboardInterrupt

    (tmp_path / "prediction.png").write_bytes(PNG + b"previous")
    with pytest.raises(KeyboardInterrupt):
        save_figure(Interrupted(), tmp_path / "prediction.png")
    assert (tmp_path / "prediction.png").read_bytes() == PNG + b"previous"
    assert [p.name for p in tmp_path.iterdir()] == ["prediction.png"]


def test_the_demo_grid_of_a_region_across_the_antimeridian_is_regional():
    from xnp.cli.demo import demo_grid

    fiji = xr.Dataset(
        {"t": ("station", [290.0, 291.0, 292.0, 293.0])},
        coords={"lat": ("station", [-20.0, -18.0, -16.0, -14.0]),
                "lon": ("station", [170.0, 178.0, -178.0, -170.0])},
    )  # fmt: skip
    lon = demo_grid(fiji, "t", 2.0)["lon"].values
    np.testing.assert_allclose(lon, np.arange(170.0, 191.0, 2.0))  # not 180 global columns
    lon = demo_grid(fiji.assign_coords(lon=("station", [-10.0, -5.0, 0.0, 2.0])), "t", 2.0)
    np.testing.assert_allclose(lon["lon"].values, np.arange(-10.0, 3.0, 2.0))


def test_a_netcdf_file_named_zarr_is_read_back(tmp_path):
    # `xnp predict ... --out p.zarr --format netcdf` writes one; evaluate must read it
    from xnp.storage import open_data

    path = write_dataset(xr.Dataset({"a": ("x", [1.0, 2.0])}), tmp_path / "p.zarr",
                         fmt="netcdf")  # fmt: skip
    assert path.is_file()
    with open_data(path) as ds:
        assert ds.a.values.tolist() == [1.0, 2.0]


def test_options_are_not_silently_ignored(capsys, files, tmp_path, monkeypatch):
    import xnp.api.fit

    def never(*args, **kwargs):
        raise AssertionError("the options should have been refused")

    monkeypatch.setattr(xnp.api.fit, "fit", never)
    status, _, err = run(capsys, "fit", files / "data.nc", "field", "--out", tmp_path / "m",
                         "--tasks", "auto", "--max-points", "64")  # fmt: skip
    assert status == 2
    assert "--max-points caps the points of spatial tasks" in err
    # the model would be saved, after training, over the checkpoints
    status, _, err = run(capsys, "fit", files / "data.nc", "field", "--out", tmp_path / "m",
                         "--checkpoint-dir", tmp_path / "m")  # fmt: skip
    assert status == 2
    assert "--out and --checkpoint-dir must be different folders" in err
    # times to hold out for validation, of data without a time axis
    files_ = tmp_path / "one-time.nc"
    xr.open_dataset(files / "data.nc").isel(time=0, drop=True).to_netcdf(files_)
    status, _, err = run(capsys, "fit", files_, "field", "--out", tmp_path / "m",
                         "--validation", "2000-01-02/")  # fmt: skip
    assert status == 1
    assert "--validation 2000-01-02/ holds out times, but the data has no time axis" in err


def test_fit_an_ensemble_and_predict_with_it(capsys, files, tmp_path):
    out = tmp_path / "ensemble"
    argv = ["fit", files / "data.nc", "field", "--out", out, "--model", "bsa-tnp-tiny",
            "--steps", "2", "--batch-size", "3", "--max-points", "32", "--validation", "0",
            "--members", "2", "--seed", "7", "--no-progress", "--quiet"]  # fmt: skip
    status, _, err = run(capsys, *argv)
    assert status == 0, err
    ensemble = xnp.load(out)
    assert isinstance(ensemble, xnp.Ensemble)
    assert [m.training["seed"] for m in ensemble.members] == [7, 8]
    status, _, err = run(capsys, *argv)  # an ensemble's folder may be replaced
    assert status == 0, err
    status, _, err = run(capsys, "predict", out, files / "data.nc", "--out",
                         tmp_path / "pred.nc", "--time", "2000-01-01T12:00",
                         "--no-progress")  # fmt: skip
    assert status == 0, err
    with xr.open_dataset(tmp_path / "pred.nc") as pred:
        assert "2 members" in pred.attrs["xnp_ensemble"]
        assert np.isfinite(pred["field_std"].values).all()
    status, _, err = run(capsys, "fit", files / "data.nc", "field", "--out", out,
                         "--members", "0")  # fmt: skip
    assert status != 0
    assert "--members" in err
