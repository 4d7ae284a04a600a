"""What the commands check and open before any work, and what they ask of a model.

The variables a command needs, the folder a model will be saved to and the
``--context-source`` files are checked here, so that a mistake is reported before a
fit or a prediction starts.  Models and the data layout are imported where they are
used (:mod:`xnp.saved_model`, :mod:`xnp.data.coords`), to keep ``xnp --help`` cheap.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import xarray as xr

from xnp.errors import ConfigError, UsageError, VariableNotFoundError
from xnp.storage import check_parent, open_data

__all__ = ["check_model_out", "check_variables", "open_sources", "time_dim"]


def check_variables(data: xr.Dataset, variables: Sequence[str], what: str) -> None:
    """Raise unless ``data`` holds every one of ``variables``.

    Parameters
    ----------
    data : Dataset
        The data opened from a file.
    variables : sequence of str
        The variables a command needs.
    what : str
        What ``data`` is, for the message ("data", "context", ...).

    Raises
    ------
    VariableNotFoundError
        Naming the missing variables and those ``data`` holds.
    """
    missing = [v for v in variables if v not in data.data_vars]
    if missing:
        raise VariableNotFoundError(
            f"the {what} has no variable {', '.join(map(repr, missing))}; it holds "
            f"{', '.join(map(repr, map(str, data.data_vars))) or 'no data variables'}."
        )


def zero_shot_context(model: Any, context: xr.Dataset, variable: str | None) -> xr.Dataset:
    """CONTEXT reduced to ``--variable`` for a zero-shot model (unchanged without one).

    ``--variable`` with a fitted model is a :class:`~xnp.errors.ConfigError`: it
    reads its variables from CONTEXT by name.
    """
    if variable is None:
        return context
    from xnp.data.coords import locators_as_coords
    from xnp.data.normalise import is_zero_shot

    if not is_zero_shot(model):
        raise ConfigError(
            f"--variable is for zero-shot (pretrained) models; this model predicts "
            f"{', '.join(model.variables)} and reads them from CONTEXT by name."
        )
    check_variables(context, [variable], "context")
    # latitude/longitude stored as data variables (a station table) stay with it
    return locators_as_coords(context, model.coords)[0][[variable]]


def check_model_out(path: Path) -> None:
    """Raise unless a model can be saved to ``path`` (checked before training).

    :meth:`xnp.NeuralProcess.save` (and :meth:`xnp.Ensemble.save`) replaces only
    an xnp model or ensemble directory (or an empty one); finding that out after
    hours of training would be too late.

    Parameters
    ----------
    path : Path
        The model directory to be written.

    Raises
    ------
    NotADirectoryError
        If a file is in the way of its folder.
    CheckpointError
        If ``path`` exists and is not an xnp model or ensemble directory (nor empty).
    """
    from xnp.files import check_replaceable

    def is_saved(directory: Path) -> bool:  # imported only for an existing folder
        from xnp.ensemble import is_saved_ensemble
        from xnp.saved_model import is_saved_model

        return is_saved_model(directory) or is_saved_ensemble(directory)

    check_parent(path)
    check_replaceable(path, ("config.json", "ensemble.json"), recognise=is_saved)


def open_sources(args: argparse.Namespace, files: contextlib.ExitStack) -> dict | None:
    """The ``--context-source`` datasets, opened (None when there are none).

    Parameters
    ----------
    args : Namespace
        The parsed command line (its ``context_source``: ``(name, path)`` pairs).
    files : ExitStack
        Closes the files when the command ends.

    Returns
    -------
    dict or None
        ``{name: Dataset}``.

    Raises
    ------
    UsageError
        If two sources share a name.
    """
    pairs = args.context_source or []
    names = [n for n, _ in pairs]
    if len(set(names)) != len(names):
        raise UsageError(f"--context-source names must differ; got {names}.")
    return {
        n: files.enter_context(open_data(p, what=f"context source {n!r}")) for n, p in pairs
    } or None


def time_dim(data: xr.Dataset, variable: str) -> str | None:
    """The time dimension of ``variable`` in ``data``, or None when it has none.

    Parameters
    ----------
    data : Dataset
        The data.
    variable : str
        One of its variables.

    Returns
    -------
    str or None
    """
    from xnp.data.coords import find_coords

    layout = find_coords(data, variable)
    return layout.time_dim if layout.time_dim in data[variable].dims else None
