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

2026-12-01, AMD EPYC with AVX-512, 2 cores.  The regressions alone on the validation
forecasts (fitted on days 1–16): RMSE 1.172 → 1.092 K at 100 %, 1.218 → 1.137 K at 10 %
(the spatial kind → the gradient kind).  The networks, validation days (the choice):

| case | fit | kept step | RMSE (K) | CRPS (K) | NLL | 90 % coverage |
|---|---|---|---|---|---|---|
| 100 % (800 steps) | spatial, seed 0 | 640 | 1.002 | 0.562 | 1.441 | 0.847 |
| 100 % | gradient, seed 0 | 240 | 0.995 | 0.558 | 1.385 | 0.910 |
| 100 % | spatial, seed 1 | 400 | 1.053 | 0.595 | 1.474 | 0.855 |
| 100 % | gradient, seed 1 | 400 | 1.023 | 0.581 | 1.450 | 0.851 |
| 10 % (1200 steps) | spatial, seed 0 | 600 | 1.044 | 0.584 | 1.487 | 0.853 |
| 10 % | gradient, seed 0 | 600 | 1.059 | 0.593 | 1.491 | 0.830 |
| 10 % | spatial, seed 1 | 840 | 1.025 | 0.571 | 1.474 | 0.871 |
| 10 % | gradient, seed 1 | 1080 | 0.964 | 0.545 | 1.432 | 0.838 |

The rule, set before the fits: choose the gradient kind in a case if its CRPS averaged
over seeds 0 and 1 is lower.  At 100 % it won with both seeds (0.570 against 0.579 K);
at 10 % on average (0.569 against 0.578 K: one seed worse by 1.5 %, the other better by
4.6 %), with lower coverage.  So it was chosen in both (variant 9 of
``era5_forecast.py``).  Then, the choice made, ``--test --seeds 0 1`` on the test
forecasts (days 19–21), CRPS (K) / RMSE (K) / 90 % coverage:

| case | seed | spatial | gradient |
|---|---|---|---|
| 100 % | 0 | 0.507 / 0.904 / 0.881 | 0.467 / 0.839 / 0.918 |
| 100 % | 1 | 0.456 / 0.823 / 0.914 | 0.467 / 0.842 / 0.897 |
| 10 % | 0 | 0.543 / 0.993 / 0.875 | 0.546 / 0.980 / 0.843 |
| 10 % | 1 | 0.575 / 1.038 / 0.857 | 0.607 / 1.036 / 0.695 |

At 100 % better on average (0.467 against 0.482 K) and steadier over the seeds, still
above issue 27's 0.450 K; at 10 % worse (0.577 against 0.559 K), its intervals too
narrow (seed 1: coverage 0.695, NLL 1.87): the validation days chose wrongly there, as
two days of validation and two seeds can.  The regression alone is far better than the
spatial one, the network on it only a little: what the slopes add, the network on the
spatial baseline had partly learned from the context itself.

**The departure from the climatology: tried and removed** (2026-12-02).  One more
regressor on top of the gradient kind, the last value's departure from the place's mean
field at the initialisation's hour over the training days (weather away from the usual
for the place and hour tends back to it), was built as
``baseline="autoregressive+climatology"`` (commit 2d1c2c8; this script then took
``--kinds gradient climatology``).  The regression alone on the validation forecasts:
RMSE 1.092 → 0.996 K at 100 %.  The networks (same steps, seeds and weight decay as
above), validation CRPS (K) / 90 % coverage, gradient → climatology kind: 100 % seed 0
0.558 / 0.910 → 0.497 / 0.849, seed 1 0.581 / 0.851 → 0.507 / 0.848; 10 % seed 0
0.593 / 0.830 → 0.531 / 0.802, seed 1 0.545 / 0.838 → 0.540 / 0.838.  By the rule set
before the fits (the lower two-seed mean CRPS), it was chosen in both cases.  Then
the test forecasts, once, CRPS (K) / RMSE (K) / 90 % coverage: 100 % seed 0 0.534 /
0.952 / 0.823 (gradient 0.467 / 0.839 / 0.918), seed 1 0.539 / 0.953 / 0.865 (0.467 /
0.842 / 0.897); 10 % seed 0 0.626 / 1.086 / 0.797 (0.546 / 0.980 / 0.843), seed 1
0.553 / 0.987 / 0.819 (0.607 / 1.036 / 0.695): far worse at 100 %, worse on average at
10 %.  Why (a diagnostic after the choice, choosing nothing): the validation days were
0.9 K colder than the 16 training days' mean at their hours, the test days 1.9 K
warmer; the regression learned to pull a departure back, which on the validation days
warmed, and on the test days cooled, the forecasts (the regression alone on the test
forecasts: RMSE 1.136 K with a mean error of −0.64 K, against 0.854 K and −0.11 K for
the gradient kind).  Sixteen days hold no seasonal cycle: late March is warmer than its
first half, so a climatology of a few weeks is not a level weather returns to.  The
kind was removed; a departure from a climatology of many years (by day of year as
well as hour) is what the idea needs, and the shared data do not hold one.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import open_era5
from era5_forecast import (
    AR_WEIGHT_DECAY,
    CASES,
    GRADIENT,
    SPATIAL,
    fitted_model,
    print_validation_table,
)
from era5_forecast_schedule import STEPS, fit_folder

import xnp

#: The baselines the study can compare, by their short names.
KINDS = {"spatial": SPATIAL, "gradient": GRADIENT}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", choices=tuple(CASES), default="10 %")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--test", action="store_true", help="score on the test days instead")
    parser.add_argument("--kinds", nargs="+", choices=tuple(KINDS),
                        default=["spatial", "gradient"],
                        help="the baselines compared (spatial gradient)")  # fmt: skip
    args = parser.parse_args()
    era5 = open_era5()
    models: dict[str, xnp.NeuralProcess] = {}
    for seed in args.seeds:
        for baseline in (KINDS[k] for k in args.kinds):
            models[f"{baseline}, seed {seed}"] = fitted_model(
                era5, args.case, STEPS[args.case], False, fit_folder(seed),
                baseline=baseline, baseline_input=True, seed=seed,
                weight_decay=AR_WEIGHT_DECAY[args.case],
            )[0]  # fmt: skip
    print_validation_table(models, era5, args.case, kept_step=True, test=args.test)


if __name__ == "__main__":
    main()
