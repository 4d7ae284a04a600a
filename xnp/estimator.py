"""The fitted model object: :class:`NeuralProcess`, and saving/loading it.

A :class:`NeuralProcess` bundles what a trained model needs to be used again:
the model configuration and parameters, the :class:`~xnp.data.Normaliser`, the
variable, covariate and coordinate names, the task specification, and the
training history (``history_``, an ``xr.Dataset`` indexed by ``step``).

A saved model is a directory::

    config.json          format, versions, model config, normaliser, names, task, training
    params.safetensors   the parameters, named by their path in the model
    history.json         the training history

Loading checks the format, the checksum of the weights and every array's shape,
and raises :class:`~xnp.errors.CheckpointError` with the reason otherwise.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import flax
import jax
import jax.numpy as jnp
import numpy as np
import xarray as xr
from flax import nnx

from xnp import checkpoint as ckpt
from xnp._version import __version__
from xnp.arrays import Points
from xnp.data.normalise import Normaliser
from xnp.data.tasks import ForecastTasks, SpatialTasks, WindowTasks
from xnp.errors import (
    CheckpointError,
    ConfigError,
    EmptyDataError,
    MissingDependencyError,
    XnpError,
)
from xnp.models.registry import build_model, config_from_dict, config_to_dict
from xnp.nn.bias import rescaled_rates
from xnp.train import HISTORY_FIELDS, _eval_step

__all__ = ["FORMAT", "NeuralProcess", "load", "task_from_dict", "task_to_dict"]

#: Format tag of a model directory's config.json.
FORMAT = "xnp.model/1"
_TASKS = {cls.__name__: cls for cls in (SpatialTasks, ForecastTasks, WindowTasks)}
_NAN_FIELDS = ("train_nll", "val_nll", "val_coverage", "learning_rate", "steps_per_second")


def task_to_dict(task: SpatialTasks | ForecastTasks | WindowTasks) -> dict[str, Any]:
    """A JSON-serialisable description of a task specification.

    Examples
    --------
    >>> task_from_dict(task_to_dict(WindowTasks(task=ForecastTasks(frames=2)))).task.frames
    2
    """
    out: dict[str, Any] = {"kind": type(task).__name__}
    for field in dataclasses.fields(task):
        value = getattr(task, field.name)
        if isinstance(value, SpatialTasks | ForecastTasks):
            value = task_to_dict(value)
        elif isinstance(value, tuple):
            value = list(value)
        out[field.name] = value
    return out


def task_from_dict(blob: Mapping[str, Any]) -> SpatialTasks | ForecastTasks | WindowTasks:
    """Inverse of :func:`task_to_dict`."""
    fields = dict(blob)
    cls = _TASKS.get(fields.pop("kind", None))
    if cls is None:
        raise ConfigError(f"Unknown task kind {blob.get('kind')!r}; known: {sorted(_TASKS)}.")
    for key, value in fields.items():
        if isinstance(value, Mapping):
            fields[key] = task_from_dict(value)
        elif isinstance(value, list):
            fields[key] = tuple(value)
    return cls(**fields)


def history_dataset(
    history: Mapping[str, Sequence[Any]], variables: Sequence[str], units: Sequence[str | None]
) -> xr.Dataset:
    """The training history as an ``xr.Dataset`` indexed by ``step``.

    ``val_rmse`` is in the data's units; with several variables it gains a
    ``variable`` dimension and a ``units`` coordinate along it.
    """
    steps = np.asarray(history.get("step", []), np.int64)
    data: dict[str, Any] = {}
    attrs = {
        "train_nll": "mean training Gaussian NLL per target point (normalised units)",
        "val_nll": "validation Gaussian NLL per target point (normalised units)",
        "val_coverage": "fraction of validation targets inside the central 95% interval",
        "learning_rate": "learning rate",
        "steps_per_second": (
            "training steps per second over the logging interval, the first step of a "
            "run (which compiles) excluded"
        ),
    }
    for name in _NAN_FIELDS:
        values = np.asarray(history.get(name, []), np.float64).reshape(-1)
        data[name] = ("step", values, {"long_name": attrs[name]})
    rmse = np.asarray(history.get("val_rmse", []), np.float64).reshape(-1, len(variables))
    rmse_attrs = {"long_name": "validation root-mean-square error (data units)"}
    if len(variables) == 1:
        if units[0]:
            rmse_attrs["units"] = units[0]
        data["val_rmse"] = ("step", rmse[:, 0], rmse_attrs)
    else:
        data["val_rmse"] = (("step", "variable"), rmse, rmse_attrs)
    coords: dict[str, Any] = {"step": steps}
    if len(variables) > 1:
        coords["variable"] = list(variables)
        # one ``units`` attribute cannot hold several units: each variable's units
        # ("" when unknown) are a coordinate along ``variable`` instead
        coords["units"] = ("variable", [u or "" for u in units])
    return xr.Dataset(data, coords=coords)[[n for n in HISTORY_FIELDS if n != "step"]]


def _history_json(history: xr.Dataset) -> dict[str, Any]:
    def clean(values: np.ndarray) -> list[Any]:
        return [None if not math.isfinite(v) else float(v) for v in values.reshape(-1)]

    out: dict[str, Any] = {"step": history["step"].values.astype(int).tolist()}
    for name in _NAN_FIELDS:
        out[name] = clean(history[name].values)
    rmse = history["val_rmse"].values
    rmse = rmse[:, None] if rmse.ndim == 1 else rmse
    out["val_rmse"] = [clean(row) for row in rmse]
    return out


def history_lists(history: Mapping[str, Sequence[Any]]) -> dict[str, list[Any]]:
    """JSON history (``None`` for NaN) back to the lists :class:`~xnp.train.TrainState` keeps."""

    def nan(v: Any) -> Any:
        if isinstance(v, list):
            return [nan(x) for x in v]
        return math.nan if v is None else v

    return {k: [nan(v) for v in history.get(k, [])] for k in HISTORY_FIELDS}


class NeuralProcess:
    """A trained neural process and everything needed to use it on new data.

    Built by :func:`xnp.api.fit` (``ds.np.fit``) or :func:`xnp.load`.

    Parameters
    ----------
    config : BSATNPConfig
        The model configuration.
    params : nnx.State
        The parameters.
    normaliser : Normaliser
        Statistics of the variables and covariate channels.
    variables : sequence of str
        The predicted variables.
    covariates : sequence of str
        Covariate names, as given to ``fit``.
    sources : sequence of str
        Names of the context sources of a multi-source model, in id order (the
        first is ``"data"``, the dataset targets come from); empty for one source.
    coords : mapping, optional
        Coordinate names found in the training data (``lat``, ``lon``, ``time``, ...).
    task : SpatialTasks, ForecastTasks or WindowTasks, optional
        The task specification the model was trained on.
    history : xr.Dataset, optional
        Training history (see :func:`history_dataset`).
    training : mapping, optional
        How it was trained (steps, batch size, learning rate, seed, ...).
    normalise : {"fitted", "context"}
        ``"fitted"``: values are normalised with the statistics of the training
        data (:attr:`normaliser`).  ``"context"``: a zero-shot model (e.g. a
        pretrained one, :func:`xnp.pretrained`) that standardises each context set
        by its own mean and standard deviation at prediction time and predicts
        whichever single variable it is given, in that variable's units.

    Attributes
    ----------
    params_ : nnx.State
        The parameters.
    history_ : xr.Dataset
        Training history indexed by ``step``.

    Examples
    --------
    >>> from xnp.models.config import BSATNPConfig
    >>> from xnp.data.normalise import Stats
    >>> model = NeuralProcess.init(
    ...     BSATNPConfig.tiny(), Normaliser({"t2m": Stats(280.0, 5.0, "K")}), ["t2m"]
    ... )
    >>> model.num_params > 1_000, model.variables
    (True, ('t2m',))
    >>> mean, std = model.denormalise(np.zeros((1, 3, 1)), np.full((1, 3, 1), 0.5))
    >>> mean[0, 0, 0].item(), std[0, 0, 0].item()
    (280.0, 2.5)
    """

    def __init__(
        self,
        config: Any,
        params: nnx.State,
        *,
        normaliser: Normaliser,
        variables: Sequence[str],
        covariates: Sequence[str] = (),
        sources: Sequence[str] = (),
        coords: Mapping[str, Any] | None = None,
        task: SpatialTasks | ForecastTasks | WindowTasks | None = None,
        history: xr.Dataset | None = None,
        training: Mapping[str, Any] | None = None,
        normalise: str = "fitted",
    ) -> None:
        if normalise not in ("fitted", "context"):
            raise ConfigError(f"normalise must be 'fitted' or 'context'; got {normalise!r}.")
        self.normalise = normalise
        self.config = config
        self.params_ = params
        self.normaliser = normaliser
        self.variables = tuple(variables)
        _check_outputs(config, self.variables)
        self.covariates = tuple(covariates)
        self.sources = tuple(sources)
        if len(self.sources) == 1:
            raise ConfigError("a multi-source model needs at least two sources; pass none.")
        self.coords = dict(coords or {})
        self.task = task
        units = [normaliser.stats[v].units if v in normaliser.stats else None for v in variables]
        self.history_ = history if history is not None else history_dataset({}, variables, units)
        self.training = dict(training or {})
        self._graphdef: nnx.GraphDef | None = None

    @classmethod
    def init(
        cls, config: Any, normaliser: Normaliser, variables: Sequence[str], *, seed: int = 0, **kw
    ) -> NeuralProcess:
        """An untrained model with parameters initialised from ``seed``."""
        _, params = nnx.split(build_model(config, rngs=nnx.Rngs(seed)))
        return cls(config, params, normaliser=normaliser, variables=variables, **kw)

    # -- the module ---------------------------------------------------------------------
    @property
    def graphdef(self) -> nnx.GraphDef:
        """Structure of the model (parameters excluded)."""
        if self._graphdef is None:
            self._graphdef = _graphdef_of(self.config)
        return self._graphdef

    @property
    def module(self) -> nnx.Module:
        """The Flax NNX module with the fitted parameters."""
        return nnx.merge(self.graphdef, self.params_)

    @property
    def num_params(self) -> int:
        """Number of scalar parameters."""
        return sum(int(np.size(x)) for x in jax.tree.leaves(self.params_))

    # -- prediction on points ---------------------------------------------------------
    def predict_points(self, context: Points, targets: Points) -> tuple[jax.Array, jax.Array]:
        """Predictive mean and standard deviation ``[B, Nt, Dy]`` in normalised units.

        ``context`` and ``targets`` are padded :class:`~xnp.arrays.Points` whose
        ``x`` and ``f`` are normalised with :attr:`normaliser` (as the task sampler
        produces them).  Compiled once per shape.
        """
        return _predict_fn(self.graphdef)(self.params_, context, targets)

    def predict(self, context: Any, targets: Any = None, **kwargs: Any) -> xr.Dataset:
        """Predict at ``targets`` given the observations ``context`` (estimator style).

        Same as ``context.np.predict(self, targets, **kwargs)``; see
        :func:`xnp.prediction.predict`.
        """
        from xnp.prediction import predict  # the xarray layer sits above this module

        return predict(self, context, targets, **kwargs)

    def with_normaliser(self, normaliser: Normaliser, variables: Sequence[str]) -> NeuralProcess:
        """The same model (parameters shared) with other statistics and variable names.

        Used for zero-shot prediction: the statistics of one context set replace
        the fitted ones.
        """
        _check_outputs(self.config, tuple(variables))
        other = copy.copy(self)
        other.normaliser = normaliser
        other.variables = tuple(variables)
        return other

    def with_distance_scale(self, factor: float) -> NeuralProcess:
        """The same model, reading every distance as ``1 / factor`` times as long.

        Equivalent to multiplying ``config.spatial_scale`` by ``factor``, but done on
        the parameters: the rates of the spatial attention bias are divided by
        ``factor²`` (:func:`xnp.nn.bias.rescaled_rates`), so compiled functions are
        reused.  The distance limit ``training["max_distance_km"]``, if any, is
        multiplied by ``factor``.  Zero-shot prediction uses this to show the model
        each context network at one size (see :func:`xnp.predict`).  Only models
        that see locations through the attention bias alone (``embed_s=False``)
        can be rescaled.

        Raises
        ------
        ConfigError
            When the model embeds coordinates or has no spatial bias, or
            ``factor`` is not a positive finite number.

        Examples
        --------
        >>> import xnp
        >>> model = xnp.pretrained("gp-sphere")
        >>> model.with_distance_scale(0.5).training["max_distance_km"]
        1200.0
        """
        cfg = self.config
        if getattr(cfg, "spatial_bias", "none") == "none" or getattr(cfg, "embed_s", True):
            raise ConfigError(
                "with_distance_scale needs a model that sees locations only through its "
                "spatial attention bias (spatial_bias set, embed_s=False); this one "
                f"has spatial_bias={getattr(cfg, 'spatial_bias', None)!r}, "
                f"embed_s={getattr(cfg, 'embed_s', None)!r}."
            )
        if not (np.isfinite(factor) and factor > 0):
            raise ConfigError(f"factor must be a positive finite number; got {factor!r}.")

        def rescale(path: tuple, leaf: Any) -> Any:
            names = [str(getattr(k, "key", getattr(k, "name", ""))) for k in path]
            spatial_rates = "b_raw" in names and names[names.index("b_raw") - 1] == "space"
            return rescaled_rates(leaf, factor) if spatial_rates else leaf

        other = copy.copy(self)
        other.params_ = jax.tree_util.tree_map_with_path(rescale, self.params_)
        other.training = dict(self.training)
        if other.training.get("max_distance_km"):
            other.training["max_distance_km"] = float(self.training["max_distance_km"]) * factor
        return other

    def denormalise(
        self, mean: jax.Array | np.ndarray, std: jax.Array | np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Map normalised predictive means and standard deviations to the data's units."""
        names = list(self.variables)
        return (
            self.normaliser.inverse(np.asarray(mean), names),
            self.normaliser.inverse_std(np.asarray(std), names),
        )

    def evaluate_batches(self, batches: Sequence[Any]) -> dict[str, Any]:
        """NLL (normalised), RMSE (data units, per variable) and 95 % coverage over batches."""
        evaluate = _eval_step(self.graphdef)
        totals: dict[str, Any] = {}
        for batch in batches:
            sums = evaluate(self.params_, batch)
            totals = sums if not totals else jax.tree.map(np.add, totals, sums)
        if not totals:
            raise EmptyDataError("evaluate_batches needs at least one batch; got none.")
        totals = jax.tree.map(np.asarray, totals)
        count = max(float(totals["count"]), 1.0)
        scale = np.array([self.normaliser.stats[v].std for v in self.variables])
        mse = totals["sq_err"] / np.maximum(totals["channel_count"], 1.0)
        return {
            "nll": float(totals["nll"]) / count,
            "rmse": (np.sqrt(mse) * scale).tolist(),
            "coverage": float(totals["covered"]) / count,
        }

    # -- saving -------------------------------------------------------------------------
    def metadata(self) -> dict[str, Any]:
        """The JSON description written to ``config.json`` (without file checksums)."""
        return {
            "format": FORMAT,
            "xnp_version": __version__,
            "jax_version": jax.__version__,
            "flax_version": flax.__version__,
            "model": config_to_dict(self.config),
            "normaliser": self.normaliser.to_json(),
            "variables": list(self.variables),
            "covariates": list(self.covariates),
            "sources": list(self.sources),
            "coords": self.coords,
            "task": None if self.task is None else task_to_dict(self.task),
            "training": self.training,
            "normalise": self.normalise,
        }

    def write_files(self, directory: Path, extra: Mapping[str, Any] | None = None) -> None:
        """Write the model's files into an existing (temporary) directory."""
        digest = ckpt.write_arrays(directory / "params.safetensors", self._arrays())
        ckpt.write_json(directory / "history.json", _history_json(self.history_))
        meta = self.metadata() | {"weights": {"file": "params.safetensors", "sha256": digest}}
        ckpt.write_json(directory / "config.json", meta | dict(extra or {}))

    def _arrays(self) -> dict[str, np.ndarray]:
        return ckpt.tree_to_arrays(self.params_)

    def save(self, path: str | os.PathLike) -> Path:
        """Save to a directory, atomically (an interrupted save keeps the previous one).

        An existing xnp model directory at ``path`` is replaced; any other existing,
        non-empty directory raises :class:`~xnp.errors.CheckpointError`.

        Returns
        -------
        Path
            The directory written.
        """
        with ckpt.atomic_directory(path, recognise=_is_saved_model) as tmp:
            self.write_files(tmp)
        return Path(path).expanduser()

    @classmethod
    def load(cls, path: str | os.PathLike) -> NeuralProcess:
        """Load a model saved by :meth:`save` (or the latest of a checkpoint folder)."""
        return load(path)

    # -- display ------------------------------------------------------------------------
    def plot_history(self, ax: Any = None, *, metrics: Sequence[str] = ("train_nll", "val_nll")):
        """Plot learning curves with matplotlib (the ``plot`` extra); return the axes.

        Parameters
        ----------
        ax : matplotlib Axes, optional
            Where to draw (default: a new figure).
        metrics : sequence of str
            Variables of :attr:`history_` to draw against the step.
        """
        try:
            import matplotlib.pyplot as plt
        except ImportError as err:  # pragma: no cover - depends on the environment
            raise MissingDependencyError(
                "plot_history needs matplotlib: pip install 'xnp[plot]'."
            ) from err
        if ax is None:
            _, ax = plt.subplots(figsize=(6, 3.5))
        for name in metrics:
            if name not in self.history_:
                raise ConfigError(f"{name!r} is not in the history ({list(self.history_)}).")
            series = self.history_[name]
            if "variable" in series.dims:
                for v in series["variable"].values:
                    s = series.sel(variable=v)
                    ok = np.isfinite(s.values)
                    unit = str(s["units"].values) if "units" in s.coords else ""
                    label = f"{name} {v}" + (f" ({unit})" if unit else "")
                    ax.plot(s["step"].values[ok], s.values[ok], ".-", label=label)
                continue
            ok = np.isfinite(series.values)
            ax.plot(series["step"].values[ok], series.values[ok], ".-", label=name)
        ax.set_xlabel("step")
        ax.legend()
        ax.grid(alpha=0.3)
        return ax

    def __repr__(self) -> str:
        kind = config_to_dict(self.config)["kind"]
        stats = self.normaliser.stats
        units = {v: stats[v].units if v in stats else None for v in self.variables}
        names = ", ".join(f"{v} [{u}]" if u else v for v, u in units.items())
        lines = [
            f"<xnp.NeuralProcess {kind}: {self.num_params:,} parameters>",
            f"  variables:   {names}",
            f"  covariates:  {', '.join(self.covariates) or 'none'}",
            *([f"  sources:     {', '.join(self.sources)}"] if self.sources else []),
            f"  tasks:       {self.task!r}",
        ]
        if self.normalise == "context":
            lines.append("  normalise:   by each context set (zero-shot, any variable)")
        t = self.training
        if t:
            lr = t.get("learning_rate")
            fields = (
                ("{} steps", t.get("steps")),
                ("batch {}", t.get("batch_size")),
                ("learning rate {}", f"{lr:g}" if isinstance(lr, int | float) else lr),
                ("seed {}", t.get("seed")),
            )  # a training record written by other code may lack some of these
            parts = [form.format(value) for form, value in fields if value is not None]
            lines.append(
                f"  trained:     {', '.join(parts) or 'yes'}"
                + (f"; best step {t['best_step']}" if t.get("best_step") else "")
            )
        val = self.history_["val_nll"].values if self.history_.sizes.get("step") else []
        finite = np.flatnonzero(np.isfinite(val))
        if finite.size:
            i = int(finite[np.argmin(np.asarray(val)[finite])])
            row = self.history_.isel(step=i)
            rmse = np.atleast_1d(row["val_rmse"].values)
            text = ", ".join(f"{r:.4g}" for r in rmse)
            lines.append(
                f"  validation:  NLL {float(row['val_nll']):.4f}, RMSE {text}, "
                f"95% coverage {float(row['val_coverage']):.3f} (step {int(row['step'])})"
            )
        return "\n".join(lines)


def _check_outputs(config: Any, variables: tuple[str, ...]) -> None:
    """Raise unless the model has one output channel per variable name."""
    dim_y = getattr(config, "dim_y", None)
    if dim_y is not None and len(variables) != dim_y:
        raise ConfigError(
            f"the model has {dim_y} output channel(s) (dim_y) but {len(variables)} variable "
            f"name(s) were given ({list(variables)}); give one name per output."
        )


@functools.lru_cache(maxsize=8)
def _predict_fn(graphdef: nnx.GraphDef) -> Any:
    """The jitted forward pass, shared by every model with this structure."""
    return jax.jit(lambda params, context, targets: nnx.merge(graphdef, params)(context, targets))


def _graphdef_of(config: Any) -> nnx.GraphDef:
    """The model structure of ``config``, built once per (hashable) configuration.

    Tracing the model's constructor takes about half a second, and zero-shot
    prediction makes a new model object (own normaliser) per context set.
    """
    try:
        return _cached_graphdef(config)
    except TypeError:  # an unhashable config: build it each time
        return nnx.split(_abstract_model(config))[0]


@functools.lru_cache(maxsize=16)
def _cached_graphdef(config: Any) -> nnx.GraphDef:
    return nnx.split(_abstract_model(config))[0]


def _abstract_model(config: Any) -> nnx.Module:
    return nnx.eval_shape(lambda: build_model(config, rngs=nnx.Rngs(0)))


def params_template(config: Any) -> nnx.State:
    """Shapes and dtypes of the parameters of ``config``'s model (nothing allocated)."""
    _, state = nnx.split(_abstract_model(config))
    return state


def _names_list(meta: Mapping[str, Any], key: str, *, required: bool = False) -> list[str]:
    """``meta[key]``: a list of names (a missing optional one is empty)."""
    value = meta[key] if required else meta.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CheckpointError(f"config.json: {key!r} must be a list of names; got {value!r}.")
    return value


def _is_saved_model(directory: Path) -> bool:
    """Whether ``directory`` holds a model saved by xnp (its config.json says so)."""
    try:
        return json.loads((directory / "config.json").read_text()).get("format") == FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def load(path: str | os.PathLike) -> NeuralProcess:
    """Load a saved :class:`NeuralProcess`.

    ``path`` is a model directory written by :meth:`NeuralProcess.save`, one
    checkpoint of a training run, or a ``checkpoint_dir`` of ``fit`` (its latest
    checkpoint is loaded).  Nothing in the directory is executed: it holds JSON
    and safetensors only.

    Raises
    ------
    CheckpointError
        If the directory is missing, incomplete, corrupted, from an incompatible
        format, or its arrays do not fit the stored configuration.

    Examples
    --------
    >>> import tempfile
    >>> from xnp.models.config import BSATNPConfig
    >>> from xnp.data.normalise import Stats
    >>> model = NeuralProcess.init(BSATNPConfig.tiny(), Normaliser({"v": Stats(0.0, 1.0)}), ["v"])
    >>> path = model.save(tempfile.mkdtemp() + "/model")
    >>> load(path).num_params == model.num_params
    True
    """
    directory = Path(path).expanduser()
    if not directory.is_dir():
        raise CheckpointError(f"{directory} is not a directory: nothing to load.")
    if not (directory / "config.json").exists():
        latest = ckpt.CheckpointDir(directory, writable=False).latest()
        if latest is not None:
            directory = latest
    meta = ckpt.read_json(directory / "config.json")
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
        _check_outputs(config, tuple(variables))
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
        history_blob = ckpt.read_json(directory / "history.json")
    except CheckpointError:
        raise
    except KeyError as err:
        raise CheckpointError(f"{directory}/config.json is incomplete: missing {err}.") from err
    except (TypeError, ValueError, AttributeError, XnpError) as err:
        raise CheckpointError(f"{directory}/config.json is not compatible: {err}") from err
    arrays = ckpt.read_arrays(directory / str(file), digest)
    params = jax.tree.map(jnp.asarray, ckpt.arrays_to_tree(params_template(config), arrays))
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
    try:
        return NeuralProcess(
            config,
            params,
            normaliser=normaliser,
            variables=variables,
            covariates=names["covariates"],
            sources=names["sources"],
            coords=meta.get("coords"),
            task=task,
            history=history,
            training=meta.get("training"),
            normalise=normalise,
        )
    except XnpError as err:
        raise CheckpointError(f"{directory}/config.json is not compatible: {err}") from err
