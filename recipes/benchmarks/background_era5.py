"""Interpolating departures from a climatology: ``predict(..., background=)`` on ERA5 (issue 28).

The task of ``zero_shot_trend.py`` and ``finetune_era5.py``: ERA5 UK 2 m temperature
with the 218 HadISD station cells as context and the other 1,399 cells as targets
(and, beside it, one random 10 % of the cells as context).  Here every method is
also given a *background*: the mean per cell of every day before the frames
predicted (the training days 1–16 for the validation days 17–18; days 1–18 for
the test days 19–21, a rule fixed before any test row was computed), or per cell
and hour of day (``ds.t2m.groupby("time.hour").mean()``, read at each frame's
hour); the test rows with the training days' background are given beside them.
Each method interpolates the departures of the observations from the background,
and the background is added back at the targets: for xnp by
``predict(..., background=)``, for the baselines by the same two functions
(:func:`xnp.prediction.background.subtract` and :func:`~xnp.prediction.background.restore`),
so every method sees identical inputs.

Methods: the shipped ``gp-sphere`` zero-shot (``trend="linear"``, with and without
``calibrate=True``), ``gp-sphere`` fine-tuned on the departures of days 1–16 from the
hourly background (clustered tasks, as the fine-tuned model of ``finetune_era5.py``,
for each of the training budgets: the validation days choose among them too;
validated on days 17–18), ordinary kriging and the exact Matérn-5/2 GP; each also
without a background.  The background variant (none, mean, hourly) and the fine-tuned
row are chosen on the validation days (17–18); the test frames (days 19–21) are
reported.

    python recipes/benchmarks/background_era5.py [--budgets 5 15 30] [--no-write] [--quick]

About the budgets' sum + 6 minutes on a 2-core CPU (the fits are cached in
``~/.cache/xnp/bench_background_era5``).  Writes the ``background_era5`` section of
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

import numpy as np
import xarray as xr

import xnp
from xnp.baselines import GaussianProcess, OrdinaryKriging
from xnp.prediction.background import restore, subtract

sys.path.insert(0, str(Path(__file__).resolve().parent))
import stations
from _report import machine, write_section
from finetune_era5 import (
    CLUSTERED,
    TRAIN_DAYS,
    VAL_DAYS,
    cached_fit,
    evaluate_all,
    random_cells_task,
    table,
)
from zero_shot_trend import era5_task

COMMAND = "python recipes/benchmarks/background_era5.py"
CACHE = Path.home() / ".cache" / "xnp" / "bench_background_era5"
KRIGING, GP = "ordinary kriging (spherical)", "exact GP, Matérn-5/2"
KH = KRIGING + ", hourly background"
#: The hourly frames before the test days (days 1–18): the test frames' climatology.
BEFORE_TEST = (TRAIN_DAYS[0], VAL_DAYS[1])


def backgrounds(days: tuple[int, int] = TRAIN_DAYS) -> dict[str, xr.DataArray | None]:
    """The background variants, from the hourly frames ``slice(*days)``."""
    train = stations.open_era5().t2m.isel(time=slice(*days))
    return {
        "none": None,
        "mean": train.mean("time"),
        "hourly": train.groupby("time.hour").mean(),
    }


def fit(budget_min: float, quick: bool, background: xr.DataArray) -> xnp.NeuralProcess:
    """``gp-sphere`` fine-tuned on the departures from ``background`` (cached)."""
    return cached_fit(
        f"finetuned_clustered_hourly_{budget_min:g}min", budget_min, quick, cache=CACHE,
        model="gp-sphere", learning_rate=1e-4, tasks=CLUSTERED, trend="none",
        data=subtract(stations.open_era5(), {"t2m": background}),
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budgets", type=float, nargs="+", default=[5.0, 15.0, 30.0],
                        help="minutes of fine-tuning, one fit each (5 15 30)")  # fmt: skip
    parser.add_argument("--no-write", action="store_true", help="do not update the docs")
    parser.add_argument("--quick", action="store_true", help="12-second fit; writes nothing")
    parser.add_argument("--fit-only", action="store_true", help="fit (or load) and stop")
    args = parser.parse_args()
    if args.quick:
        args.budgets, args.no_write = [0.2], True
    start = time.perf_counter()
    bgs = backgrounds()
    fits = {b: fit(b, args.quick, bgs["hourly"]) for b in args.budgets}
    if args.fit_only:
        return
    zero = xnp.pretrained("gp-sphere")
    frames = {
        "validation": np.arange(16 * 24, 18 * 24, 6)[: 2 if args.quick else None],
        "test": np.arange(18 * 24, 21 * 24, 6)[: 3 if args.quick else None],
    }
    # Validation: the climatology of the training days, which end where the validation
    # days begin.  Test: the same rule, a climatology of every day before the test days
    # (1–18; a user predicting day 19 has them), and, for comparison, the training days'.
    fitted, before_test = (
        methods_for(bgs, zero, fits),
        methods_for(backgrounds(BEFORE_TEST), zero, fits),
    )
    print("validation frames (days 17–18), station cells:", flush=True)
    val = dict(evaluate_all(fitted, era5_task(frames["validation"])))
    test, rand = {}, {}
    for label, methods in (("1–18", before_test), ("1–16", fitted)):
        print(f"test frames (days 19–21), background of days {label}, station cells:", flush=True)
        test[label] = dict(evaluate_all(methods, era5_task(frames["test"])))
        print("test frames, random 10 % of the cells:", flush=True)
        rand[label] = dict(evaluate_all(methods, random_cells_task(frames["test"])))
    total = (time.perf_counter() - start) / 60.0
    text = report(val, test, rand, args.budgets, total)
    print(text)
    if not args.no_write:
        write_section("background_era5", text)
        print("wrote the background_era5 section of docs/benchmarks.md")


def methods_for(bgs: dict, zero: xnp.NeuralProcess, fits: dict) -> dict:
    """Every method, each given each background variant of ``bgs``."""
    methods = {}
    for kind, bg in bgs.items():
        label = "" if bg is None else f", {kind} background"
        for cal in (False, True):
            extra = ", calibrate=True" if cal else ""
            methods[f"xnp gp-sphere zero-shot, trend='linear'{extra}{label}"] = (
                lambda c, t, b=bg, ca=cal: xnp.predict(zero, c, t, trend="linear",
                                                       calibrate=ca, background=b))  # fmt: skip
        if kind == "hourly":  # the fine-tune learned the departures from this one
            for (minutes, tuned), cal in itertools.product(fits.items(), (False, True)):
                extra = ", calibrate=True" if cal else ""
                methods[
                    f"xnp fine-tuned on the departures ({minutes:g} min, "
                    f"{tuned.training['step']} steps), trend='linear'{extra}{label}"
                ] = lambda c, t, b=bg, ca=cal, m=tuned: xnp.predict(m, c, t, trend="linear",
                                                           calibrate=ca, background=b)  # fmt: skip
        methods[KRIGING + label] = departures_of(OrdinaryKriging("spherical").predict, bg)
        methods[GP + label] = departures_of(GaussianProcess("matern52").predict, bg)
    return methods


def departures_of(predict, background: xr.DataArray | None):
    """A baseline given the departures from ``background`` (by xnp's own two functions)."""
    if background is None:
        return predict
    field = {"t2m": background}
    return lambda c, t: restore(predict(subtract(c, field), t), field)


def chosen(val: dict, prefix: str) -> str:
    """The row of a path (its name starts with ``prefix``) with the lowest validation NLL."""
    return min((n for n in val if n.startswith(prefix)), key=lambda n: val[n][1])


def goals(test: dict, rand: dict, name: str) -> list[tuple[str, bool]]:
    """Issue 28's goals for the row ``name``, against baselines with and without its background."""
    label = name.split(", ")[-1] if name.endswith("background") else None
    same = [KRIGING + (f", {label}" if label else ""), GP + (f", {label}" if label else "")]
    raw = [KRIGING, GP]
    ours, r_ours = test[name], rand[name]
    return [
        ("RMSE ≤ 0.58 K", ours[0] <= 0.58),
        ("NLL below kriging and the Matérn GP without a background",
         ours[1] < min(test[b][1] for b in raw)),
        ("CRPS below them", ours[2] < min(test[b][2] for b in raw)),
        ("NLL below kriging and the Matérn GP given the same background",
         ours[1] < min(test[b][1] for b in same)),
        ("CRPS below them", ours[2] < min(test[b][2] for b in same)),
        ("RMSE below them", ours[0] < min(test[b][0] for b in same)),
        ("95 % coverage in [0.93, 0.97]", 0.93 <= ours[4] <= 0.97),
        ("random 10 %: RMSE, NLL and CRPS below the Matérn GP given the same background",
         all(r_ours[i] < rand[same[1]][i] for i in range(3))),
    ]  # fmt: skip


def report(val: dict, test: dict, rand: dict, budgets: list[float], total: float) -> str:
    rows = lambda d: [(n, v) for n, v in d.items()]  # noqa: E731
    zero = chosen(val, "xnp gp-sphere zero-shot")
    tuned = chosen(val, "xnp fine-tuned")
    text = (
        "## Interpolating departures from a climatology (`background=`, issue 28)\n\n"
        f"`{COMMAND}`: {total:.0f} min (the fine-tune cached in `~/.cache/xnp/{CACHE.name}`). "
        f"Machine: {machine()}.\n\n"
        "The task of the `finetune_era5` section (ERA5 UK 2 m temperature; context: the 218 "
        "HadISD station cells, or one random 10 % of the cells; targets: every other cell; "
        "scores per frame, averaged), with a *background* for every method: the mean per "
        "cell of the days before the frames predicted (`mean`), or per cell and hour of day "
        "(`hourly`, `ds.t2m.groupby('time.hour').mean()`, read at each frame's hour). "
        "The days the background is the climatology of follow one rule, fixed before any "
        "test row was computed: every day before the frames predicted, as a user predicting "
        "a day has them. For the validation frames (days 17–18) these are the training "
        "days 1–16; for the test frames (days 19–21), days 1–18 (training and validation; "
        "the rows with the training days' background, 1–16, are given for comparison). "
        "Each method "
        "interpolates the observations' departures from the background, which is added back "
        "at the targets: xnp by `predict(..., background=)`, kriging and the GP by the same "
        "functions (`xnp.prediction.background.subtract` and `restore`), so all see identical "
        "inputs. The fine-tuned model is `gp-sphere` fine-tuned on the departures of days "
        f"1–16 from their hourly climatology ({' or '.join(f'{b:g}' for b in budgets)} min, "
        "`time_budget=`, clustered tasks and "
        "peak learning rate 1e-4 as in `finetune_era5`, validated on days 17–18); it is not "
        "refitted for the test days. The row "
        "of each path that the goals are stated for is the one with the lowest NLL on the "
        "validation days (17–18; the background variant and `calibrate=` are chosen there), "
        f"never on the test frames: zero-shot **{zero}**; fine-tuned **{tuned}**.\n\n"
        "**Validation frames (days 17–18, 8 frames), station cells, background of days "
        "1–16:**\n\n" + table(rows(val))
    )  # fmt: skip
    for days in test:
        text += (
            f"\n\n**Test frames (days 19–21, 12 frames), station cells, background of days "
            f"{days}:**\n\n" + table(rows(test[days]))
            + f"\n\n**Test frames, a random 10 % of the cells as context, background of days "
            f"{days}:**\n\n" + table(rows(rand[days]))
        )  # fmt: skip
    for days in test:
        text += f"\n\nGoals of issue 28, on the test frames, background of days {days}:"
        for name in (zero, tuned):
            met = "; ".join(
                f"{g}: {'met' if ok else 'not met'}"
                for g, ok in goals(test[days], rand[days], name)
            )
            text += f"\n\n* {name}: {met}."
    plain = "xnp gp-sphere zero-shot, trend='linear', calibrate=True"
    hourly = plain + ", hourly background"
    first = next(iter(test))
    gains = [f"{d[plain][0]:.3f} → {d[hourly][0]:.3f} K" for d in (val, test[first], rand[first])]
    text += (
        "\n\nWhat the hourly background brings the zero-shot model (RMSE, calibrated, without "
        f"→ with): validation {gains[0]}, test {gains[1]}, test with random 10 % context "
        f"{gains[2]}; kriging: {val[KRIGING][0]:.3f} → {val[KH][0]:.3f} K and "
        f"{test[first][KRIGING][0]:.3f} → {test[first][KH][0]:.3f} K (test: background of "
        f"days {first}). "
        "How much a background helps depends on how well it describes the day, which a user "
        "with a longer climatology (years, not weeks) is better placed to get."
    )
    return text + "\n"


if __name__ == "__main__":
    main()
