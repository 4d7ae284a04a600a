"""Where a training step of the paper-size BSA-TNP spends its time.

The model and batch of ``train_throughput.py`` (8 GP tasks, 512 context and 1024
target points, Euclidean RBF bias), timed in one process with the runs of every
variant interleaved, so that the machine's drift hits them alike:

* forward alone and forward + backward, with and without the attention bias;
* forward + backward with the bias weights frozen (``stop_gradient``), which
  separates the cost of recomputing the bias in the backward pass from that of its
  weights' gradient.

    python recipes/benchmarks/train_breakdown.py [--repeats 7]

It prints a table; the analysis beside the training-throughput section of
``docs/benchmarks.md`` quotes it.
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections.abc import Callable

import jax
import numpy as np
from flax import nnx

from xnp.data.batch import Batch
from xnp.data.synthetic import GPTasks, sample_gp_batch
from xnp.models.bsa_tnp import BSATNP
from xnp.models.config import BSATNPConfig
from xnp.train import batch_loss

BATCH, N_CONTEXT, N_TARGET = 8, 512, 1024


def gp_batch() -> Batch:
    tasks = GPTasks(n_context=(128, N_CONTEXT), n_target=N_TARGET)
    ctx, tgt, y = jax.jit(lambda k: sample_gp_batch(k, tasks, batch_size=BATCH))(jax.random.key(0))
    zeros = lambda n: np.zeros((BATCH, n), np.int32)  # noqa: E731
    return Batch(ctx, tgt, y, zeros(N_CONTEXT), zeros(N_TARGET))


def _freeze_bias(params: nnx.State) -> nnx.State:
    """``params`` with the attention-bias weights behind ``stop_gradient``.

    Those are the RBF weights ``a`` and ``b`` of each block's ``bias.space`` (and
    ``bias.time``); the ``bias`` vectors of the linear and norm layers keep their
    gradients.
    """

    def freeze(path, x):
        keys = [str(getattr(k, "key", k)) for k in path]
        rbf = any(a == "bias" and b in ("space", "time") for a, b in itertools.pairwise(keys))
        return jax.lax.stop_gradient(x) if rbf else x

    return jax.tree_util.tree_map_with_path(freeze, params)


def variants() -> dict[str, tuple[Callable, nnx.State]]:
    out = {}
    for bias, label in (("none", "no attention bias"), ("euclidean", "RBF bias (the model)")):
        config = BSATNPConfig(spatial_bias=bias, spatial_scale=1.0)
        graphdef, params = nnx.split(BSATNP(config, rngs=nnx.Rngs(0)))

        def loss(p, b, graphdef=graphdef):
            return batch_loss(nnx.merge(graphdef, p), b)

        out[f"{label}: forward"] = (jax.jit(loss), params)
        out[f"{label}: forward + backward"] = (jax.jit(jax.value_and_grad(loss)), params)
        if bias != "none":
            frozen = jax.value_and_grad(lambda p, b, loss=loss: loss(_freeze_bias(p), b))
            out["RBF bias, weights frozen: forward + backward"] = (jax.jit(frozen), params)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="timed runs of each variant")
    parser.add_argument("--quick", action="store_true", help="2 timed runs of each variant")
    args = parser.parse_args()
    if args.quick:
        args.repeats = 2
    batch = gp_batch()
    fns = variants()
    for fn, params in fns.values():  # compile
        jax.block_until_ready(fn(params, batch))
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(args.repeats):
        for name, (fn, params) in fns.items():
            start = time.perf_counter()
            jax.block_until_ready(fn(params, batch))
            times[name].append(time.perf_counter() - start)
    print("| variant | median (s) | fastest (s) |\n|---|---|---|")
    for name, ts in times.items():
        print(f"| {name} | {np.median(ts):.2f} | {min(ts):.2f} |")


if __name__ == "__main__":
    main()
