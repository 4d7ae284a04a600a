"""The fitted-model handle: :class:`NeuralProcess`, and :func:`load`.

A :class:`NeuralProcess` bundles what a trained model needs to be used again:
the model configuration and parameters, the :class:`~xnp.data.Normaliser`, the
variable, covariate and coordinate names, the task specification, and the
training history (``history_``, an ``xr.Dataset`` indexed by ``step``).  It is
made by :func:`xnp.fit` and :func:`load`; it predicts on points
(:meth:`~NeuralProcess.predict_points`) and on xarray objects
(:meth:`~NeuralProcess.predict`, the same as :func:`xnp.predict`).  Its files
are described in :mod:`xnp.saved_model`.
"""

from __future__ import annotations

import copy
import functools
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np
import xarray as xr
from flax import nnx

from xnp.arrays import Points
from xnp.data.baseline import ForecastBaseline
from xnp.data.normalise import Normaliser
from xnp.data.tasks import ForecastTasks, SpatialTasks, WindowTasks
from xnp.errors import CheckpointError, ConfigError, EmptyDataError, XnpError
from xnp.files import atomic_directory
from xnp.history import default_metrics, history_dataset, plot_history
from xnp.models.build import build_model, graphdef_of
from xnp.models.registry import config_to_dict
from xnp.nn.bias import rescaled_rates
from xnp.nn.layers import count_params
from xnp.prediction import predict_with
from xnp.saved_model import check_outputs, is_saved_model, metadata, read_model, write_model
from xnp.train.metrics import batch_scores, eval_step

__all__ = ["NeuralProcess", "load"]


class NeuralProcess:
    """A trained neural process and everything needed to use it on new data.

    Built by :func:`xnp.fit` (``ds.np.fit``) or :func:`xnp.load`.

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
    baseline : ForecastBaseline, optional
        For a forecast model fitted with ``ForecastTasks(baseline=...)``: what it
        predicts the change from (persistence, and the diurnal climatology).

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
        baseline: ForecastBaseline | None = None,
    ) -> None:
        if baseline is not None and tuple(baseline.variables) != tuple(variables):
            raise ConfigError(
                f"the forecast baseline is of {list(baseline.variables)}, the model predicts "
                f"{list(variables)}: they must be the same variables, in the same order."
            )
        self.baseline = baseline
        if normalise not in ("fitted", "context"):
            raise ConfigError(f"normalise must be 'fitted' or 'context'; got {normalise!r}.")
        self.normalise = normalise
        self.config = config
        self.params_ = params
        self.normaliser = normaliser
        self.variables = tuple(variables)
        check_outputs(config, self.variables)
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
            self._graphdef = graphdef_of(self.config)
        return self._graphdef

    @property
    def module(self) -> nnx.Module:
        """The Flax NNX module with the fitted parameters."""
        return nnx.merge(self.graphdef, self.params_)

    @property
    def std_scale(self) -> np.ndarray | None:
        """Factors ``[Dy]`` of the predictive std fitted on held-out data, or None.

        Set by :func:`xnp.calibrate` (kept in ``training["std_scale"]``, saved with
        the model); every prediction multiplies its std by them, unless
        ``predict(..., calibrate=True)`` cross-validates the context instead.
        """
        factors = self.training.get("std_scale")
        return None if factors is None else np.asarray(factors, np.float64)

    @property
    def num_params(self) -> int:
        """Number of scalar parameters."""
        return count_params(self.params_)

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

        Same as ``context.np.predict(self, targets, **kwargs)``; see :func:`xnp.predict`.
        """
        return predict_with(self, context, targets, **kwargs)

    def with_normaliser(self, normaliser: Normaliser, variables: Sequence[str]) -> NeuralProcess:
        """The same model (parameters shared) with other statistics and variable names.

        Used for zero-shot prediction: the statistics of one context set replace
        the fitted ones.
        """
        check_outputs(self.config, tuple(variables))
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
        """NLL and CRPS (normalised), RMSE (data units, per variable) and 95 % coverage."""
        if not batches:
            raise EmptyDataError("evaluate_batches needs at least one batch; got none.")
        scale = np.array([self.normaliser.stats[v].std for v in self.variables])
        if self.baseline is not None:  # a forecaster's targets are changes in their own scale
            scale = self.baseline.change_scale(scale)
        scores = batch_scores(eval_step(self.graphdef), self.params_, batches, scale)
        return scores._asdict()

    # -- saving -------------------------------------------------------------------------
    def metadata(self) -> dict[str, Any]:
        """The JSON description written to ``config.json`` (without file checksums)."""
        return metadata(self)

    def write_files(self, directory: Path, extra: Mapping[str, Any] | None = None) -> None:
        """Write the model's files into an existing (temporary) directory."""
        write_model(self, directory, extra)

    def save(self, path: str | os.PathLike) -> Path:
        """Save to a directory, atomically (an interrupted save keeps the previous one).

        An existing xnp model directory at ``path`` is replaced; any other existing,
        non-empty directory raises :class:`~xnp.errors.CheckpointError`.

        Returns
        -------
        Path
            The directory written.
        """
        with atomic_directory(path, recognise=is_saved_model) as tmp:
            self.write_files(tmp)
        return Path(path).expanduser()

    @classmethod
    def load(cls, path: str | os.PathLike) -> NeuralProcess:
        """Load a model saved by :meth:`save` (or the latest of a checkpoint folder)."""
        return load(path)

    # -- display ------------------------------------------------------------------------
    def plot_history(self, ax: Any = None, *, metrics: Sequence[str] | None = None):
        """Plot learning curves with matplotlib (the ``plot`` extra); return the axes.

        Parameters
        ----------
        ax : matplotlib Axes, optional
            Where to draw (default: a new figure).
        metrics : sequence of str, optional
            Variables of :attr:`history_` to draw against the step (default: the
            training and validation values of the objective it was trained with).
        """
        return plot_history(self.history_, ax, metrics=metrics)

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
        if self.baseline is not None:
            lines.append(f"  baseline:    {self.baseline.kind} (the model predicts the change)")
        start = (self.training or {}).get("fine_tuned_from")
        if self.normalise == "context" and isinstance(start, Mapping):
            lines.append(
                f"  normalise:   by each context set (fine-tuned from {start.get('from')})"
            )
        elif self.normalise == "context":
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
        # the validation row that chose the kept parameters: the lowest of the objective's
        column = default_metrics(self.history_)[1]
        val = self.history_[column].values if self.history_.sizes.get("step") else []
        finite = np.flatnonzero(np.isfinite(val))
        if finite.size:
            i = int(finite[np.argmin(np.asarray(val)[finite])])
            row = self.history_.isel(step=i)
            rmse = np.atleast_1d(row["val_rmse"].values)
            text = ", ".join(f"{r:.4g}" for r in rmse)
            crps = float(row["val_crps"])
            lines.append(
                f"  validation:  NLL {float(row['val_nll']):.4f}, RMSE {text}, "
                + (f"CRPS {crps:.4f} (normalised), " if math.isfinite(crps) else "")
                + f"95% coverage {float(row['val_coverage']):.3f} (step {int(row['step'])})"
            )
        return "\n".join(lines)


@functools.lru_cache(maxsize=8)
def _predict_fn(graphdef: nnx.GraphDef) -> Any:
    """The jitted forward pass, shared by every model with this structure."""
    return jax.jit(lambda params, context, targets: nnx.merge(graphdef, params)(context, targets))


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
    directory, arguments = read_model(path)
    try:
        return NeuralProcess(**arguments)
    except XnpError as err:
        raise CheckpointError(f"{directory}/config.json is not compatible: {err}") from err
