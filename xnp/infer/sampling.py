"""Joint samples of a predicted field by autoregressive sampling.

A neural process predicts each target's marginal distribution given the context.
Draws of the field *jointly* at many targets come from the chain rule: visit the
targets in a random order, draw the next ``per_step`` of them from their
marginals given the context and the values drawn so far, add those draws to the
context, and go on (the TNP-KR and ConvNP papers sample so).  With one target per
step this is exact for a model whose marginals are exact; drawing ``per_step > 1``
targets at once treats the targets of one step as independent given the rest, an
approximation that costs little when the step's targets are far apart relative to
the field's correlation length, which random orders make likely.

Every sample has its own order; the ``K`` samples run together along the batch
axis, so one pass conditions ``K`` contexts of equal size.  The cost is
``ceil(M / per_step)`` conditioning passes over a context that grows from ``N`` to
``N + M`` points, each ``O((N + M)²)`` in attention: sampling 1,617 targets in steps
of 64 from 218 observations is 26 passes of up to 1,835 context points.

Values are in the model's normalised units; :mod:`xnp.prediction` maps them to the
variables' units.

Examples
--------
>>> import numpy as np
>>> from flax import nnx
>>> from xnp.arrays import Points
>>> from xnp.models.bsa_tnp import BSATNP
>>> from xnp.models.config import BSATNPConfig
>>> from xnp.infer import Predictor
>>> predictor = Predictor(BSATNP(BSATNPConfig.tiny(), rngs=nnx.Rngs(0)))
>>> rng = np.random.default_rng(0)
>>> context = Points.from_arrays(s=rng.uniform(0, 5, (1, 20, 2)), f=rng.normal(size=(1, 20, 1)))
>>> targets = Points.from_arrays(s=rng.uniform(0, 5, (1, 30, 2)))
>>> autoregressive_samples(predictor, context, targets, n_samples=3, per_step=8).shape
(3, 30, 1)
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tqdm.auto import tqdm

from xnp.arrays import Points
from xnp.errors import ConfigError
from xnp.infer.chunks import host_fields, real_points

__all__ = ["autoregressive_samples"]


def autoregressive_samples(
    predictor: Any,
    context: Points,
    targets: Points,
    *,
    n_samples: int,
    per_step: int = 64,
    seed: int = 0,
    progress: bool = False,
) -> np.ndarray:
    """``n_samples`` joint draws ``[K, M, Dy]`` of the values at ``targets`` given ``context``.

    Parameters
    ----------
    predictor : Predictor
        Conditions (:meth:`~xnp.infer.Predictor.condition`) and predicts
        (:meth:`~xnp.infer.Predictor.predict_state`) batches of point sets.
    context, targets : Points
        Batches of one point set each (normalised values; the targets' values are
        ignored, their padding is not drawn: it stays NaN).
    n_samples : int
        Number of joint draws ``K``.
    per_step : int
        Targets drawn per conditioning pass (1: exact chain rule; larger: faster).
    seed : int
        Seed of the orders and the draws: the same seed gives the same samples.
    progress : bool
        Show a progress bar over the passes.

    Returns
    -------
    ndarray ``[K, M, Dy]``
        The draws, float32; NaN at the targets' padding.
    """
    for name, value in (("n_samples", n_samples), ("per_step", per_step)):
        if not isinstance(value, int | np.integer) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"{name} must be a positive integer; got {value!r}.")
    if context.batch_size != 1 or targets.batch_size != 1:
        raise ConfigError("autoregressive sampling takes one context and one target set.")
    rng = np.random.default_rng(seed)
    ctx = real_points(context)
    tgt = {k: v[0] for k, v in host_fields(targets).items()}  # (padding included)
    real = np.flatnonzero(tgt["mask"])
    k, dy = int(n_samples), ctx["f"].shape[-1]
    out = np.full((k, targets.size, dy), np.nan, np.float32)
    orders = np.stack([real[rng.permutation(real.size)] for _ in range(k)])  # [K, M]
    grown = {name: np.repeat(v[None], k, axis=0) for name, v in ctx.items()}  # [K, N, .]
    rows = np.arange(k)[:, None]
    steps = range(0, real.size, int(per_step))
    for start in tqdm(steps, desc="sampling", disable=not progress):
        idx = orders[:, start : start + int(per_step)]  # [K, m]
        step = {name: tgt[name][idx] for name in ("s", "t", "x")}
        state = predictor.condition(Points.from_arrays(**grown, dim_y=dy))
        mean, std = predictor.predict_state(state, Points.from_arrays(**step, dim_y=dy))
        draw = (mean + std * rng.standard_normal(mean.shape)).astype(np.float32)
        out[rows, idx] = draw
        step["f"] = draw
        grown = {name: np.concatenate([grown[name], step[name]], axis=1) for name in grown}
    return out
