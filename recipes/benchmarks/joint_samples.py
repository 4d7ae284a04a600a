"""Joint samples of an ERA5 map: cost, calibration of a regional mean, correlation check.

    python recipes/benchmarks/joint_samples.py [--samples 32] [--no-write] [--quick]

1. **Cost.** The shipped ``gp-sphere`` (zero-shot, ``trend="linear"``) conditions on
   ERA5 UK 2 m temperature at the 218 HadISD station cells and draws ``K`` joint
   samples of the full 33 × 49 map (1,617 cells, the stations' included) with
   ``predict(..., samples=K)`` at ``sample_step`` 64 and 16: seconds per sample.
2. **A regional mean with its uncertainty.** For each of the 12 test frames (days
   19–21, six-hourly), the mean temperature over the box 51–53° N, 3° W–0° from
   each sample: whether their 90 % interval holds the true box mean, and the share
   of samples below it (a PIT value: spread over 0–1 when calibrated); the same
   from independent draws of the marginals (all cells in one step), which ignore
   the correlations between cells (each draw still adds the trend's shared error).
3. **Correlations** against the exact GP posterior on a small synthetic field (the
   protocol of ``tests/test_samples.py``): mean absolute error of the correlation
   matrix, joint samples against independent draws.

Writes the ``joint_samples`` section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
import stations
from _report import machine, write_section

import xnp

COMMAND = "python recipes/benchmarks/joint_samples.py"
BOX = {"lat": (51.0, 53.0), "lon": (-3.0, 0.0)}


def context_and_grid(era5, time_index: int):
    frame = era5.isel(time=time_index)
    cells = stations.station_cells(era5)
    context = stations.as_points(era5.isel(time=[time_index]), cells, "station").isel(time=0)
    grid = frame.drop_vars("t2m")
    return context, grid, frame


def box_mean(field) -> np.ndarray:
    lat = field.latitude.values
    lon = field.longitude.values
    sel = field.isel(
        latitude=np.flatnonzero((lat >= BOX["lat"][0]) & (lat <= BOX["lat"][1])),
        longitude=np.flatnonzero((lon >= BOX["lon"][0]) & (lon <= BOX["lon"][1])),
    )
    return np.asarray(sel.mean(["latitude", "longitude"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=32)
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--quick", action="store_true", help="4 samples, 2 frames; no docs")
    args = parser.parse_args()
    k = 4 if args.quick else args.samples
    era5 = stations.open_era5()
    model = xnp.pretrained("gp-sphere")
    n_cells = era5.sizes["latitude"] * era5.sizes["longitude"]
    frames = np.arange(18 * 24, 21 * 24, 6)[: 2 if args.quick else None]
    warnings.simplefilter("ignore")
    # 1. cost per sample
    context, grid, _ = context_and_grid(era5, int(frames[0]))
    cost = {}
    for step in (64, 16):
        xnp.predict(
            model, context, grid, trend="linear", calibrate=False, samples=2, sample_step=step
        )  # compile
        t0 = time.perf_counter()
        xnp.predict(
            model, context, grid, trend="linear", calibrate=False, samples=k, sample_step=step
        )
        cost[step] = (time.perf_counter() - t0) / k
        print(f"sample_step {step}: {cost[step]:.2f} s per sample of {n_cells} cells", flush=True)
    # a worked example: P(box mean warmer than the training days' mean at that hour)
    context, grid, frame = context_and_grid(era5, int(frames[0]))
    hour = int(era5.time.dt.hour[int(frames[0])])
    train = era5.isel(time=slice(0, 16 * 24))
    usual = float(np.mean(box_mean(train.t2m.where(train.time.dt.hour == hour, drop=True))))
    out = xnp.predict(model, context, grid, trend="linear", calibrate=False, samples=k, seed=0)
    means = box_mean(out.t2m_samples)
    example = (str(era5.time.values[int(frames[0])])[:16], usual, float((means > usual).mean()),
               float(np.quantile(means, 0.05)), float(np.quantile(means, 0.95)),
               float(box_mean(frame.t2m)))  # fmt: skip
    print("example", example, flush=True)
    # 2. the box mean: interval coverage and PIT, joint against independent
    rows = {"joint (sample_step 64)": 64, "independent draws": n_cells}
    stats = {name: {"covered": [], "pit": [], "width": []} for name in rows}
    for i in frames:
        context, grid, frame = context_and_grid(era5, int(i))
        truth = float(box_mean(frame.t2m))
        for name, step in rows.items():
            out = xnp.predict(model, context, grid, trend="linear", calibrate=False, samples=k,
                              sample_step=step, seed=int(i))  # fmt: skip
            means = box_mean(out.t2m_samples)
            lo, hi = np.quantile(means, [0.05, 0.95])
            stats[name]["covered"].append(lo <= truth <= hi)
            stats[name]["pit"].append(float((means < truth).mean()))
            stats[name]["width"].append(hi - lo)
        print(f"frame {i}: truth {truth:.2f} K", flush=True)
    # 3. correlations against the exact GP posterior (tests/test_samples.py)
    import test_samples as ts

    s, f, ctx_idx, tgt_idx = ts.make_field()
    truth_corr = ts.posterior_correlation(s, ctx_idx, tgt_idx)
    errors = {}
    for name, step in (("joint, sample_step 1", 1), ("independent draws", len(tgt_idx))):
        n = 40 if args.quick else 200
        out = xnp.predict(model, ts.points(s, f, ctx_idx), ts.points(s, f, tgt_idx, False),
                          samples=n, sample_step=step, seed=1)  # fmt: skip
        errors[name] = ts.correlation_error(out.field_samples.values, truth_corr)
    lines = [
        f"## Joint samples (`{COMMAND}`, issue 30)\n",
        f"Machine: {machine()}. The shipped `gp-sphere`, zero-shot with `trend='linear'`, "
        "conditioned on ERA5 UK 2 m temperature at the 218 HadISD station cells.\n",
        f"**Cost** of joint samples of the whole {era5.sizes['latitude']} × "
        f"{era5.sizes['longitude']} map ({n_cells:,} cells), {k} samples drawn together: "
        + ", ".join(f"{cost[s]:.2f} s per sample with `sample_step={s}`" for s in cost)
        + ".\n",
        f"**The mean over 51–53° N, 3° W–0°** on the {len(frames)} test frames (days 19–21, "
        f"six-hourly), from {k} samples per frame: how often the 90 % interval of the "
        "samples' box means holds the true box mean, its mean width, and the PIT values "
        "(the share of samples below the truth; calibrated: spread over 0–1).\n",
        "| draws | 90 % interval covers | mean width (K) | PIT values |\n|---|---|---|---|",
    ]
    for name, st in stats.items():
        pit = ", ".join(f"{p:.2f}" for p in st["pit"])
        lines.append(f"| {name} | {np.mean(st['covered']):.2f} | {np.mean(st['width']):.2f} "
                     f"| {pit} |")  # fmt: skip
    when, usual, p_warm, lo, hi, truth = example
    lines.append(
        f"\n**A worked example.** At {when.replace('T', ' ')} the {k} samples put the box "
        f"mean between {lo:.2f} and {hi:.2f} K (90 %), and the probability that it exceeds "
        f"the training days' mean at that hour ({usual:.2f} K) at {p_warm:.2f}; the true box "
        f"mean was {truth:.2f} K."
    )
    lines.append(
        "\n**Correlations** on a small GP field with a known kernel (8 observations, 10 "
        "neighbouring targets; `tests/test_samples.py`): mean absolute error of the samples' "
        "correlation matrix against the exact GP posterior's: "
        + ", ".join(f"{n} {e:.3f}" for n, e in errors.items())
        + ".\n"
    )
    text = "\n".join(lines)
    print(text)
    if not (args.no_write or args.quick):
        write_section("joint_samples", text)


if __name__ == "__main__":
    main()
