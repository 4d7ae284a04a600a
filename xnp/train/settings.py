"""Training settings: :class:`TrainConfig`, and the one optimiser they define.

The optimiser is the BSA-TNP paper's: AdamW (β = 0.9, 0.999) after global-norm
clipping, with a linear warm-up and a cosine decay of the learning rate.  It is
built in one place, :func:`adamw`, whose learning rate is an injected
hyperparameter (:func:`optax.inject_hyperparams`): ``fit`` sets it from the
schedule on the host at each step, so the compiled step does not depend on the
run's length or peak learning rate; :func:`make_optimizer` bakes a schedule into
the same transformation for code that drives its own loop (recipes, tests).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import optax
from flax import nnx

from xnp.errors import ConfigError
from xnp.models.config import check_int, check_real

__all__ = ["LOSSES", "TrainConfig", "adamw", "check_loss", "make_optimizer"]

#: The training objectives :class:`TrainConfig` takes (``loss=``).
LOSSES = ("nll", "crps")


def check_loss(loss: str) -> str:
    """``loss`` if it is one of :data:`LOSSES`, else a :class:`~xnp.errors.ConfigError`.

    Examples
    --------
    >>> check_loss("crps")
    'crps'
    """
    if loss not in LOSSES:
        raise ConfigError(f"loss must be one of {', '.join(map(repr, LOSSES))}; got {loss!r}.")
    return loss


#: AdamW's moment decay rates (the paper's, and optax's defaults).
_BETAS = (0.9, 0.999)
#: Hyperparameters of :func:`optax.adamw` that stay Python numbers (static), so that
#: the compiled update is the plain AdamW one; only the learning rate is injected.
_STATIC = ("b1", "b2", "eps", "eps_root", "weight_decay", "mu_dtype", "mask", "nesterov")


def adamw(
    clip_norm: float, weight_decay: float, learning_rate: float | optax.Schedule = 0.0
) -> optax.GradientTransformation:
    """Global-norm clipping, then AdamW with an injected learning rate.

    ``learning_rate`` is a number (a placeholder that the training step replaces,
    see :func:`xnp.train.steps.fit_step`) or a schedule of the step count.  The
    current rate lives in the optimiser state as ``learning_rate``
    (:func:`optax.tree_utils.tree_get` reads it, ``tree_set`` changes it).

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> tx = adamw(0.5, 1e-4, learning_rate=1e-3)
    >>> state = tx.init({"w": jnp.ones(2)})
    >>> float(optax.tree_utils.tree_get(state, "learning_rate"))
    0.001
    """
    if not callable(learning_rate):
        learning_rate = np.asarray(learning_rate, np.float32)  # an array: injected, not static
    inject = optax.inject_hyperparams(optax.adamw, static_args=_STATIC)
    return optax.chain(
        optax.clip_by_global_norm(clip_norm),
        inject(learning_rate, b1=_BETAS[0], b2=_BETAS[1], weight_decay=weight_decay),
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """Rarely changed training knobs (``ds.np.fit`` takes the common ones directly).

    Parameters
    ----------
    warmup_fraction : float
        Fraction of the steps over which the learning rate rises linearly from 0.
    final_lr_ratio : float
        Floor of the cosine schedule as a fraction of the peak learning rate.  The
        default 0.2 is the BSA-TNP paper's stated schedule, 1e-4 decaying to 2e-5
        (the reference code's ``alpha`` would multiply instead, ending at 2e-9).
    weight_decay : float
        AdamW weight decay (paper: 1e-4).
    clip_norm : float
        Global gradient-norm clipping threshold (paper: 0.5).
    log_every : int
        Steps between history rows (train NLL, learning rate, speed).
    validate_every : int
        Steps between validations; a multiple of ``log_every``.  The last step is
        always validated.
    validation_batches : int
        Number of fixed validation batches.
    checkpoint_every : int
        Steps between checkpoints (with ``checkpoint_dir``); a multiple of ``log_every``.
    keep_checkpoints : int
        Number of most recent checkpoints kept on disk.
    context_size, target_size : int, optional
        Padded numbers of context and target points per task.  By default they are
        derived from the data and the task specification, so that every batch has
        the same shape and the step compiles once.
    devices : int, optional
        Number of devices to shard each batch over (default: as many as divide the
        batch size).
    prefetch : int
        Batches prepared ahead in a background thread (0: none).
    ema : float
        Decay of an exponential moving average of the parameters (Polyak
        averaging; 0: none).  With ``ema`` > 0 the average is what is validated,
        kept as the best parameters and returned; each step moves it towards the
        new parameters by ``1 − d`` with ``d = min(ema, (1 + k) / (10 + k))`` at
        step ``k``, so that it forgets the random initialisation early in a run.
        Values near ``1 − 10 / steps`` average over the last tenth of a run.
    loss : {"nll", "crps"}
        The training objective: the Gaussian negative log-likelihood per target
        (the papers'), or the continuous ranked probability score of the Gaussian
        predictions (closed form; proper too, but linear in large errors, so a few
        hard targets pull less on the mean and the std).  Validation computes both;
        the kept best parameters are those with the lowest validation value of the
        objective trained.

    Examples
    --------
    >>> TrainConfig(log_every=10, validate_every=50).checkpoint_every
    500
    """

    warmup_fraction: float = 0.05
    final_lr_ratio: float = 0.2
    weight_decay: float = 1e-4
    clip_norm: float = 0.5
    log_every: int = 50
    validate_every: int = 250
    validation_batches: int = 16
    checkpoint_every: int = 500
    keep_checkpoints: int = 2
    context_size: int | None = None
    target_size: int | None = None
    devices: int | None = None
    prefetch: int = 2
    ema: float = 0.0
    loss: str = "nll"

    def __post_init__(self) -> None:
        for name in ("log_every", "validate_every", "validation_batches", "checkpoint_every"):
            check_int(self, name)
        for name in ("validate_every", "checkpoint_every"):
            if getattr(self, name) % self.log_every:
                raise ConfigError(
                    f"{name} ({getattr(self, name)}) must be a multiple of log_every "
                    f"({self.log_every})."
                )
        check_real(self, "warmup_fraction", lambda v: 0.0 <= v < 1.0, "a number in [0, 1)")
        check_real(self, "final_lr_ratio", lambda v: 0.0 <= v <= 1.0, "a number in [0, 1]")
        check_real(self, "weight_decay", lambda v: v >= 0, "a finite number ≥ 0")
        check_real(
            self,
            "clip_norm",
            lambda v: v > 0,
            "a positive number (inf: no clipping)",
            finite=False,
        )
        for name in ("context_size", "target_size", "devices"):
            check_int(self, name, optional=True)
        check_int(self, "keep_checkpoints")
        check_int(self, "prefetch", minimum=0)
        check_real(self, "ema", lambda v: 0.0 <= v < 1.0, "a number in [0, 1) (0: no average)")
        check_loss(self.loss)

    def schedule(self, learning_rate: float, steps: int) -> Callable[[int], float]:
        """Learning rate at each step of a run of ``steps`` steps peaking at ``learning_rate``.

        Linear warm-up from 0 over ``warmup_fraction`` of the steps, then a cosine
        down to ``final_lr_ratio × learning_rate`` (as
        ``optax.warmup_cosine_decay_schedule``, evaluated on the host).

        Examples
        --------
        >>> lr = TrainConfig(warmup_fraction=0.1).schedule(1e-3, 100)
        >>> lr(0), lr(10), round(lr(100), 8)
        (0.0, 0.001, 0.0002)
        """
        if not learning_rate > 0:
            raise ConfigError(f"learning_rate must be positive; got {learning_rate!r}.")
        if steps < 1:
            raise ConfigError(f"steps must be ≥ 1; got {steps}.")
        peak, final = learning_rate, learning_rate * self.final_lr_ratio
        warmup = self.warmup_steps(steps)

        def lr(step: int) -> float:
            if step < warmup:
                return peak * step / warmup
            progress = min(max(step - warmup, 0) / max(steps - warmup, 1), 1.0)
            return final + (peak - final) * 0.5 * (1.0 + math.cos(math.pi * progress))

        return lr

    def rate_at(self, learning_rate: float, fraction: float) -> float:
        """The learning rate at ``fraction`` (0 to 1) of a run: the schedule laid over time.

        The same warm-up and cosine as :meth:`schedule`, as a function of the
        fraction of the run done (a fit with a time budget: the fraction of the
        budget spent).

        Examples
        --------
        >>> config = TrainConfig(warmup_fraction=0.1)
        >>> (
        ...     config.rate_at(1e-3, 0.05),
        ...     config.rate_at(1e-3, 0.1),
        ...     round(config.rate_at(1e-3, 1), 8),
        ... )
        (0.0005, 0.001, 0.0002)
        """
        peak, final = learning_rate, learning_rate * self.final_lr_ratio
        fraction = min(max(float(fraction), 0.0), 1.0)
        warm = self.warmup_fraction
        if fraction < warm:
            return peak * fraction / warm
        progress = (fraction - warm) / (1.0 - warm)
        return final + (peak - final) * 0.5 * (1.0 + math.cos(math.pi * progress))

    def init_optimizer(self, params: nnx.State) -> optax.OptState:
        """A fresh optimiser state for ``params`` (the form :func:`~xnp.train.loop.train` expects).

        The learning rate in it is a placeholder: the training step sets it from
        :meth:`schedule` at every step (see :func:`adamw`).
        """
        return adamw(self.clip_norm, self.weight_decay).init(params)

    def ema_decay(self, step: int) -> float:
        """The decay of the parameter average at step ``step`` (0 without one).

        Examples
        --------
        >>> config = TrainConfig(ema=0.99)
        >>> config.ema_decay(0), config.ema_decay(10_000)
        (0.1, 0.99)
        """
        return min(self.ema, (1.0 + step) / (10.0 + step))

    def warmup_steps(self, steps: int) -> int:
        """Number of warm-up steps in a run of ``steps`` steps."""
        return min(int(self.warmup_fraction * steps), steps - 1)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        """Inverse of :meth:`to_dict`."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"a TrainConfig is read from a mapping; got {data!r}.")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ConfigError(f"unknown TrainConfig fields {unknown}; known: {sorted(names)}.")
        return cls(**data)


def make_optimizer(
    *,
    learning_rate: float = 1e-4,
    final_learning_rate: float = 2e-5,
    steps: int = 100_000,
    warmup_steps: int = 0,
    weight_decay: float = 1e-4,
    clip_norm: float = 0.5,
) -> optax.GradientTransformation:
    """:func:`adamw` with a warm-up + cosine schedule built in (BSA-TNP paper).

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
    return adamw(clip_norm, weight_decay, schedule)
