"""Fine-tuning: a fit that starts from a pretrained model's weights.

``fit(data, "t2m", model="gp-sphere")`` (or ``model=xnp.pretrained(...)``, or any
zero-shot :class:`~xnp.NeuralProcess`) starts from the model's parameters instead of
a random initialisation.  What carries over, and how:

* **Normalisation.**  A zero-shot model standardises each context set by its own
  mean and standard deviation.  The fine-tuned model keeps that rule: in training
  each task's context and targets are standardised by the context's statistics
  (:class:`~xnp.data.TaskSampler`'s ``standardise="context"``), and at prediction
  each context is, as for the pretrained model.  So at step 0 it predicts what the
  pretrained model predicts, and it stays usable on contexts of any level or
  spread (another month, another region).
* **Distance scale.**  A zero-shot model rescales the distances of each context
  to its working size (``training["context_rms_km"]``).  Fine-tuning fixes the
  scale once, that of the training data's whole network of places, and bakes it
  into the weights (:meth:`~xnp.NeuralProcess.with_distance_scale`); the
  fine-tuned model then reads distances as they are, the scale it learned on.
* **Trend.**  A pretrained model may record the trend zero-shot prediction
  removes by default (``training["trend"]``; ``gp-sphere``'s is ``"linear"``).
  A fine-tuned model keeps it for prediction unless ``fit(..., trend=)`` says
  otherwise (:func:`fit_trend`), so at step 0 it predicts what the pretrained
  model predicts by default; its training tasks stay plain unless a trend is
  given.
* **Covariates.**  New covariates (elevation, hour of day, any variable) enter
  the point encoder as extra input channels whose weights start at zero, so step
  0 is unchanged.

What cannot map onto the pretrained network raises
:class:`~xnp.errors.ConfigError` with what to do instead: several variables (the
pretrained models predict one), forecast tasks into a model without temporal
attention, and extra context sources.  Projected x/y data map: their CF grid
mapping gives every point a latitude and longitude, which the pretrained model's
great-circle distances take.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from xnp.data.normalise import is_zero_shot
from xnp.data.tasks import ForecastTasks, WindowTasks
from xnp.errors import ConfigError
from xnp.models.bsa_tnp import with_zero_inputs
from xnp.neural_process import NeuralProcess
from xnp.prediction.context import working_scale
from xnp.shipped import available_pretrained, pretrained

__all__ = [
    "FINE_TUNE_CLUSTERED",
    "FINE_TUNE_LEARNING_RATE",
    "FINE_TUNE_STEPS",
    "Start",
    "as_pretrained",
    "check_fit_trend",
    "fit_trend",
    "pretrained_start",
]

#: Defaults of a fine-tuning fit: a tenth of the from-scratch peak learning rate,
#: and fewer steps (the network already knows what fields look like).
FINE_TUNE_LEARNING_RATE = 1e-4
FINE_TUNE_STEPS = 500
#: Share of the default fine-tuning tasks whose context is drawn in clusters, as
#: station networks are (``SpatialTasks(clustered=...)``): on ERA5's validation days
#: it lowered the RMSE at the HadISD cells from 0.654 to 0.588 K (recipes/benchmarks/
#: finetune_era5.py); half the tasks stay uniform, as gridded or even networks are.
FINE_TUNE_CLUSTERED = 0.5


def check_fit_trend(trend: Any, fine_tuning: bool, tasks: Any) -> None:
    """Raise :class:`~xnp.errors.ConfigError` unless ``fit(trend=...)`` can be honoured.

    A trend is removed from each task's context when fine-tuning a pretrained
    (context-standardised) model on interpolation tasks; ``None`` and ``"none"``
    ask for none.

    Examples
    --------
    >>> check_fit_trend("linear", True, None)
    """
    if trend is None or trend == "none":
        return
    if trend not in ("constant", "linear"):
        raise ConfigError(f"trend must be None, 'none', 'constant' or 'linear'; got {trend!r}.")
    if not fine_tuning:
        raise ConfigError(
            "trend= is for fine-tuning a pretrained model (model='gp-sphere', ...), which "
            "standardises each context by its own statistics; a model fitted from scratch "
            "learns the field's large-scale structure from the data. Fit without trend=."
        )
    if _forecasting(tasks):
        raise ConfigError(
            "trend= applies to interpolation tasks; a forecast learns the change from its "
            "baseline (ForecastTasks(baseline=...)). Fit without trend=."
        )


def fit_trend(trend: Any, base: NeuralProcess | None, tasks: Any) -> tuple[str | None, str | None]:
    """The trends of a fit (checked): the one removed in training, the model's own.

    The model's own trend is the one :func:`xnp.predict` removes by default.  A
    trend given to the fit is both.  ``None`` when fine-tuning on interpolation
    tasks: the tasks are learnt plain, and the fine-tuned model keeps the
    pretrained model's own trend for prediction (``base.training["trend"]``), as
    the validation days chose (``recipes/benchmarks/finetune_era5.py``: removing
    it in training too did not lower the NLL or CRPS); so at step 0 the
    fine-tuned model predicts what the pretrained one predicts by default.
    ``"none"``: no trend, in training or prediction.

    Examples
    --------
    >>> fit_trend(None, pretrained("gp-sphere"), None)
    (None, 'linear')
    >>> fit_trend("linear", pretrained("gp-sphere"), None)
    ('linear', 'linear')
    >>> fit_trend("none", pretrained("gp-sphere"), None)
    (None, None)
    >>> fit_trend(None, None, None)
    (None, None)
    """
    check_fit_trend(trend, base is not None, tasks)
    if trend is None:
        own = None if base is None or _forecasting(tasks) else (base.training or {}).get("trend")
        return None, own
    return (None, None) if trend == "none" else (str(trend), str(trend))


def _forecasting(tasks: Any) -> bool:
    inner = tasks.task if isinstance(tasks, WindowTasks) else tasks
    return isinstance(inner, ForecastTasks)


@dataclasses.dataclass(frozen=True)
class Start:
    """A pretrained model adapted to the data: configuration, parameters, record.

    Attributes
    ----------
    config, params
        The configuration (``dim_x`` set for the covariates) and its parameters.
    training : dict
        The pretrained model's training record, with the distance limit rescaled
        and without ``context_rms_km`` (the scale is now in the weights).
    record : dict
        What the fit's run record says of the start (name, scale, checksum).
    """

    config: Any
    params: Any
    training: dict
    record: dict


def as_pretrained(model: Any) -> NeuralProcess | None:
    """The zero-shot model ``model`` names (a shipped name or a model), else None."""
    if isinstance(model, NeuralProcess):
        if not is_zero_shot(model):
            raise ConfigError(
                "fit(model=<NeuralProcess>) fine-tunes a zero-shot (pretrained) model; this "
                "one was fitted on its own data (normalise='fitted'). To go on training it, "
                "use fit(..., checkpoint_dir=..., resume=True) on its run, or start from a "
                "pretrained model (xnp.available_pretrained())."
            )
        return model
    if isinstance(model, str) and model.lower() in {n.lower() for n in available_pretrained()}:
        return pretrained(model)
    return None


def pretrained_start(
    base: NeuralProcess,
    *,
    variables: Sequence[str],
    n_covariate_channels: int,
    temporal: bool,
    n_sources: int,
    lat: np.ndarray,
    lon: np.ndarray,
) -> Start:
    """``base`` adapted to the data: checked, covariate channels added, scale baked in."""
    cfg = base.config
    if len(variables) != getattr(cfg, "dim_y", 1):
        raise ConfigError(
            f"the pretrained model predicts {cfg.dim_y} variable(s); fine-tuning it on "
            f"{list(variables)} cannot map them onto its outputs. Fine-tune one model per "
            "variable, or fit a model from scratch (model='bsa-tnp') for several."
        )
    if temporal and not getattr(cfg, "temporal_bias", False):
        raise ConfigError(
            "this pretrained model has no temporal attention, so it cannot be fine-tuned on "
            "forecast tasks; fine-tune it on SpatialTasks() (interpolation), or fit a "
            "forecaster from scratch (model='bsa-tnp')."
        )
    if n_sources > 1:
        raise ConfigError(
            "fine-tuning takes the observations of one dataset; merge the context sources "
            "into it, or fit from scratch to weigh them apart."
        )
    if cfg.dim_x:
        raise ConfigError(
            f"this pretrained model already takes {cfg.dim_x} covariate channel(s); xnp's "
            "shipped models take none, and only those are fine-tuned."
        )
    lat, lon = np.ravel(lat), np.ravel(lon)
    ok = np.isfinite(lat) & np.isfinite(lon)
    factor = working_scale(base, np.stack([lat[ok], lon[ok]], -1))  # the whole network's
    model = base.with_distance_scale(factor) if factor != 1.0 else base
    params = model.params_
    new_cfg = cfg
    if n_covariate_channels:
        new_cfg = cfg.replace(dim_x=n_covariate_channels)
        params = with_zero_inputs(params, cfg.dim_obs_embed, n_covariate_channels)
    training = {k: v for k, v in model.training.items() if k != "context_rms_km"}
    digest = _digest(base.params_)
    record = {"from": _name_of(digest), "distance_scale": factor, "params_digest": digest}
    return Start(new_cfg, params, training, record)


def _name_of(digest: str) -> str:
    """The shipped model whose parameters have ``digest`` (:func:`_digest`), else ``"model"``."""
    for name in available_pretrained():
        if _digest(pretrained(name).params_) == digest:
            return name
    return "model"


def _digest(params: Any) -> str:
    """A short checksum of parameters (which start a fine-tuning run)."""
    import hashlib

    h = hashlib.sha256()
    for leaf in jax.tree.leaves(params):
        h.update(np.asarray(leaf).tobytes())
    return h.hexdigest()[:16]
