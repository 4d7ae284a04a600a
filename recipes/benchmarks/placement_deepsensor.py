"""Time per greedy placement step: xnp against DeepSensor's ``GreedyAlgorithm`` (issue 30).

The task of ``placement_era5.py``: ERA5 UK 2 m temperature on day 19 00:00, the 218
HadISD station cells as context, the other 1,399 cells as candidates and the whole
33 × 49 grid (1,617 cells) as the region whose mean predictive std a new site
should lower.  In one process, on the same machine, one after the other:

* **xnp**: :func:`xnp.placement.place_sensors` with the zero-shot ``gp-sphere``,
  ``acquisition="mean_std"``, exhaustive (every candidate scored at every step,
  batches of 64) and lazy (``lazy=True``);
* **DeepSensor**: ``GreedyAlgorithm`` with ``MeanStddev`` (the same acquisition:
  the mean marginal std over the targets, each candidate added with the model's
  mean, ``model_infill_method="mean"``) and a ``ConvNP`` of DeepSensor's default
  UNet (4 × 64 channels, one internal grid point per ERA5 cell), the model of the
  ``era5_forecast_deepsensor`` section, on a one-frame ``TaskLoader`` (t2m
  context at the station cells, t2m targets).  Its weights are untrained: the
  cost of a forward pass does not depend on them, and only time is measured here
  (a trained ConvNP would need ERA5 training tasks of its own; the placements'
  quality is compared in the ``placement_era5`` section, for xnp's designs).

Each method places ``--sites`` sites (3); the time per step is the whole call over
the number of sites, after a warm-up call of one site (compilation, first torch
pass).  Writes the ``placement_deepsensor`` section of docs/benchmarks.md.

Environment: DeepSensor's, as in ``era5_forecast_deepsensor.py``::

    python3.11 -m venv /work/ds-venv
    /work/ds-venv/bin/pip install torch==2.13.0
    /work/ds-venv/bin/pip install deepsensor
    /work/ds-venv/bin/pip install -e .

Usage::

    /work/ds-venv/bin/python recipes/benchmarks/placement_deepsensor.py [--sites 3] [--no-write]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from importlib.metadata import version
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import stations
from _report import machine, write_section
from placement_era5 import station_task

import xnp
from xnp.placement import place_sensors

COMMAND = "/work/ds-venv/bin/python recipes/benchmarks/placement_deepsensor.py"
#: DeepSensor's default UNet and one internal grid point per ERA5 cell (as in the
#: era5_forecast_deepsensor section).
UNET_CHANNELS = (64, 64, 64, 64)
INTERNAL_DENSITY = 48


def the_task():
    """ERA5 on day 19 00:00: the frame, the station-cell context, the candidate mask."""
    era5 = stations.open_era5()
    cells = stations.station_cells(era5)
    frame, context, allowed = station_task(era5, cells, 18 * 24)
    return era5, frame, context, allowed, cells


def time_xnp(context, allowed, grid, n_sites: int, lazy: bool) -> tuple[float, list]:
    """Seconds per greedy step of xnp (after a warm-up step) and the sites chosen."""
    model = xnp.pretrained("gp-sphere")
    place_sensors(model, context, allowed, grid, 1, lazy=lazy, progress=False)  # warm-up
    start = time.perf_counter()
    out = place_sensors(model, context, allowed, grid, n_sites, lazy=lazy, progress=False)
    sites = list(zip(out.site_lat.values.round(2), out.site_lon.values.round(2), strict=True))
    return (time.perf_counter() - start) / n_sites, sites


def time_deepsensor(era5, frame, allowed, cells, n_sites: int) -> tuple[float, list, int]:
    """Seconds per greedy step of DeepSensor's GreedyAlgorithm, its sites and parameters."""
    import deepsensor.torch  # noqa: F401  (selects the PyTorch backend)
    from deepsensor.active_learning.acquisition_fns import MeanStddev
    from deepsensor.active_learning.algorithms import GreedyAlgorithm
    from deepsensor.data import DataProcessor, TaskLoader
    from deepsensor.model import ConvNP

    processor = DataProcessor(x1_name="latitude", x2_name="longitude")
    t2m = processor(era5.t2m)
    loader = TaskLoader(context=t2m, target=t2m)
    model = ConvNP(processor, loader, unet_channels=UNET_CHANNELS,
                   internal_density=INTERNAL_DENSITY, likelihood="cnp", verbose=False)  # fmt: skip
    n_params = sum(p.numel() for p in model.model.parameters())
    x1, x2 = t2m.x1.values, t2m.x2.values
    i, j = np.unravel_index(cells, frame.t2m.shape)
    sampling = np.stack([x1[i], x2[j]])  # the station cells, in normalised coordinates
    task = loader(frame.time.values, context_sampling=[sampling], target_sampling="all")
    grid = frame.t2m.drop_vars("time")  # (DeepSensor reads a time coordinate as a dimension)
    allowed = allowed.drop_vars("time")
    acquisition = MeanStddev(model)

    def run(n: int):
        greedy = GreedyAlgorithm(model, X_s=grid, X_t=grid, X_s_mask=allowed, N_new_context=n,
                                 model_infill_method="mean")  # fmt: skip
        return greedy(acquisition, task)

    run(1)  # warm-up
    start = time.perf_counter()
    new, _ = run(n_sites)
    seconds = (time.perf_counter() - start) / n_sites
    sites = list(zip(new["latitude"].round(2), new["longitude"].round(2), strict=True))
    return seconds, sites, n_params


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sites", type=int, default=3, help="sites per timed call (3)")
    parser.add_argument("--no-write", action="store_true", help="do not update the docs")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    import torch

    torch.set_num_threads(2)
    era5, frame, context, allowed, cells = the_task()
    grid = frame.drop_vars("t2m")
    n_cand = int(allowed.sum())
    ds_step, ds_sites, n_params = time_deepsensor(era5, frame, allowed, cells, args.sites)
    print(f"DeepSensor: {ds_step:.1f} s per step", flush=True)
    exhaustive, _ = time_xnp(context, allowed, grid, args.sites, lazy=False)
    print(f"xnp exhaustive: {exhaustive:.1f} s per step", flush=True)
    lazy, _ = time_xnp(context, allowed, grid, args.sites, lazy=True)
    print(f"xnp lazy: {lazy:.1f} s per step", flush=True)
    table = (
        "| method | s / greedy step | vs DeepSensor |\n|---|---|---|\n"
        f"| DeepSensor `GreedyAlgorithm`, `MeanStddev`, ConvNP ({n_params:,} parameters) "
        f"| {ds_step:.1f} | 1× |\n"
        f"| xnp `place_sensors`, exhaustive, `gp-sphere` | {exhaustive:.1f} "
        f"| {ds_step / exhaustive:.1f}× faster |\n"
        f"| xnp `place_sensors`, `lazy=True`, `gp-sphere` | {lazy:.1f} "
        f"| {ds_step / lazy:.1f}× faster |"
    )
    text = (
        f"## Greedy placement: xnp against DeepSensor (`{COMMAND}`, issue 30)\n\n"
        f"Machine: {machine()}, PyTorch {version('torch')} (2 threads), DeepSensor "
        f"{version('deepsensor')}; the three timings in one process, one after the other.\n\n"
        f"The task of the placement_era5 section: day 19 00:00, the 218 station cells as "
        f"context, {n_cand:,} candidate cells, the mean predictive std over the "
        f"{grid.latitude.size * grid.longitude.size:,} cells of the grid as the acquisition, "
        "each candidate added with the model's mean. Seconds per greedy step, over "
        f"{args.sites} steps after a warm-up step. DeepSensor's ConvNP (its default UNet, "
        "the model of the era5_forecast_deepsensor section) is untrained here: a forward "
        "pass costs the same whatever its weights, and only time is compared; its first "
        f"sites (untrained, so not a design to use): {ds_sites}.\n\n" + table + "\n"
    )
    print(text)
    if not args.no_write:
        write_section("placement_deepsensor", text)


if __name__ == "__main__":
    main()
