"""``xnp predict``: a saved or pretrained model, conditioned on a file, streamed to zarr or netCDF.

The variables to predict and the ``--time`` selection are checked here, before
any work, by the library's own rules (:func:`xnp.prediction.context.zero_shot_variable`,
:func:`xnp.prediction.frames.select_times`), and their refusals told in terms of the
command's options.  The model and :mod:`xnp.api.predict` are imported only when the
command runs.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import time
from typing import Any

import numpy as np
import xarray as xr

from xnp.cli.checks import check_variables, open_sources, zero_shot_context
from xnp.cli.console import one_line
from xnp.cli.options import parse_time
from xnp.data.normalise import is_zero_shot
from xnp.errors import (
    ConfigError,
    CoordinateError,
    DimensionError,
    EmptyDataError,
    VariableNotFoundError,
    XnpError,
)
from xnp.storage import check_not_input, check_output, open_data, output_format, write_dataset

__all__ = ["run_predict"]

log = logging.getLogger(__name__)


def _default_chunks(model: Any, template: xr.Dataset) -> dict[str, int]:
    """About 4096 target points per dask block over the template's spatial dims."""
    from xnp.data.coords import find_coords

    # the names of the training data, when the targets use them too (as predict does)
    coords = model.coords
    names = {k: coords[k] for k in ("lat", "lon")
             if isinstance(coords.get(k), str) and coords[k] in template.variables}  # fmt: skip
    dims = find_coords(template, **names).point_dims
    size = max(1, round(4096 ** (1.0 / max(len(dims), 1))))
    return dict.fromkeys(dims, size)


def run_predict(args: argparse.Namespace, files: contextlib.ExitStack) -> int:
    """``xnp predict``: condition MODEL on CONTEXT, predict at TARGETS, write ``--out``.

    The variables, ``--time`` and ``--out`` are checked before any work; the
    prediction is lazy and computed block by block while it is written.

    Takes the parsed command line and the stack that closes the files it opens;
    returns the exit status, 0 (failures raise, and :func:`xnp.cli.main` reports them).
    """
    # the output first: a wrong --out is refused before the model and JAX are loaded
    fmt = output_format(args.out, args.format)
    inputs = {"CONTEXT": args.context, "TARGETS": args.targets}
    inputs.update({f"context source {n!r}": p for n, p in args.context_source or []})
    if args.background:
        inputs["background"] = args.background
    check_not_input(args.out, inputs)
    check_output(args.out, fmt, args.overwrite)

    from xnp.api.predict import predict
    from xnp.shipped import resolve_model

    model = resolve_model(args.model)
    context = files.enter_context(open_data(args.context, what="context"))
    context = zero_shot_context(model, context, args.variable)
    variables = _context_variables(model, context)
    when = parse_time(args.time)
    if when is not None:
        _check_time(model, context, variables[0], args.time, when)
    targets = None
    if args.targets:
        targets = files.enter_context(open_data(args.targets, what="targets"))
    template = targets if targets is not None else context
    chunks = args.chunks or _default_chunks(model, template)
    unknown = sorted(set(chunks) - {str(d) for d in template.dims})
    if unknown:
        raise DimensionError(
            f"--chunks names {unknown}, which are not dimensions of the targets "
            f"({', '.join(map(str, template.dims))})."
        )
    kwargs: dict[str, Any] = {}
    if args.background:
        background = files.enter_context(open_data(args.background, what="background"))
        kwargs["background"] = _background(background, variables, args.background)
    if args.lead_time is not None:
        kwargs["lead_time"] = args.lead_time
    start = time.perf_counter()
    pred = predict(
        model, context, targets, time=when, context_radius=args.context_radius,
        chunks=chunks, memory_budget=args.memory_budget, trend=args.trend,
        context_sources=open_sources(args, files), max_context=args.max_context,
        seed=args.seed, calibrate=args.calibrate, **kwargs,
    )  # fmt: skip
    first = pred[f"{variables[0]}_mean"]
    log.info("predicting %s at %s points in %d dask blocks", ", ".join(variables),
             f"{first.size:,}", getattr(first.data, "npartitions", 1))  # fmt: skip
    path = write_dataset(pred, args.out, fmt=fmt, overwrite=args.overwrite,
                         progress=args.progress)  # fmt: skip
    log.info("wrote %s in %.1f s", path, time.perf_counter() - start)
    print(f"prediction: {path}")
    return 0


def _background(background: xr.Dataset, variables: list[str], path: str) -> dict:
    """The ``--background`` file's field for each predicted variable."""
    names = [str(v) for v in background.data_vars]
    if all(v in names for v in variables):
        return {v: background[v] for v in variables}
    if len(names) == 1 and len(variables) == 1:
        return {variables[0]: background[names[0]]}
    raise VariableNotFoundError(
        f"--background {path} holds {', '.join(map(repr, names)) or 'no variables'}; it needs "
        f"one named after each predicted variable ({', '.join(map(repr, variables))}), or a "
        "single variable for a single predicted one."
    )


def _context_variables(model: Any, context: xr.Dataset) -> list[str]:
    """The variables ``model`` will predict from ``context``; an error if it lacks them.

    A fitted model predicts its own variables, which the context must hold.  A
    zero-shot (pretrained) model predicts whichever single variable the context
    holds, whatever its name: the rule of
    :func:`xnp.prediction.context.zero_shot_variable`, whose refusal is told here
    with the option that fixes it.
    """
    if not is_zero_shot(model):
        check_variables(context, model.variables, "context")
        return list(model.variables)
    from xnp.prediction.context import zero_shot_variable

    try:
        model = zero_shot_variable(model, context)
    except ConfigError as err:
        names = [str(v) for v in context.data_vars]
        raise VariableNotFoundError(
            f"a zero-shot model predicts the one variable its context holds, and the context "
            f"holds {len(names)} ({', '.join(map(repr, names)) or 'none'}); choose one with "
            "--variable NAME."
        ) from err
    return [str(v) for v in model.variables]


def _check_time(model: Any, context: xr.Dataset, variable: str, text: str, when: Any) -> None:
    """Raise a clear error when the ``--time`` value ``when`` selects no time of ``context``.

    The selection is only checked here (the prediction selects again), by
    :func:`xnp.prediction.frames.select_times`; its refusal is told in terms of
    ``--time``: a label that is not in the context, an unreadable label (the
    error xarray raised, which the refusal carries as its cause) or an empty range.
    """
    from xnp.data.coords import find_coords
    from xnp.prediction.frames import select_times

    coords = getattr(model, "coords", None) or {}
    names = {k: coords[k] for k in ("lat", "lon")
             if isinstance(coords.get(k), str) and coords[k] in context.variables}  # fmt: skip
    try:
        layout = find_coords(context, variable, **names)
    except XnpError:
        return  # the prediction reports what is wrong with the coordinates
    name = layout.time
    if name is None or layout.time_dim is None or name not in context.indexes:
        return  # no time axis to select from: the prediction decides what --time means
    times = context[name]
    span = f"{times.size} times, {_label(times.min())} .. {_label(times.max())}"
    try:
        select_times(context, layout, when)
    except CoordinateError as err:
        cause = err.__cause__
        if isinstance(cause, KeyError):
            raise CoordinateError(
                f"--time {text} is not a time of the context ({span}); give one of its times "
                "or an inclusive range START..END."
            ) from cause
        # e.g. a label that is no date (a ValueError or TypeError of xarray's)
        raise CoordinateError(
            f"cannot select --time {text} from the context ({span}): {one_line(cause or err)}"
        ) from cause
    except EmptyDataError as err:
        raise CoordinateError(f"--time {text} selects no time of the context ({span}).") from err


def _label(value: xr.DataArray) -> str:
    """A time (or other coordinate value) for messages, datetimes to the second."""
    v = value.values
    return str(v.astype("datetime64[s]")) if np.issubdtype(v.dtype, np.datetime64) else str(v)
