"""Validation scores of padded batches: exact totals, summed over batches.

A jitted evaluation step returns sums over a batch's valid targets (NLL, CRPS,
squared error per channel, points inside the central 95 % interval, counts), so scores
over a validation set are exact ratios of totals however it is batched.  The
training loop validates with it, and :meth:`xnp.NeuralProcess.evaluate_batches`
scores a fitted model with it; neither needs the optimiser or the loop.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from xnp.models.likelihoods import gaussian_crps, gaussian_nll

__all__ = ["Scores", "batch_scores", "eval_step", "make_eval_step", "std_factors"]

_Z95 = 1.959963984540054  # two-sided 95 % quantile of the standard normal


def make_eval_step(graphdef: nnx.GraphDef) -> Callable[[nnx.State, Any], dict[str, jax.Array]]:
    """A jitted ``evaluate(params, batch)`` returning sums over the batch's valid targets.

    The sums (``nll``, ``crps``, per-channel ``sq_err`` and ``sq_z`` ``[Dy]``, ``covered``,
    ``count``, per-channel ``channel_count``) add up over batches, so metrics over a
    validation set are exact ratios of totals.
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
            "crps": gaussian_crps(mean, std, batch.y, batch.target.mask) * count,
            "sq_err": jnp.sum(jnp.square(batch.y - mean) * mask, axis=(0, 1)),
            "sq_z": jnp.sum(jnp.square(jnp.where(mask > 0, z, 0.0)) * mask, axis=(0, 1)),
            "covered": jnp.sum(covered * mask),
            "count": count,
            "channel_count": jnp.sum(mask, axis=(0, 1)),
        }

    return jax.jit(evaluate)


@functools.lru_cache(maxsize=8)
def eval_step(graphdef: nnx.GraphDef) -> Callable:
    """:func:`make_eval_step` of ``graphdef``, compiled once per model structure."""
    return make_eval_step(graphdef)


class Scores(NamedTuple):
    """Validation scores of parameters over a set of batches (:func:`batch_scores`)."""

    #: Mean Gaussian NLL per valid target and channel (normalised units).
    nll: float
    #: Root-mean-square error per channel, in the data's units.
    rmse: list[float]
    #: Fraction of the valid targets inside the central 95 % interval.
    coverage: float
    #: Mean CRPS per valid target and channel (normalised units, as the NLL).
    crps: float

    def objective(self, loss: str) -> float:
        """The score of the training objective ``loss`` (``"nll"`` or ``"crps"``)."""
        return self.crps if loss == "crps" else self.nll


def batch_scores(
    evaluate: Callable, params: nnx.State, batches: Sequence[Any], scale: np.ndarray
) -> Scores:
    """The :class:`Scores` (NLL, RMSE per channel, 95 % coverage, CRPS) of ``params``.

    ``evaluate`` is an evaluation step (:func:`eval_step`); ``scale`` the
    per-channel standard deviations that turn normalised RMSE into data units.
    The NLL and CRPS stay normalised.  No batch, or no valid target: NaN scores.

    Each batch's sums are awaited before the next is dispatched: with the batch
    sharded over several CPU devices, a queue of evaluation steps and their
    sums could deadlock XLA's CPU collectives (an all-reduce waiting for a
    device whose next launch waits for a free slot), which XLA ends by aborting
    the process after 40 s.  Validation is rare, so the lost overlap costs
    nothing.
    """
    totals = _totals(evaluate, params, batches)
    if not totals:
        nan = float("nan")
        return Scores(nan, [nan] * np.size(scale), nan, nan)
    count = max(float(totals["count"]), 1.0)
    rmse = np.sqrt(totals["sq_err"] / np.maximum(totals["channel_count"], 1.0)) * scale
    return Scores(
        float(totals["nll"]) / count,
        rmse.tolist(),
        float(totals["covered"]) / count,
        float(totals["crps"]) / count,
    )


def std_factors(evaluate: Callable, params: nnx.State, batches: Sequence[Any]) -> np.ndarray:
    """Per-channel factors ``[Dy]`` of the predictive std that best fit ``batches``.

    The root mean square of the standardised errors ``z = (y − μ) / σ`` over the
    valid targets of each channel: multiplying σ by it minimises the Gaussian NLL
    of those targets (for fixed μ, the NLL's minimum over a common factor ``c`` of
    σ is at ``c² = mean z²``).  A channel without a valid target gets NaN.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> import jax.numpy as jnp
    >>> def fake(params, batch):  # z = 2 everywhere: the std was half what it should be
    ...     return {"sq_z": jnp.array([8.0]), "channel_count": jnp.array([2.0])}
    >>> std_factors(fake, None, [SimpleNamespace()]).tolist()
    [2.0]
    """
    totals = _totals(evaluate, params, batches)
    if not totals:
        raise ValueError("std_factors needs at least one batch")
    count = np.asarray(totals["channel_count"], np.float64)
    sq_z = np.asarray(totals["sq_z"], np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, np.sqrt(sq_z / np.maximum(count, 1.0)), np.nan)


def _totals(evaluate: Callable, params: nnx.State, batches: Sequence[Any]) -> dict[str, Any]:
    """The sums of ``evaluate`` over ``batches`` as numpy arrays (empty: no batch).

    Each batch's sums are awaited before the next is dispatched (see
    :func:`batch_scores`).
    """
    totals: dict[str, Any] = {}
    for batch in batches:
        sums = jax.block_until_ready(evaluate(params, batch))
        totals = sums if not totals else jax.tree.map(jnp.add, totals, sums)
    return jax.tree.map(np.asarray, totals)
