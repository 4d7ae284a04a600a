"""Greedy placement with a GP-bank model: the bank's block update against refactoring it.

    python recipes/benchmarks/placement_bank_update.py [--steps 2] [--no-write]

The task of the ``placement_era5`` section (day 19 00:00, the 218 HadISD station cells
as context, the other 1,399 cells as candidates, the whole 1,617-cell grid as the
region, the mean predictive std as the acquisition) with the zero-shot
``gp-sphere-bank``.  Exhaustive greedy steps are run twice in one process: as
:func:`xnp.placement.place_sensors` runs them (each candidate grows the bank by a block
update of its inverses, :meth:`xnp.infer.predictor.Predictor.condition_added`, the bank's
lengthscales held at the context's) and with ``refactor=True`` (the slow reference:
every candidate's context conditioned whole, the bank refactored with its own
lengthscales).  Prints and writes seconds per step, whether the sites agree, and how
far apart the acquisition maps are (the largest difference and Spearman's rank
correlation over the candidates).  Writes the ``placement_bank_update`` section of
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import machine, write_section
from placement_era5 import setup, sites_of, station_task

from xnp.infer.predictor import Predictor
from xnp.placement import place_sensors

COMMAND = "python recipes/benchmarks/placement_bank_update.py"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    era5, model, cells, _, s = setup("gp-sphere-bank")
    _, context, allowed = station_task(era5, cells, 18 * 24)
    grid = context.drop_vars("t2m")
    runs, seconds = {}, {}
    fast = Predictor.condition_added
    for name, refactor in (("block update", False), ("refactored", True)):
        Predictor.condition_added = functools.partialmethod(fast, refactor=refactor)
        try:
            start = time.perf_counter()
            runs[name] = place_sensors(model, context, allowed, grid, args.steps, progress=True)
            seconds[name] = (time.perf_counter() - start) / args.steps
        finally:
            Predictor.condition_added = fast
        print(f"{name}: {seconds[name]:.1f} s per step, sites {sites_of(runs[name], s)}",
              flush=True)  # fmt: skip
    a, b = (runs[k].acquisition_map.values for k in ("block update", "refactored"))
    # a chosen site leaves the candidates (NaN in the later steps' maps)
    rho = [spearmanr(a[i], b[i], nan_policy="omit").statistic for i in range(args.steps)]
    same = sites_of(runs["block update"], s) == sites_of(runs["refactored"], s)
    n_cells = grid.sizes["latitude"] * grid.sizes["longitude"]
    ratio, gap = seconds["refactored"] / seconds["block update"], np.nanmax(np.abs(a - b))
    text = (
        f"## Placement with a GP bank: block update against refactoring (`{COMMAND}`, "
        "issue 30)\n\n"
        f"Machine: {machine()}.\n\n"
        "The task of the `placement_era5` section (day 19 00:00, 218 station cells as "
        f"context, {int(allowed.sum()):,} candidates, the {n_cells:,} cells of the grid as "
        "the region, the mean predictive std) with the zero-shot `gp-sphere-bank`, "
        f"{args.steps} exhaustive greedy steps each way in one process.\n\n"
        "| bank per candidate | s / greedy step |\n|---|---|\n"
        f"| grown by a block update (`place_sensors`) | {seconds['block update']:.1f} |\n"
        f"| refactored (`refactor=True`, the reference) | {seconds['refactored']:.1f} |\n\n"
        f"The block update is {ratio:.1f}× faster and chose "
        f"{'the same' if same else 'different'} sites; over the candidates its acquisition "
        f"maps differ from the reference's by at most {gap:.4f} K (values "
        f"{np.nanmin(b):.3f}–{np.nanmax(b):.3f} K), Spearman's rank correlation "
        + ", ".join(f"{r:.4f}" for r in rho)
        + " per step (the difference: the bank's lengthscales held at the context's, "
        "and float32 rounding).\n"
    )
    print(text)
    if not args.no_write:
        write_section("placement_bank_update", text)


if __name__ == "__main__":
    main()
