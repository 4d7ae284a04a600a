"""The saved-model format: a directory of JSON and safetensors, written and read safely.

A saved model is a directory::

    config.json          format, versions, model config, normaliser, names, task, training
    params.safetensors   the parameters, named by their path in the model
    history.json         the training history
    baseline.safetensors a forecast model's diurnal climatology, if it has one

:func:`write_model` writes a model's files into a directory (made atomic by the
caller, :func:`xnp.files.atomic_directory`); :func:`read_model` checks the
format, the checksum of the weights and every array's shape, and returns what
:class:`xnp.NeuralProcess` is built from, raising
:class:`~xnp.errors.CheckpointError` with the reason otherwise.  The model
object itself is one layer up (:mod:`xnp.neural_process`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import flax
import jax
import jax.numpy as jnp

from xnp._version import __version__
from xnp.data.baseline import ForecastBaseline
from xnp.data.normalise import Normaliser
from xnp.data.tasks import task_from_dict, task_to_dict
from xnp.errors import CheckpointError, ConfigError, XnpError
from xnp.files import (
    arrays_to_tree,
    read_arrays,
    read_json,
    tree_to_arrays,
    write_arrays,
    write_json,
)
from xnp.history import history_dataset, history_json
from xnp.models.build import params_template
from xnp.models.registry import config_from_dict, config_to_dict
from xnp.train.checkpoints import CheckpointDir
from xnp.train.state import history_lists

__all__ = [
    "ENSEMBLE_FILE",
    "ENSEMBLE_FORMAT",
    "FORMAT",
    "check_outputs",
    "is_saved_model",
    "metadata",
    "read_model",
    "write_model",
]

#: Format tag of a model directory's config.json.
FORMAT = "xnp.model/1"
#: The file of a forecast model's diurnal climatology.
BASELINE_FILE = "baseline.safetensors"
#: The file naming an ensemble's members (:class:`xnp.Ensemble`), and its format tag.
ENSEMBLE_FILE, ENSEMBLE_FORMAT = "ensemble.json", "xnp.ensemble/1"


def check_outputs(config: Any, variables: tuple[str, ...]) -> None:
    """Raise :class:`~xnp.errors.ConfigError` unless the model has one output per variable."""
    dim_y = getattr(config, "dim_y", None)
    if dim_y is not None and len(variables) != dim_y:
        raise ConfigError(
            f"the model has {dim_y} output channel(s) (dim_y) but {len(variables)} variable "
            f"name(s) were given ({list(variables)}); give one name per output."
        )


def metadata(model: Any) -> dict[str, Any]:
    """The JSON description of ``model`` written to ``config.json`` (without checksums)."""
    return {
        "format": FORMAT,
        "xnp_version": __version__,
        "jax_version": jax.__version__,
        "flax_version": flax.__version__,
        "model": config_to_dict(model.config),
        "normaliser": model.normaliser.to_json(),
        "variables": list(model.variables),
        "covariates": list(model.covariates),
        "sources": list(model.sources),
        "coords": model.coords,
        "task": None if model.task is None else task_to_dict(model.task),
        "training": model.training,
        "normalise": model.normalise,
        "baseline": None if model.baseline is None else model.baseline.to_json(),
    }


def write_model(model: Any, directory: Path, extra: Mapping[str, Any] | None = None) -> None:
    """Write ``model``'s files into the existing (temporary) ``directory``.

    ``extra`` entries join ``config.json`` (a training checkpoint's record).
    """
    digest = write_arrays(directory / "params.safetensors", tree_to_arrays(model.params_))
    write_json(directory / "history.json", history_json(model.history_))
    meta = metadata(model) | {"weights": {"file": "params.safetensors", "sha256": digest}}
    arrays = {} if model.baseline is None else model.baseline.arrays()
    if arrays:
        meta["baseline"]["sha256"] = write_arrays(directory / BASELINE_FILE, arrays)
    write_json(directory / "config.json", meta | dict(extra or {}))


def is_saved_model(directory: Path) -> bool:
    """Whether ``directory`` holds a model saved by xnp (its config.json says so)."""
    try:
        return json.loads((directory / "config.json").read_text()).get("format") == FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def _names_list(meta: Mapping[str, Any], key: str, *, required: bool = False) -> list[str]:
    """``meta[key]``: a list of names (a missing optional one is empty)."""
    value = meta[key] if required else meta.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CheckpointError(f"config.json: {key!r} must be a list of names; got {value!r}.")
    return value


def read_model(path: str | Path) -> tuple[Path, dict[str, Any]]:
    """``(directory, arguments)``: the model saved at ``path``, as constructor arguments.

    ``path`` is a model directory, one checkpoint of a training run, or a
    ``checkpoint_dir`` of ``fit`` (its latest checkpoint is read).  The arguments
    are those of :class:`xnp.NeuralProcess` (``config`` and ``params`` first).

    Raises
    ------
    CheckpointError
        If the directory is missing, incomplete, corrupted, from an incompatible
        format, or its arrays do not fit the stored configuration.
    """
    directory = Path(path).expanduser()
    if not directory.is_dir():
        raise CheckpointError(f"{directory} is not a directory: nothing to load.")
    if (directory / ENSEMBLE_FILE).exists():
        raise CheckpointError(
            f"{directory} is an ensemble of models ({ENSEMBLE_FILE}), not one model: load it "
            "with xnp.load, which returns an xnp.Ensemble."
        )
    if not (directory / "config.json").exists():
        latest = CheckpointDir(directory, writable=False).latest()
        if latest is not None:
            directory = latest
    meta = read_json(directory / "config.json")
    if "format" not in meta:
        raise CheckpointError(
            f"{directory}/config.json has no 'format' key, so its format is unknown: it was "
            "not written by xnp's NeuralProcess.save (or the key was removed). Load a "
            "directory that xnp saved."
        )
    if meta.get("format") != FORMAT:
        raise CheckpointError(
            f"{directory} has format {meta.get('format')!r}; this xnp ({__version__}) reads "
            f"{FORMAT!r}. Load it with the xnp version that wrote it "
            f"({meta.get('xnp_version', 'unknown')})."
        )
    try:
        config = config_from_dict(meta["model"])
        normaliser = Normaliser.from_json(meta["normaliser"])
        variables = _names_list(meta, "variables", required=True)
        check_outputs(config, tuple(variables))
        names = {k: _names_list(meta, k) for k in ("covariates", "sources")}
        task = None if meta.get("task") is None else task_from_dict(meta["task"])
        weights = meta["weights"]
        file, digest = weights["file"], weights.get("sha256")
        if not isinstance(file, str) or Path(file).name != file:
            raise CheckpointError(
                f"{directory}/config.json: the weights file must be a name in the model "
                f"directory; got {file!r}."
            )
        for key in ("coords", "training"):
            if not isinstance(meta.get(key) or {}, Mapping):
                raise CheckpointError(f"{directory}/config.json: {key!r} must be a mapping.")
        # the history is a record of the training, not needed to predict: a directory
        # without it (copied without, or from a hand-made model) loads with an empty one
        history_file = directory / "history.json"
        history_blob = read_json(history_file) if history_file.exists() else {}
    except CheckpointError:
        raise
    except KeyError as err:
        raise CheckpointError(f"{directory}/config.json is incomplete: missing {err}.") from err
    except (TypeError, ValueError, AttributeError, XnpError) as err:
        raise CheckpointError(f"{directory}/config.json is not compatible: {err}") from err
    arrays = read_arrays(directory / str(file), digest)
    baseline = _read_baseline(directory, meta.get("baseline"))
    params = jax.tree.map(jnp.asarray, arrays_to_tree(params_template(config), arrays))
    units = [normaliser.stats[v].units if v in normaliser.stats else None for v in variables]
    try:
        history = history_dataset(history_lists(history_blob), variables, units)
    except (ValueError, TypeError) as err:
        raise CheckpointError(f"{directory}/history.json is malformed: {err}.") from err
    normalise = meta.get("normalise", "fitted")
    missing = [v for v in variables if v not in normaliser.stats]
    if normalise == "fitted" and missing:
        raise CheckpointError(
            f"{directory}/config.json is not consistent: the normaliser has no statistics "
            f"for the variable(s) {missing}."
        )
    return directory, {
        "config": config,
        "params": params,
        "normaliser": normaliser,
        "variables": variables,
        "covariates": names["covariates"],
        "sources": names["sources"],
        "coords": meta.get("coords"),
        "task": task,
        "history": history,
        "training": meta.get("training"),
        "normalise": normalise,
        "baseline": baseline,
    }


def _read_baseline(directory: Path, blob: Any) -> ForecastBaseline | None:
    """The forecast baseline recorded in config.json (None if there is none)."""
    if blob is None:
        return None
    if not isinstance(blob, Mapping):
        raise CheckpointError(f"{directory}/config.json: 'baseline' must be a mapping.")
    arrays = {}
    if "sha256" in blob:
        arrays = read_arrays(directory / BASELINE_FILE, blob["sha256"])
    return ForecastBaseline.from_saved(blob, arrays)
