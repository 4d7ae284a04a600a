"""``xnp calibrate``: fit a saved model's std to held-out data and save the result.

Imports JAX (through :mod:`xnp.api.calibrate`) only when the command runs.
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from xnp.cli.checks import check_model_out
from xnp.errors import UsageError
from xnp.storage import open_data

__all__ = ["run_calibrate"]


def run_calibrate(args: argparse.Namespace, files: contextlib.ExitStack) -> int:
    """``xnp calibrate``: save MODEL with std factors fitted on DATA to ``--out``.

    Takes the parsed command line and the stack that closes the files it opens;
    returns the exit status, 0 (failures raise, and :func:`xnp.cli.main` reports them).
    """
    out = Path(args.out).expanduser()
    if Path(args.model).expanduser().resolve() == out.resolve():
        raise UsageError(
            "--out is MODEL itself: xnp does not replace its inputs; save the calibrated "
            "model to another folder."
        )
    check_model_out(out)
    data = files.enter_context(open_data(args.data, what="held-out data"))
    from xnp.api.calibrate import calibrate
    from xnp.shipped import resolve_model

    model = calibrate(resolve_model(args.model), data, batches=args.batches, seed=args.seed)
    factors = ", ".join(
        f"{v} × {f:.3f}" for v, f in zip(model.variables, model.std_scale, strict=True)
    )
    print(f"std factors (from {model.training['std_scale_points']} held-out targets): {factors}")
    print(f"model: {model.save(out)}")
    return 0
