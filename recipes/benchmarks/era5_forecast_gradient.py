"""The forecast baseline that reads the field's slopes (ERA5, issue 27).

The BSA-TNP sees space only through great-circle distances: its attention cannot
tell a context point west of a target from one east of it, so it cannot learn that
weather arrives from upwind.  Nor can the spatial autoregressive baseline, whose
neighbourhood averages are isotropic.  ``baseline="autoregressive+gradient"`` adds
to that regression the local gradient (east and north components) of the last
context frame at three scales and of its change since the frame before
(:func:`xnp.data.neighbours.gradient`, a Gaussian-weighted local plane); with its
coefficients fitted per initialisation hour on the training days, the regression
learns how the field's slopes carry into the next six hours (the mean advection of
the training period, and whatever else a slope foretells).

This study fits the variant the validation days chose in each case (variant 8: the
BSA-TNP of the change from the spatial baseline, shown its baseline, with the case's
weight decay) and the same network on the gradient baseline, for the same fixed
number of steps (those of ``era5_forecast_schedule.py``, whose cached variant-8 fits
it shares) and seeds, and scores the kept weights on
the validation forecasts (days 17–18) with the scoring code of the benchmark's test
table.  ``--test`` scores them on the benchmark's test forecasts (days 19–21)
instead, for a choice made on the validation days.

    python recipes/benchmarks/era5_forecast_gradient.py [--case "10 %"] [--seeds 0 1] [--test]

About 15 minutes a fit on two cores (cached in
``~/.cache/xnp/bench_era5_forecast/schedule``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import open_era5
from era5_forecast import (
    AR_WEIGHT_DECAY,
    CACHE,
    CASES,
    GRADIENT,
    SPATIAL,
    fitted_model,
    print_validation_table,
)
from era5_forecast_schedule import STEPS

import xnp


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", choices=tuple(CASES), default="10 %")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--test", action="store_true", help="score on the test days instead")
    args = parser.parse_args()
    era5 = open_era5()
    models: dict[str, xnp.NeuralProcess] = {}
    for seed in args.seeds:
        for baseline in (SPATIAL, GRADIENT):
            models[f"{baseline}, seed {seed}"] = fitted_model(
                era5, args.case, STEPS[args.case], False, CACHE / "schedule" / f"f0.2_s{seed}",
                baseline=baseline, baseline_input=True, seed=seed,
                weight_decay=AR_WEIGHT_DECAY[args.case],
            )[0]  # fmt: skip
    print_validation_table(models, era5, args.case, kept_step=True, test=args.test)


if __name__ == "__main__":
    main()
