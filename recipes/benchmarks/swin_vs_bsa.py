"""Swin-TNP against BSA-TNP on dense 2-D GP context: NLL at equal budget, and scaling.

    python recipes/benchmarks/swin_vs_bsa.py [--budget 90] [--quick] [--no-write]

Tasks follow the gridded-TNP paper's §5.1: 2-D fields of a GP with an SE kernel
of lengthscale 0.1 or 0.5 on ``[-6, 6]²``, 10,000 noisy context points (noise
0.1) and 1,000 noiseless targets.  The fields are drawn with 2,048 random Fourier
features (the paper used SKI, another approximation; exact sampling of 11k
points is out of reach on a CPU).

1. **Equal training budget.**  For each lengthscale, each model (paper sizes:
   Swin-TNP 32×32 PT-GE grid, BSA-TNP 6 KRBlocks) trains for the same wall-clock
   budget with AdamW at 5e-4 (clip 0.5), batch 1, then is scored on fresh tasks
   (NLL per target, nats; lower is better).  The zero-mean unit-variance
   predictor's NLL is given for reference.
2. **Scaling.**  Forward time (condition + predict of 1,000 targets, batch 1) as
   the context grows from 1k to 100k points.  BSA-TNP sizes whose estimated time
   exceeds ``--max-forward`` seconds are extrapolated (quadratic cost) instead.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import best_time, machine, write_section

from xnp.arrays import Points
from xnp.models.bsa_tnp import BSATNP
from xnp.models.config import BSATNPConfig
from xnp.models.likelihoods import gaussian_nll
from xnp.models.swin_tnp import SwinTNP, SwinTNPConfig
from xnp.nn.layers import count_params
from xnp.train import make_optimizer, make_train_step

BOX = 6.0
NOISE = 0.1


def sample_tasks(key, *, lengthscale, n_ctx, n_tgt, batch, n_features=2048):
    """``(context, targets, y)`` of GP fields drawn with random Fourier features."""

    def one(k):
        kx, kw, kb, ka, kn = jax.random.split(k, 5)
        x = jax.random.uniform(kx, (n_ctx + n_tgt, 2), minval=-BOX, maxval=BOX)
        omega = jax.random.normal(kw, (n_features, 2)) / lengthscale
        phase = jax.random.uniform(kb, (n_features,), maxval=2 * math.pi)
        amp = jax.random.normal(ka, (n_features,))
        f = jnp.cos(x @ omega.T + phase[None]) @ amp * math.sqrt(2.0 / n_features)
        y_ctx = f[:n_ctx] + NOISE * jax.random.normal(kn, (n_ctx,))
        return x[:n_ctx], y_ctx, x[n_ctx:], f[n_ctx:]

    xc, yc, xt, yt = jax.vmap(one)(jax.random.split(key, batch))
    ctx = Points.from_arrays(s=xc, f=yc[..., None])
    return ctx, Points.from_arrays(s=xt), yt[..., None]


def build(name: str):
    if name == "Swin-TNP":
        return SwinTNP(SwinTNPConfig.gp2d(), rngs=nnx.Rngs(0))
    return BSATNP(BSATNPConfig(spatial_bias="euclidean", spatial_scale=1.0), rngs=nnx.Rngs(0))


def train_and_score(name, lengthscale, args):
    graphdef, params = nnx.split(build(name))
    tx = make_optimizer(
        learning_rate=5e-4, final_learning_rate=5e-4, steps=10**6, weight_decay=0.01
    )
    opt_state = tx.init(params)
    step = make_train_step(graphdef, tx, lambda m, batch: m.loss(*batch))
    sample = jax.jit(
        lambda k: sample_tasks(
            k, lengthscale=lengthscale, n_ctx=args.n_ctx, n_tgt=args.n_tgt, batch=args.batch
        )
    )
    key = jax.random.key(1)
    params, opt_state, loss = step(params, opt_state, sample(key))  # compile
    jax.block_until_ready(loss)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < args.budget:
        key, sub = jax.random.split(key)
        params, opt_state, loss = step(params, opt_state, sample(sub))
        jax.block_until_ready(loss)
        steps += 1
    per_step = (time.perf_counter() - start) / max(steps, 1)
    score = jax.jit(lambda p, c, t, y: gaussian_nll(*nnx.merge(graphdef, p)(c, t), y))
    nll, trivial = [], []
    eval_sample = jax.jit(
        lambda k: sample_tasks(
            k, lengthscale=lengthscale, n_ctx=args.n_ctx, n_tgt=args.n_tgt, batch=1
        )
    )
    for k in jax.random.split(jax.random.key(123), args.eval_tasks):
        ctx, tgt, y = eval_sample(k)
        nll.append(float(score(params, ctx, tgt, y)))
        trivial.append(float(0.5 * math.log(2 * math.pi) + 0.5 * jnp.mean(y**2)))
    return {
        "steps": steps,
        "per_step": per_step,
        "nll": float(np.mean(nll)),
        "nll_se": float(np.std(nll) / math.sqrt(len(nll))),
        "trivial": float(np.mean(trivial)),
    }


def forward_time(name, n_ctx, n_tgt):
    graphdef, params = nnx.split(build(name))
    fwd = jax.jit(lambda p, c, t: nnx.merge(graphdef, p)(c, t))
    ctx, tgt, _ = sample_tasks(
        jax.random.key(0), lengthscale=0.5, n_ctx=n_ctx, n_tgt=n_tgt, batch=1, n_features=64
    )
    return best_time(lambda: fwd(params, ctx, tgt), repeat=2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=90.0, help="training seconds per run")
    parser.add_argument("--n-ctx", type=int, default=10_000)
    parser.add_argument("--n-tgt", type=int, default=1_000)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--eval-tasks", type=int, default=4)
    parser.add_argument("--lengthscales", type=float, nargs="+", default=[0.5, 0.1])
    parser.add_argument(
        "--sizes", type=int, nargs="+", default=[1_000, 3_000, 10_000, 30_000, 100_000]
    )
    parser.add_argument("--max-forward", type=float, default=40.0)
    parser.add_argument("--quick", action="store_true", help="a smoke run of a minute or two")
    parser.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    args = parser.parse_args()
    if args.quick:
        args.budget, args.n_ctx, args.n_tgt, args.eval_tasks = 10.0, 1_000, 256, 2
        args.sizes, args.lengthscales = [1_000, 2_000], [0.5]
    models = ("Swin-TNP", "BSA-TNP")
    n_params = {m: count_params(nnx.eval_shape(lambda m=m: build(m))) for m in models}

    lines = [
        "## Swin-TNP vs BSA-TNP on dense context (`recipes/benchmarks/swin_vs_bsa.py`)",
        "",
        f"Machine: {machine()}.  2-D GP fields (SE kernel, random Fourier features) on "
        f"[-6, 6]², {args.n_ctx:,} context points (noise 0.1), {args.n_tgt:,} targets.  Each "
        f"model trains for {args.budget:.0f} s of wall clock (AdamW 5e-4, batch "
        f"{args.batch}), then is scored on {args.eval_tasks} fresh tasks.  Parameters: "
        + ", ".join(f"{m} {n_params[m] / 1e6:.2f}M" for m in models)
        + ".",
        "",
        "| lengthscale | model | steps | s / step | NLL ↓ (± s.e.) | N(0, 1) NLL |",
        "|---|---|---|---|---|---|",
    ]
    for ell in args.lengthscales:
        for m in models:
            r = train_and_score(m, ell, args)
            lines.append(
                f"| {ell} | {m} | {r['steps']} | {r['per_step']:.2f} | "
                f"{r['nll']:.3f} ± {r['nll_se']:.3f} | {r['trivial']:.3f} |"
            )
            print(lines[-1], flush=True)

    lines += [
        "",
        f"Forward time (condition + predict {args.n_tgt:,} targets, batch 1, seconds; "
        '"≈": extrapolated from the largest measured size, quadratic for BSA-TNP):',
        "",
        "| context points | " + " | ".join(models) + " |",
        "|---" * (len(models) + 1) + "|",
    ]
    last: dict[str, tuple[int, float]] = {}
    for n in args.sizes:
        cells = []
        for m in models:
            power = 1 if m == "Swin-TNP" else 2
            if m in last and last[m][1] * (n / last[m][0]) ** power > args.max_forward:
                est = last[m][1] * (n / last[m][0]) ** power
                cells.append(f"≈ {est:.1f}")
                continue
            t = forward_time(m, n, args.n_tgt)
            last[m] = (n, t)
            cells.append(f"{t:.3f}")
        lines.append(f"| {n:,} | " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)

    markdown = "\n".join(lines)
    print(markdown)
    if not args.no_write:
        write_section("swin_vs_bsa", markdown)


if __name__ == "__main__":
    main()
