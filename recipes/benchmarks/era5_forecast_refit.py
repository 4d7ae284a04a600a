"""Refit on every day before the forecasts, for the step count validated (ERA5, issue 27).

``era5_forecast_schedule.py`` found the forecast fits limited by data: the
validation NLL stops falling after a few hundred steps, and on half the training days
the validation CRPS is 30 % worse.  The benchmark fits on days 1–16 and keeps the
step with the best validation NLL on days 17–18, so the two days nearest the test
days never train the model.  The usual remedy is to choose the number of steps on
held-out days, then refit on all the days for that many steps.  Whether that pays is
measured here one step earlier, where the test days are not involved: the variant
the validation days chose in each case (variant 8 of ``era5_forecast.py``, with the
case's weight decay), seed 0,

* **held out**: fitted on days 1–14 and validated on 15–16, the best validated step
  kept (the benchmark's protocol, two days earlier);
* **refit**: fitted on days 1–16 for that many steps (its own warm-up and cosine over
  them), no validation, the last step kept;

both scored on the forecasts valid on days 17–18 by the benchmark's scoring code.
The model's own baseline (the regression and the diurnal climatology) is fitted on
its training days in each.

    python recipes/benchmarks/era5_forecast_refit.py [--case "10 %"] [--seed 0]

About 20 minutes for the 10 % case on two cores (cached in
``~/.cache/xnp/bench_era5_forecast/refit``).

2026-12-01, AMD EPYC with AVX-512, 2 cores, 10 % of the cells (``--seed 0`` and
``--seed 1``):

| seed | fit | RMSE (K) | CRPS (K) | NLL | 90 % cov. | mean error |
|---|---|---|---|---|---|---|
| 0 | held out, days 1–14: step 360, best on 15–16 | 1.118 | 0.634 | 1.536 | 0.881 | −0.025 |
| 0 | refit: days 1–16 for 360 steps | 1.162 | 0.658 | 1.574 | 0.884 | +0.039 |
| 1 | held out, days 1–14: step 240, best on 15–16 | 1.115 | 0.643 | 1.562 | 0.939 | −0.191 |
| 1 | refit: days 1–16 for 240 steps | 1.122 | 0.636 | 1.542 | 0.903 | −0.000 |

The refit, with two more days and the two nearest the scored ones, was worse for one
seed (CRPS +4 %) and a little better for the other (−1 %): within what separates
two seeds of one fit, and no support for refitting the benchmark's models on days
1–18 before the test days; the benchmark keeps its protocol.  The held-out fits'
validation NLL on days 15–16 was lowest at steps 240–360 and rose to the end while
the training NLL fell (seed 0: 1.29 → 0.96): the overfitting of
``era5_forecast_schedule.py`` again.
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
    SPATIAL,
    fitted_model,
    print_validation_table,
)
from era5_forecast_schedule import STEPS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", choices=tuple(CASES), default="10 %")
    parser.add_argument("--seed", type=int, default=0, help="seed of both fits (0)")
    args = parser.parse_args()
    era5 = open_era5()
    cache = CACHE / "refit"
    common = {"baseline": SPATIAL, "baseline_input": True, "seed": args.seed,
              "weight_decay": AR_WEIGHT_DECAY[args.case]}  # fmt: skip
    tag = f"_s{args.seed}" if args.seed else ""
    held_out = fitted_model(era5, args.case, STEPS[args.case], False, cache / f"held_out{tag}",
                            train_days=(1, 14), validation=(15, 16), **common)[0]  # fmt: skip
    kept = held_out.training["best_step"]
    refit = fitted_model(era5, args.case, kept, False, cache / f"refit{tag}",
                         train_days=(1, 16), validation=None, **common)[0]  # fmt: skip
    models = {
        "held out: days 1–14, best step validated on 15–16": held_out,
        f"refit: days 1–16 for {kept} steps": refit,
    }
    print_validation_table(models, era5, args.case)


if __name__ == "__main__":
    main()
