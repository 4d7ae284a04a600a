"""The training loop: :func:`train` runs the step over a stream of padded batches.

:func:`train` runs :func:`~xnp.train.steps.fit_step` on padded
:class:`~xnp.arrays.Batch` objects given as a function of the step number (batch
``k`` depends only on ``k``, which is what makes a resumed run identical to an
uninterrupted one).  It shards every batch over the devices along the batch axis
(parameters replicated), so several GPUs train data-parallel; it validates every
so often on a fixed set of batches, keeps the parameters with the best
validation NLL, and hands its state to a checkpoint callback.  It sees padded
arrays only: no xarray here.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import math
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from tqdm.auto import tqdm

from xnp.errors import ConfigError, XnpError, XnpWarning
from xnp.train.metrics import batch_scores, eval_step
from xnp.train.settings import TrainConfig
from xnp.train.state import TrainState
from xnp.train.steps import averaged_fit_step, fit_step

__all__ = ["data_mesh", "train"]

log = logging.getLogger("xnp.train")


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
    time_budget: float | None = None,
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
        With ``config.ema`` > 0 it is the parameters' moving average
        (``state.ema_params``) that is validated and kept as the best.
    value_scale : sequence of float
        Per-channel standard deviations that turn normalised RMSE into data units.
    on_checkpoint : callable, optional
        Called with the state every ``config.checkpoint_every`` steps and at the end.
    progress : bool
        Show a tqdm progress bar.
    time_budget : float, optional
        Seconds the loop may take (counting those of the run before a resume):
        the schedule is laid over the budget (its progress is the larger of the
        fractions of steps done and of the budget spent), and the run stops cleanly
        at the first step that ends past it, with a last validation and checkpoint.
        ``steps`` is then the most it may make.

    Returns
    -------
    TrainState
        The state after ``steps`` steps (or when the budget ran out); arrays are
        donated, so ``state`` itself must not be reused.
    """
    if state.step > steps:
        raise ConfigError(f"The state is at step {state.step}, beyond the run's {steps} steps.")
    if time_budget is not None and state.seconds >= time_budget:
        log.info("the run had spent its time budget (%.0f s) already", time_budget)
        return dataclasses.replace(state, out_of_time=state.step < steps)
    schedule = config.schedule(learning_rate, steps)
    mesh = data_mesh(batch_size, config.devices)
    replicated = NamedSharding(mesh, PartitionSpec())
    sharded = NamedSharding(mesh, PartitionSpec("batch"))
    step_fn = fit_step(graphdef, config.clip_norm, config.weight_decay, config.loss)
    averaging = config.ema > 0
    if averaging:
        step_fn = averaged_fit_step(graphdef, config.clip_norm, config.weight_decay, config.loss)
    evaluate = eval_step(graphdef)
    # several CPU devices: one step in flight at a time (see metrics.batch_scores: queued
    # sharded runs can deadlock XLA's CPU collectives); GPUs keep asynchronous dispatch
    in_step = mesh.devices.size > 1 and mesh.devices.flat[0].platform == "cpu"
    params = jax.device_put(state.params, replicated)
    opt_state = jax.device_put(state.opt_state, replicated)
    best = None if state.best_params is None else jax.device_put(state.best_params, replicated)
    average = None
    if averaging:  # a fresh run starts the average at the initial parameters
        start_average = state.params if state.ema_params is None else state.ema_params
        average = jax.device_put(jax.tree.map(jnp.copy, start_average), replicated)
    val_batches = [jax.device_put(b, sharded) for b in validation or ()]
    scale = np.asarray(value_scale, np.float64)
    history = {k: list(v) for k, v in state.history.items()}
    best_step, best_score = state.best_step, state.best_score
    losses: list[jax.Array] = [jnp.asarray(x, jnp.float32) for x in state.pending_losses]
    start = state.step
    fetch = _Prefetcher(
        lambda k: jax.device_put(batch_fn(k), sharded), start, steps, config.prefetch
    )
    if time_budget is None:
        bar = tqdm(total=steps, initial=start, desc="fit", disable=not progress, unit="step")
    else:  # a bar of seconds: the budget is what ends the run
        bar = tqdm(total=round(time_budget), initial=min(round(state.seconds), round(time_budget)),
                   desc="fit", disable=not progress, unit="s")  # fmt: skip
    tick, tick_step = time.perf_counter(), start
    began, spent_before = tick, float(state.seconds)
    elapsed = lambda: spent_before + time.perf_counter() - began  # noqa: E731
    done, interrupted, out_of_time = start, False, False
    in_flight: jax.Array | None = None  # the last queued loss, awaited once the next is queued

    def snapshot(**more: Any) -> TrainState:
        """The state now (the loop's current values)."""
        return TrainState(done, params, opt_state, best, best_step, best_score, history,
                          ema_params=average, seconds=elapsed(), **more)  # fmt: skip

    failures: list[int] = []
    try:
        for k in range(start, steps):
            if time_budget is None:
                lr = np.float32(schedule(k))
            else:  # the schedule laid over the budget
                lr = np.float32(
                    config.rate_at(learning_rate, max(k / steps, elapsed() / time_budget))
                )
            if averaging:
                decay = np.float32(config.ema_decay(k))
                params, opt_state, average, loss = step_fn(
                    params, opt_state, average, fetch.get(k), lr, decay
                )
            else:
                params, opt_state, loss = step_fn(params, opt_state, fetch.get(k), lr)
            if in_step:
                jax.block_until_ready(loss)
            losses.append(loss)
            done = k + 1
            if time_budget is None:
                # one step in flight: the host prepares the next step while this one
                # runs, and the bar counts steps (nearly) done, not merely queued, so
                # its rate and time left are true between log points
                if in_flight is not None:
                    jax.block_until_ready(in_flight)
                in_flight = loss
                bar.update(1)
            else:
                jax.block_until_ready(loss)  # time the step itself, not its dispatch
                out_of_time = elapsed() >= time_budget and done < steps
                bar.update(max(min(round(elapsed()), bar.total) - bar.n, 0))
            last = done == steps or out_of_time
            if k == start:
                # the first step compiles (unless this process compiled it before): keep
                # it out of steps_per_second, which would otherwise understate the speed
                # of the first logging interval many times over
                jax.block_until_ready(loss)
                now = time.perf_counter()
                log.info("first step (including compilation) took %.1f s", now - tick)
                tick, tick_step = now, done
            if done % config.log_every and not last:
                continue
            train_loss = float(jnp.mean(jnp.stack(losses)))
            if not math.isfinite(train_loss):
                raise _diverged(done, train_loss, learning_rate, state.step, config.loss)
            losses.clear()
            now = time.perf_counter()
            # NaN when the interval held only the first step, which is not timed
            speed = (done - tick_step) / (now - tick) if done > tick_step else math.nan
            tick, tick_step = now, done
            row = {
                "step": done,
                "train_nll": math.nan,
                "train_crps": math.nan,
                "val_nll": math.nan,
                "val_crps": math.nan,
                "val_rmse": [math.nan] * scale.size,
                "val_coverage": math.nan,
                "learning_rate": float(lr),
                "steps_per_second": speed,
            }
            row[f"train_{config.loss}"] = train_loss
            if val_batches and (done % config.validate_every == 0 or last):
                judged = average if averaging else params  # what a model of this step uses
                scores = batch_scores(evaluate, judged, val_batches, scale)
                row.update(val_nll=scores.nll, val_crps=scores.crps, val_rmse=scores.rmse,
                           val_coverage=scores.coverage)  # fmt: skip
                score = scores.objective(config.loss)
                if score < best_score:
                    best_score, best_step = score, done
                    best = jax.tree.map(jnp.copy, judged)
                log.info("step %d: train %s %.4f, validation NLL %.4f, CRPS %.4f", done,
                         config.loss.upper(), train_loss, scores.nll, scores.crps)  # fmt: skip
                tick = time.perf_counter()  # do not count validation time as training speed
            for key, value in row.items():
                history[key].append(value)
            bar.set_postfix({config.loss: f"{train_loss:.3f}", "steps_s": f"{speed:.1f}",
                             "step": done})  # fmt: skip
            if on_checkpoint is not None and (done % config.checkpoint_every == 0 or last):
                _checkpoint(on_checkpoint, snapshot(), failures)
                tick = time.perf_counter()
            if out_of_time:
                log.info("time budget of %.0f s reached after %d steps", time_budget, done)
                break
    except KeyboardInterrupt:
        interrupted = True
    finally:
        fetch.close()
        bar.close()
    if interrupted:
        pending = tuple(float(x) for x in losses)
        return _interrupted(
            snapshot(interrupted=True, pending_losses=pending),
            steps,
            on_checkpoint,
            failures,
        )
    return snapshot(out_of_time=out_of_time)


def _diverged(
    step: int, loss: float, learning_rate: float, start: int, objective: str = "nll"
) -> ConfigError:
    """The error of a run whose training loss became NaN or infinite at ``step``."""
    resumed = f" (this run resumed at step {start})" if start else ""
    return ConfigError(
        f"Training diverged: the training {objective.upper()} is {loss} at step {step} "
        f"(peak learning rate "
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
        for x in jax.tree.leaves((state.params, state.opt_state, state.ema_params))
    )
    if deleted and state.best_params is None:
        raise KeyboardInterrupt
    if deleted:
        state = dataclasses.replace(state, params=state.best_params, ema_params=None)
    elif on_checkpoint is not None and state.step > 0:
        _checkpoint(on_checkpoint, state, failures)  # so that resume=True continues from here
    log.warning("interrupted after %d of %d steps", state.step, steps)
    return state
