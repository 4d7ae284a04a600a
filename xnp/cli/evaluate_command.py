"""``xnp evaluate``: score a prediction against the truth and print a table.

Imports :mod:`xnp.scoring.evaluation` only when the command runs.
"""

from __future__ import annotations

import argparse
import contextlib

from xnp.cli.tables import format_table
from xnp.errors import ConfigError, UsageError
from xnp.storage import check_not_input, check_output, open_data, output_format, write_dataset

__all__ = ["run_evaluate"]


def run_evaluate(args: argparse.Namespace, files: contextlib.ExitStack) -> int:
    """``xnp evaluate``: print the scores of PRED against TRUTH, and write them to ``--out``.

    Takes the parsed command line and the stack that closes the files it opens;
    returns the exit status, 0 (failures raise, and :func:`xnp.cli.main` reports them).
    """
    try:
        from xnp.scoring.evaluation import evaluate
    except ImportError as err:
        raise ConfigError(f"this xnp has no evaluation module (xnp.scoring): {err}") from err
    fmt = None
    if args.out:  # checked before the scores are computed and printed
        fmt = output_format(args.out, args.format)
        check_not_input(args.out, {"PRED": args.pred, "TRUTH": args.truth})
        check_output(args.out, fmt, args.overwrite)
    elif args.format is not None:
        raise UsageError("--format is the format of --out; give --out FILE too.")
    pred = files.enter_context(open_data(args.pred, what="prediction"))
    truth = files.enter_context(open_data(args.truth, what="truth"))
    result = evaluate(pred, truth, variables=args.variables, dim=args.dim).compute()
    print(format_table(result))
    if args.out:
        path = write_dataset(result, args.out, fmt=fmt, overwrite=args.overwrite)
        print(f"scores: {path}")
    return 0
