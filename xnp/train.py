"""Training building blocks: the paper's optimiser and a pure, jitted train step.

The step works on the split form of an NNX model (``graphdef`` + parameter
state), so it is a pure function of arrays: jit-compiled once per padded batch
shape, with the parameter and optimiser buffers donated (updated in place).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import optax
from flax import nnx

from xnp.errors import ConfigError

__all__ = ["make_optimizer", "make_train_step"]


def make_optimizer(
    *,
    learning_rate: float = 1e-4,
    final_learning_rate: float = 2e-5,
    steps: int = 100_000,
    warmup_steps: int = 0,
    weight_decay: float = 1e-4,
    clip_norm: float = 0.5,
) -> optax.GradientTransformation:
    """AdamW with global-norm clipping and a warm-up + cosine schedule (BSA-TNP paper).

    The learning rate rises linearly from 0 to ``learning_rate`` over
    ``warmup_steps`` and then follows a cosine down to ``final_learning_rate`` at
    ``steps`` (the paper's "starts at 1e-4, decays to 2e-5": the floor is the
    stated value, not ``init × alpha`` as in the reference code).

    Examples
    --------
    >>> tx = make_optimizer(steps=10)
    >>> type(tx).__name__
    'GradientTransformationExtraArgs'
    """
    if steps < 1:
        raise ConfigError(f"steps must be ≥ 1; got {steps}.")
    if not 0 <= warmup_steps < steps:
        raise ConfigError(f"warmup_steps must be in [0, steps); got {warmup_steps}.")
    if learning_rate <= 0 or final_learning_rate < 0:
        raise ConfigError("learning rates must be positive.")
    schedule = optax.warmup_cosine_decay_schedule(
        init_value=0.0 if warmup_steps else learning_rate,
        peak_value=learning_rate,
        warmup_steps=warmup_steps,
        decay_steps=steps,
        end_value=final_learning_rate,
    )
    return optax.chain(
        optax.clip_by_global_norm(clip_norm),
        optax.adamw(schedule, b1=0.9, b2=0.999, weight_decay=weight_decay),
    )


def make_train_step(
    graphdef: nnx.GraphDef,
    tx: optax.GradientTransformation,
    loss_fn: Callable[[nnx.Module, Any], jax.Array],
) -> Callable[[nnx.State, optax.OptState, Any], tuple[nnx.State, optax.OptState, jax.Array]]:
    """A jitted ``step(params, opt_state, batch) -> (params, opt_state, loss)``.

    ``loss_fn(model, batch)`` computes the scalar loss from the merged model.
    ``params`` and ``opt_state`` are donated: do not reuse the arrays passed in.
    """

    def step(params: nnx.State, opt_state: optax.OptState, batch: Any):
        def objective(p):
            return loss_fn(nnx.merge(graphdef, p), batch)

        loss, grads = jax.value_and_grad(objective)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return jax.jit(step, donate_argnums=(0, 1))
