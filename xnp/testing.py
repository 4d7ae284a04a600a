"""Test helpers: the structural checks every neural process must pass, and a dask counter.

A transformer neural process is a function of sets: the context's order does not
matter, padding is inert, targets are conditionally independent given the
context, so predicting them in chunks equals predicting them at once, and a
trained model beats the trivial predictor.  The ``check_*`` functions assert
these for any model with the split API (``model(context, targets)``,
``condition``, ``predict``), so that a new model (or a user's own) is held to
the same structure as BSA-TNP and Swin-TNP.  :class:`ComputeCounter` counts how
often dask is asked to compute (a lazy result must not compute at graph build).

This module is for tests: it sits at the top of the package, beside the command
line, and may import anything in xnp (but not pytest).

Examples
--------
>>> import jax
>>> from flax import nnx
>>> from xnp.models.bsa_tnp import BSATNP
>>> from xnp.models.config import BSATNPConfig
>>> model = Jitted(BSATNP(BSATNPConfig.tiny(spatial_bias="euclidean"), rngs=nnx.Rngs(0)))
>>> ctx = random_points(jax.random.key(0), 2, 30)
>>> tgt = random_points(jax.random.key(1), 2, 20)
>>> check_context_permutation_invariance(model, ctx, tgt)
>>> mean, std = check_chunked_prediction(model, ctx, tgt, cuts=(0, 7, 13))
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import dask
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from xnp.arrays import Points
from xnp.data.synthetic import GPTasks, sample_gp_batch
from xnp.train.settings import make_optimizer
from xnp.train.steps import make_train_step

__all__ = [
    "ComputeCounter",
    "Jitted",
    "check_beats_trivial_predictor",
    "check_chunked_prediction",
    "check_context_permutation_invariance",
    "check_padding_is_inert",
    "check_targets_independent",
    "random_points",
]


class ComputeCounter:
    """A dask scheduler that counts how often it is asked to compute.

    Examples
    --------
    >>> import dask.array as da
    >>> counter = ComputeCounter()
    >>> with dask.config.set(scheduler=counter):
    ...     _ = da.ones(4, chunks=2).sum().compute()
    >>> counter.calls
    1
    """

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, dsk: Any, keys: Any, **kwargs: Any) -> Any:
        """Compute ``keys`` of the graph ``dsk`` synchronously, counting the call."""
        self.calls += 1
        return dask.get(dsk, keys, **kwargs)


class Jitted:
    """A model whose forward, ``condition`` and ``predict`` are jit-compiled (fast tests).

    ``merge(params)`` gives the NNX module back (e.g. to call it eagerly).
    """

    def __init__(self, model: nnx.Module) -> None:
        graphdef, self.params = nnx.split(model)
        merge = lambda p: nnx.merge(graphdef, p)  # noqa: E731
        self._call = jax.jit(lambda p, c, t: merge(p)(c, t))
        self._condition = jax.jit(lambda p, c: merge(p).condition(c))
        self._predict = jax.jit(lambda p, st, t: merge(p).predict(st, t))
        self.merge = merge

    def __call__(self, ctx: Points, tgt: Points) -> tuple[jax.Array, jax.Array]:
        """Mean and std at ``tgt`` given the context ``ctx`` (one jitted forward pass)."""
        return self._call(self.params, ctx, tgt)

    def condition(self, ctx: Points) -> Any:
        """The conditioned state of the context ``ctx``."""
        return self._condition(self.params, ctx)

    def predict(self, state: Any, tgt: Points) -> tuple[jax.Array, jax.Array]:
        """Mean and std at ``tgt`` given a conditioned ``state``."""
        return self._predict(self.params, state, tgt)


def random_points(
    key: jax.Array,
    b: int,
    n: int,
    *,
    sphere: bool = False,
    dim_x: int = 0,
    mask_frac: float | None = None,
    time: bool = False,
    box: float = 2.0,
) -> Points:
    """``b`` random sets of ``n`` points: on the sphere, or in ``[-box, box]²``.

    Values and covariates are standard normal; with ``time`` times are uniform in
    [0, 48) hours; with ``mask_frac`` each point is real with that probability.
    """
    ks = jax.random.split(key, 5)
    if sphere:
        lat = jnp.rad2deg(jnp.arcsin(jax.random.uniform(ks[0], (b, n), minval=-1, maxval=1)))
        lon = jax.random.uniform(ks[1], (b, n), minval=-180, maxval=180)
        s = jnp.stack([lat, lon], -1)
    else:
        s = jax.random.uniform(ks[0], (b, n, 2), minval=-box, maxval=box)
    mask = None if mask_frac is None else jax.random.bernoulli(ks[4], mask_frac, (b, n))
    t = jax.random.uniform(ks[3], (b, n, 1), maxval=48.0) if time else None
    return Points.from_arrays(
        s=s, t=t, x=jax.random.normal(ks[2], (b, n, dim_x)),
        f=jax.random.normal(ks[3], (b, n, 1)), mask=mask,
    )  # fmt: skip


def check_context_permutation_invariance(
    model: Callable, ctx: Points, tgt: Points, *, atol: float = 1e-5
) -> None:
    """Assert that shuffling the context points leaves the predictive mean unchanged."""
    perm = jax.random.permutation(jax.random.key(5), ctx.size)
    shuffled = jax.tree.map(lambda a: a[:, perm], ctx)
    np.testing.assert_allclose(model(shuffled, tgt)[0], model(ctx, tgt)[0], atol=atol)


def check_chunked_prediction(
    model: Any, ctx: Points, tgt: Points, *, cuts: Sequence[int], atol: float = 1e-6
) -> tuple[jax.Array, jax.Array]:
    """Assert that predicting the targets in chunks ``cuts`` equals predicting them at once.

    Conditions once (``model.condition``), predicts the chunks ``tgt[cuts[i]:cuts[i+1]]``
    (the last runs to the end) and compares with one ``predict`` of all targets;
    returns that ``(mean, std)``.
    """
    state = model.condition(ctx)
    mean, std = model.predict(state, tgt)
    bounds = [*cuts, tgt.size]
    parts = [model.predict(state, tgt.slice(a, b)) for a, b in itertools.pairwise(bounds)]
    np.testing.assert_allclose(jnp.concatenate([p[0] for p in parts], 1), mean, atol=atol)
    np.testing.assert_allclose(jnp.concatenate([p[1] for p in parts], 1), std, atol=atol)
    return mean, std


def check_padding_is_inert(
    model: Callable, ctx: Points, tgt: Points, junk: Points, *, atol: float = 1e-5
) -> None:
    """Assert that masked context points change nothing and get no gradient.

    ``junk`` (masked points, typically with extreme values) is appended to the
    context; the prediction must not change, and the gradient of the predictive
    mean with respect to the junk's values, locations and covariates must be
    exactly zero (and finite, and non-zero for the real points).
    """
    junk = junk.replace(mask=jnp.zeros(junk.mask.shape, bool))
    padded = jax.tree.map(lambda a, b: jnp.concatenate([a, b], 1), ctx, junk)
    out, out_padded = model(ctx, tgt), model(padded, tgt)
    np.testing.assert_allclose(out_padded[0], out[0], atol=atol)
    np.testing.assert_allclose(out_padded[1], out[1], atol=atol)

    def total(f, s, x):
        return jnp.sum(model(padded.replace(f=f, s=s, x=x), tgt)[0])

    grads = jax.jit(jax.grad(total, argnums=(0, 1, 2)))(padded.f, padded.s, padded.x)
    n = ctx.size
    for g in grads:
        assert bool(jnp.isfinite(g).all()), "a gradient through padding is not finite"
        np.testing.assert_array_equal(g[:, n:], 0.0)
        assert float(jnp.abs(g[:, :n]).sum()) > 0, "no gradient reaches the real points"


def check_targets_independent(model: Callable, ctx: Points, tgt: Points) -> None:
    """Assert that each target's mean depends on its own inputs only (none on another's).

    The Jacobian of the means with respect to the targets' locations and
    covariates is block-diagonal: zero off the diagonal, non-zero on it.
    """

    def means(s, x):
        return model(ctx, tgt.replace(s=s, x=x))[0][..., 0]

    jacobians = jax.jit(jax.jacrev(means, argnums=(0, 1)))(tgt.s, tgt.x)  # [B, Nt, B, Nt, .]
    for jac in jacobians:
        if not jac.size:
            continue
        j = jnp.abs(jac).sum(-1)
        for b in range(tgt.batch_size):
            block = j[b, :, b, :]
            off = block - jnp.diag(jnp.diag(block))
            assert float(off.max()) == 0.0, "a target's mean depends on another target"
            assert float(jnp.diag(block).min()) > 0.0, "a target's mean ignores its own input"


def check_beats_trivial_predictor(
    model: nnx.Module, tasks: GPTasks, *, batch_size: int, steps: int = 300, margin: float = 0.6
) -> None:
    """Assert that training ``model`` on GP ``tasks`` beats the zero-mean unit-variance guess.

    Trains with the paper's optimiser (learning rate 3e-3 warming up over 20
    steps, decaying to 1e-4) for ``steps`` steps and compares the mean NLL of four
    fresh batches with the trivial predictor's (≈ 1.42 nats on unit-variance
    fields): the trained model must be at least ``margin`` nats better.
    """
    graphdef, params = nnx.split(model)
    tx = make_optimizer(learning_rate=3e-3, final_learning_rate=1e-4, steps=steps, warmup_steps=20)
    opt_state = tx.init(params)
    step = make_train_step(graphdef, tx, lambda m, batch: m.loss(*batch))
    sample = jax.jit(lambda k: sample_gp_batch(k, tasks, batch_size=batch_size))
    for key in jax.random.split(jax.random.key(0), steps):
        params, opt_state, _ = step(params, opt_state, sample(key))
    loss = jax.jit(lambda p, batch: nnx.merge(graphdef, p).loss(*batch))
    nll, trivial = [], []
    for key in jax.random.split(jax.random.key(1), 4):
        ctx, tgt, y = sample(key)
        nll.append(float(loss(params, (ctx, tgt, y))))
        trivial.append(float(0.5 * jnp.log(2 * jnp.pi) + 0.5 * jnp.mean(y**2)))
    assert np.mean(nll) < np.mean(trivial) - margin, (nll, trivial)
