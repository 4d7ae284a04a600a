"""The ``xnp`` argument parser: its subcommands, their options and help.

The command line is built with :mod:`argparse` from the standard library: five
subcommands with plain options need no third-party CLI framework, so the command
adds no dependency.  Each subcommand's parser names the function that runs it
(``func``), imported from its command module only when it runs, so building the
parser (``xnp --help``, or a usage error) imports neither xarray nor JAX.
"""

from __future__ import annotations

import argparse
from typing import Any

from xnp.cli.defaults import (
    DEMO_FINE_TUNE_LEARNING_RATE,
    DEMO_FINE_TUNE_STEPS,
    DEMO_LEARNING_RATE,
    DEMO_MODEL,
    DEMO_START,
    DEMO_STEPS,
)
from xnp.cli.options import (
    parse_chunks,
    parse_duration,
    parse_hours,
    parse_names,
    parse_source,
    parse_validation,
    positive_float,
    positive_int,
    quantity,
)
from xnp.cli.parser_base import EPILOG, Formatter, add_common, command
from xnp.cli.parser_scores import add_calibrate, add_evaluate, add_place

__all__ = ["EPILOG", "build_parser"]


def _add_demo(subs: Any) -> None:
    p = subs.add_parser(
        "demo", help="fit, predict and plot on built-in synthetic data (about a minute)",
        description="Fit a tiny BSA-TNP on a synthetic Gaussian-process field on the sphere "
        "(offline; or on your own file with --data), predict the last, held-out time on a "
        "regular latitude/longitude grid from a few hundred scattered observations (lazily, "
        "over dask blocks), and write the model, the prediction and a plot into --out. "
        "Existing demo outputs in --out are replaced.",
        epilog=EPILOG, formatter_class=Formatter,
    )  # fmt: skip
    p.add_argument(
        "--out",
        default="xnp-demo",
        metavar="DIR",
        help="folder for model/, prediction.zarr (or .nc) and prediction.png "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--data",
        metavar="FILE",
        help="netCDF file or zarr store to use instead of the synthetic data (needs --variable)",
    )
    p.add_argument("--variable", metavar="NAME", help="variable of --data to learn")
    p.add_argument(
        "--model",
        metavar="MODEL",
        help="use this saved model directory (or pretrained model name) instead of fitting one",
    )
    p.add_argument(
        "--pretrained",
        metavar="NAME",
        help="use a pretrained model shipped with xnp zero-shot instead of fitting one "
        "(e.g. gp-sphere; see xnp.available_pretrained())",
    )
    p.add_argument(
        "--from-scratch",
        action="store_true",
        help=f"train {DEMO_MODEL} from a random initialisation instead of fine-tuning "
        f"the pretrained {DEMO_START} model",
    )
    p.add_argument(
        "--steps",
        type=positive_int,
        metavar="N",
        default=None,
        help=f"training steps (default: {DEMO_FINE_TUNE_STEPS} fine-tuning, {DEMO_STEPS} "
        "from scratch; a few for a smoke test)",
    )
    p.add_argument(
        "--learning-rate",
        type=positive_float,
        metavar="LR",
        default=None,
        help=f"peak learning rate (default: {DEMO_FINE_TUNE_LEARNING_RATE:g} fine-tuning, "
        f"{DEMO_LEARNING_RATE:g} from scratch)",
    )
    p.add_argument(
        "--context-points",
        type=positive_int,
        default=200,
        metavar="N",
        help="observations drawn from the held-out time as context (default: %(default)s)",
    )
    p.add_argument(
        "--resolution",
        type=positive_float,
        default=2.0,
        metavar="DEG",
        help="spacing of the prediction grid in degrees (default: %(default)s)",
    )
    p.add_argument(
        "--format",
        choices=("zarr", "netcdf"),
        default="zarr",
        help="format of the prediction (default: %(default)s)",
    )
    p.add_argument(
        "--seed", type=int, default=0, metavar="N", help="random seed (default: %(default)s)"
    )
    p.add_argument(
        "--no-progress", dest="progress", action="store_false", help="hide progress bars"
    )
    add_common(p)
    p.set_defaults(func=command("demo", "run_demo"), _parser=p)


def _source_option(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument(
        "--context-source",
        type=parse_source,
        action="append",
        metavar="NAME=PATH",
        help=f"{what} (netCDF or zarr; repeat for several)",
    )


def _add_fit(subs: Any) -> None:
    from xnp.data.tasks import DEFAULT_MAX_POINTS
    from xnp.models.registry import available_models, name_key

    p = subs.add_parser(
        "fit", help="train a neural process on a dataset and save it",
        description="Train a neural process to predict VARIABLE from the data in DATA "
        "(netCDF or zarr, gridded or stations, with or without time; or a CSV of stations, "
        "one row each) and save it to --out.",
        epilog=EPILOG, formatter_class=Formatter,
    )  # fmt: skip
    p.add_argument("data", metavar="DATA", help="training data: a netCDF file or zarr store")
    p.add_argument(
        "variable",
        metavar="VARIABLE",
        type=parse_names,
        help="variable to learn (several: comma-separated, e.g. t2m,u10)",
    )
    p.add_argument(
        "--out",
        required=True,
        metavar="MODEL_DIR",
        help="directory to save the model to (replaced if it holds an xnp model)",
    )
    p.add_argument(
        "--model",
        default="bsa-tnp",
        type=name_key,  # case and _ vs - do not count, as in the registry
        choices=available_models(),
        metavar="NAME",
        help=f"architecture: {', '.join(available_models())} (default: %(default)s)",
    )
    p.add_argument(
        "--from",
        dest="start",
        metavar="MODEL",
        help="fine-tune a pretrained model (its name, e.g. gp-sphere, or a saved zero-shot "
        "model directory) instead of training --model from scratch (default: 500 steps)",
    )
    p.add_argument(
        "--trend",
        choices=("none", "constant", "linear"),
        help="with --from: remove each task's context mean (constant) or plane (linear), "
        "estimated by generalised least squares, before the model sees it; the model "
        "keeps it for prediction (default: the pretrained model's own, linear for "
        "gp-sphere; none: no trend)",
    )
    p.add_argument(
        "--tasks",
        choices=("spatial", "auto", "forecast"),
        default="spatial",
        help="spatial: interpolate at one time (what `xnp predict` does); forecast: "
        "predict LEAD hours ahead from 4 past frames; auto: xnp's default for the data, "
        "forecast tasks when it has a regular time axis (default: %(default)s)",
    )
    p.add_argument(
        "--lead",
        type=parse_hours,
        metavar="HOURS",
        help="forecast tasks: lead time(s) in hours, comma-separated for one model of "
        "several (e.g. 6,12,24; default: the frames' step)",
    )
    p.add_argument(
        "--baseline",
        choices=(
            "none",
            "persistence",
            "persistence+diurnal",
            "autoregressive",
            "autoregressive+spatial",
            "autoregressive+gradient",
        ),
        help="forecast tasks: predict the change from the last observation (persistence), "
        "plus the training days' mean change for the place and hour (persistence+diurnal), "
        "or plus a regression on that change and the changes since the earlier frames "
        "(autoregressive), and on their neighbourhood means (autoregressive+spatial), "
        "and on the local gradients of the last frame and its last change "
        "(autoregressive+gradient) "
        "(default: autoregressive for sub-daily steps, else "
        "persistence; none: the field itself)",
    )
    p.add_argument(
        "--baseline-input",
        action="store_true",
        help="forecast tasks: show the network the baseline forecast at every point as an "
        "input channel (helps with sparse context; costs time per step)",
    )
    p.add_argument(
        "--time-budget",
        type=parse_duration,
        metavar="DURATION",
        help="train for this wall-clock time, e.g. 10min or 1.5h, with the learning-rate "
        "schedule laid over it (--steps then caps it; default: no budget)",
    )
    p.add_argument(
        "--members",
        type=positive_int,
        default=1,
        metavar="K",
        help="fit K models with seeds SEED, SEED+1, ... and save them as one ensemble, "
        "which predicts the mixture of their predictions; --time-budget is shared "
        "between them (default: %(default)s)",
    )
    p.add_argument(
        "--max-points",
        type=positive_int,
        default=None,
        metavar="N",
        help="at most N context and N target points per task, with --tasks spatial "
        f"(default: {DEFAULT_MAX_POINTS}; --tasks auto always caps at {DEFAULT_MAX_POINTS})",
    )
    _source_option(
        p,
        "other observations of the variable added to every task's context "
        "(e.g. stations next to a grid); predict with the same names",
    )
    p.add_argument(
        "--covariates",
        type=parse_names,
        default=[],
        metavar="NAMES",
        help="comma-separated covariates: elevation, hour_of_day, solar_time, "
        "day_of_year or variables of DATA (default: none)",
    )
    p.add_argument(
        "--steps",
        type=positive_int,
        metavar="N",
        default=None,
        help="optimisation steps (default: 2000, or unlimited with --time-budget)",
    )
    p.add_argument(
        "--batch-size",
        type=positive_int,
        default=8,
        metavar="N",
        help="tasks per step (default: %(default)s)",
    )
    p.add_argument(
        "--learning-rate",
        type=positive_float,
        metavar="LR",
        default=None,
        help="peak learning rate of the warm-up + cosine schedule (default: 5e-4, 1e-4 "
        "with --from)",
    )
    p.add_argument(
        "--validation",
        type=parse_validation,
        default=0.1,
        metavar="FRACTION|DATES",
        help="held out for validation: a fraction of the time axis at its end, or "
        "times, as START/END dates (2019-03-17/2019-03-18, either end may be left "
        "open) or one date prefix (2019-03-20: that day); 0: none (default: "
        "%(default)s; none when the data has no time axis)",
    )
    p.add_argument(
        "--seed",
        type=int,
        metavar="N",
        default=0,
        help="seed of the initialisation and of the tasks (default: %(default)s)",
    )
    p.add_argument(
        "--ema",
        type=float,
        default=0.0,
        metavar="DECAY",
        help="keep a moving average of the parameters with this decay (e.g. 0.99) and "
        "validate, keep and save the average (default: none)",
    )
    p.add_argument(
        "--loss",
        choices=("nll", "crps"),
        default="nll",
        help="the training objective: the Gaussian NLL, or the CRPS of the Gaussian "
        "predictions; the kept parameters are those of its best validation value "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--checkpoint-dir", metavar="DIR", help="folder for periodic checkpoints (default: none)"
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue from the latest checkpoint in --checkpoint-dir",
    )
    p.add_argument(
        "--no-progress", dest="progress", action="store_false", help="hide the progress bar"
    )
    add_common(p)
    p.set_defaults(func=command("fit_command", "run_fit"), _parser=p)


def _add_predict(subs: Any) -> None:
    p = subs.add_parser(
        "predict", help="predict with a saved or pretrained model and write zarr or netCDF",
        description="Condition MODEL (a saved model directory, or the name of a pretrained "
        "model shipped with xnp) on the observations in CONTEXT and predict the mean and "
        "standard deviation of its variables at the points of TARGETS (any netCDF or zarr "
        "whose coordinates give the places: a grid, stations, ...; or a CSV of sites), "
        "or at every point of "
        "CONTEXT when TARGETS is left out (gap filling).  A pretrained (zero-shot) model "
        "predicts the one variable CONTEXT holds, whatever its name.  The prediction is "
        "computed lazily, one dask block at a time, while it is written.",
        epilog=EPILOG, formatter_class=Formatter,
    )  # fmt: skip
    p.add_argument(
        "model",
        metavar="MODEL",
        help="saved model directory (xnp fit --out) or the name of a pretrained model, "
        "e.g. gp-sphere (an existing path wins over a name)",
    )
    p.add_argument("context", metavar="CONTEXT", help="observations: netCDF file or zarr store")
    p.add_argument(
        "targets",
        metavar="TARGETS",
        nargs="?",
        help="file whose coordinates are the places to predict at "
        "(default: every point of CONTEXT)",
    )
    p.add_argument(
        "--out",
        required=True,
        metavar="FILE",
        help="output, .zarr or .nc (or any name with --format)",
    )
    p.add_argument(
        "--format",
        choices=("zarr", "netcdf"),
        help="output format (default: from the extension of --out)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    p.add_argument(
        "--variable",
        metavar="NAME",
        help="zero-shot (pretrained) models: the variable of CONTEXT to predict, when it "
        "holds several (default: its only variable)",
    )
    _source_option(
        p, "multi-source models: further observations under the names the model was fitted with"
    )
    p.add_argument(
        "--time",
        metavar="T",
        help="time to predict, e.g. 2020-01-01T06:00, or an inclusive range "
        "START..END (default: every time of CONTEXT)",
    )
    p.add_argument(
        "--lead-time",
        metavar="HOURS",
        help="forecast models only: lead time after --time, e.g. 6h (default: "
        "the lead the model was trained for)",
    )
    p.add_argument(
        "--context-radius",
        metavar="DIST",
        type=quantity("distance"),
        help="condition each block only on observations within this great-circle "
        "distance, e.g. 500km (default: all observations)",
    )
    p.add_argument(
        "--trend",
        choices=["none", "constant", "linear"],
        help="zero-shot models only: estimate the context's mean (constant) or plane "
        "(linear) by generalised least squares, with dense station clusters "
        "down-weighted as in kriging; the model interpolates the rest and the "
        "prediction reverts to the trend far from the observations (recommended for "
        "station networks with gaps; default: the model's own: linear for gp-sphere "
        "and the models fine-tuned from it, none for a model that records none; "
        "none: the plain mean)",
    )
    p.add_argument(
        "--max-context",
        type=int,
        metavar="N",
        help="condition on at most N observations per context set (a random subset, "
        "seeded by --seed): cheap conditioning on dense grids, e.g. the model's "
        "training max_context; a forecast baseline still reads every observation "
        "(default: all observations)",
    )
    p.add_argument(
        "--calibrate",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="rescale the predictive std by a 10-fold cross-validation of the context "
        "(interpolation only; 10 more conditionings per time); default: on for zero-shot "
        "and fine-tuned models with a trend (theirs, as gp-sphere's, or --trend) and at "
        "least 50 observations per time, off otherwise",
    )
    p.add_argument(
        "--background",
        metavar="PATH",
        help="netCDF or Zarr with a field the observations depart from (e.g. an hourly "
        "climatology with an hour dimension, from groupby('time.hour').mean()): the model "
        "interpolates the departures and the background is added back at the targets; "
        "its variable is the predicted one's name, or its only variable",
    )
    p.add_argument(
        "--seed", type=int, default=0, metavar="N",
        help="seed of the --max-context subset and of the --calibrate folds "
        "(default: %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--chunks",
        type=parse_chunks,
        metavar="DIM=N,...",
        help="dask chunks of the target dimensions, e.g. lat=64,lon=64 (default: "
        "about 4096 points per block)",
    )
    p.add_argument(
        "--memory-budget",
        default="1GiB",
        type=quantity("size"),
        metavar="SIZE",
        help="memory one chunk of targets may use on the device (default: %(default)s)",
    )
    p.add_argument(
        "--no-progress", dest="progress", action="store_false", help="hide the progress bar"
    )
    add_common(p)
    p.set_defaults(func=command("predict_command", "run_predict"), _parser=p)


def build_parser() -> argparse.ArgumentParser:
    """The ``xnp`` argument parser with its subcommands.

    Examples
    --------
    >>> sorted(build_parser().parse_args(["fit", "d.nc", "t2m", "--out", "m"]).variable)
    ['t2m']
    """
    from xnp._version import __version__

    parser = argparse.ArgumentParser(
        prog="xnp",
        description="Transformer neural processes for xarray: fit on gridded or station "
        "data, predict mean and standard deviation anywhere.  Run `xnp COMMAND --help` "
        "for the options of a command; `xnp demo` shows everything in about a minute.",
        epilog=EPILOG, formatter_class=Formatter,
    )  # fmt: skip
    parser.add_argument("--version", action="version", version=f"xnp {__version__}")
    group = parser.add_argument_group("output and logging")
    group.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="print only warnings and errors (and no progress bars)",
    )
    group.add_argument("-v", "--verbose", action="store_true", help="print debugging messages")
    group.add_argument(
        "--debug", action="store_true", help="show the full traceback when a command fails"
    )
    subs = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    for add in (_add_demo, _add_fit, _add_predict, add_evaluate, add_calibrate, add_place):
        add(subs)
    return parser
