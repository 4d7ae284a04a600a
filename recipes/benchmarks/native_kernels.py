"""The native CPU kernels of the RBF attention bias against XLA, in one process.

``xnp.nn.native`` computes the RBF bias ``Σ_f a_hf exp(-b_hf z)``, the gradient
of its weights, and biased attention itself (forward and backward) in C++
kernels; ``XNP_NATIVE=0`` makes xnp trace the pure-JAX computation instead.  The
environment variable is read when a function is traced, so this script compiles
every function twice, with and without the kernels, and
times the two versions interleaved (run after run), so that the machine's drift
hits both alike:

* one tile: the bias of 2 × 4 heads × 512 × 256 pairs with 5 basis functions, and
  the gradient of its weights (what the backward pass of a training step calls);
* a training step's forward and backward pass: the paper-size BSA-TNP on the batch
  of ``train_throughput.py`` (8 GP tasks, 512 context and 1024 target points,
  Euclidean RBF bias);
* a prediction: the paper-size BSA-TNP with the great-circle bias, 1,000 context and
  10,000 target points, one jitted call (as ``predict_scale.py``'s "xnp model()").

    python recipes/benchmarks/native_kernels.py [--repeats 7] [--no-write]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import exp_rate, machine, write_section
from predict_scale import build_model, sphere_points, to_points
from train_breakdown import gp_batch

from xnp.models.bsa_tnp import BSATNP
from xnp.models.config import BSATNPConfig
from xnp.nn import native
from xnp.train import batch_loss

TILE = (2, 4, 512, 256)  # batch, heads, queries, keys
N_BASIS = 5


def traced_both(
    make: Callable[[], Callable], args: tuple, calls: int = 1
) -> dict[str, Callable[[], object]]:
    """``{"native": run, "XLA": run}``: ``make()`` jitted and compiled with and without.

    ``make`` must return a new function each time: jit reuses the trace of a function
    it has seen, whatever the environment says.

    ``run()`` makes ``calls`` calls in a row (a millisecond call timed alone mostly
    measures how long the idle thread pool takes to wake up); times are per call.
    """
    out = {}
    for label, mode in (("native", "1"), ("XLA", "0")):
        os.environ["XNP_NATIVE"] = mode
        compiled = jax.jit(make()).lower(*args).compile()

        def run(compiled=compiled):
            return [jax.block_until_ready(compiled(*args)) for _ in range(calls)]

        out[label] = run
        out[label].calls = calls
    os.environ["XNP_NATIVE"] = "auto"
    return out


def cases() -> dict[str, tuple[dict[str, Callable[[], object]], float]]:
    """Each case: the two runnable versions and its count of exponentials (for a rate)."""
    b, h, q, k = TILE
    keys = jax.random.split(jax.random.key(0), 4)
    a = jax.random.normal(keys[0], (h, N_BASIS))
    rate = jnp.exp(jnp.linspace(np.log(0.25), np.log(16.0), h * N_BASIS)).reshape(h, N_BASIS)
    z = jax.random.uniform(keys[2], (b, q, k), maxval=4.0)
    g = jax.random.normal(keys[3], TILE)
    n_exp = float(np.prod(TILE) * N_BASIS)
    out = {
        "one tile: bias": (
            traced_both(lambda: lambda *x: native.rbf_bias(*x), (a, rate, z), 50),
            n_exp,
        ),
        "one tile: weights' gradient": (
            traced_both(
                lambda: lambda *x: native.rbf_grad(*x, want_dz=False), (a, rate, z, g), 50
            ),
            n_exp,
        ),
    }

    batch = gp_batch()
    config = BSATNPConfig(spatial_bias="euclidean", spatial_scale=1.0)
    graphdef, params = nnx.split(BSATNP(config, rngs=nnx.Rngs(0)))

    def loss(p, batch):
        return batch_loss(nnx.merge(graphdef, p), batch)

    out["training step: forward + backward"] = (
        traced_both(lambda: jax.value_and_grad(loss), (params, batch)),
        float("nan"),
    )

    rng = np.random.default_rng(0)
    ctx = to_points(sphere_points(rng, 1000), rng.normal(size=1000).astype(np.float32))
    tgt = to_points(sphere_points(rng, 10_000))
    model, _ = build_model()
    graphdef_p, params_p = nnx.split(model)
    out["prediction: 1,000 context, 10,000 targets"] = (
        traced_both(lambda: lambda p, c, t: nnx.merge(graphdef_p, p)(c, t), (params_p, ctx, tgt)),
        float("nan"),
    )
    return out


def measure(repeats: int) -> dict[str, dict[str, list[float]]]:
    found = cases()
    times = {name: {label: [] for label in runs} for name, (runs, _) in found.items()}
    for runs, _ in found.values():  # warm up
        for run in runs.values():
            jax.block_until_ready(run())
    for _ in range(repeats):
        for name, (runs, _) in found.items():
            for label, run in runs.items():
                start = time.perf_counter()
                jax.block_until_ready(run())
                times[name][label].append((time.perf_counter() - start) / run.calls)
    return {name: (times[name], found[name][1]) for name in found}


def section(results, repeats: int, xla_exp: float) -> str:
    rows = []
    for name, (times, n_exp) in results.items():
        nat, xla = np.median(times["native"]), np.median(times["XLA"])
        unit, scale = ("ms", 1e3) if xla < 0.1 else ("s", 1.0)
        rate = "" if np.isnan(n_exp) else f" ({n_exp / nat / 1e9:.1f} vs {n_exp / xla / 1e9:.1f})"
        rows.append(
            f"| {name}{rate} | {xla * scale:.3g} {unit} | {nat * scale:.3g} {unit} | "
            f"**{xla / nat:.2f}×** |"
        )
    table = "\n".join(rows)
    width = "AVX-512, 16 floats a vector" if avx512() else "no AVX-512, 8 floats a vector"
    script = "`recipes/benchmarks/native_kernels.py`"
    return f"""## Native CPU kernels of the RBF bias ({width}; {script})

The RBF attention bias and the gradient of its weights computed by xnp's C++ kernels
(`xnp.nn.native`, compiled on the machine with `-march=native`) against the same
computation left to XLA (`XNP_NATIVE=0`).  Both versions compiled in one process and
timed interleaved, median of {repeats} runs each (a tile: of 50 calls in a row,
per call).  A tile is {" × ".join(map(str, TILE))}
(batch × heads × queries × keys) with {N_BASIS} basis functions; in parentheses the rate
of exponentials, G/s (native vs XLA; XLA's fused exponentials measured apart:
{xla_exp:.2f} G/s).  The training step is that of `train_throughput.py` (paper-size
BSA-TNP, 8 tasks of 512 context and 1024 target points), where the fused attention
kernels run forward and backward; the prediction one jitted call of the paper-size
model with the great-circle bias (the fused forward kernel).

Machine: {machine()}.

| what | XLA | native kernels | speed-up |
|---|---|---|---|
{table}
"""


def avx512() -> bool:
    """Whether this processor has AVX-512 (the kernels then use 16-float vectors, else 8).

    Read from ``/proc/cpuinfo`` (Linux); elsewhere False.  The two widths are
    separate sections of the docs, so a run on one kind of machine keeps the other's.
    """
    try:
        return " avx512f" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="timed runs of each version")
    parser.add_argument(
        "--quick", action="store_true", help="2 timed runs; the docs are not written"
    )
    parser.add_argument("--no-write", action="store_true", help="do not update the docs")
    args = parser.parse_args()
    if args.quick:
        args.repeats, args.no_write = 2, True
    if not native.enabled():
        raise SystemExit("the native kernels are not available here (see xnp.nn.native)")
    xla_exp = exp_rate()
    text = section(measure(args.repeats), args.repeats, xla_exp)
    print(text)
    if not args.no_write:
        write_section("native_kernels" if avx512() else "native_kernels_avx2", text)


if __name__ == "__main__":
    main()
