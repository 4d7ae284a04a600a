"""A Pangeo pipeline: zarr in → fit on a subset → predict a large grid lazily → zarr out.

Runs locally on the ERA5 UK 2 m temperature file in ``../shared/data`` and, unchanged,
on a cluster:

1. **zarr in.**  The observations are a chunked zarr store opened lazily with
   ``xr.open_zarr`` (here first written from the netCDF file, one chunk per day;
   pass ``--input`` to use any zarr store, local or ``s3://``/``gs://`` with fsspec).
2. **fit on a subset.**  A small BSA-TNP learns interpolation from the first 16
   days; the task sampler reads only the frames each task needs, so the store is
   never loaded whole.
3. **predict lazily.**  ERA5 sampled at the ~250 HadISD station sites in the box is
   the context; the targets are a 4× finer grid (0.0625°, 129 × 193 cells) for
   every hour of the chosen day.  ``ds.np.predict(..., chunks=...)`` builds a dask
   graph: the model and each hour's conditioned context enter it once, and the
   blocks of the fine grid are independent tasks.
4. **zarr out.**  ``to_zarr(compute=False)`` gives one delayed write; the
   ``dask.distributed`` client runs it with a progress bar, block by block.

Locally a ``LocalCluster`` is started (and closed at the end).  The outputs (the
zarr copy of the input and the prediction) go to ``--out-dir``, by default a folder
in the system's temporary directory, never the repository.  ``--quick`` runs a
small version in a couple of minutes on two cores (fewer training days and steps,
six hours on a coarser grid).  Without the data folder (``../shared/data``, or the
folder named by the environment variable ``XNP_DATA``) and without ``--input``, the
recipe says so and exits cleanly.  On a cluster, start workers with xnp installed
and pass the scheduler's address::

    python recipes/pangeo_pipeline/pipeline.py --scheduler tcp://10.0.0.5:8786

or create the client from ``dask_gateway.Gateway().new_cluster().get_client()``
and pass nothing else: every step above is the same code.  The output store can be
any zarr URL the workers can write (``--out s3://bucket/t2m-fine.zarr``).

    python recipes/pangeo_pipeline/pipeline.py [--quick] [--steps 400] [--day 2019-03-20]
        [--out-dir DIR] [--out URL] [--scheduler ADDRESS] [--workers 1] [--threads 2]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

import xnp
from xnp.data import SpatialTasks
from xnp.models.config import BSATNPConfig

#: The real data: $XNP_DATA, else ../shared/data beside the repository.
DATA = Path(os.environ.get("XNP_DATA") or Path(__file__).resolve().parents[3] / "shared" / "data")
ERA5 = "era5_t2m_uk_2019-03-01_21.nc"


def zarr_store(path: Path) -> Path:
    """The ERA5 file as a zarr store chunked by day (what a cloud archive looks like)."""
    if path.exists():
        return path
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", xr.SerializationWarning)
        ds = xr.open_dataset(DATA / ERA5)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=".zarr."))
    ds.chunk({"time": 24}).to_zarr(tmp / "store.zarr", consolidated=False)
    (tmp / "store.zarr").rename(path)  # atomic: a store is either complete or absent
    shutil.rmtree(tmp)
    return path


def station_context(obs: xr.Dataset) -> xr.Dataset:
    """ERA5 at the HadISD sites in the box, as a (time, station) dataset (lazy)."""
    sites = pd.read_csv(DATA / "hadisd_station_locations.csv")
    lat, lon = obs.latitude.values, obs.longitude.values
    inside = sites[
        sites.latitude.between(lat.min(), lat.max())
        & sites.longitude.between(lon.min(), lon.max())
    ].drop_duplicates()
    points = obs.t2m.sel(
        latitude=xr.DataArray(inside.latitude.values, dims="station"),
        longitude=xr.DataArray(inside.longitude.values, dims="station"),
        method="nearest",
    )
    return points.rename(latitude="lat", longitude="lon").to_dataset()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", help="zarr store of observations (default: ERA5 UK as zarr)")
    parser.add_argument(
        "--out-dir",
        type=Path,
        default=Path(tempfile.gettempdir()) / "xnp-pangeo",
        help="folder for the outputs (default: xnp-pangeo in the temp folder)",
    )
    parser.add_argument("--out", help="output zarr store (default: OUT_DIR/t2m-fine.zarr)")
    parser.add_argument("--day", default="2019-03-20", help="day to predict (hourly)")
    parser.add_argument("--steps", type=int, help="training steps (400; --quick: 60)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a small run: 4 training days, 60 steps, 6 hours on a coarser grid",
    )
    parser.add_argument("--scheduler", help="address of a running dask scheduler")
    parser.add_argument("--workers", type=int, default=1, help="local workers (1)")
    parser.add_argument("--threads", type=int, default=2, help="threads per local worker")
    args = parser.parse_args()  # fmt: skip
    if args.input is None and not (DATA / ERA5).is_file():
        print(f"skipped: the real data ({DATA / ERA5}) are absent; set XNP_DATA to the folder "
              "that holds them, or pass --input STORE")  # fmt: skip
        return 0
    args.out_dir.mkdir(parents=True, exist_ok=True)
    # the output is consolidated (one metadata read); zarr notes that this is not yet in
    # its v3 specification, which is no concern here
    warnings.filterwarnings("ignore", "Consolidated metadata", UserWarning)
    out = args.out or str(args.out_dir / "t2m-fine.zarr")
    steps = args.steps or (60 if args.quick else 400)
    days, hours, size = (4, 6, (33, 49)) if args.quick else (16, 24, (129, 193))

    from dask.distributed import Client, LocalCluster, progress

    with contextlib.ExitStack() as stack:  # the client and the cluster close cleanly
        if args.scheduler:
            client = stack.enter_context(Client(args.scheduler))
        else:
            cluster = stack.enter_context(
                LocalCluster(
                    n_workers=args.workers, threads_per_worker=args.threads, dashboard_address=None
                )
            )
            client = stack.enter_context(Client(cluster))
        print(f"dask: {client}")
        store = Path(args.input) if args.input else zarr_store(args.out_dir / "era5_t2m_uk.zarr")
        obs = xr.open_zarr(store, consolidated=False)  # lazy, chunked by day
        print(f"observations: {dict(obs.sizes)} in {store} (chunks {dict(obs.chunks)})")

        start = time.perf_counter()
        model = obs.isel(time=slice(0, days * 24)).np.fit(
            "t2m",
            model=BSATNPConfig.tiny(n_blocks=3, n_heads=4, dim_token=32, dim_attn=32),
            tasks=SpatialTasks(context_fraction=(0.02, 0.3), max_context=384, max_targets=384),
            steps=steps, learning_rate=3e-3, validation=0.1,
        )  # fmt: skip
        print(f"fitted in {time.perf_counter() - start:.0f} s: {model!r}")

        context = station_context(obs).sel(time=args.day).isel(time=slice(0, hours))
        fine = xr.Dataset(coords={
            "lat": np.linspace(float(obs.latitude.min()), float(obs.latitude.max()), size[0]),
            "lon": np.linspace(float(obs.longitude.min()), float(obs.longitude.max()), size[1]),
        })  # fmt: skip
        start = time.perf_counter()
        pred = context.np.predict(
            model, fine, chunks={"lat": -(-size[0] // 3), "lon": -(-size[1] // 3)}
        )
        n_points = pred.t2m_mean.size
        print(f"graph for {n_points:,} target values built in {time.perf_counter() - start:.1f} s "
              f"({pred.t2m_mean.data.npartitions} blocks)")  # fmt: skip

        start = time.perf_counter()
        write = pred.to_zarr(out, mode="w", consolidated=True, compute=False)
        future = client.compute(write)
        progress(future)
        future.result()
        seconds = time.perf_counter() - start
        print(f"\nwrote {out}: {n_points:,} points in {seconds:.0f} s "
              f"({n_points / seconds:,.0f} points/s)")  # fmt: skip

        truth = obs.t2m.sel(time=context.time).interp(latitude=fine.lat, longitude=fine.lon)
        back = xr.open_zarr(out)
        scores = xnp.evaluate(back, truth.rename("t2m").to_dataset().compute())
        print(f"against ERA5 bilinearly interpolated: RMSE {float(scores.t2m_rmse):.2f} K, "
              f"95% coverage {float(scores.t2m_coverage_95):.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
