"""The ``xnp`` command: fit, predict, evaluate and a self-contained demo from the shell.

::

    xnp demo [--out DIR] [--steps N] [--data FILE --variable NAME] [--model MODEL]
    xnp fit DATA VARIABLE --out MODEL_DIR [--model NAME] [--steps N] ...
    xnp predict MODEL CONTEXT [TARGETS] --out FILE [--time T] [--chunks lat=64,lon=64] ...
    xnp evaluate PRED TRUTH [--dim DIMS] [--out FILE]

Data files are opened with xarray: a directory as a zarr store, a file as netCDF (or
whatever xarray's backends recognise).  Outputs are written
atomically (to a temporary path, renamed into place once complete), so an
interrupted run never leaves a half-written file under the requested name.

The command line is built with :mod:`argparse` from the standard library: four
subcommands with plain options need no third-party CLI framework, so the command
adds no dependency.

Exit status: 0 on success; 1 when the command fails at run time (missing or
unreadable file, unknown variable, incompatible model, ...), after printing
``xnp: error: <message>`` on stderr without a traceback (``--debug`` shows it);
2 for an invalid command line (unknown option, bad option value); 130 when
interrupted.  Informational messages and warnings go to stderr through
:mod:`logging` as ``xnp: ...`` (``--quiet`` keeps warnings and errors only); the
paths written go to stdout.

Examples
--------
>>> main(["--version"])  # doctest: +ELLIPSIS
xnp ...
0
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import logging
import math
import os
import re
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from xnp.errors import (
    ConfigError,
    CoordinateError,
    DimensionError,
    VariableNotFoundError,
    XnpError,
    XnpWarning,
)

__all__ = ["build_parser", "format_table", "main", "open_data", "write_dataset"]

log = logging.getLogger("xnp.cli")

#: Settings of ``xnp demo`` (small enough to finish in about a minute on two CPU cores).
DEMO_STEPS = 400
DEMO_MODEL = "bsa-tnp-tiny"
DEMO_MAX_POINTS = 128
DEMO_LEARNING_RATE = 1e-2

EPILOG = """\
exit status:
  0    success
  1    the command failed (missing or unreadable file, unknown variable,
       incompatible model, ...); the reason is printed as "xnp: error: ..."
  2    invalid command line (unknown option or bad option value)
  130  interrupted
"""


class UsageError(XnpError, ValueError):
    """The command line is inconsistent (exit status 2)."""


# -- small parsers for option values ----------------------------------------------------
def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), got {text!r}") from None
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), got {text!r}")
    return value


def _validation(text: str) -> float | str | slice:
    """``--validation``: a fraction, ``START/END`` dates, or one date (a prefix, e.g. a day)."""
    try:
        if re.fullmatch(r"\s*\d{4}\s*", text):  # a year, not a fraction
            raise ValueError(text)
        float(text)
    except ValueError:
        if text.count("/") > 1 or not text.strip(" /"):
            raise argparse.ArgumentTypeError(
                f"expected a fraction, a date or START/END dates, got {text!r}"
            ) from None
        if "/" in text:
            start, end = (part.strip() or None for part in text.split("/"))
            return slice(start, end)
        return text.strip()
    return _fraction(text)


def _names(text: str) -> list[str]:
    """``"a,b"`` → ``["a", "b"]``."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"expected comma-separated names, got {text!r}")
    return names


def parse_chunks(text: str) -> dict[str, int]:
    """Dask chunks from ``"lat=64,lon=64"``.

    Examples
    --------
    >>> parse_chunks("lat=64, lon=128")
    {'lat': 64, 'lon': 128}
    """
    chunks: dict[str, int] = {}
    for part in text.split(","):
        name, sep, size = part.partition("=")
        try:
            value = int(size)
        except ValueError:
            value = 0
        if not sep or not name.strip() or value < 1:
            raise argparse.ArgumentTypeError(
                f"expected chunks as DIM=SIZE[,DIM=SIZE...] with positive sizes, e.g. "
                f"lat=64,lon=64; got {text!r}"
            )
        chunks[name.strip()] = value
    return chunks


def _checked(what: str) -> Callable[[str], str]:
    """An argparse ``type`` that checks a ``"distance"`` or a ``"size"`` and keeps the text.

    A bad value is then a command-line error (exit status 2) before any work.
    """

    def check(text: str) -> str:
        from xnp.units import parse_bytes, parse_distance_km

        try:
            (parse_distance_km if what == "distance" else parse_bytes)(text)
        except XnpError as err:
            raise argparse.ArgumentTypeError(f"{what}: {err}") from err
        return text

    check.__name__ = what  # argparse names the type in its messages
    return check


def parse_source(text: str) -> tuple[str, str]:
    """A ``--context-source`` value ``NAME=PATH``.

    Examples
    --------
    >>> parse_source("stations=hadisd.nc")
    ('stations', 'hadisd.nc')
    """
    name, sep, path = text.partition("=")
    if not sep or not name.strip() or not path.strip():
        raise argparse.ArgumentTypeError(
            f"expected a context source as NAME=PATH, e.g. stations=hadisd.nc; got {text!r}"
        )
    return name.strip(), path.strip()


def _open_sources(args: argparse.Namespace, files: contextlib.ExitStack) -> dict | None:
    """The ``--context-source`` datasets, opened (None when there are none)."""
    pairs = args.context_source or []
    names = [n for n, _ in pairs]
    if len(set(names)) != len(names):
        raise UsageError(f"--context-source names must differ; got {names}.")
    return {
        n: files.enter_context(open_data(p, what=f"context source {n!r}")) for n, p in pairs
    } or None


def parse_time(text: str | None) -> Any:
    """A ``--time`` value: one label, or ``START..END`` for an inclusive range.

    Examples
    --------
    >>> parse_time("2000-01-02..2000-01-03")
    slice('2000-01-02', '2000-01-03', None)
    >>> parse_time("2000-01-02T06:00")
    '2000-01-02T06:00'
    """
    if text is None:
        return None
    start, sep, end = text.partition("..")
    if not sep:
        return text
    return slice(start or None, end or None)


# -- files --------------------------------------------------------------------------------
def _is_zarr(path: Path) -> bool:
    """Whether the existing ``path`` is read as zarr: when it is a directory.

    A file named ``.zarr`` is read as netCDF (``xnp predict --format netcdf`` may write one).
    """
    return path.is_dir()


def _zarr_consolidated(path: Path) -> bool:
    """Whether the zarr store at ``path`` has consolidated metadata (v2 or v3)."""
    if (path / ".zmetadata").is_file():
        return True
    meta = path / "zarr.json"
    if meta.is_file():
        try:
            return json.loads(meta.read_text()).get("consolidated_metadata") is not None
        except (ValueError, OSError):
            return False
    return False


def open_data(path: str | os.PathLike, *, what: str = "data") -> xr.Dataset:
    """Open a netCDF file or a zarr store lazily, with a clear error when that fails.

    Parameters
    ----------
    path : path
        A directory: a zarr store; a file: netCDF (or another format one of
        xarray's backends recognises), whatever its name.  A leading ``~`` is
        expanded.
    what : str
        What the file is, for error messages ("context", "truth", ...).

    Returns
    -------
    xr.Dataset

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    OSError
        If it cannot be read as a dataset.
    """
    p = Path(path).expanduser()
    if not p.exists():
        raise FileNotFoundError(errno.ENOENT, f"{what} file not found", str(p))
    try:
        if _is_zarr(p):
            return xr.open_zarr(p, consolidated=_zarr_consolidated(p))
        return xr.open_dataset(p)
    except (ValueError, TypeError, KeyError) as err:
        raise OSError(f"cannot read the {what} {p} as netCDF or zarr: {err}") from err


def output_format(path: str | os.PathLike, fmt: str | None) -> str:
    """``"zarr"`` or ``"netcdf"``: ``fmt`` if given, else from the extension of ``path``.

    Examples
    --------
    >>> output_format("pred.zarr", None), output_format("pred.nc", None)
    ('zarr', 'netcdf')
    """
    if fmt is not None:
        return fmt
    suffix = Path(path).suffix.lower()
    if suffix == ".zarr":
        return "zarr"
    if suffix in (".nc", ".nc4", ".netcdf", ".cdf"):
        return "netcdf"
    raise UsageError(
        f"cannot tell the output format from {str(path)!r}; end it in .zarr or .nc, or pass "
        "--format zarr|netcdf."
    )


@contextlib.contextmanager
def _progress(show: bool) -> Iterator[None]:
    """A dask progress bar on stderr for computations longer than a second."""
    if not show:
        yield
        return
    from dask.diagnostics import ProgressBar

    with ProgressBar(minimum=1.0, out=sys.stderr):
        yield


#: Files that make a directory a zarr store (v3, v2 group, v2 array): replaceable.
_ZARR_MARKERS = ("zarr.json", ".zgroup", ".zarray")


def check_output(path: str | os.PathLike, fmt: str, overwrite: bool) -> None:
    """Raise unless :func:`write_dataset` may write ``path`` (checked before any work).

    An existing output needs ``overwrite``; an existing directory is replaced only
    if it is a zarr store.
    """
    from xnp.files import check_replaceable

    target = Path(path).expanduser()
    _check_parent(target)
    if fmt == "netcdf" and target.is_dir():  # os.replace cannot put a file there
        raise IsADirectoryError(
            errno.EISDIR,
            "the output is a directory, and netCDF is written to a file; choose a file name "
            "(or --format zarr to replace a zarr store)",
            str(target),
        )
    if target.exists() and not overwrite:
        raise FileExistsError(
            errno.EEXIST, "the output exists (pass --overwrite to replace it)", str(target)
        )
    if fmt == "zarr":
        check_replaceable(target, _ZARR_MARKERS)


def _check_not_input(out: str | os.PathLike, inputs: dict[str, Any]) -> None:
    """Raise if the output path ``out`` is one of the ``inputs`` (``{what: path}``).

    An input is read while the output is written, and ``--overwrite`` is meant for
    an earlier output, never for the data: xnp does not replace its inputs.
    """
    target = Path(out).expanduser().resolve()
    for what, path in inputs.items():
        if path is not None and Path(path).expanduser().resolve() == target:
            raise ConfigError(
                f"--out {out} is the {what}; xnp never writes over its input data. "
                "Choose another --out."
            )


def _check_parent(target: Path) -> None:
    """Raise unless the folders above ``target`` exist as folders or can be created."""
    for parent in target.parents:
        if parent.exists():
            if not parent.is_dir():
                raise NotADirectoryError(
                    errno.ENOTDIR,
                    f"cannot write {target}: a file is in the way of its folder",
                    str(parent),
                )
            return


def _check_model_out(path: Path) -> None:
    """Raise unless a model can be saved to ``path`` (checked before training).

    :meth:`xnp.NeuralProcess.save` replaces only an xnp model directory (or an
    empty one); finding that out after hours of training would be too late.
    """
    from xnp.files import check_replaceable
    from xnp.saved_model import is_saved_model

    _check_parent(path)
    check_replaceable(path, "config.json", recognise=is_saved_model)


def write_dataset(
    ds: xr.Dataset,
    path: str | os.PathLike,
    *,
    fmt: str | None = None,
    overwrite: bool = False,
    progress: bool = False,
) -> Path:
    """Write ``ds`` (lazy or not) to zarr or netCDF, atomically.

    The data are written to a temporary path next to ``path`` and renamed into
    place once complete; dask-backed variables are computed block by block.

    Parameters
    ----------
    ds : Dataset
        What to write.
    path : path
        Destination (``.zarr`` or ``.nc``, or any name with ``fmt``; a leading ``~``
        is expanded).
    fmt : {"zarr", "netcdf"}, optional
        Format (default: from the extension).
    overwrite : bool
        Replace an existing ``path`` (a zarr store, or a file).
    progress : bool
        Show a dask progress bar on stderr.

    Returns
    -------
    Path
        ``path`` (with ``~`` expanded).

    Examples
    --------
    >>> import tempfile
    >>> out = write_dataset(xr.Dataset({"a": ("x", [1.0, 2.0])}), tempfile.mkdtemp() + "/a.nc")
    >>> xr.open_dataset(out).a.values.tolist()
    [1.0, 2.0]
    """
    from xnp.files import atomic_directory

    target = Path(path).expanduser()
    fmt = output_format(target, fmt)
    check_output(target, fmt, overwrite)
    ds = ds.drop_encoding()  # encodings (chunks, dtypes) copied from the inputs may not fit
    target.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "zarr":
        with atomic_directory(target, marker=_ZARR_MARKERS) as tmp, _progress(progress):
            ds.to_zarr(tmp, mode="w", consolidated=False)
        return target
    with _atomic_file(target) as tmp, _progress(progress):
        ds.to_netcdf(tmp)
    return target


@contextlib.contextmanager
def _atomic_file(target: Path) -> Iterator[Path]:
    """A temporary path beside ``target``, renamed to it when the block ends without error.

    An interrupted write never leaves a truncated file under the requested name.
    """
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def _save_figure(fig: Any, path: str | os.PathLike, **kwargs: Any) -> Path:
    """Save the matplotlib figure ``fig`` as PNG to ``path``, atomically.

    As :func:`write_dataset`: written next to ``path`` and renamed into place once
    complete, so an interrupted run never leaves a truncated image.
    """
    target = Path(path).expanduser()
    with _atomic_file(target) as tmp:
        fig.savefig(tmp, format="png", **kwargs)
    return target


# -- tables -------------------------------------------------------------------------------
def format_table(result: xr.Dataset, *, precision: int = 4) -> str:
    """A plain-text table of the (small) Dataset ``result``, e.g. evaluation scores.

    Scalars are listed one per line with their units; variables over dimensions are
    shown as tables indexed by those dimensions.

    Examples
    --------
    >>> scores = xr.Dataset(
    ...     {"rmse": ((), 1.23456, {"units": "K"}), "crps": ((), 0.5)},
    ... )
    >>> print(format_table(scores))
    rmse  1.235  K
    crps    0.5
    """
    lines: list[str] = []
    scalars = [n for n, v in result.data_vars.items() if v.ndim == 0]
    if scalars:
        rows = [
            (str(n), f"{float(result[n]):.{precision}g}", str(result[n].attrs.get("units", "")))
            for n in scalars
        ]
        width_n = max(len(r[0]) for r in rows)
        width_v = max(len(r[1]) for r in rows)
        lines += [f"{n:<{width_n}}  {v:>{width_v}}  {u}".rstrip() for n, v, u in rows]
    groups: dict[tuple[str, ...], list[str]] = {}
    for name, var in result.data_vars.items():
        if var.ndim:
            groups.setdefault(tuple(map(str, var.dims)), []).append(str(name))
    for names in groups.values():
        if lines:
            lines.append("")
        frame = result[names].to_dataframe()[names]
        lines.append(frame.to_string(float_format=lambda x: f"{x:.{precision}g}"))
    return "\n".join(lines)


# -- models -------------------------------------------------------------------------------
def _zero_shot(model: Any) -> bool:
    """Whether ``model`` standardises each context by its own statistics (pretrained)."""
    return getattr(model, "normalise", "fitted") == "context"


def _context_variables(model: Any, context: xr.Dataset) -> list[str]:
    """The variables ``model`` will predict from ``context``; an error if it lacks them.

    A fitted model predicts its own variables, which the context must hold.  A
    zero-shot (pretrained) model predicts whichever single variable the context
    holds, whatever its name.
    """
    names = [str(v) for v in context.data_vars]
    if _zero_shot(model):
        if len(model.variables) == 1 and len(names) == 1:
            return names
        if all(v in names for v in model.variables):
            return list(model.variables)
        raise VariableNotFoundError(
            f"a zero-shot model predicts the one variable its context holds, and the context "
            f"holds {len(names)} ({', '.join(map(repr, names)) or 'none'}); choose one with "
            "--variable NAME."
        )
    _check_variables(context, model.variables, "context")
    return list(model.variables)


def _check_time(model: Any, context: xr.Dataset, variable: str, text: str, when: Any) -> None:
    """Raise a clear error when the ``--time`` value ``when`` selects no time of ``context``.

    The selection is only checked here (the prediction selects again): a label that
    is not in the context, an unreadable label or an empty range would otherwise
    surface as a bare ``KeyError`` or ``ValueError`` from xarray.
    """
    from xnp.data.coords import find_coords

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
        selected = times.sel({name: when})
    except KeyError as err:
        raise CoordinateError(
            f"--time {text} is not a time of the context ({span}); give one of its times "
            "or an inclusive range START..END."
        ) from err
    except (ValueError, TypeError) as err:  # e.g. a label that is no date
        raise CoordinateError(
            f"cannot select --time {text} from the context ({span}): {_message(err)}"
        ) from err
    if selected.size == 0:
        raise CoordinateError(f"--time {text} selects no time of the context ({span}).")


def _label(value: xr.DataArray) -> str:
    """A time (or other coordinate value) for messages, datetimes to the second."""
    v = value.values
    return str(v.astype("datetime64[s]")) if np.issubdtype(v.dtype, np.datetime64) else str(v)


# -- commands -----------------------------------------------------------------------------
def _check_variables(data: xr.Dataset, variables: Sequence[str], what: str) -> None:
    missing = [v for v in variables if v not in data.data_vars]
    if missing:
        raise VariableNotFoundError(
            f"the {what} has no variable {', '.join(map(repr, missing))}; it holds "
            f"{', '.join(map(repr, map(str, data.data_vars))) or 'no data variables'}."
        )


def _train_config(steps: int, **overrides: Any) -> Any:
    """A TrainConfig whose logging and validation intervals suit a run of ``steps``."""
    from xnp.train import TrainConfig

    log_every = min(50, steps)
    validate_every = log_every * max(1, min(250, steps) // log_every)
    return TrainConfig(log_every=log_every, validate_every=validate_every,
                       checkpoint_every=validate_every * 2, **overrides)  # fmt: skip


def _time_dim(data: xr.Dataset, variable: str) -> str | None:
    from xnp.data.coords import find_coords

    layout = find_coords(data, variable)
    return layout.time_dim if layout.time_dim in data[variable].dims else None


def _cmd_fit(args: argparse.Namespace, files: contextlib.ExitStack) -> int:
    from xnp.api.fit import fit
    from xnp.api.sizes import DEFAULT_MAX_POINTS
    from xnp.data.tasks import SpatialTasks

    if args.max_points is not None and args.tasks != "spatial":
        raise UsageError(
            "--max-points caps the points of spatial tasks (--tasks spatial); --tasks auto "
            f"caps its tasks at {DEFAULT_MAX_POINTS} points. Leave out one of the two."
        )
    out = Path(args.out).expanduser()
    if args.checkpoint_dir and Path(args.checkpoint_dir).expanduser().resolve() == out.resolve():
        raise UsageError(
            "--out and --checkpoint-dir must be different folders: the model saved at the "
            "end would have to replace the checkpoints."
        )
    _check_model_out(out)  # before training, not after it
    data = files.enter_context(open_data(args.data))
    variables = args.variable
    _check_variables(data, variables, "data")
    validation: float | str | slice | None = args.validation or None
    if validation is not None and _time_dim(data, variables[0]) is None:
        if not isinstance(validation, float):  # dates given: they cannot be held out
            v = validation
            shown = f"{v.start or ''}/{v.stop or ''}" if isinstance(v, slice) else v
            raise ConfigError(
                f"--validation {shown} holds out times, but the data has no time "
                f"axis; leave --validation out, or give data of {variables[0]!r} over time."
            )
        log.info("the data has no time axis: training without validation")
        validation = None
    max_points = args.max_points or DEFAULT_MAX_POINTS
    tasks = (SpatialTasks(max_context=max_points, max_targets=max_points)
             if args.tasks == "spatial" else None)  # fmt: skip
    model = fit(
        data, variables, model=args.model, covariates=args.covariates, tasks=tasks,
        steps=args.steps, batch_size=args.batch_size, learning_rate=args.learning_rate,
        validation=validation, seed=args.seed, checkpoint_dir=args.checkpoint_dir,
        resume=args.resume, progress=args.progress, config=_train_config(args.steps),
        context_sources=_open_sources(args, files),
    )  # fmt: skip
    path = model.save(out)
    for line in repr(model).splitlines():
        log.info("%s", line)
    print(f"model: {path}")
    return 0


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


def _cmd_predict(args: argparse.Namespace, files: contextlib.ExitStack) -> int:
    from xnp.api.predict import predict
    from xnp.shipped import resolve_model

    model = resolve_model(args.model)
    context = files.enter_context(open_data(args.context, what="context"))
    if args.variable is not None:
        if not _zero_shot(model):
            raise ConfigError(
                f"--variable is for zero-shot (pretrained) models; this model predicts "
                f"{', '.join(model.variables)} and reads them from CONTEXT by name."
            )
        _check_variables(context, [args.variable], "context")
        context = context[[args.variable]]
    variables = _context_variables(model, context)
    when = parse_time(args.time)
    if when is not None:
        _check_time(model, context, variables[0], args.time, when)
    targets = None
    if args.targets:
        targets = files.enter_context(open_data(args.targets, what="targets"))
    fmt = output_format(args.out, args.format)
    inputs = {"CONTEXT": args.context, "TARGETS": args.targets}
    inputs.update({f"context source {n!r}": p for n, p in args.context_source or []})
    _check_not_input(args.out, inputs)
    check_output(args.out, fmt, args.overwrite)
    template = targets if targets is not None else context
    chunks = args.chunks or _default_chunks(model, template)
    unknown = sorted(set(chunks) - {str(d) for d in template.dims})
    if unknown:
        raise DimensionError(
            f"--chunks names {unknown}, which are not dimensions of the targets "
            f"({', '.join(map(str, template.dims))})."
        )
    kwargs: dict[str, Any] = {}
    if args.lead_time is not None:
        kwargs["lead_time"] = args.lead_time
    start = time.perf_counter()
    pred = predict(
        model, context, targets, time=when, context_radius=args.context_radius,
        chunks=chunks, memory_budget=args.memory_budget, trend=args.trend,
        context_sources=_open_sources(args, files), **kwargs,
    )  # fmt: skip
    first = pred[f"{variables[0]}_mean"]
    log.info("predicting %s at %s points in %d dask blocks", ", ".join(variables),
             f"{first.size:,}", getattr(first.data, "npartitions", 1))  # fmt: skip
    path = write_dataset(pred, args.out, fmt=fmt, overwrite=args.overwrite,
                         progress=args.progress)  # fmt: skip
    log.info("wrote %s in %.1f s", path, time.perf_counter() - start)
    print(f"prediction: {path}")
    return 0


def _cmd_evaluate(args: argparse.Namespace, files: contextlib.ExitStack) -> int:
    try:
        from xnp.scoring.evaluation import evaluate
    except ImportError as err:
        raise ConfigError(f"this xnp has no evaluation module (xnp.scoring): {err}") from err
    fmt = None
    if args.out:  # checked before the scores are computed and printed
        fmt = output_format(args.out, args.format)
        _check_not_input(args.out, {"PRED": args.pred, "TRUTH": args.truth})
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


def _demo_grid(data: xr.Dataset, variable: str, resolution: float) -> dict[str, xr.DataArray]:
    """A regular latitude/longitude grid over the extent of ``data`` (global if it is)."""
    from xnp.data.coords import find_coords, latlon
    from xnp.geo.sphere import into_frame, longitude_frame

    lat, lon = latlon(data, find_coords(data, variable))
    # a region across the antimeridian (e.g. 170°E to 165°W) is a region, not the
    # globe: its longitudes, in the window it fits in, run on past 180
    lon = into_frame(lon, longitude_frame(lon)[0])
    lat0, lat1 = float(np.nanmin(lat)), float(np.nanmax(lat))
    lon0, lon1 = float(np.nanmin(lon)), float(np.nanmax(lon))
    if lon1 - lon0 > 300.0:  # (nearly) global: cover every longitude
        lons = np.arange(-180.0 + resolution / 2, 180.0, resolution)
    else:
        lons = np.linspace(lon0, lon1, max(2, round((lon1 - lon0) / resolution) + 1))
    lats = np.linspace(lat0, lat1, max(2, round((lat1 - lat0) / resolution) + 1))
    return {
        "lat": xr.DataArray(lats, dims="lat",
                            attrs={"units": "degrees_north", "standard_name": "latitude"}),
        "lon": xr.DataArray(lons, dims="lon",
                            attrs={"units": "degrees_east", "standard_name": "longitude"}),
    }  # fmt: skip


def _sample_context(frame: xr.Dataset, variable: str, n: int, seed: int) -> xr.Dataset:
    """``n`` random observed points of ``frame`` as a station dataset (the demo's context)."""
    from xnp.data.coords import find_coords
    from xnp.data.points import to_points

    ps = to_points(frame, variable)
    rng = np.random.default_rng(seed)
    pick = np.sort(rng.choice(len(ps), size=min(n, len(ps)), replace=False))
    coords: dict[str, Any] = {
        "lat": ("station", ps.lat[pick], {"units": "degrees_north", "standard_name": "latitude"}),
        "lon": ("station", ps.lon[pick], {"units": "degrees_east", "standard_name": "longitude"}),
    }
    time_name = find_coords(frame, variable).time
    if time_name is not None and frame[time_name].ndim == 0:
        coords[time_name] = frame[time_name].variable
    values = ("station", ps.f[pick, 0], dict(frame[variable].attrs))
    return xr.Dataset({variable: values}, coords=coords)


def _held_out_scores(model: Any, context: xr.Dataset, frame: xr.Dataset, variable: str) -> str:
    """RMSE, spread and 95 % coverage of the prediction at every point of ``frame``."""
    from xnp.api.predict import predict

    pred = predict(model, context, frame[[variable]])
    err = (pred[f"{variable}_mean"] - frame[variable]).values
    std = pred[f"{variable}_std"].values
    ok = np.isfinite(err) & np.isfinite(std)
    rmse = float(np.sqrt(np.mean(err[ok] ** 2)))
    spread = float(np.mean(std[ok]))
    coverage = float(np.mean(np.abs(err[ok]) <= 1.959964 * std[ok]))
    scale = float(np.nanstd(frame[variable].values))
    units = frame[variable].attrs.get("units")
    u = f" {units}" if units else ""
    return (
        f"RMSE {rmse:.3g}{u} (field std {scale:.3g}{u}), mean predictive std {spread:.3g}{u}, "
        f"95% interval coverage {coverage:.2f} at {int(ok.sum())} points"
    )


def _cmd_demo(args: argparse.Namespace, files: contextlib.ExitStack) -> int:
    from xnp.api.fit import fit
    from xnp.api.predict import predict
    from xnp.data.tasks import SpatialTasks
    from xnp.datasets import gp_sphere
    from xnp.shipped import resolve_model

    start = time.perf_counter()
    out = Path(args.out).expanduser()
    if args.model is not None and args.pretrained is not None:
        raise UsageError("give --model or --pretrained, not both.")
    fmt = args.format
    pred_path = out / ("prediction.zarr" if fmt == "zarr" else "prediction.nc")
    # what will be written, checked before any work (a fit can take a while)
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(
            errno.ENOTDIR, "--out is a file; the demo writes into a folder", str(out)
        )
    if args.model is None or not Path(args.model).expanduser().exists():
        _check_model_out(out / "model")  # (a saved model given with --model stays where it is)
    check_output(pred_path, fmt, overwrite=True)
    given = resolve_model(args.model) if args.model is not None else None
    if args.data is not None:
        if args.variable is None:
            raise UsageError("--data needs --variable, the name of the variable to learn.")
        data = files.enter_context(open_data(args.data))
        variable = args.variable
        _check_variables(data, [variable], "data")
    elif args.pretrained is not None or (given is not None and _zero_shot(given)):
        # a zero-shot model was trained on regional fields (caps of at most 4000 km):
        # a continental region, not the globe, is where it is meant to work
        region = {"lat_range": (30.0, 60.0), "lon_range": (-30.0, 30.0)}
        data = gp_sphere(n_lat=24, n_lon=48, n_time=24, lengthscale_km=800.0, seed=args.seed,
                         **region)  # fmt: skip
        variable = "field"
        log.info("data: synthetic Gaussian-process field on a 24 × 48 grid over 30–60°N, "
                 "30°W–30°E, 24 times 6 h apart")  # fmt: skip
    else:
        data = gp_sphere(n_lat=24, n_lon=48, n_time=24, seed=args.seed)
        variable = "field"
        log.info("data: synthetic Gaussian-process field on a 24 × 48 grid, 24 times 6 h apart")
    tdim = _time_dim(data, variable)
    # the last time is held out of training (validation period) and used as the context
    frame = data.isel({tdim: -1}) if tdim is not None else data
    if args.pretrained is not None:
        from xnp.shipped import pretrained

        model = pretrained(args.pretrained)  # zero-shot: no fitting, works offline
        log.info("using the pretrained %r model zero-shot (no fitting)", args.pretrained)
        model_path = model.save(out / "model")
    elif given is not None:
        model = given
        if not _zero_shot(model) and variable not in model.variables:
            raise VariableNotFoundError(
                f"the model {args.model} predicts {list(model.variables)}, not {variable!r}."
            )
        model_path = Path(args.model).expanduser()
        if not model_path.exists():  # a pretrained model's name: save it, as --pretrained does
            model_path = model.save(out / "model")
    else:
        log.info("fitting %s for %d steps", DEMO_MODEL, args.steps)
        tasks = SpatialTasks(max_context=DEMO_MAX_POINTS, max_targets=DEMO_MAX_POINTS)
        # one device: sharding a model this small over several would only add overhead
        config = _train_config(args.steps, validation_batches=2, devices=1)
        model = fit(
            data, variable, model=DEMO_MODEL, tasks=tasks, steps=args.steps, batch_size=8,
            learning_rate=args.learning_rate, validation=0.1 if tdim is not None else None,
            seed=args.seed, progress=args.progress, config=config,
        )  # fmt: skip
        model_path = model.save(out / "model")
        log.info("trained in %.1f s", model.training.get("seconds", float("nan")))

    context = _sample_context(frame, variable, args.context_points, args.seed)
    grid = _demo_grid(data, variable, args.resolution)
    chunks = {"lat": max(1, math.ceil(grid["lat"].size / 2))}
    pred = predict(model, context, grid, chunks=chunks)  # lazy: one dask task per block
    # label the maps with the time the observations are from
    pred = pred.assign_coords({str(c): context[c] for c in context.coords if context[c].ndim == 0})
    log.info("predicting at %d × %d grid points from %d observations (%d dask blocks)",
             grid["lat"].size, grid["lon"].size, context.sizes["station"],
             pred[f"{variable}_mean"].data.npartitions)  # fmt: skip
    write_dataset(pred, pred_path, fmt=fmt, overwrite=True, progress=args.progress)
    if tdim is not None:
        log.info("held-out field: %s", _held_out_scores(model, context, frame, variable))

    png_path: Path | None = out / "prediction.png"
    try:
        from xnp.plot import plot_prediction

        with open_data(pred_path, what="prediction") as written:
            fig = plot_prediction(written, variable, context=context)
            _save_figure(fig, png_path, dpi=110)
    except ImportError as err:  # matplotlib missing: the demo still succeeds
        log.warning("no plot: %s", err)
        png_path = None
    log.info("demo finished in %.1f s", time.perf_counter() - start)
    print(f"model:      {model_path}")
    print(f"prediction: {pred_path}")
    if png_path is not None:
        print(f"plot:       {png_path}")
    return 0


# -- the parser ---------------------------------------------------------------------------
class _Formatter(argparse.HelpFormatter):
    """Wraps one-paragraph descriptions; keeps multi-line text (the epilog) as written."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=32)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def _common(sub: argparse.ArgumentParser) -> None:
    """Options every subcommand has (they may also come before the subcommand)."""
    group = sub.add_argument_group("output and logging")
    group.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=argparse.SUPPRESS,
        help="print only warnings and errors (and no progress bars)",
    )
    group.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=argparse.SUPPRESS,
        help="print debugging messages",
    )
    group.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help="show the full traceback when a command fails",
    )


def _add_demo(subs: Any) -> None:
    p = subs.add_parser(
        "demo", help="fit, predict and plot on built-in synthetic data (about a minute)",
        description="Fit a tiny BSA-TNP on a synthetic Gaussian-process field on the sphere "
        "(offline; or on your own file with --data), predict the last, held-out time on a "
        "regular latitude/longitude grid from a few hundred scattered observations (lazily, "
        "over dask blocks), and write the model, the prediction and a plot into --out. "
        "Existing demo outputs in --out are replaced.",
        epilog=EPILOG, formatter_class=_Formatter,
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
        "--steps",
        type=_positive_int,
        metavar="N",
        default=DEMO_STEPS,
        help="training steps (default: %(default)s; a few for a smoke test)",
    )
    p.add_argument(
        "--learning-rate",
        type=_positive_float,
        metavar="LR",
        default=DEMO_LEARNING_RATE,
        help="peak learning rate (default: %(default)s)",
    )
    p.add_argument(
        "--context-points",
        type=_positive_int,
        default=200,
        metavar="N",
        help="observations drawn from the held-out time as context (default: %(default)s)",
    )
    p.add_argument(
        "--resolution",
        type=_positive_float,
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
    _common(p)
    p.set_defaults(func=_cmd_demo, _parser=p)


def _source_option(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument(
        "--context-source",
        type=parse_source,
        action="append",
        metavar="NAME=PATH",
        help=f"{what} (netCDF or zarr; repeat for several)",
    )


def _add_fit(subs: Any) -> None:
    from xnp.api.sizes import DEFAULT_MAX_POINTS
    from xnp.models.registry import available_models, name_key

    p = subs.add_parser(
        "fit", help="train a neural process on a dataset and save it",
        description="Train a neural process to predict VARIABLE from the data in DATA "
        "(netCDF or zarr; gridded or stations, with or without time) and save it to --out.",
        epilog=EPILOG, formatter_class=_Formatter,
    )  # fmt: skip
    p.add_argument("data", metavar="DATA", help="training data: a netCDF file or zarr store")
    p.add_argument(
        "variable",
        metavar="VARIABLE",
        type=_names,
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
        "--tasks",
        choices=("spatial", "auto"),
        default="spatial",
        help="spatial: interpolate at one time (what `xnp predict` does); auto: "
        "xnp's default for the data, forecast tasks when it has a time axis "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--max-points",
        type=_positive_int,
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
        type=_names,
        default=[],
        metavar="NAMES",
        help="comma-separated covariates: elevation, hour_of_day, solar_time, "
        "day_of_year or variables of DATA (default: none)",
    )
    p.add_argument(
        "--steps",
        type=_positive_int,
        metavar="N",
        default=2000,
        help="optimisation steps (default: %(default)s)",
    )
    p.add_argument(
        "--batch-size",
        type=_positive_int,
        default=8,
        metavar="N",
        help="tasks per step (default: %(default)s)",
    )
    p.add_argument(
        "--learning-rate",
        type=_positive_float,
        metavar="LR",
        default=5e-4,
        help="peak learning rate of the warm-up + cosine schedule (default: %(default)s)",
    )
    p.add_argument(
        "--validation",
        type=_validation,
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
    _common(p)
    p.set_defaults(func=_cmd_fit, _parser=p)


def _add_predict(subs: Any) -> None:
    p = subs.add_parser(
        "predict", help="predict with a saved or pretrained model and write zarr or netCDF",
        description="Condition MODEL (a saved model directory, or the name of a pretrained "
        "model shipped with xnp) on the observations in CONTEXT and predict the mean and "
        "standard deviation of its variables at the points of TARGETS (any netCDF or zarr "
        "whose coordinates give the places: a grid, stations, ...), or at every point of "
        "CONTEXT when TARGETS is left out (gap filling).  A pretrained (zero-shot) model "
        "predicts the one variable CONTEXT holds, whatever its name.  The prediction is "
        "computed lazily, one dask block at a time, while it is written.",
        epilog=EPILOG, formatter_class=_Formatter,
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
        type=_checked("distance"),
        help="condition each block only on observations within this great-circle "
        "distance, e.g. 500km (default: all observations)",
    )
    p.add_argument(
        "--trend",
        choices=["constant", "linear"],
        help="zero-shot models only: estimate the context's mean (constant) or plane "
        "(linear) by generalised least squares, with dense station clusters "
        "down-weighted as in kriging; the model interpolates the rest and the "
        "prediction reverts to the trend far from the observations (recommended for "
        "station networks with gaps; default: none, the plain mean)",
    )
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
        type=_checked("size"),
        metavar="SIZE",
        help="memory one chunk of targets may use on the device (default: %(default)s)",
    )
    p.add_argument(
        "--no-progress", dest="progress", action="store_false", help="hide the progress bar"
    )
    _common(p)
    p.set_defaults(func=_cmd_predict, _parser=p)


def _add_evaluate(subs: Any) -> None:
    p = subs.add_parser(
        "evaluate", help="score a prediction against the truth",
        description="Score the prediction PRED (xnp predict --out) against observed values "
        "in TRUTH and print a table of the scores (xnp.evaluate).",
        epilog=EPILOG, formatter_class=_Formatter,
    )  # fmt: skip
    p.add_argument("pred", metavar="PRED", help="prediction: netCDF file or zarr store")
    p.add_argument("truth", metavar="TRUTH", help="true values: netCDF file or zarr store")
    p.add_argument(
        "--variables",
        type=_names,
        metavar="NAMES",
        help="comma-separated variables to score (default: every predicted one)",
    )
    p.add_argument(
        "--dim",
        type=_names,
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
    _common(p)
    p.set_defaults(func=_cmd_evaluate, _parser=p)


def build_parser() -> argparse.ArgumentParser:
    """The ``xnp`` argument parser with its four subcommands.

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
        epilog=EPILOG, formatter_class=_Formatter,
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
    for add in (_add_demo, _add_fit, _add_predict, _add_evaluate):
        add(subs)
    return parser


@contextlib.contextmanager
def _logging(quiet: bool, verbose: bool) -> Iterator[None]:
    """Send xnp's log records to stderr as ``xnp: message`` for the command's duration.

    Python warnings (xnp's own, or xarray's while it decodes a file) are shown the
    same way, as ``xnp: warning: message``, not with the file and source line of
    the code that warned (``--verbose`` adds where they come from).
    """
    logger = logging.getLogger("xnp")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("xnp: %(message)s"))
    previous = logger.level
    logger.setLevel(logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO)
    logger.addHandler(handler)

    def show(message: Any, category: type[Warning], filename: str, lineno: int,
             file: Any = None, line: str | None = None) -> None:  # fmt: skip
        text = " ".join(str(message).split())
        if not issubclass(category, XnpWarning):
            text = f"{category.__name__}: {text}"
        if verbose:
            text = f"{text} ({filename}:{lineno})"
        log.warning("warning: %s", text)

    try:
        with warnings.catch_warnings():
            warnings.showwarning = show
            yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)


def _message(err: BaseException) -> str:
    """One line describing ``err``.

    OSErrors lose their ``[Errno N]`` prefix, KeyErrors the quotes ``str`` puts
    around their message, and line breaks become spaces.
    """
    if isinstance(err, OSError) and err.strerror and err.filename:
        return f"{err.strerror}: {err.filename}"
    if isinstance(err, KeyError) and len(err.args) == 1 and isinstance(err.args[0], str):
        text = err.args[0]
    else:
        text = str(err)
    text = " ".join(text.split())
    return text or type(err).__name__


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``xnp`` command with ``argv`` (default: ``sys.argv[1:]``).

    Parameters
    ----------
    argv : sequence of str, optional
        The arguments after the program name.

    Returns
    -------
    int
        The exit status: 0 success, 1 the command failed, 2 invalid command line,
        130 interrupted.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # --help, --version or a usage error
        return int(exit_.code or 0) if not isinstance(exit_.code, str) else 2
    if getattr(args, "resume", False) and not args.checkpoint_dir:
        args._parser.print_usage(sys.stderr)
        print("xnp: error: --resume needs --checkpoint-dir", file=sys.stderr)
        return 2
    quiet = bool(getattr(args, "quiet", False))
    if quiet and hasattr(args, "progress"):
        args.progress = False
    with _logging(quiet, bool(getattr(args, "verbose", False))), contextlib.ExitStack() as files:
        try:
            return int(args.func(args, files))
        except UsageError as err:
            if args.debug:
                raise
            args._parser.print_usage(sys.stderr)
            print(f"xnp: error: {_message(err)}", file=sys.stderr)
            return 2
        except (XnpError, OSError) as err:
            if args.debug:
                raise
            print(f"xnp: error: {_message(err)}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print("xnp: interrupted", file=sys.stderr)
            return 130
