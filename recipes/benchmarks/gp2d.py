"""2-D GP (BSA-TNP paper §5.1): xnp and dl4bi against the exact-GP oracle (issue 7, item 1).

The meta-learning task of the BSA-TNP paper: GP functions with an RBF kernel of
lengthscale ℓ ~ Beta(3, 7) (unit variance) on [-2, 2]², 128–512 context points
with noise 0.1 and 1024 noiseless targets per task (``xnp.data.synthetic.GPTasks()``).

Two implementations of a mid-size BSA-TNP (4 KRBlocks, 4 heads, token and
attention dimension 64, Euclidean RBF-network attention bias, locations not
embedded, so both are translation invariant) are trained for the same fixed CPU
budget of step time (``--minutes`` each, one after the other, never at once):

* xnp: :class:`xnp.models.bsa_tnp.BSATNP` with :func:`xnp.train.steps.fit_step`;
* dl4bi 0.1.3, the authors' JAX/Flax Linen package, in its own virtual environment
  and process: its ``BSATNP`` with Biased Scan Attention, ``embed_s`` dropping the
  locations, layer sizes as close to xnp's as its constructor allows.

Both see the same training batches in the same order (drawn while xnp trains and
handed to dl4bi in a file; if dl4bi runs more steps it draws further batches
itself).  As in the reference code, the 8 tasks of a batch share the lengthscale and
the locations (:func:`shared_batch`: one Cholesky factor per batch, as each of the 8
of :func:`xnp.data.synthetic.sample_gp_batch` costs about as much as a step on this CPU;
``--iid-batches`` uses ``sample_gp_batch``).  Batch 8, AdamW
(β = 0.9, 0.999, weight decay 1e-4, clipping at 0.5), and the same learning-rate
schedule: a linear warm-up over 5 % of the budget, then a cosine to 0.2 × the peak,
as a function of the elapsed fraction of the time budget (the number of steps is not
known in advance).  Compilation (the first step) and data generation are outside
the budget and reported separately.  During training both are evaluated on the
first ``--curve-tasks`` in-domain tasks at ``--checkpoints`` equally spaced times
(the accuracy-per-minute curve).

The trained models are then scored on fixed, seeded evaluation tasks (``--tasks``
per condition, ``--doubled-tasks`` on the doubled domain; identical for both models
and the oracle; drawn with ``sample_gp_batch`` except the multiresolution ones):

* **in-domain**: ``GPTasks()``;
* **shifted +10**: the same tasks with every location moved by +10 in both axes
  (to [8, 12]²; the oracle is unchanged, a translation-invariant model too);
* **doubled domain**: ``GPTasks(domain=(-4, 4), n_context=(512, 2048))``: [-4, 4]²
  with the training density of context points (4× as many) and 1024 targets;
* **multiresolution**: half of the 128–512 context points uniform on
  [-0.5, 0.5]², half on [-1.5, 1.5]², and likewise the 1024 targets (built in
  this script in float64).  The paper trains a separate model for this layout; here
  the in-domain models are evaluated zero-shot.

The floor is the exact GP posterior with the true lengthscale and noise of each
task (:func:`xnp.data.synthetic.gp_oracle`, in float64).  Scores are the Gaussian NLL per
target point (mean over a task's targets; tables give mean ± standard error over
tasks and the gap to the oracle with the standard error of the paired
differences), RMSE and the 95 % coverage.

    python recipes/benchmarks/gp2d.py [--minutes 7] [--tasks 48] [--doubled-tasks 24]
                                      [--quick] [--reference-python PATH] [--no-write]

About 20–30 min on a 2-core CPU (two training budgets, compilation, data and the
evaluation of both models; dl4bi's inference is the slow part).  ``--quick`` (a few
minutes) trains 15 s each, scores 8 tasks per condition and writes nothing.
Otherwise the ``gp2d`` section of ``docs/benchmarks.md`` and
``docs/images/gp2d_curve.png`` are written (unless ``--no-write``).  With
``--reference-python ''`` (or no interpreter at the path) dl4bi is skipped.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from scipy import linalg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import machine, write_section

from xnp.arrays import Points
from xnp.data.batch import Batch
from xnp.data.synthetic import GPTasks, gp_oracle, rbf_kernel, sample_gp_batch
from xnp.models.bsa_tnp import BSATNP
from xnp.models.config import BSATNPConfig
from xnp.nn.layers import count_params
from xnp.train import TrainConfig, fit_step

ROOT = Path(__file__).resolve().parents[2]
IMAGE = ROOT / "docs" / "images" / "gp2d_curve.png"
COMMAND = "python recipes/benchmarks/gp2d.py"
DEFAULT_REFERENCE = "/work/bench-venv/bin/python"

BATCH = 8
NOISE = 0.1
SHIFT = 10.0
TRAIN_TASKS = GPTasks()  # the paper's: Beta(3, 7), 128–512 context, 1024 targets, [-2, 2]²
DOUBLED_TASKS = GPTasks(domain=(-4.0, 4.0), n_context=(512, 2048))
#: Resolution of the time-based learning-rate schedule (a step index of TrainConfig.schedule).
SCHEDULE_POINTS = 1000
PEAK_LR = 1e-3
#: Mid-size model: the paper size (6 blocks, 476K parameters) is ~3 s per step here.
SIZES = {"n_blocks": 4, "n_heads": 4, "dim_token": 64, "dim_attn": 64, "n_basis_space": 5,
         "embed_hidden": (128,), "ffn_hidden": 128, "head_hidden": (128, 64)}  # fmt: skip
MODEL = BSATNPConfig(spatial_bias="euclidean", spatial_scale=1.0, **SIZES)
CONDITIONS = {
    "in": "in-domain [-2, 2]²",
    "shift": "shifted +10 ([8, 12]²)",
    "double": "doubled domain [-4, 4]²",
    "multires": "multiresolution (zero-shot)",
}

Task = dict[str, np.ndarray]  # s_c [N, Nc, 2], f_c [N, Nc, 1], m_c [N, Nc], s_t, y [N, Nt, 1], ell


# --------------------------------------------------------------------------- evaluation tasks


def sampled_tasks(seed: int, tasks: GPTasks, n_tasks: int) -> Task:
    """``n_tasks`` tasks of ``tasks`` drawn with :func:`sample_gp_batch`, in batches of 8.

    Batches with a non-finite value (a failed float32 Cholesky) are redrawn; their
    number is returned under ``"redrawn"``.
    """
    sample = jax.jit(functools.partial(sample_gp_batch, tasks=tasks, batch_size=BATCH,
                                       return_lengthscale=True))  # fmt: skip
    parts, redrawn, k = [], 0, 0
    while len(parts) * BATCH < n_tasks:
        ctx, tgt, y, ell = sample(jax.random.fold_in(jax.random.key(seed), k))
        k += 1
        arrays = {"s_c": ctx.s, "f_c": ctx.f, "m_c": ctx.mask, "s_t": tgt.s, "y": y, "ell": ell}
        arrays = {name: np.asarray(a) for name, a in arrays.items()}
        if not all(np.isfinite(a).all() for a in arrays.values()):
            redrawn += 1
            continue
        parts.append(arrays)
    out = {name: np.concatenate([p[name] for p in parts])[:n_tasks] for name in parts[0]}
    out["redrawn"] = np.asarray(redrawn)
    return out


def multires_tasks(seed: int, n_tasks: int, n_context: tuple[int, int] = (128, 512),
                   n_target: int = 1024) -> Task:  # fmt: skip
    """Multiresolution tasks: half the points on [-0.5, 0.5]², half on [-1.5, 1.5]².

    The field is drawn in float64 (Cholesky with jitter 1e-6) over the real context
    points and the targets; context values get noise 0.1, targets are noiseless.
    """
    rng = np.random.default_rng(seed)
    lo, hi = n_context
    out: dict[str, list] = {k: [] for k in ("s_c", "f_c", "m_c", "s_t", "y", "ell")}
    for _ in range(n_tasks):
        ell = rng.beta(*TRAIN_TASKS.lengthscale)
        n = int(rng.integers(lo, hi + 1))
        s_c = rng.uniform(-1.5, 1.5, (hi, 2))
        s_c[: n // 2] = rng.uniform(-0.5, 0.5, (n // 2, 2))
        n_in = n_target // 2
        s_t = np.concatenate(
            [rng.uniform(-0.5, 0.5, (n_in, 2)), rng.uniform(-1.5, 1.5, (n_target - n_in, 2))]
        )
        s = np.concatenate([s_c[:n], s_t])
        d2 = np.sum((s[:, None] - s[None]) ** 2, axis=-1)
        chol = linalg.cholesky(np.exp(-0.5 * d2 / ell**2) + 1e-6 * np.eye(len(s)), lower=True,
                               check_finite=False)  # fmt: skip
        f = chol @ rng.standard_normal(len(s))
        f_c = np.zeros(hi)
        f_c[:n] = f[:n] + NOISE * rng.standard_normal(n)
        for name, a in (("s_c", s_c), ("f_c", f_c[:, None]), ("m_c", np.arange(hi) < n),
                        ("s_t", s_t), ("y", f[n:, None]), ("ell", ell)):  # fmt: skip
            out[name].append(a)
    tasks = {name: np.stack(a).astype(np.float32) for name, a in out.items()}
    tasks["m_c"] = tasks["m_c"].astype(bool)
    tasks["redrawn"] = np.asarray(0)
    return tasks


def evaluation_tasks(seed: int, n_tasks: int, n_doubled: int) -> dict[str, Task]:
    """The four evaluation conditions (see the module docstring)."""
    base = sampled_tasks(seed + 1, TRAIN_TASKS, n_tasks)
    shifted = {**base, "s_c": base["s_c"] + SHIFT, "s_t": base["s_t"] + SHIFT}
    return {
        "in": base,
        "shift": shifted,
        "double": sampled_tasks(seed + 2, DOUBLED_TASKS, n_doubled),
        "multires": multires_tasks(seed + 3, n_tasks),
    }


def points(task: Task, lo: int, hi: int, dtype: jnp.dtype = jnp.float32) -> tuple[Points, Points]:
    """Context and target :class:`Points` of tasks ``lo:hi``."""
    ctx = Points.from_arrays(s=task["s_c"][lo:hi], f=task["f_c"][lo:hi], mask=task["m_c"][lo:hi],
                             dtype=dtype)  # fmt: skip
    return ctx, Points.from_arrays(s=task["s_t"][lo:hi], dtype=dtype)


def oracle(task: Task) -> tuple[np.ndarray, np.ndarray]:
    """Exact GP predictive mean and std with each task's true lengthscale and noise (float64)."""
    means, stds = [], []
    with jax.enable_x64(True):
        fn = jax.jit(functools.partial(gp_oracle, noise=NOISE))
        for lo in range(0, len(task["y"]), BATCH):
            ctx, tgt = points(task, lo, lo + BATCH, jnp.float64)
            ell = jnp.asarray(task["ell"][lo : lo + BATCH], jnp.float64)
            mean, std = fn(ctx, tgt, ell)
            means.append(np.asarray(mean))
            stds.append(np.asarray(std))
    return np.concatenate(means), np.concatenate(stds)


def task_scores(mean: np.ndarray, std: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    """Per-task NLL (mean over targets), RMSE and 95 % coverage, in float64."""
    mean, std, y = (np.asarray(a, np.float64)[..., 0] for a in (mean, std, y))
    z = (y - mean) / std
    nll = 0.5 * z**2 + np.log(std) + 0.5 * math.log(2 * math.pi)
    return {
        "nll": nll.mean(axis=1),
        "rmse": np.sqrt(np.mean((y - mean) ** 2, axis=1)),
        "cov95": np.mean(np.abs(z) <= 1.959964, axis=1),
    }


# --------------------------------------------------------------------------- xnp


def shared_batch(key: jax.Array, tasks: GPTasks = TRAIN_TASKS) -> tuple[Points, Points, jax.Array]:
    """A training batch drawn as in the reference code: one ℓ and one set of locations.

    Each task is distributed as in :func:`sample_gp_batch` (ℓ ~ Beta, uniform
    locations, context size uniform per task, noise on the context), but the 8
    tasks of a batch share the lengthscale and the locations and differ in the
    function draw and the context size, so one Cholesky factor serves the batch
    (8× cheaper: ``sample_gp_batch`` factors 8 matrices of 1536² per batch, which
    on this CPU costs about as much as a training step).
    """
    k_len, k_loc, k_f, k_noise, k_n = jax.random.split(key, 5)
    n_max = tasks.n_context[1]
    n = n_max + tasks.n_target
    ell = jax.random.beta(k_len, *tasks.lengthscale)
    s = jax.random.uniform(k_loc, (n, tasks.dims), minval=tasks.domain[0],
                           maxval=tasks.domain[1])  # fmt: skip
    chol = jnp.linalg.cholesky(rbf_kernel(s, s, ell) + 1e-5 * jnp.eye(n))
    f = (chol @ jax.random.normal(k_f, (n, BATCH))).T  # [B, n]
    n_ctx = jax.random.randint(k_n, (BATCH, 1), tasks.n_context[0], n_max + 1)
    y_ctx = f[:, :n_max] + tasks.noise * jax.random.normal(k_noise, (BATCH, n_max))
    s_b = jnp.broadcast_to(s, (BATCH, n, tasks.dims))
    context = Points.from_arrays(s=s_b[:, :n_max], f=y_ctx[..., None],
                                 mask=jnp.arange(n_max)[None] < n_ctx)  # fmt: skip
    return context, Points.from_arrays(s=s_b[:, n_max:]), f[:, n_max:, None]


def learning_rates(peak: float) -> list[float]:
    """The learning rate at each of ``SCHEDULE_POINTS + 1`` fractions of the budget."""
    schedule = TrainConfig().schedule(peak, SCHEDULE_POINTS)
    return [schedule(i) for i in range(SCHEDULE_POINTS + 1)]


def xnp_predict_fn(graphdef: nnx.GraphDef) -> Callable:
    """A jitted ``predict(params, context, targets) -> (mean, std)``."""
    return jax.jit(lambda params, ctx, tgt: nnx.merge(graphdef, params)(ctx, tgt))


def xnp_predictions(predict: Callable, params: nnx.State, task: Task) -> tuple[np.ndarray, ...]:
    """Predictive mean and std of the model for every task, 8 at a time."""
    means, stds = [], []
    for lo in range(0, len(task["y"]), BATCH):
        mean, std = predict(params, *points(task, lo, lo + BATCH))
        means.append(np.asarray(mean))
        stds.append(np.asarray(std))
    return np.concatenate(means), np.concatenate(stds)


def train_xnp(args: argparse.Namespace, evals: dict[str, Task], batch_file: Path) -> dict:
    """Train xnp for the budget, evaluate, and save the training batches for dl4bi."""
    model = BSATNP(MODEL, rngs=nnx.Rngs(args.seed))
    n_params = count_params(model)
    graphdef, params = nnx.split(model)
    config = TrainConfig()
    opt_state = config.init_optimizer(params)
    step = fit_step(graphdef, config.clip_norm, config.weight_decay)
    predict = xnp_predict_fn(graphdef)
    lrs = learning_rates(args.lr)
    if args.iid_batches:
        sample = jax.jit(functools.partial(sample_gp_batch, tasks=TRAIN_TASKS, batch_size=BATCH))
    else:
        sample = jax.jit(shared_batch)
    zeros = functools.partial(np.zeros, dtype=np.int32)
    budget = args.minutes * 60.0
    marks = [budget * (i + 1) / args.checkpoints for i in range(args.checkpoints)]
    saved: dict[str, list] = {k: [] for k in ("s_c", "f_c", "m_c", "s_t", "y")}
    curve, losses, loads = [], [], []
    elapsed = data_s = eval_s = compile_s = 0.0
    key, k, skipped = jax.random.key(args.seed), 0, 0
    wall = time.perf_counter()
    while elapsed < budget:
        t0 = time.perf_counter()
        ctx, tgt, y = jax.block_until_ready(sample(jax.random.fold_in(key, k)))
        k += 1
        arrays = {"s_c": ctx.s, "f_c": ctx.f, "m_c": ctx.mask, "s_t": tgt.s, "y": y}
        arrays = {name: np.asarray(a) for name, a in arrays.items()}
        data_s += time.perf_counter() - t0
        if not all(np.isfinite(a).all() for a in arrays.values()):
            skipped += 1  # a failed float32 Cholesky: never train on it
            continue
        for name, a in arrays.items():
            saved[name].append(a)
        batch = Batch(ctx, tgt, y, zeros((BATCH, ctx.size)), zeros((BATCH, tgt.size)))
        lr = np.float32(lrs[min(int(SCHEDULE_POINTS * elapsed / budget), SCHEDULE_POINTS)])
        t0 = time.perf_counter()
        params, opt_state, loss = step(params, opt_state, batch, lr)
        loss = float(loss)  # blocks on the step
        dt = time.perf_counter() - t0
        if len(losses) == 0:
            compile_s = dt  # the first step compiles: outside the budget
        else:
            elapsed += dt
        losses.append(loss)
        if not math.isfinite(loss):
            print(f"xnp: non-finite training loss at step {len(losses)}; stopping")
            break
        if marks and elapsed >= marks[0]:
            while marks and elapsed >= marks[0]:
                marks.pop(0)
            t0 = time.perf_counter()
            curve_tasks = {n: v[: args.curve_tasks] for n, v in evals["in"].items() if v.ndim}
            mean, std = xnp_predictions(predict, params, curve_tasks)
            nll = float(task_scores(mean, std, curve_tasks["y"])["nll"].mean())
            eval_s += time.perf_counter() - t0
            loads.append(os.getloadavg()[0])
            curve.append({"minutes": elapsed / 60, "steps": len(losses), "nll": nll})
            print(f"xnp: {elapsed / 60:5.2f} min, {len(losses):4d} steps, in-domain NLL "
                  f"{nll:.3f} (load {loads[-1]:.1f})", flush=True)  # fmt: skip
    wall = time.perf_counter() - wall
    np.savez(batch_file, **{name: np.stack(a) for name, a in saved.items()})
    predictions = {c: xnp_predictions(predict, params, task) for c, task in evals.items()}
    ctx, tgt = points(evals["in"], 0, BATCH)
    _timed(lambda: predict(params, ctx, tgt))  # compiled already; warm caches
    infer_s = min(_timed(lambda: predict(params, ctx, tgt)) for _ in range(3))
    return {
        "params": n_params, "steps": len(losses), "train_s": elapsed, "compile_s": compile_s,
        "step_s": elapsed / max(len(losses) - 1, 1), "data_s": data_s, "eval_s": eval_s,
        "wall_s": wall, "skipped": skipped, "curve": curve, "loads": loads,
        "first_loss": losses[0], "last_loss": float(np.mean(losses[-10:])),
        "infer_s": infer_s, "predictions": predictions, "version": "xnp", "jax": jax.__version__,
    }  # fmt: skip


def _timed(fn: Callable[[], object]) -> float:
    """Wall time of ``fn()`` with its result blocked on."""
    t0 = time.perf_counter()
    jax.block_until_ready(fn())
    return time.perf_counter() - t0


# --------------------------------------------------------------------------- dl4bi worker

# Runs with the dl4bi interpreter: argv = settings.json, train batches .npz, eval tasks .npz,
# output .npz.  Prints one JSON line (timings, curve); predictions go to the output file.
REFERENCE_WORKER = """
import json, math, os, sys, time
import jax, jax.numpy as jnp, numpy as np, optax
from flax import linen as nn
from dl4bi.core.attention import BiasedScanAttention, MultiHeadAttention
from dl4bi.core.bias import Bias
from dl4bi.core.mlp import MLP
from dl4bi.core.transformer import KRBlock
from dl4bi.meta_learning.bsa_tnp import BSATNP

cfg = json.load(open(sys.argv[1]))
train = dict(np.load(sys.argv[2]))
evals = np.load(sys.argv[3])
conds = cfg["conditions"]
H, D, B = cfg["n_heads"], cfg["dim_token"], cfg["batch"]
attn = BiasedScanAttention(
    bias={"s": Bias.build_rbf_network_bias(num_heads=H, num_basis=cfg["n_basis_space"])})
mha = MultiHeadAttention(attn=attn, num_heads=H, proj_qs=MLP([cfg["dim_attn"]]),
                         proj_ks=MLP([cfg["dim_attn"]]), proj_vs=MLP([cfg["dim_attn"]]),
                         proj_out=MLP([D]))
model = BSATNP(num_blks=cfg["n_blocks"], embed_s=lambda s: None,  # locations only in the bias
               embed_all=MLP([*cfg["embed_hidden"], D], nn.gelu),
               blk=KRBlock(attn=mha, ffn=MLP([cfg["ffn_hidden"], D])),
               head=MLP([*cfg["head_hidden"], 2], nn.gelu))

def gp_batch(key, NC=512, NT=1024):
    # As the parent's shared_batch (one lengthscale and set of locations per batch), for
    # steps beyond the shared batches.
    k_len, k_loc, k_f, k_noise, k_n = jax.random.split(key, 5)
    ell = jax.random.beta(k_len, 3.0, 7.0)
    s = jax.random.uniform(k_loc, (NC + NT, 2), minval=-2.0, maxval=2.0)
    d2 = jnp.sum((s[:, None] - s[None]) ** 2, -1)
    chol = jnp.linalg.cholesky(jnp.exp(-0.5 * d2 / ell**2) + 1e-5 * jnp.eye(NC + NT))
    f = (chol @ jax.random.normal(k_f, (NC + NT, B))).T[..., None]
    s = jnp.broadcast_to(s, (B, NC + NT, 2))
    n_ctx = jax.random.randint(k_n, (B, 1), 128, NC + 1)
    mask = jnp.arange(NC)[None] < n_ctx
    f_ctx = f[:, :NC] + 0.1 * jax.random.normal(k_noise, (B, NC, 1))
    return s[:, :NC], f_ctx, mask, s[:, NC:], f[:, NC:]

sample = jax.jit(gp_batch)
n_shared = len(train["y"])
def batch(k):
    if k < n_shared:
        return tuple(jnp.asarray(train[n][k]) for n in ("s_c", "f_c", "m_c", "s_t", "y"))
    return sample(jax.random.fold_in(jax.random.key(cfg["seed"] + 1000), k))

s_c, f_c, m_c, s_t, y = batch(0)
params = model.init(jax.random.key(cfg["seed"]), s_ctx=s_c, f_ctx=f_c, mask_ctx=m_c,
                    s_test=s_t)["params"]
n_params = sum(int(np.size(x)) for x in jax.tree.leaves(params))
tx = optax.chain(optax.clip_by_global_norm(cfg["clip_norm"]), optax.scale_by_adam(0.9, 0.999),
                 optax.add_decayed_weights(cfg["weight_decay"]))  # AdamW, lr applied below
opt_state = tx.init(params)

def step(params, opt_state, batch, lr):
    s_c, f_c, m_c, s_t, y = batch
    def loss_fn(p):
        out = model.apply({"params": p}, s_ctx=s_c, f_ctx=f_c, mask_ctx=m_c, s_test=s_t,
                          training=True)
        return out.nll(y)
    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    updates = jax.tree.map(lambda u: -lr * u, updates)
    return optax.apply_updates(params, updates), opt_state, loss

step = jax.jit(step, donate_argnums=(0, 1))

@jax.jit
def predict(params, s_c, f_c, m_c, s_t):
    out = model.apply({"params": params}, s_ctx=s_c, f_ctx=f_c, mask_ctx=m_c, s_test=s_t)
    return out.mu, out.std

def predictions(params, c, n=None):
    means, stds = [], []
    for lo in range(0, n or len(evals[c + "_y"]), B):
        args = [evals[f"{c}_{n}"][lo:lo + B] for n in ("s_c", "f_c", "m_c", "s_t")]
        mu, std = predict(params, *args)
        means.append(np.asarray(mu)); stds.append(np.asarray(std))
    return np.concatenate(means), np.concatenate(stds)

def mean_nll(mu, std, y):
    mu, std, y = (np.asarray(a, np.float64) for a in (mu, std, y))
    z = (y - mu) / std
    return float(np.mean(0.5 * z**2 + np.log(std) + 0.5 * math.log(2 * math.pi)))

lrs, points, budget = cfg["learning_rates"], len(cfg["learning_rates"]) - 1, cfg["budget_s"]
marks = [budget * (i + 1) / cfg["checkpoints"] for i in range(cfg["checkpoints"])]
elapsed = data_s = eval_s = compile_s = 0.0
losses, curve, loads, k = [], [], [], 0
wall = time.perf_counter()
while elapsed < budget:
    t0 = time.perf_counter()
    b = jax.block_until_ready(batch(k))
    k += 1
    data_s += time.perf_counter() - t0
    if not all(bool(jnp.isfinite(a).all()) for a in b):
        continue
    lr = np.float32(lrs[min(int(points * elapsed / budget), points)])
    t0 = time.perf_counter()
    params, opt_state, loss = step(params, opt_state, b, lr)
    loss = float(loss)
    dt = time.perf_counter() - t0
    if not losses:
        compile_s = dt
    else:
        elapsed += dt
    losses.append(loss)
    if not math.isfinite(loss):
        break
    if marks and elapsed >= marks[0]:
        while marks and elapsed >= marks[0]:
            marks.pop(0)
        t0 = time.perf_counter()
        nll = mean_nll(*predictions(params, "in", cfg["curve_tasks"]),
                       evals["in_y"][:cfg["curve_tasks"]])
        eval_s += time.perf_counter() - t0
        loads.append(os.getloadavg()[0])
        curve.append({"minutes": elapsed / 60, "steps": len(losses), "nll": nll})
        print(f"dl4bi: {elapsed / 60:5.2f} min, {len(losses):4d} steps, in-domain NLL "
              f"{nll:.3f} (load {loads[-1]:.1f})", file=sys.stderr, flush=True)
wall = time.perf_counter() - wall
out = {}
for c in conds:
    out[c + "_mean"], out[c + "_std"] = predictions(params, c)
np.savez(sys.argv[4], **out)
args = [evals["in_" + n][:B] for n in ("s_c", "f_c", "m_c", "s_t")]
jax.block_until_ready(predict(params, *args))
times = []
for _ in range(3):
    t0 = time.perf_counter()
    jax.block_until_ready(predict(params, *args))
    times.append(time.perf_counter() - t0)
from importlib.metadata import version
print(json.dumps({
    "params": n_params, "steps": len(losses), "train_s": elapsed, "compile_s": compile_s,
    "step_s": elapsed / max(len(losses) - 1, 1), "data_s": data_s, "eval_s": eval_s,
    "wall_s": wall, "own_batches": max(k - n_shared, 0), "curve": curve, "loads": loads,
    "first_loss": losses[0], "last_loss": float(np.mean(losses[-10:])), "infer_s": min(times),
    "version": "dl4bi " + version("dl4bi"), "jax": jax.__version__}))
"""


def run_reference(args: argparse.Namespace, evals: dict[str, Task], batch_file: Path,
                  tmp: Path) -> dict | str:  # fmt: skip
    """Train and evaluate dl4bi in its own process; its result or why it is missing."""
    python = args.reference_python
    if not python or not Path(python).exists():
        return f"not run (no dl4bi interpreter at {python!r})"
    settings = {
        **SIZES, "batch": BATCH, "seed": args.seed, "budget_s": args.minutes * 60.0,
        "checkpoints": args.checkpoints, "learning_rates": learning_rates(args.lr),
        "clip_norm": TrainConfig().clip_norm, "weight_decay": TrainConfig().weight_decay,
        "conditions": list(evals), "curve_tasks": args.curve_tasks,
    }  # fmt: skip
    (tmp / "settings.json").write_text(json.dumps(settings))
    eval_file, out_file = tmp / "evals.npz", tmp / "dl4bi_predictions.npz"
    np.savez(eval_file, **{f"{c}_{k}": v for c, task in evals.items() for k, v in task.items()})
    cmd = [python, "-c", textwrap.dedent(REFERENCE_WORKER), str(tmp / "settings.json"),
           str(batch_file), str(eval_file), str(out_file)]  # fmt: skip
    try:
        done = subprocess.run(
            cmd, stdout=subprocess.PIPE, text=True, timeout=args.timeout, check=False
        )  # fmt: skip  (stderr: progress, shown live)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"could not run ({type(err).__name__})"
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode or not lines:
        return f"failed (exit {done.returncode})"
    result = json.loads(lines[-1])
    with np.load(out_file) as f:
        result["predictions"] = {c: (f[c + "_mean"], f[c + "_std"]) for c in evals}
    return result


# --------------------------------------------------------------------------- report


def _mse(x: np.ndarray) -> str:
    """``mean ± standard error`` of per-task values."""
    return f"{x.mean():.3f} ± {x.std(ddof=1) / math.sqrt(len(x)):.3f}"


def nll_table(evals: dict[str, Task], scores: dict[str, dict], names: list[str]) -> str:
    """NLL per condition: the oracle, each model and its gap to the oracle."""
    head = "| condition | tasks | context / targets | oracle NLL |"
    rule = "|---|---|---|---|"
    for name in names:
        head += f" {name} NLL | {name} − oracle |"
        rule += "---|---|"
    rows = [head, rule]
    for c, label in CONDITIONS.items():
        task = evals[c]
        n_ctx = task["m_c"].sum(axis=1)
        row = (f"| {label} | {len(task['y'])} | {n_ctx.min()}–{n_ctx.max()} / "
               f"{task['y'].shape[1]} | {_mse(scores['oracle'][c]['nll'])} |")  # fmt: skip
        for name in names:
            s = scores[name][c]["nll"]
            row += f" {_mse(s)} | {_mse(s - scores['oracle'][c]['nll'])} |"
        rows.append(row)
    return "\n".join(rows)


def metric_table(scores: dict[str, dict], names: list[str]) -> str:
    """RMSE and 95 % coverage per condition (mean over tasks)."""
    who = ["oracle", *names]
    head = "| condition |" + "".join(f" {n} RMSE | {n} 95 % cov. |" for n in who)
    rows = [head, "|---|" + "---|---|" * len(who)]
    for c, label in CONDITIONS.items():
        rows.append(f"| {label} |" + "".join(
            f" {scores[n][c]['rmse'].mean():.3f} | {scores[n][c]['cov95'].mean():.2f} |"
            for n in who))  # fmt: skip
    return "\n".join(rows)


def run_table(runs: dict[str, dict]) -> str:
    """Training and inference cost of each implementation."""
    rows = [
        "| implementation | parameters | steps in budget | s / step | compile (s) | "
        "data (s, outside budget) | infer (s / batch of 8) | batches / s | train NLL first → "
        "last 10 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs.values():
        rows.append(
            f"| {r['version']} (JAX {r['jax']}) | {r['params']:,} | {r['steps']} | "
            f"{r['step_s']:.2f} | {r['compile_s']:.1f} | {r['data_s']:.0f} | "
            f"{r['infer_s']:.2f} | {1 / r['infer_s']:.1f} | "
            f"{r['first_loss']:.2f} → {r['last_loss']:.2f} |"
        )
    return "\n".join(rows)


def curve_table(runs: dict[str, dict]) -> str:
    """In-domain NLL at the checkpoints of cumulative training time."""
    names = list(runs)
    head = "| checkpoint |" + "".join(f" {n}: min / steps / NLL |" for n in names)
    rows = [head, "|---|" + "---|" * len(names)]
    for i in range(max(len(r["curve"]) for r in runs.values())):
        row = f"| {i + 1} |"
        for n in names:
            c = runs[n]["curve"]
            row += (f" {c[i]['minutes']:.1f} / {c[i]['steps']} / {c[i]['nll']:.3f} |"
                    if i < len(c) else " |")  # fmt: skip
        rows.append(row)
    return "\n".join(rows)


def plot_curve(runs: dict[str, dict], oracle_nll: float, path: Path) -> None:
    """In-domain NLL against training minutes, with the oracle's NLL."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 4))
    ax = fig.add_subplot()
    for name, r in runs.items():
        ax.plot([c["minutes"] for c in r["curve"]], [c["nll"] for c in r["curve"]], "o-",
                label=f"{name} ({r['params']:,} parameters)")  # fmt: skip
    ax.axhline(oracle_nll, color="k", ls="--", label="exact GP oracle")
    ax.set_xlabel("training time (min of steps, 2-core CPU)")
    ax.set_ylabel("in-domain NLL per target point")
    ax.set_title("2-D GP (BSA-TNP §5.1): accuracy per training minute")
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)


def summary(scores: dict[str, dict], runs: dict[str, dict], minutes: float) -> str:
    """A few sentences computed from the numbers."""
    oracle_nll = {c: scores["oracle"][c]["nll"] for c in CONDITIONS}
    text = []
    for name, r in runs.items():
        gap = {c: float((scores[name][c]["nll"] - oracle_nll[c]).mean()) for c in CONDITIONS}
        shift = np.abs(scores[name]["shift"]["nll"] - scores[name]["in"]["nll"]).max()
        invariant = (
            "as translation invariance implies: the locations enter only through distances"
            if shift < 1e-3
            else "so it is not translation invariant in practice"
        )
        text.append(
            f"After {minutes:g} min of steps ({r['steps']} steps) **{name}** is "
            f"{gap['in']:.3f} nats per point above the oracle in-domain, {gap['double']:.3f} "
            f"on the doubled domain and {gap['multires']:.3f} on the multiresolution layout it "
            f"was not trained on.  Shifting every location by +10 changes its NLL by at most "
            f"{shift:.1e} on any task, {invariant}."
        )
    if len(runs) == 2:
        (a, ra), (b, rb) = runs.items()
        nll_a, nll_b = (float(scores[n]["in"]["nll"].mean()) for n in (a, b))
        diff = scores[a]["in"]["nll"] - scores[b]["in"]["nll"]
        se = diff.std(ddof=1) / math.sqrt(len(diff))
        better = a if nll_a < nll_b else b
        text.append(
            f"Per step {a} is {rb['step_s'] / ra['step_s']:.1f}× as fast as {b} "
            f"({ra['step_s']:.2f} against {rb['step_s']:.2f} s) and "
            f"{rb['infer_s'] / ra['infer_s']:.1f}× "
            f"as fast at inference, so in the same budget it made {ra['steps']} steps against "
            f"{rb['steps']}.  At equal training time the in-domain NLL is {nll_a:.3f} ({a}) "
            f"against {nll_b:.3f} ({b}): {better} is ahead by {abs(nll_a - nll_b):.3f} ± "
            f"{se:.3f} (s.e. of the paired difference over tasks)."
        )
        reach = (
            [c for c in ra["curve"] if c["nll"] <= rb["curve"][-1]["nll"]] if rb["curve"] else []
        )
        if reach and ra["curve"]:
            text.append(
                f"{a} reached {b}'s final in-domain NLL after {reach[0]['minutes']:.1f} min "
                f"(checkpoint resolution)."
            )
    text.append(
        "One training seed per implementation (the spread is over evaluation tasks only); "
        "the paper trains 100K steps on a GPU and reports -0.32 in-domain for BSA-TNP, so "
        "these CPU-budget numbers measure early training, not converged models."
    )
    return "\n\n".join(text)


def report(args: argparse.Namespace, evals: dict[str, Task], scores: dict[str, dict],
           runs: dict[str, dict], reference: dict | str, timing: dict[str, float],
           loads: list[float]) -> str:  # fmt: skip
    """The markdown section ``gp2d``."""
    names = list(runs)
    redrawn = sum(int(t["redrawn"]) for t in evals.values()) + runs["xnp"]["skipped"]
    if "dl4bi" in runs:
        ref = runs["dl4bi"]
        ref_note = (
            f"dl4bi made {ref['steps']} steps, {ref['own_batches']} of them on batches it drew "
            "itself (same scheme) after the shared ones ran out. "
        )
        ref_params = f"{ref['params']:,} parameters"
    else:
        ref_note, ref_params = f"dl4bi: {reference}. ", "not run"
    sampler = (
        "`sample_gp_batch` (independent tasks)"
        if args.iid_batches
        else "`shared_batch` (as the reference code: the 8 tasks of a batch share ℓ and the "
        "locations, one Cholesky factor per batch)"
    )
    walls = "; ".join(
        f"{n} {r['wall_s'] / 60:.1f} min (data {r['data_s'] / 60:.1f}, checkpoint scoring "
        f"{r['eval_s'] / 60:.1f}, compilation {r['compile_s'] / 60:.1f})"
        for n, r in runs.items()
    )
    command = " ".join([COMMAND, *sys.argv[1:]])
    curve_oracle = scores["oracle"]["in"]["nll"][: args.curve_tasks].mean()
    return f"""
## 2-D GP (BSA-TNP paper §5.1): NLL against the exact-GP oracle, xnp and dl4bi

`{command}`: {timing["total"] / 60:.0f} min in all.  Machine: {machine()}; shared with other
jobs: the 1-minute load average ranged {min(loads):.1f}–{max(loads):.1f} during the run (about
2 would be this job alone), so the times are indicative and both implementations ran under
similar but not identical load.

Tasks as in the paper: RBF kernel, lengthscale ~ Beta(3, 7), unit variance, 128–512 context
points with noise {NOISE} and 1024 noiseless targets on [-2, 2]².  Models: a mid-size BSA-TNP
(4 KRBlocks, 4 heads, token and attention dimension 64, 5 RBF basis functions per head and
block on the Euclidean distance, locations not embedded: translation invariant), xnp
({runs["xnp"]["params"]:,} parameters) and the authors' dl4bi ({ref_params}; the same layer
sizes), each trained for **{args.minutes:g} min of step time** (compilation and data generation
outside it) with batch {BATCH}, AdamW (weight decay 1e-4, clipping 0.5) and a warm-up + cosine
learning rate (peak {args.lr:g}, floor 0.2 × peak) over the time budget, on the same batches in
the same order, drawn with {sampler}.  {ref_note}Wall time of training: {walls}.

The evaluation tasks are fixed and seeded, the same for both models and the oracle (the exact
GP posterior with each task's true lengthscale and noise, float64; tasks
{timing["tasks"]:.0f} s, oracle {timing["oracle"]:.0f} s).  Shifted: the in-domain tasks moved
by +10.  Doubled: [-4, 4]² with 4× the context points (the training density) and 1024 targets.
Multiresolution: half the context and half the targets on [-0.5, 0.5]², half on
[-1.5, 1.5]², scored zero-shot (the paper trains a model for it).  {redrawn} sampled batches had
a non-finite value (float32 Cholesky) and were redrawn.

NLL per target point (mean over a task's targets), mean ± standard error over tasks; the gap
is the mean ± s.e. of the per-task differences:

{nll_table(evals, scores, names)}

RMSE and 95 % coverage (means over tasks):

{metric_table(scores, names)}

Training and inference (inference: one forward pass of 8 in-domain tasks, best of 3):

{run_table(runs)}

In-domain NLL during training (first {args.curve_tasks} in-domain tasks; oracle
{curve_oracle:.3f}), at equally spaced times of the budget:

{curve_table(runs)}

![In-domain NLL against training minutes](images/{IMAGE.name})

{summary(scores, runs, args.minutes)}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, help="training budget per implementation (7)")
    parser.add_argument("--tasks", type=int, help="evaluation tasks per condition (48)")
    parser.add_argument("--doubled-tasks", type=int, help="tasks on the doubled domain (24)")
    parser.add_argument("--checkpoints", type=int, default=4, help="points of the NLL curve")
    parser.add_argument("--curve-tasks", type=int, default=16,
                        help="in-domain tasks scored at each checkpoint")  # fmt: skip
    parser.add_argument("--lr", type=float, default=PEAK_LR, help="peak learning rate")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--iid-batches", action="store_true",
                        help="train on sample_gp_batch (independent tasks)")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="15 s of training, 8 tasks")
    parser.add_argument("--reference-python", default=DEFAULT_REFERENCE,
                        help="interpreter with dl4bi installed ('' to skip)")  # fmt: skip
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds for dl4bi")
    parser.add_argument("--no-write", action="store_true", help="do not update the docs")
    args = parser.parse_args()
    args.minutes = args.minutes or (0.25 if args.quick else 7.0)
    args.tasks = args.tasks or (8 if args.quick else 48)
    n_doubled = args.doubled_tasks or (8 if args.quick else 24)
    args.curve_tasks = min(args.curve_tasks, args.tasks) // BATCH * BATCH or BATCH
    write = not (args.no_write or args.quick)
    start, load_start = time.perf_counter(), os.getloadavg()[0]

    t0 = time.perf_counter()
    evals = evaluation_tasks(args.seed, args.tasks, n_doubled)
    gen_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    scores: dict[str, dict] = {"oracle": {}}
    for c, task in evals.items():
        scores["oracle"][c] = task_scores(*oracle(task), task["y"])
    oracle_s = time.perf_counter() - t0
    for c in CONDITIONS:
        print(f"oracle {c}: NLL {_mse(scores['oracle'][c]['nll'])}")
    print(f"evaluation tasks {gen_s:.0f} s, oracle {oracle_s:.0f} s", flush=True)

    runs: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="xnp_gp2d_") as tmp:
        batch_file = Path(tmp) / "train_batches.npz"
        runs["xnp"] = train_xnp(args, evals, batch_file)
        reference = run_reference(args, evals, batch_file, Path(tmp))
    if isinstance(reference, dict):
        runs["dl4bi"] = reference
    else:
        print(f"dl4bi: {reference}")
    for name, r in runs.items():
        predictions = r.pop("predictions")
        scores[name] = {c: task_scores(*predictions[c], evals[c]["y"]) for c in evals}
    total = time.perf_counter() - start
    loads = [load_start, *(x for r in runs.values() for x in r["loads"]), os.getloadavg()[0]]
    image = IMAGE if write else Path(tempfile.gettempdir()) / IMAGE.name
    plot_curve(runs, float(scores["oracle"]["in"]["nll"][: args.curve_tasks].mean()), image)
    timing = {"total": total, "tasks": gen_s, "oracle": oracle_s}
    text = report(args, evals, scores, runs, reference, timing, loads)
    print(text)
    if write:
        write_section("gp2d", text)
        print(f"wrote the gp2d section of docs/benchmarks.md and {image}")
    else:
        print(f"not written (--quick or --no-write); the figure is in {image}")


if __name__ == "__main__":
    main()
