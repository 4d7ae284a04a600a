"""Datasets and figures on disk: open netCDF, zarr or CSV, write them atomically.

A directory is read as a zarr store, a ``.csv`` file as a table of points (one row
per site), any other file as netCDF (or whatever xarray's backends recognise).
Outputs are written atomically (to a temporary path, renamed into place once
complete), so an interrupted run never leaves a half-written file under the
requested name; what would be replaced is checked first (:func:`check_output`),
before any work.

This module sits low: it imports xarray, dask (for a progress bar), :mod:`xnp.files`
and :mod:`xnp.errors`, never the models or the command line.  :mod:`xnp.files` is
imported where it is used, as it imports JAX, and the ``xnp`` command's ``--help``
imports this module.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import xarray as xr

from xnp.errors import ConfigError, UsageError

__all__ = [
    "check_not_input",
    "check_output",
    "check_parent",
    "open_data",
    "output_format",
    "save_figure",
    "write_dataset",
]

#: Files that make a directory a zarr store (v3, v2 group, v2 array): replaceable.
_ZARR_MARKERS = ("zarr.json", ".zgroup", ".zarray")


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


#: Column names (any case) a CSV table's latitude and longitude may have.
_LAT_NAMES, _LON_NAMES = ("lat", "latitude"), ("lon", "long", "longitude")


def _open_csv(p: Path, what: str) -> xr.Dataset:
    """A CSV table of points, one row each, as a Dataset along ``point``.

    Numeric columns become data variables; the latitude and longitude columns and any
    text column (station names) become coordinates.  A time column with one value is
    the table's (scalar) time; several times (one row per site and time) are a layout
    this reader does not guess: it says how to build the Dataset instead.
    """
    import numpy as np
    import pandas as pd

    try:
        df = pd.read_csv(p)
    except (ValueError, pd.errors.ParserError) as err:
        raise OSError(f"cannot read the {what} {p} as CSV: {err}") from err
    lower = {str(c).lower(): c for c in df.columns}
    scalar = {}
    for c in (lower[n] for n in ("time", "date", "datetime") if n in lower):
        if df[c].nunique(dropna=False) > 1:
            raise UsageError(
                f"the {what} {p} is a CSV with several times in its column {c!r}; xnp reads "
                "a CSV as one row per site (one time). Build the Dataset in Python, e.g. "
                "xr.Dataset.from_dataframe(df.set_index(['station', 'time'])) with lat/lon "
                "as coordinates, and save it as netCDF or zarr."
            )
        scalar[str(c)] = pd.to_datetime(df[c].iloc[0]) if len(df) else None
        df = df.drop(columns=c)
    lat = next((lower[n] for n in _LAT_NAMES if n in lower), None)
    lon = next((lower[n] for n in _LON_NAMES if n in lower), None)
    if lat is None or lon is None:
        raise UsageError(
            f"the {what} {p} is a CSV without latitude and longitude columns (named lat "
            f"or latitude, and lon or longitude; it has {list(df.columns)}); rename them."
        )
    units = {lat: {"units": "degrees_north"}, lon: {"units": "degrees_east"}}
    coords, data = {}, {}
    for c in df.columns:
        numeric = pd.api.types.is_numeric_dtype(df[c])
        if c in units or not numeric:
            coords[str(c)] = ("point", df[c].to_numpy(), units.get(c, {}))
        else:
            data[str(c)] = ("point", df[c].to_numpy(np.float64))
    coords.update({c: v for c, v in scalar.items() if v is not None})  # one time: a scalar
    return xr.Dataset(data, coords)


def open_data(path: str | os.PathLike, *, what: str = "data") -> xr.Dataset:
    """Open a netCDF file, a zarr store or a CSV table of points, with clear errors.

    Parameters
    ----------
    path : path
        A directory: a zarr store; a file: netCDF (or another format one of
        xarray's backends recognises), whatever its name; a ``.csv`` file: a table
        of points, one row per site, with latitude and longitude columns (numeric
        columns become variables, text columns coordinates, along ``point``).  A
        leading ``~`` is expanded.
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
    UsageError
        If a CSV has no latitude and longitude columns, or several times.
    """
    p = Path(path).expanduser()
    if not p.exists():
        raise FileNotFoundError(errno.ENOENT, f"{what} file not found", str(p))
    if p.is_file() and p.suffix.lower() == ".csv":
        return _open_csv(p, what)
    try:
        if _is_zarr(p):
            return xr.open_zarr(p, consolidated=_zarr_consolidated(p))
        return xr.open_dataset(p)
    except (ValueError, TypeError, KeyError) as err:
        raise OSError(f"cannot read the {what} {p} as netCDF or zarr: {err}") from err


def output_format(path: str | os.PathLike, fmt: str | None) -> str:
    """``"zarr"`` or ``"netcdf"``: ``fmt`` if given, else from the extension of ``path``.

    Parameters
    ----------
    path : path
        The output.
    fmt : {"zarr", "netcdf"}, optional
        The format asked for, if any.

    Returns
    -------
    str

    Raises
    ------
    UsageError
        If ``fmt`` is None and the extension of ``path`` names no format.

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


def check_parent(target: Path) -> None:
    """Raise unless the folders above ``target`` exist as folders or can be created.

    Parameters
    ----------
    target : Path
        A file or folder to be written.

    Raises
    ------
    NotADirectoryError
        If a file is where one of the folders above ``target`` should be.
    """
    for parent in target.parents:
        if parent.exists():
            if not parent.is_dir():
                raise NotADirectoryError(
                    errno.ENOTDIR,
                    f"cannot write {target}: a file is in the way of its folder",
                    str(parent),
                )
            return


def check_output(path: str | os.PathLike, fmt: str, overwrite: bool) -> None:
    """Raise unless :func:`write_dataset` may write ``path`` (checked before any work).

    An existing output needs ``overwrite``; an existing directory is replaced only
    if it is a zarr store.

    Parameters
    ----------
    path : path
        The output (a leading ``~`` is expanded).
    fmt : {"zarr", "netcdf"}
        Its format.
    overwrite : bool
        Whether an existing output may be replaced.

    Raises
    ------
    OSError
        If a file is in the way of the output's folder, if netCDF would replace a
        directory, or if the output exists and ``overwrite`` is false.
    CheckpointError
        If ``path`` is a directory but not a zarr store (never replaced).
    """
    from xnp.files import check_replaceable  # (imports JAX)

    target = Path(path).expanduser()
    check_parent(target)
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


def check_not_input(out: str | os.PathLike, inputs: dict[str, Any]) -> None:
    """Raise if the output path ``out`` is one of the ``inputs`` (``{what: path}``).

    An input is read while the output is written, and ``--overwrite`` is meant for
    an earlier output, never for the data: xnp does not replace its inputs.

    Parameters
    ----------
    out : path
        The output.
    inputs : dict
        ``{what: path}`` of the inputs (a path may be None: no such input).

    Raises
    ------
    ConfigError
        If ``out`` is one of the inputs.
    """
    target = Path(out).expanduser().resolve()
    for what, path in inputs.items():
        if path is not None and Path(path).expanduser().resolve() == target:
            raise ConfigError(
                f"--out {out} is the {what}; xnp never writes over its input data. "
                "Choose another --out."
            )


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
    from xnp.files import atomic_directory, atomic_file  # (imports JAX)

    target = Path(path).expanduser()
    fmt = output_format(target, fmt)
    check_output(target, fmt, overwrite)
    ds = ds.drop_encoding()  # encodings (chunks, dtypes) copied from the inputs may not fit
    target.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "zarr":
        # consolidated, so that a plain xr.open_zarr reads it without a warning; zarr
        # says (once per write) that consolidation is not yet in the v3 specification
        quiet = warnings.catch_warnings()
        with atomic_directory(target, marker=_ZARR_MARKERS) as tmp, _progress(progress), quiet:
            warnings.filterwarnings("ignore", "Consolidated metadata", UserWarning)
            ds.to_zarr(tmp, mode="w", consolidated=True)
        return target
    with atomic_file(target) as tmp, _progress(progress):
        ds.to_netcdf(tmp)
    return target


def save_figure(fig: Any, path: str | os.PathLike, **kwargs: Any) -> Path:
    """Save the matplotlib figure ``fig`` as PNG to ``path``, atomically.

    As :func:`write_dataset`: written next to ``path`` and renamed into place once
    complete, so an interrupted run never leaves a truncated image.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
        The figure (anything with a ``savefig`` method).
    path : path
        Destination (a leading ``~`` is expanded).
    **kwargs
        Passed to ``fig.savefig`` (e.g. ``dpi``).

    Returns
    -------
    Path
        ``path`` (with ``~`` expanded).
    """
    from xnp.files import atomic_file  # (imports JAX)

    target = Path(path).expanduser()
    with atomic_file(target) as tmp:
        fig.savefig(tmp, format="png", **kwargs)
    return target
