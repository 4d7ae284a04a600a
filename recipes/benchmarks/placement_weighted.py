"""Greedy placement on ERA5 UK with the region weighted by past errors (issue 30).

    python recipes/benchmarks/placement_weighted.py [--split validation|test]

The task of ``placement_era5.py`` (the zero-shot ``gp-sphere`` on the 218 HadISD
station cells, candidates the other cells, region the whole grid), with one more
design: lazy greedy by the mean predictive variance over the region, each cell
weighted (``place_sensors(weights=...)``) by the ratio of the squared error of the
stations-only map to the model's variance there, both averaged over the six-hourly
frames of every day before the design's frame, so that the weighted mean variance
is the map's expected squared error calibrated cell by cell.  Beside it the
unweighted lazy greedy design and the space-filling one; each scored by the oracle
RMSE of the map (K) after 5, 10 and 20 sites over the split's six-hourly frames.

``--split validation``: design on day 17 00:00, past days 1–16, scored on days
17–18 (8 frames); ``--split test``: day 19 00:00, days 1–18, days 19–21 (12
frames).  Prints a table; writes nothing (the user guide's placement page quotes
it).  About 5 minutes on two CPU cores.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from placement_era5 import (
    observed_at,
    oracle_rmse,
    setup,
    sites_of,
    space_filling,
    station_task,
)

import xnp
from xnp.placement import place_sensors

COUNTS = (5, 10, 20)


def past_weights(model, era5, cells: np.ndarray, frames: np.ndarray):
    """Per cell: mean squared error of the stations-only map over mean predicted variance."""
    squares = variance = 0.0
    for f in frames:
        data = era5.isel(time=int(f))
        pred = xnp.predict(model, observed_at(data, cells), data.drop_vars("t2m"), trend="none",
                           calibrate=False, progress=False)  # fmt: skip
        squares = squares + (pred.t2m_mean - data.t2m) ** 2
        variance = variance + pred.t2m_std**2
    return (squares / variance).rename(None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", choices=("validation", "test"), default="validation")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    era5, model, cells, candidates, s = setup()
    first, days = (16 * 24, 2) if args.split == "validation" else (18 * 24, 3)
    frames = np.arange(first, first + days * 24, 6)
    weights = past_weights(model, era5, cells, np.arange(0, first, 6))
    _, context, allowed = station_task(era5, cells, first)
    grid = era5.isel(time=first).drop_vars("t2m")
    designs = {}
    variants = {"lazy greedy (model variance)": {},
                "lazy greedy (weighted by past errors)": {"weights": weights}}  # fmt: skip
    for name, extra in variants.items():
        t0 = time.perf_counter()
        out = place_sensors(model, context, allowed, grid, max(COUNTS), lazy=True,
                            acquisition="mean_variance", progress=False, **extra)  # fmt: skip
        print(f"{name}: {time.perf_counter() - t0:.0f} s", flush=True)
        designs[name] = sites_of(out, s)
    designs["space-filling (maximin distance)"] = space_filling(cells, candidates, s, max(COUNTS))
    print(f"\n{args.split}: oracle RMSE (K) over {frames.size} frames\n")
    print("| design | " + " | ".join(f"{c} sites" for c in COUNTS) + " |")
    print("|---|" + "---|" * len(COUNTS))
    for name, design in designs.items():
        row = [np.mean([oracle_rmse(model, era5, int(f), np.r_[cells, design[:c]])
                        for f in frames]) for c in COUNTS]  # fmt: skip
        print(f"| {name} | " + " | ".join(f"{v:.3f}" for v in row) + " |", flush=True)


if __name__ == "__main__":
    main()
