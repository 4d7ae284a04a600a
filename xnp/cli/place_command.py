"""``xnp place``: choose new observation sites greedily and write them.

Imports the placement module (and with it xarray and JAX) only when it runs.
"""

from __future__ import annotations

import argparse
import contextlib

from xnp.cli.checks import zero_shot_context
from xnp.errors import ConfigError
from xnp.storage import check_not_input, check_output, open_data, output_format, write_dataset

__all__ = ["run_place"]


def run_place(args: argparse.Namespace, files: contextlib.ExitStack) -> int:
    """``xnp place``: choose ``--n-sites`` among CANDIDATES, print them, write ``--out``.

    Takes the parsed command line and the stack that closes the files it opens;
    returns the exit status, 0 (failures raise, and :func:`xnp.cli.main` reports them).
    """
    fmt = output_format(args.out, None)
    check_not_input(args.out, {"CONTEXT": args.context, "CANDIDATES": args.candidates})
    check_output(args.out, fmt, args.overwrite)

    from xnp.placement import place_sensors
    from xnp.shipped import resolve_model

    model = resolve_model(args.model)
    context = files.enter_context(open_data(args.context, what="context"))
    context = zero_shot_context(model, context, args.variable)
    candidates = files.enter_context(open_data(args.candidates, what="candidates"))
    region = candidates
    if args.region:
        region = files.enter_context(open_data(args.region, what="region"))
    weights = None
    if args.weights:
        if args.weights not in region.data_vars:
            names = ", ".join(map(repr, map(str, region.data_vars))) or "none"
            raise ConfigError(
                f"--weights {args.weights!r} is not a data variable of the region file "
                f"(it holds {names}); name one of them, or drop --weights."
            )
        weights = region[args.weights]
        region = region.drop_vars(args.weights)
    result = place_sensors(
        model, context, candidates, region, args.n_sites, acquisition=args.acquisition,
        trend=None if args.trend == "own" else args.trend, weights=weights,
        batch_size=args.batch_size, lazy=args.lazy, progress=args.progress,
    )  # fmt: skip
    print(f"before: {args.acquisition} {float(result.acquisition_before):.4g}")
    for step in result.step.values:
        site = result.sel(step=step)
        print(f"site {int(step)}: lat {float(site.site_lat):.3f}, lon {float(site.site_lon):.3f}"
              f" -> {args.acquisition} {float(site.acquisition):.4g}")  # fmt: skip
    path = write_dataset(result, args.out, fmt=fmt, overwrite=args.overwrite)
    print(f"sites: {path}")
    return 0
