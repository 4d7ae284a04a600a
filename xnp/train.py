"""The training loop: the paper's optimiser, a pure jitted step, validation, history.

The step works on the split form of an NNX model (``graphdef`` + parameter
state), so it is a pure function of arrays: jit-compiled once per padded batch
shape, with the parameter and optimiser buffers donated (updated in place).

:func:`train` runs that step on a stream of padded :class:`~xnp.data.batch.Batch`
objects given as a function of the step number (batch ``k`` depends only on ``k``,
which is what makes a resumed run identical to an uninterrupted one).  It shards
every batch over the devices along the batch axis (parameters replicated), so
several GPUs train data-parallel; it validates every so often on a fixed set of
batches, keeps the parameters with the best validation NLL, and hands its state to
a checkpoint callback.  It sees padded arrays only: no xarray here.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import logging
import math
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from tqdm.auto import tqdm

from xnp.errors import ConfigError, XnpError, XnpWarning
from xnp.models.config import check_int, check_real
from xnp.models.likelihoods import gaussian_nll

__all__ = [
    "HISTORY_FIELDS",
    "TrainConfig",
    "TrainState",
    "batch_loss",
    "data_mesh",
    "fit_step",
    "make_eval_step",
    "make_optimizer",
    "make_train_step",
    "train",
]

log = logging.getLogger(__name__)

#: Columns of the training history, in order (see :class:`TrainState`).
HISTORY_FIELDS = (
    "step",
    "train_nll",
    "val_nll",
    "val_rmse",
    "val_coverage",
    "learning_rate",
    "steps_per_second",
)

_Z95 = 1.959963984540054  # two-sided 95 % quantile of the standard normal


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
    return optax.chain(
        optax.clip_by_global_norm(clip_norm),
        optax.adamw(
            _schedule(learning_rate, final_learning_rate, steps, warmup_steps),
            b1=0.9,
            b2=0.999,
            weight_decay=weight_decay,
        ),
    )


def _schedule(peak: float, final: float, steps: int, warmup: int) -> optax.Schedule:
    return optax.warmup_cosine_decay_schedule(
        init_value=0.0 if warmup else peak,
        peak_value=peak,
        warmup_steps=warmup,
        decay_steps=steps,
        end_value=final,
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


def batch_loss(model: nnx.Module, batch: Any) -> jax.Array:
    """Mean Gaussian NLL of a :class:`~xnp.data.batch.Batch` (the training objective)."""
    return model.loss(batch.context, batch.target, batch.y)


def make_eval_step(graphdef: nnx.GraphDef) -> Callable[[nnx.State, Any], dict[str, jax.Array]]:
    """A jitted ``evaluate(params, batch)`` returning sums over the batch's valid targets.

    The sums (``nll``, per-channel ``sq_err`` ``[Dy]``, ``covered``, ``count``) add
    up over batches, so metrics over a validation set are exact ratios of totals.
    """

    def evaluate(params: nnx.State, batch: Any) -> dict[str, jax.Array]:
        mean, std = nnx.merge(graphdef, params)(batch.context, batch.target)
        mask = batch.target.mask[..., None].astype(mean.dtype)
        mask = jnp.broadcast_to(mask, mean.shape)
        count = jnp.sum(mask)
        z = (batch.y - mean) / std
        covered = (jnp.abs(z) <= _Z95).astype(mean.dtype)
        return {
            "nll": gaussian_nll(mean, std, batch.y, batch.target.mask) * count,
            "sq_err": jnp.sum(jnp.square(batch.y - mean) * mask, axis=(0, 1)),
            "covered": jnp.sum(covered * mask),
            "count": count,
            "channel_count": jnp.sum(mask, axis=(0, 1)),
        }

    return jax.jit(evaluate)


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

    def init_optimizer(self, params: nnx.State) -> optax.OptState:
        """A fresh optimiser state for ``params`` (the form :func:`train` expects)."""
        return _gradient_transform(self).init(params)

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


@dataclasses.dataclass
class TrainState:
    """Everything needed to continue training exactly where it stopped.

    Attributes
    ----------
    step : int
        Number of steps done.
    params, opt_state
        Current parameters and optimiser state.
    best_params : nnx.State or None
        Parameters with the lowest validation NLL so far (None without validation).
    best_step : int
        Step of ``best_params`` (0: none yet).
    best_nll : float
        Their validation NLL (``inf`` before the first validation).
    history : dict of list
        One list per name of :data:`HISTORY_FIELDS`; ``val_rmse`` entries are
        per-channel lists, NaN where a row had no validation.
    """

    step: int
    params: nnx.State
    opt_state: optax.OptState
    best_params: nnx.State | None = None
    best_step: int = 0
    best_nll: float = math.inf
    history: dict[str, list[Any]] = dataclasses.field(
        default_factory=lambda: {k: [] for k in HISTORY_FIELDS}
    )
    #: Whether the run was stopped early by an interrupt (Ctrl-C) at ``step``.
    interrupted: bool = False
    #: Training losses of the steps since the last history row (an interrupt can
    #: stop between rows; resuming averages them into the next row, as without it).
    pending_losses: tuple[float, ...] = ()


def _gradient_transform(config: TrainConfig) -> optax.GradientTransformation:
    """AdamW without its learning-rate factor (applied in the step, see :func:`fit_step`)."""
    return optax.chain(
        optax.clip_by_global_norm(config.clip_norm),
        optax.scale_by_adam(b1=0.9, b2=0.999),
        optax.add_decayed_weights(config.weight_decay),
    )


@functools.lru_cache(maxsize=8)
def fit_step(graphdef: nnx.GraphDef, clip_norm: float, weight_decay: float) -> Callable:
    """Jitted ``step(params, opt_state, batch, lr) -> (params, opt_state, loss)``.

    The same update as :func:`make_optimizer`'s AdamW, with the learning rate a
    traced argument computed from the schedule on the host, so the compiled step
    does not depend on the run length or learning rate: fitting again with the
    same model (a resumed run, a notebook cell run twice) compiles nothing new.
    """
    tx = _gradient_transform(TrainConfig(clip_norm=clip_norm, weight_decay=weight_decay))

    def step(params: nnx.State, opt_state: optax.OptState, batch: Any, lr: jax.Array):
        def objective(p):
            return batch_loss(nnx.merge(graphdef, p), batch)

        loss, grads = jax.value_and_grad(objective)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        updates = jax.tree.map(lambda u: -lr * u, updates)
        return optax.apply_updates(params, updates), opt_state, loss

    return jax.jit(step, donate_argnums=(0, 1))


@functools.lru_cache(maxsize=8)
def _eval_step(graphdef: nnx.GraphDef) -> Callable:
    return make_eval_step(graphdef)


def data_mesh(batch_size: int, devices: int | None = None) -> Mesh:
    """A one-axis (``"batch"``) mesh over the devices that evenly split ``batch_size``.

    With ``devices=None`` the largest number of available devices that divides the
    batch size is used; an explicit ``devices`` must divide it.

    Examples
    --------
    >>> data_mesh(8).axis_names
    ('batch',)
    """
    available = jax.devices()
    if devices is not None:
        if devices > len(available) or batch_size % devices:
            raise ConfigError(
                f"Cannot shard a batch of {batch_size} over {devices} devices "
                f"({len(available)} available): the batch size must be a multiple of the "
                "device count. Change batch_size or TrainConfig.devices."
            )
        n = devices
    else:
        n = max(d for d in range(1, len(available) + 1) if batch_size % d == 0)
        if n < len(available):
            log.info(
                "batch size %d is not a multiple of the %d devices; training on %d of them",
                batch_size,
                len(available),
                n,
            )
    return Mesh(np.array(available[:n]), ("batch",))


class _Prefetcher:
    """Prepare batch ``k`` ahead of use in a background thread (order is preserved)."""

    def __init__(self, fn: Callable[[int], Any], start: int, stop: int, ahead: int):
        self._fn, self._next, self._stop = fn, start, stop
        self._pool = concurrent.futures.ThreadPoolExecutor(1) if ahead else None
        self._queue: list[concurrent.futures.Future] = []
        self._ahead = ahead

    def _fill(self) -> None:
        while self._pool and len(self._queue) < self._ahead and self._next < self._stop:
            self._queue.append(self._pool.submit(self._fn, self._next))
            self._next += 1

    def get(self, k: int) -> Any:
        if self._pool is None:
            return self._fn(k)
        self._fill()
        return self._queue.pop(0).result()

    def close(self) -> None:
        if self._pool is not None:
            for future in self._queue:
                future.cancel()
            self._pool.shutdown(wait=True)


def _validate(
    evaluate: Callable, params: nnx.State, batches: Sequence[Any], scale: np.ndarray
) -> tuple[float, list[float], float]:
    totals: dict[str, Any] = {}
    for batch in batches:
        sums = evaluate(params, batch)
        totals = sums if not totals else jax.tree.map(jnp.add, totals, sums)
    totals = jax.tree.map(np.asarray, totals)
    count = max(float(totals["count"]), 1.0)
    rmse = np.sqrt(totals["sq_err"] / np.maximum(totals["channel_count"], 1.0)) * scale
    return float(totals["nll"]) / count, rmse.tolist(), float(totals["covered"]) / count


def train(
    graphdef: nnx.GraphDef,
    state: TrainState,
    batch_fn: Callable[[int], Any],
    *,
    steps: int,
    learning_rate: float,
    config: TrainConfig,
    batch_size: int,
    validation: Sequence[Any] | None = None,
    value_scale: Sequence[float] = (1.0,),
    on_checkpoint: Callable[[TrainState], None] | None = None,
    progress: bool = True,
) -> TrainState:
    """Train from ``state`` up to ``steps`` steps and return the final state.

    Parameters
    ----------
    graphdef : nnx.GraphDef
        Structure of the model whose parameters ``state.params`` holds.
    state : TrainState
        Where to start: a fresh state (step 0, optimiser state from
        :meth:`TrainConfig.init_optimizer`) or one restored from a checkpoint.
    batch_fn : callable
        ``batch_fn(k)`` returns the padded training batch of step ``k`` (same shape
        for every ``k``); it must depend on ``k`` only.
    steps : int
        Total number of steps of the run (the schedule spans them all).
    learning_rate : float
        Peak learning rate.
    config : TrainConfig
        The other knobs.
    batch_size : int
        Tasks per batch (to build the device mesh).
    validation : list of Batch, optional
        Fixed validation batches; without them no best parameters are tracked.
    value_scale : sequence of float
        Per-channel standard deviations that turn normalised RMSE into data units.
    on_checkpoint : callable, optional
        Called with the state every ``config.checkpoint_every`` steps and at the end.
    progress : bool
        Show a tqdm progress bar.

    Returns
    -------
    TrainState
        The state after ``steps`` steps; arrays are donated, so ``state`` itself
        must not be reused.
    """
    if state.step > steps:
        raise ConfigError(f"The state is at step {state.step}, beyond the run's {steps} steps.")
    schedule = config.schedule(learning_rate, steps)
    mesh = data_mesh(batch_size, config.devices)
    replicated = NamedSharding(mesh, PartitionSpec())
    sharded = NamedSharding(mesh, PartitionSpec("batch"))
    step_fn = fit_step(graphdef, config.clip_norm, config.weight_decay)
    evaluate = _eval_step(graphdef)
    params = jax.device_put(state.params, replicated)
    opt_state = jax.device_put(state.opt_state, replicated)
    best = None if state.best_params is None else jax.device_put(state.best_params, replicated)
    val_batches = [jax.device_put(b, sharded) for b in validation or ()]
    scale = np.asarray(value_scale, np.float64)
    history = {k: list(v) for k, v in state.history.items()}
    best_step, best_nll = state.best_step, state.best_nll
    losses: list[jax.Array] = [jnp.asarray(x, jnp.float32) for x in state.pending_losses]
    start = state.step
    fetch = _Prefetcher(
        lambda k: jax.device_put(batch_fn(k), sharded), start, steps, config.prefetch
    )
    bar = tqdm(total=steps, initial=start, desc="fit", disable=not progress, unit="step")
    tick, tick_step = time.perf_counter(), start
    done, interrupted = start, False
    failures: list[int] = []
    try:
        for k in range(start, steps):
            lr = np.float32(schedule(k))
            params, opt_state, loss = step_fn(params, opt_state, fetch.get(k), lr)
            losses.append(loss)
            done = k + 1
            bar.update(1)
            if k == start:
                # the first step compiles (unless this process compiled it before): keep
                # it out of steps_per_second, which would otherwise understate the speed
                # of the first logging interval many times over
                jax.block_until_ready(loss)
                now = time.perf_counter()
                log.info("first step (including compilation) took %.1f s", now - tick)
                tick, tick_step = now, done
            if done % config.log_every and done != steps:
                continue
            train_nll = float(jnp.mean(jnp.stack(losses)))
            if not math.isfinite(train_nll):
                raise _diverged(done, train_nll, learning_rate, state.step)
            losses.clear()
            now = time.perf_counter()
            # NaN when the interval held only the first step, which is not timed
            speed = (done - tick_step) / (now - tick) if done > tick_step else math.nan
            tick, tick_step = now, done
            row = {
                "step": done,
                "train_nll": train_nll,
                "val_nll": math.nan,
                "val_rmse": [math.nan] * scale.size,
                "val_coverage": math.nan,
                "learning_rate": float(lr),
                "steps_per_second": speed,
            }
            if val_batches and (done % config.validate_every == 0 or done == steps):
                nll, rmse, coverage = _validate(evaluate, params, val_batches, scale)
                row.update(val_nll=nll, val_rmse=rmse, val_coverage=coverage)
                if nll < best_nll:
                    best_nll, best_step = nll, done
                    best = jax.tree.map(jnp.copy, params)
                log.info("step %d: train NLL %.4f, validation NLL %.4f", done, train_nll, nll)
                tick = time.perf_counter()  # do not count validation time as training speed
            for key, value in row.items():
                history[key].append(value)
            bar.set_postfix(nll=f"{train_nll:.3f}", steps_s=f"{speed:.1f}")
            if on_checkpoint is not None and (
                done % config.checkpoint_every == 0 or done == steps
            ):
                _checkpoint(
                    on_checkpoint,
                    TrainState(done, params, opt_state, best, best_step, best_nll, history),
                    failures,
                )
                tick = time.perf_counter()
    except KeyboardInterrupt:
        interrupted = True
    finally:
        fetch.close()
        bar.close()
    if interrupted:
        pending = tuple(float(x) for x in losses)
        return _interrupted(
            TrainState(done, params, opt_state, best, best_step, best_nll, history, True, pending),
            steps,
            on_checkpoint,
            failures,
        )
    return TrainState(steps, params, opt_state, best, best_step, best_nll, history)


def _diverged(step: int, loss: float, learning_rate: float, start: int) -> ConfigError:
    """The error of a run whose training loss became NaN or infinite at ``step``."""
    resumed = f" (this run resumed at step {start})" if start else ""
    return ConfigError(
        f"Training diverged: the training NLL is {loss} at step {step} (peak learning rate "
        f"{learning_rate:g}), so the parameters are no longer finite. Lower learning_rate "
        "(e.g. by 10×), or check the data for extreme values. Checkpoints written before "
        f"step {step} are intact{resumed}."
    )


def _checkpoint(
    on_checkpoint: Callable[[TrainState], None], state: TrainState, failures: list[int]
) -> None:
    """Write a checkpoint; a failure (disk full, folder removed) warns and training goes on.

    Losing the run in memory because a checkpoint could not be written would throw
    away all the steps done; the returned model is complete either way.
    """
    try:
        on_checkpoint(state)
    except (OSError, XnpError) as err:
        message = (
            f"could not write the checkpoint of step {state.step}: {err} Training continues; "
            "the model it returns is complete, but resume=True can only continue from the "
            "last checkpoint written."
        )
        if failures:
            log.warning(message)
        else:
            warnings.warn(message, XnpWarning, stacklevel=4)
        failures.append(state.step)


def _interrupted(
    state: TrainState,
    steps: int,
    on_checkpoint: Callable[[TrainState], None] | None,
    failures: list[int],
) -> TrainState:
    """Stop cleanly after Ctrl-C: checkpoint what was done and return it.

    An interrupt during a step may leave that step's inputs donated (deleted);
    then the last validated best parameters are all that is left, and without
    them the interrupt propagates.
    """
    deleted = any(
        getattr(x, "is_deleted", lambda: False)()
        for x in jax.tree.leaves((state.params, state.opt_state))
    )
    if deleted and state.best_params is None:
        raise KeyboardInterrupt
    if deleted:
        state = dataclasses.replace(state, params=state.best_params)
    elif on_checkpoint is not None and state.step > 0:
        _checkpoint(on_checkpoint, state, failures)  # so that resume=True continues from here
    log.warning("interrupted after %d of %d steps", state.step, steps)
    return state
