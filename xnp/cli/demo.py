"""``xnp demo``: fit, predict and plot on built-in synthetic data (or a file) in a minute.

The settings of the demo, the grid it predicts on and the context it samples.
The models, :mod:`xnp.api` and matplotlib are imported only when the command runs.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import logging
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from xnp.cli.checks import check_model_out, check_variables, time_dim
from xnp.cli.defaults import (
    DEMO_FINE_TUNE_LEARNING_RATE,
    DEMO_FINE_TUNE_STEPS,
    DEMO_LEARNING_RATE,
    DEMO_MAX_POINTS,
    DEMO_MODEL,
    DEMO_START,
    DEMO_STEPS,
)
from xnp.cli.fit_command import train_config
from xnp.data.normalise import is_zero_shot
from xnp.errors import UsageError, VariableNotFoundError
from xnp.storage import check_output, open_data, save_figure, write_dataset

__all__ = ["demo_grid", "run_demo"]

log = logging.getLogger(__name__)


def demo_grid(data: xr.Dataset, variable: str, resolution: float) -> dict[str, xr.DataArray]:
    """A regular latitude/longitude grid over the extent of ``data`` (global if it is).

    A region across the antimeridian stays a region: its longitudes run on past 180.

    Parameters
    ----------
    data : Dataset
        Gridded or station data.
    variable : str
        Its variable (whose coordinates give the extent).
    resolution : float
        Spacing of the grid in degrees.

    Returns
    -------
    dict
        ``{"lat": DataArray, "lon": DataArray}``, targets for :func:`xnp.predict`.
    """
    from xnp.data.coords import find_coords, latlon
    from xnp.geo.sphere import into_frame, longitude_frame

    lat, lon = latlon(data, find_coords(data, variable))
    # a region across the antimeridian (e.g. 170°E to 165°W) is a region, not the
    # globe: its longitudes, in the window it fits in, run on past 180
    lon = into_frame(lon, longitude_frame(lon)[0])
    lat0, lat1 = float(np.nanmin(lat)), float(np.nanmax(lat))
    lon0, lon1 = float(np.nanmin(lon)), float(np.nanmax(lon))
    if lon1 - lon0 > 300.0:  # (nearly) global: cover every longitude
        lons = np.arange(-180.0 + resolution / 2, 180.0, resolution)
    else:
        lons = np.linspace(lon0, lon1, max(2, round((lon1 - lon0) / resolution) + 1))
    lats = np.linspace(lat0, lat1, max(2, round((lat1 - lat0) / resolution) + 1))
    return {
        "lat": xr.DataArray(lats, dims="lat",
                            attrs={"units": "degrees_north", "standard_name": "latitude"}),
        "lon": xr.DataArray(lons, dims="lon",
                            attrs={"units": "degrees_east", "standard_name": "longitude"}),
    }  # fmt: skip


def _sample_context(frame: xr.Dataset, variable: str, n: int, seed: int) -> xr.Dataset:
    """``n`` random observed points of ``frame`` as a station dataset (the demo's context)."""
    from xnp.data.coords import find_coords
    from xnp.data.flatten import to_points

    ps = to_points(frame, variable)
    rng = np.random.default_rng(seed)
    pick = np.sort(rng.choice(len(ps), size=min(n, len(ps)), replace=False))
    coords: dict[str, Any] = {
        "lat": ("station", ps.lat[pick], {"units": "degrees_north", "standard_name": "latitude"}),
        "lon": ("station", ps.lon[pick], {"units": "degrees_east", "standard_name": "longitude"}),
    }
    time_name = find_coords(frame, variable).time
    if time_name is not None and frame[time_name].ndim == 0:
        coords[time_name] = frame[time_name].variable
    values = ("station", ps.f[pick, 0], dict(frame[variable].attrs))
    return xr.Dataset({variable: values}, coords=coords)


def _held_out_scores(
    model: Any, context: xr.Dataset, frame: xr.Dataset, variable: str
) -> tuple[float, str]:
    """RMSE, and a line of RMSE, spread and 95 % coverage, at every point of ``frame``."""
    from xnp.api.predict import predict

    pred = predict(model, context, frame[[variable]])
    err = (pred[f"{variable}_mean"] - frame[variable]).values
    std = pred[f"{variable}_std"].values
    ok = np.isfinite(err) & np.isfinite(std)
    rmse = float(np.sqrt(np.mean(err[ok] ** 2)))
    spread = float(np.mean(std[ok]))
    coverage = float(np.mean(np.abs(err[ok]) <= 1.959964 * std[ok]))
    scale = float(np.nanstd(frame[variable].values))
    units = frame[variable].attrs.get("units")
    u = f" {units}" if units else ""
    return rmse, (
        f"RMSE {rmse:.3g}{u} (field std {scale:.3g}{u}), mean predictive std {spread:.3g}{u}, "
        f"95% interval coverage {coverage:.2f} at {int(ok.sum())} points"
    )


def run_demo(args: argparse.Namespace, files: contextlib.ExitStack) -> int:
    """``xnp demo``: fit (or take) a model, predict a held-out time on a grid, plot it.

    Every output in ``--out`` is checked before any work.

    Takes the parsed command line and the stack that closes the files it opens;
    returns the exit status, 0 (failures raise, and :func:`xnp.cli.main` reports them).
    """
    from xnp.api.fit import fit
    from xnp.api.predict import predict
    from xnp.data.tasks import SpatialTasks
    from xnp.datasets import gp_sphere
    from xnp.shipped import pretrained, resolve_model

    start = time.perf_counter()
    out = Path(args.out).expanduser()
    if args.model is not None and args.pretrained is not None:
        raise UsageError("give --model or --pretrained, not both.")
    fmt = args.format
    pred_path = out / ("prediction.zarr" if fmt == "zarr" else "prediction.nc")
    # what will be written, checked before any work (a fit can take a while)
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(
            errno.ENOTDIR, "--out is a file; the demo writes into a folder", str(out)
        )
    if args.model is None or not Path(args.model).expanduser().exists():
        check_model_out(out / "model")  # (a saved model given with --model stays where it is)
    check_output(pred_path, fmt, overwrite=True)
    given = resolve_model(args.model) if args.model is not None else None
    if args.data is not None:
        if args.variable is None:
            raise UsageError("--data needs --variable, the name of the variable to learn.")
        data = files.enter_context(open_data(args.data))
        variable = args.variable
        check_variables(data, [variable], "data")
    elif (args.pretrained is not None or (given is not None and is_zero_shot(given))
          or (given is None and not args.from_scratch)):  # fmt: skip
        # a zero-shot model was trained on regional fields (caps of at most 4000 km):
        # a continental region, not the globe, is where it is meant to work
        region = {"lat_range": (30.0, 60.0), "lon_range": (-30.0, 30.0)}
        data = gp_sphere(n_lat=24, n_lon=48, n_time=24, lengthscale_km=800.0, seed=args.seed,
                         **region)  # fmt: skip
        variable = "field"
        log.info("data: synthetic Gaussian-process field on a 24 × 48 grid over 30–60°N, "
                 "30°W–30°E, 24 times 6 h apart")  # fmt: skip
    else:
        data = gp_sphere(n_lat=24, n_lon=48, n_time=24, seed=args.seed)
        variable = "field"
        log.info("data: synthetic Gaussian-process field on a 24 × 48 grid, 24 times 6 h apart")
    tdim = time_dim(data, variable)
    # the last time is held out of training (validation period) and used as the context
    frame = data.isel({tdim: -1}) if tdim is not None else data
    if args.pretrained is not None:
        model = pretrained(args.pretrained)  # zero-shot: no fitting, works offline
        log.info("using the pretrained %r model zero-shot (no fitting)", args.pretrained)
        model_path = model.save(out / "model")
    elif given is not None:
        model = given
        if not is_zero_shot(model) and variable not in model.variables:
            raise VariableNotFoundError(
                f"the model {args.model} predicts {list(model.variables)}, not {variable!r}."
            )
        model_path = Path(args.model).expanduser()
        if not model_path.exists():  # a pretrained model's name: save it, as --pretrained does
            model_path = model.save(out / "model")
    else:
        start_from = None if args.from_scratch else pretrained(DEMO_START)
        steps = args.steps or (DEMO_STEPS if start_from is None else DEMO_FINE_TUNE_STEPS)
        rate = args.learning_rate or (
            DEMO_LEARNING_RATE if start_from is None else DEMO_FINE_TUNE_LEARNING_RATE
        )
        if start_from is None:
            log.info("fitting %s from scratch for %d steps", DEMO_MODEL, steps)
            tasks = SpatialTasks(max_context=DEMO_MAX_POINTS, max_targets=DEMO_MAX_POINTS)
        else:
            log.info("fine-tuning the pretrained %r model for %d steps", DEMO_START, steps)
            # contexts of the pretraining's sizes, as many targets as the scratch demo
            tasks = SpatialTasks(context_count=(16, 256), max_context=256,
                                 max_targets=DEMO_MAX_POINTS)  # fmt: skip
        # one device: sharding a model this small over several would only add overhead
        config = train_config(steps, validation_batches=2, devices=1)
        model = fit(
            data, variable, model=start_from or DEMO_MODEL, tasks=tasks, steps=steps,
            batch_size=8, learning_rate=rate, validation=0.1 if tdim is not None else None,
            seed=args.seed, progress=args.progress, config=config,
        )  # fmt: skip
        model_path = model.save(out / "model")
        log.info("trained in %.1f s", model.training.get("seconds", float("nan")))

    context = _sample_context(frame, variable, args.context_points, args.seed)
    grid = demo_grid(data, variable, args.resolution)
    chunks = {"lat": max(1, math.ceil(grid["lat"].size / 2))}
    pred = predict(model, context, grid, chunks=chunks)  # lazy: one dask task per block
    # label the maps with the time the observations are from
    pred = pred.assign_coords({str(c): context[c] for c in context.coords if context[c].ndim == 0})
    log.info("predicting at %d × %d grid points from %d observations (%d dask blocks)",
             grid["lat"].size, grid["lon"].size, context.sizes["station"],
             pred[f"{variable}_mean"].data.npartitions)  # fmt: skip
    write_dataset(pred, pred_path, fmt=fmt, overwrite=True, progress=args.progress)
    if tdim is not None:
        rmse, line = _held_out_scores(model, context, frame, variable)
        log.info("held-out field: %s", line)
        tuned_from = (model.training or {}).get("fine_tuned_from")
        if tuned_from:  # what fine-tuning gained over the pretrained model, zero-shot
            before, line = _held_out_scores(pretrained(tuned_from["from"]), context, frame,
                                            variable)  # fmt: skip
            log.info("the pretrained %s model zero-shot: %s", tuned_from["from"], line)
            log.info("fine-tuning changed the held-out RMSE by %+.1f %% (%.3g -> %.3g)",
                     100.0 * (rmse - before) / before, before, rmse)  # fmt: skip

    png_path: Path | None = out / "prediction.png"
    try:
        from xnp.plot import plot_prediction

        with open_data(pred_path, what="prediction") as written:
            fig = plot_prediction(written, variable, context=context)
            save_figure(fig, png_path, dpi=110)
    except ImportError as err:  # matplotlib missing: the demo still succeeds
        log.warning("no plot: %s", err)
        png_path = None
    log.info("demo finished in %.1f s", time.perf_counter() - start)
    print(f"model:      {model_path}")
    print(f"prediction: {pred_path}")
    if png_path is not None:
        print(f"plot:       {png_path}")
    return 0
