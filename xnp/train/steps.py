"""The training step: the loss of a padded batch and one jitted optimiser update.

The step works on the split form of an NNX model (``graphdef`` + parameter
state), so it is a pure function of arrays: jit-compiled once per padded batch
shape, with the parameter and optimiser buffers donated (updated in place).
:func:`fit_step` is the step ``fit`` runs (the learning rate an argument, set
from the schedule on the host); :func:`averaged_fit_step` the same with a
moving average of the parameters carried along (``TrainConfig.ema``);
:func:`make_train_step` the same update for any optax transformation and loss,
for code that drives its own loop.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import optax
from flax import nnx

from xnp.models.likelihoods import gaussian_crps
from xnp.train.settings import adamw, check_loss

__all__ = ["averaged_fit_step", "batch_loss", "fit_step", "make_train_step"]


def _update(
    graphdef: nnx.GraphDef,
    tx: optax.GradientTransformation,
    loss_fn: Callable[[nnx.Module, Any], jax.Array],
) -> Callable:
    """The unjitted ``update(params, opt_state, batch) -> (params, opt_state, loss)``."""

    def update(params: nnx.State, opt_state: optax.OptState, batch: Any):
        def objective(p):
            return loss_fn(nnx.merge(graphdef, p), batch)

        loss, grads = jax.value_and_grad(objective)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return update


def make_train_step(
    graphdef: nnx.GraphDef,
    tx: optax.GradientTransformation,
    loss_fn: Callable[[nnx.Module, Any], jax.Array],
) -> Callable[[nnx.State, optax.OptState, Any], tuple[nnx.State, optax.OptState, jax.Array]]:
    """A jitted ``step(params, opt_state, batch) -> (params, opt_state, loss)``.

    ``loss_fn(model, batch)`` computes the scalar loss from the merged model; ``tx``
    is any optax transformation, e.g. :func:`xnp.train.settings.make_optimizer`.
    ``params`` and ``opt_state`` are donated: do not reuse the arrays passed in.
    """
    return jax.jit(_update(graphdef, tx, loss_fn), donate_argnums=(0, 1))


def batch_loss(model: nnx.Module, batch: Any, loss: str = "nll") -> jax.Array:
    """The training objective of a :class:`~xnp.data.batch.Batch`.

    ``loss="nll"``: the mean Gaussian NLL per valid target (the model's own
    ``loss``); ``"crps"``: the mean CRPS of its Gaussian predictions
    (:func:`~xnp.models.likelihoods.gaussian_crps`, normalised units).
    """
    if check_loss(loss) == "crps":
        mean, std = model(batch.context, batch.target)
        return gaussian_crps(mean, std, batch.y, batch.target.mask)
    return model.loss(batch.context, batch.target, batch.y)


@functools.lru_cache(maxsize=8)
def fit_step(
    graphdef: nnx.GraphDef, clip_norm: float, weight_decay: float, loss: str = "nll"
) -> Callable:
    """Jitted ``step(params, opt_state, batch, lr) -> (params, opt_state, loss)``.

    The update of :func:`~xnp.train.settings.adamw` with its learning rate set to
    ``lr`` (a float32 scalar, computed from the schedule on the host) before the
    step, so the compiled step does not depend on the run length or learning
    rate: fitting again with the same model (a resumed run, a notebook cell run
    twice) compiles nothing new.  ``opt_state`` comes from
    :meth:`~xnp.train.settings.TrainConfig.init_optimizer`.  ``loss`` is the
    objective (:func:`batch_loss`: ``"nll"`` or ``"crps"``).
    """
    update = _update(graphdef, adamw(clip_norm, weight_decay), _objective(loss))

    def step(params: nnx.State, opt_state: optax.OptState, batch: Any, lr: jax.Array):
        opt_state = optax.tree_utils.tree_set(opt_state, learning_rate=lr)
        return update(params, opt_state, batch)

    return jax.jit(step, donate_argnums=(0, 1))


def _objective(loss: str) -> Callable[[nnx.Module, Any], jax.Array]:
    """:func:`batch_loss` with its ``loss`` fixed (checked before anything compiles)."""
    return functools.partial(batch_loss, loss=check_loss(loss))


def moving_average(average: nnx.State, params: nnx.State, decay: jax.Array) -> nnx.State:
    """``decay × average + (1 − decay) × params``, leaf by leaf (in the average's dtype).

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> moving_average({"w": jnp.zeros(2)}, {"w": jnp.ones(2)}, jnp.float32(0.75))["w"]
    Array([0.25, 0.25], dtype=float32)
    """
    moved = optax.incremental_update(params, average, 1 - decay)
    return jax.tree.map(lambda m, a: m.astype(a.dtype), moved, average)


@functools.lru_cache(maxsize=8)
def averaged_fit_step(
    graphdef: nnx.GraphDef, clip_norm: float, weight_decay: float, loss: str = "nll"
) -> Callable:
    """Jitted ``step(params, opt_state, average, batch, lr, decay)``.

    It returns ``(params, opt_state, average, loss)``: :func:`fit_step`'s
    update, then the moving average of the new parameters (:func:`moving_average`
    with ``decay``, a float32 scalar set on the host from
    :meth:`~xnp.train.settings.TrainConfig.ema_decay`).  The three states are
    donated together, so an interrupted step leaves all or none of them consumed.
    """
    update = _update(graphdef, adamw(clip_norm, weight_decay), _objective(loss))

    def step(params, opt_state, average, batch, lr: jax.Array, decay: jax.Array):
        opt_state = optax.tree_utils.tree_set(opt_state, learning_rate=lr)
        params, opt_state, loss = update(params, opt_state, batch)
        return params, opt_state, moving_average(average, params, decay), loss

    return jax.jit(step, donate_argnums=(0, 1, 2))
