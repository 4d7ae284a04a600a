"""The parsers of ``xnp evaluate``, ``xnp calibrate`` and ``xnp place``.

Scoring a prediction, fitting a model's std to held-out data, and choosing new
observation sites.
"""

from __future__ import annotations

from typing import Any

from xnp.cli.options import parse_names, positive_int
from xnp.cli.parser_base import EPILOG, Formatter, add_common, command

__all__ = ["add_calibrate", "add_evaluate", "add_place"]


def add_evaluate(subs: Any) -> None:
    """Add ``xnp evaluate`` to the subcommands ``subs``."""
    p = subs.add_parser(
        "evaluate", help="score a prediction against the truth",
        description="Score the prediction PRED (xnp predict --out) against observed values "
        "in TRUTH and print a table of the scores (xnp.evaluate).",
        epilog=EPILOG, formatter_class=Formatter,
    )  # fmt: skip
    p.add_argument("pred", metavar="PRED", help="prediction: netCDF file or zarr store")
    p.add_argument("truth", metavar="TRUTH", help="true values: netCDF file or zarr store")
    p.add_argument(
        "--variables",
        type=parse_names,
        metavar="NAMES",
        help="comma-separated variables to score (default: every predicted one)",
    )
    p.add_argument(
        "--dim",
        type=parse_names,
        metavar="DIMS",
        help="comma-separated dimensions to average over, e.g. lat,lon for scores per time "
        "(default: all, one score per variable)",
    )
    p.add_argument("--out", metavar="FILE", help="also write the scores to .nc or .zarr")
    p.add_argument(
        "--format",
        choices=("zarr", "netcdf"),
        help="format of --out (default: from its extension)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    add_common(p)
    p.set_defaults(func=command("evaluate_command", "run_evaluate"), _parser=p)


def add_calibrate(subs: Any) -> None:
    """Add ``xnp calibrate`` to the subcommands ``subs``."""
    p = subs.add_parser(
        "calibrate", help="fit a model's predictive std to held-out data",
        description="Fit one factor per variable of the predictive std of MODEL to the "
        "held-out DATA (tasks drawn as the fit drew its validation tasks; the factor that "
        "minimises their NLL), print it and save the model with it to --out "
        "(xnp.calibrate).  Every prediction of the saved model uses it.",
        epilog=EPILOG, formatter_class=Formatter,
    )  # fmt: skip
    p.add_argument("model", metavar="MODEL", help="a model directory written by xnp fit")
    p.add_argument("data", metavar="DATA", help="held-out data: netCDF file or zarr store")
    p.add_argument("--out", metavar="DIR", required=True, help="where to save the model")
    p.add_argument("--batches", type=positive_int, default=8, metavar="N",
                   help="batches of tasks to draw (default: %(default)s)")  # fmt: skip
    p.add_argument("--seed", type=int, default=0, help="seeds the tasks (default: %(default)s)")
    add_common(p)
    p.set_defaults(func=command("calibrate_command", "run_calibrate"), _parser=p)


def add_place(subs: Any) -> None:
    """Add ``xnp place`` to the subcommands ``subs``."""
    p = subs.add_parser(
        "place", help="choose new observation sites greedily",
        description="Choose N new observation sites among the points of CANDIDATES that "
        "most improve the prediction of REGION from the observations in CONTEXT "
        "(xnp.placement.place_sensors), print them and write the result to --out.",
        epilog=EPILOG, formatter_class=Formatter,
    )  # fmt: skip
    p.add_argument("model", metavar="MODEL", help="model directory or pretrained name")
    p.add_argument("context", metavar="CONTEXT",
                   help="observations: netCDF, zarr or CSV; with several times, the sites "
                   "serve them all (scores averaged over the times)")  # fmt: skip
    p.add_argument("candidates", metavar="CANDIDATES", help="where a site may go (any layout)")
    p.add_argument("--region", metavar="FILE", help="points to map (default: CANDIDATES)")
    p.add_argument("--variable", metavar="NAME", help="the variable of CONTEXT (zero-shot)")
    p.add_argument("-n", "--n-sites", type=positive_int, default=5, metavar="N",
                   help="sites to choose (default: %(default)s)")  # fmt: skip
    p.add_argument(
        "--acquisition",
        choices=("mean_std", "mean_variance", "std"),
        default="mean_std",
        help="what a site should lower: the mean predictive std over the region, the mean "
        "variance, or (std) go where the std is largest (default: %(default)s)",
    )
    p.add_argument(
        "--trend",
        choices=["none", "own", "constant", "linear"],
        default="none",
        help="zero-shot models: score the map made with this trend, as xnp predict --trend "
        "(own: the model's own, linear for gp-sphere; the map's std then includes the "
        "trend estimate's, which each candidate lowers; default: %(default)s, the network "
        "alone)",
    )
    p.add_argument("--weights", metavar="NAME",
                   help="a data variable of the region file (or of CANDIDATES without "
                   "--region): how much each point counts in the region's mean, e.g. its "
                   "area (default: every point the same)")  # fmt: skip
    p.add_argument("--batch-size", type=positive_int, default=64, metavar="N",
                   help="candidates tried per pass (default: %(default)s)")  # fmt: skip
    p.add_argument("--lazy", action="store_true",
                   help="lazy greedy: after the first site, retry candidates in order of their "
                   "last improvement and stop when none can beat the best (much faster for "
                   "many sites; mean_std and mean_variance only)")  # fmt: skip
    p.add_argument("--out", metavar="FILE", required=True, help="result: .nc or .zarr")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    p.add_argument(
        "--no-progress", dest="progress", action="store_false", help="hide the progress bar"
    )
    add_common(p)
    p.set_defaults(func=command("place_command", "run_place"), _parser=p)
