"""Sensor placement on the departures from an hourly climatology (ERA5 UK, issue 30).

``placement_era5.py`` scores designs by the map a user makes from the stations with
the zero-shot model's own trend.  The better map of issue 28 (``background_era5.py``,
chosen there on the validation days) interpolates the departures from the hourly
climatology of the days before and adds the climatology back: at the station
cells its RMSE on the validation days is 0.400 K against 0.706 K without it.  The
departures are also nearer to what ``gp-sphere`` was trained on, stationary fields,
so its std may tell better where a site would help.  This study designs on the
departures and scores every design by that map:

* **lazy greedy** (:func:`xnp.placement.place_sensors`, ``lazy=True``, mean std over
  the grid, sites added with the model's mean) on the departures of the first scored
  frame, and over the 4 six-hourly frames of the day before the scored days (the
  design for many maps of ``placement_era5.py``);
* **space-filling** (greedy maximin) and **random** (5 draws): the sites of
  ``placement_era5.py``, which do not depend on the map;

each scored by the oracle RMSE over the grid (K) of the map from the stations plus
the first 5, 10 or 20 sites with their true values: the departures from the
background interpolated by ``xnp.predict`` with the model's own trend, the
background added back (the RMSE of the departures' map is that of the field's).
The background is the hourly mean over every day before the scored frames (as
``background_era5.py`` rules): days 1–16 for the validation frames (days 17–18,
``--validation``: where the design variant is chosen), days 1–18 for the 12 test
frames (days 19–21).

    python recipes/benchmarks/placement_background.py [--validation] [--sites 20]

About 12 minutes on two cores (measured while a training run shared them).

The rule, written before the first validation run: the greedy design of this map is
the variant (first frame alone, or over the day before) with the lower mean oracle
RMSE over 5, 10 and 20 sites on the validation frames; the test frames are then
scored once, and the greedy design meets issue 30's bar in this map if it is below
space-filling and random at 5, 10 and 20 sites there.

2026-12-02, AMD EPYC with AVX-512, 2 cores (shared with a training run), oracle RMSE
(K).  Validation frames (design on day 17 00:00 or over day 16; stations alone
0.374 K):

| design | 5 sites | 10 sites | 20 sites | mean |
|---|---|---|---|---|
| lazy greedy (model std), first frame | 0.267 | 0.240 | 0.226 | 0.244 |
| lazy greedy (model std), over the day before | 0.271 | 0.247 | 0.232 | 0.250 |
| space-filling (maximin distance) | 0.271 | 0.252 | 0.226 | 0.250 |
| random (mean of 5 draws) | 0.335 | 0.310 | 0.287 | 0.311 |

So the rule chose the design on the first frame.  Then the test frames, once (design
on day 19 00:00; stations alone 0.585 K, against 0.622 K for the map without the
background in ``placement_era5.py``):

| design | 5 sites | 10 sites | 20 sites | mean |
|---|---|---|---|---|
| lazy greedy (model std), first frame | 0.467 | 0.443 | 0.435 | 0.448 |
| lazy greedy (model std), over the day before | 0.472 | 0.445 | 0.445 | 0.454 |
| space-filling (maximin distance) | 0.466 | 0.460 | 0.431 | 0.452 |
| random (mean of 5 draws) | 0.523 | 0.480 | 0.460 | 0.488 |

The background lowers every design's RMSE by 0.02–0.05 K, but it does not separate
greedy from space-filling: greedy is better at 10 sites (0.443 against 0.460 K),
level at 5 (0.467 against 0.466) and worse at 20 (0.435 against 0.431), as it was
level with space-filling at 20 sites on the validation frames.  On departures that
are nearly stationary, the model's std after adding a site is mostly a function of
the distance to the nearest observation, which is what space-filling maximises; the
differences between the two designs are then those of single sites, within what
one frame's weather decides.  Issue 30's bar is not met in this map either.
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
    oracle_rmse,
    setup,
    sites_of,
    space_filling,
    station_frames,
    station_task,
)

from xnp.placement import place_sensors
from xnp.prediction.background import subtract


def departures(era5, first: int):
    """ERA5 as departures from the hourly mean of its frames before hour ``first``."""
    background = era5.t2m.isel(time=slice(0, first)).groupby("time.hour").mean()
    return subtract(era5, {"t2m": background})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sites", type=int, default=20)
    parser.add_argument(
        "--validation", action="store_true", help="design on day 17, score days 17–18"
    )
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    era5, model, cells, candidates, s = setup()
    first, last = (16 * 24, 18 * 24) if args.validation else (18 * 24, 21 * 24)
    frames = np.arange(first, last, 6)
    dep = departures(era5, first)
    counts = [c for c in (5, 10, 20) if c <= args.sites]
    frame, context, allowed = station_task(dep, cells, first)
    grid = frame.drop_vars("t2m")
    past = station_frames(dep, cells, np.arange(first - 24, first, 6))
    designs = {}
    for name, observed in (("first frame", context), ("over the day before", past)):
        t0 = time.perf_counter()
        result = place_sensors(model, observed, allowed, grid, args.sites, lazy=True)
        print(f"lazy greedy, {name}: {(time.perf_counter() - t0) / args.sites:.1f} s/step")
        designs[f"lazy greedy (model std), {name}"] = [sites_of(result, s)]
    designs["space-filling (maximin distance)"] = [space_filling(cells, candidates, s, args.sites)]
    designs["random (mean of 5 draws)"] = [
        list(np.random.default_rng(k).choice(candidates, args.sites, replace=False))
        for k in range(5)
    ]
    base = np.mean([oracle_rmse(model, dep, int(f), cells, None) for f in frames])
    days = "validation frames (days 17–18)" if args.validation else "test frames (days 19–21)"
    print(f"\n{len(frames)} {days}; stations alone: {base:.3f} K\n")
    print("| design | " + " | ".join(f"{c} sites" for c in counts) + " | mean |")
    print("|---|" + "---|" * (len(counts) + 1))
    for name, draws in designs.items():
        row = [np.mean([oracle_rmse(model, dep, int(f), np.r_[cells, d[:c]], None)
                        for d in draws for f in frames]) for c in counts]  # fmt: skip
        print(f"| {name} | " + " | ".join(f"{v:.3f}" for v in row) + f" | {np.mean(row):.3f} |")
    print("\nsites:", {k: [int(c) for c in v[0][:10]] for k, v in designs.items()})


if __name__ == "__main__":
    main()
