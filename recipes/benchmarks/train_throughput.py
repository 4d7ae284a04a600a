"""Training throughput of the paper-size BSA-TNP: xnp against the reference ``dl4bi``.

The task is the BSA-TNP paper's 2-D GP benchmark: batches of 8 tasks, context
padded to 512 points (128–512 real), 1024 targets, RBF kernel on [-2, 2]².  Each
implementation runs in its own fresh process, so peak memory (max RSS) is its own:

* xnp: ``BSATNPConfig(spatial_bias="euclidean", spatial_scale=1.0)`` (475,770
  parameters) and :func:`xnp.train.steps.fit_step`, the step ``ds.np.fit`` runs;
* dl4bi 0.1.3 (the authors' JAX/Flax Linen package), in its own virtual environment
  (it needs jax<0.9 and flax<0.13): its ``BSATNP`` with Biased Scan Attention and an
  RBF-network bias on the Euclidean distance, locations not embedded (as in xnp, so
  both are the same architecture), trained with the same AdamW chain.

Compile time (first step) and steps per second (after it) are reported separately.

    python recipes/benchmarks/train_throughput.py [--steps 8] [--rounds 2]
                                                  [--reference-python PATH] [--no-write]

Without a reference interpreter (default ``/work/bench-venv/bin/python``, made with
``python -m venv /work/bench-venv && /work/bench-venv/bin/pip install 'dl4bi[cpu]==0.1.3'``)
the reference row says it was not measured.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

BATCH, N_CONTEXT, N_TARGET = 8, 512, 1024
DEFAULT_REFERENCE = "/work/bench-venv/bin/python"

# Both workers print one JSON line: parameters, compile seconds, seconds per step, peak RSS.
XNP_WORKER = """
import json, os, resource, sys, time
import jax, numpy as np
from flax import nnx
from xnp.data.batch import Batch
from xnp.data.synthetic import GPTasks, sample_gp_batch
from xnp.models.bsa_tnp import BSATNP
from xnp.nn.layers import count_params
from xnp.models.config import BSATNPConfig
from xnp.train import TrainConfig, fit_step

steps, B, NC, NT = (int(a) for a in sys.argv[1:5])
tasks = GPTasks(n_context=(128, NC), n_target=NT)
model = BSATNP(BSATNPConfig(spatial_bias="euclidean", spatial_scale=1.0), rngs=nnx.Rngs(0))
graphdef, params = nnx.split(model)
config = TrainConfig()
opt_state = config.init_optimizer(params)
step = fit_step(graphdef, config.clip_norm, config.weight_decay)
sample = jax.jit(lambda k: sample_gp_batch(k, tasks, batch_size=B))
def batch(k):
    ctx, tgt, y = sample(jax.random.key(k))
    zeros = lambda n: np.zeros((B, n), np.int32)
    return Batch(ctx, tgt, y, zeros(NC), zeros(NT))
batches = [jax.block_until_ready(batch(k)) for k in range(steps + 1)]
lr = np.float32(1e-4)
t0 = time.perf_counter()
params, opt_state, loss = step(params, opt_state, batches[0], lr)
jax.block_until_ready(loss)
compile_s = time.perf_counter() - t0
times = []
for b in batches[1:]:
    t0 = time.perf_counter()
    params, opt_state, loss = step(params, opt_state, b, lr)
    jax.block_until_ready(loss)
    times.append(time.perf_counter() - t0)
per_step, fastest = float(np.median(times)), min(times)
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
# XLA's count of the step's arithmetic, on the same model with dense attention (no loops,
# whose trip counts the cost analysis leaves out) and without xnp's native kernels (whose
# work it cannot see); compiled, never run
os.environ["XNP_NATIVE"] = "0"
dense = BSATNP(BSATNPConfig(spatial_bias="euclidean", spatial_scale=1.0, attention="dense"),
               rngs=nnx.Rngs(0))
g_dense, p_dense = nnx.split(dense)
grad = jax.jit(jax.value_and_grad(
    lambda p, b: nnx.merge(g_dense, p).loss(b.context, b.target, b.y)))
cost = grad.lower(p_dense, batches[0]).compile().cost_analysis()
cost = cost[0] if isinstance(cost, list) else cost
print(json.dumps({"params": count_params(model), "compile_s": compile_s,
                  "step_s": per_step, "step_min_s": fastest, "rss_mb": rss, "times": times,
                  "loss": float(loss), "version": "xnp", "jax": jax.__version__,
                  "flops": cost["flops"], "transcendentals": cost["transcendentals"]}))
"""

REFERENCE_WORKER = """
import json, resource, sys, time
import jax, jax.numpy as jnp, numpy as np, optax
import dl4bi
from dl4bi.core.attention import BiasedScanAttention, MultiHeadAttention
from dl4bi.core.bias import Bias
from dl4bi.core.mlp import MLP
from dl4bi.core.transformer import KRBlock
from dl4bi.meta_learning.bsa_tnp import BSATNP

steps, B, NC, NT = (int(a) for a in sys.argv[1:5])
attn = BiasedScanAttention(bias={"s": Bias.build_rbf_network_bias(num_heads=4, num_basis=5)})
mha = MultiHeadAttention(attn=attn, num_heads=4, proj_qs=MLP([128]), proj_ks=MLP([128]),
                         proj_vs=MLP([128]), proj_out=MLP([64]))
model = BSATNP(blk=KRBlock(attn=mha), embed_s=lambda s: None)  # locations only in the bias

def gp_batch(key):
    # The paper's 2-D GP tasks (as xnp.data.synthetic.GPTasks): RBF, lengthscale ~ Beta(3, 7).
    k_len, k_loc, k_f, k_noise, k_n = jax.random.split(key, 5)
    ell = jax.random.beta(k_len, 3.0, 7.0, (B, 1, 1))
    s = jax.random.uniform(k_loc, (B, NC + NT, 2), minval=-2.0, maxval=2.0)
    d2 = jnp.sum((s[:, :, None] - s[:, None]) ** 2, -1)
    chol = jnp.linalg.cholesky(jnp.exp(-0.5 * d2 / ell**2) + 1e-5 * jnp.eye(NC + NT))
    f = (chol @ jax.random.normal(k_f, (B, NC + NT, 1)))
    n_ctx = jax.random.randint(k_n, (B, 1), 128, NC + 1)
    mask = jnp.arange(NC)[None] < n_ctx
    f_ctx = f[:, :NC] + 0.1 * jax.random.normal(k_noise, (B, NC, 1))
    return s[:, :NC], f_ctx, mask, s[:, NC:], f[:, NC:]

sample = jax.jit(gp_batch)
batches = [jax.block_until_ready(sample(jax.random.key(k))) for k in range(steps + 1)]
s_c, f_c, m_c, s_t, f_t = batches[0]
params = model.init(jax.random.key(0), s_ctx=s_c, f_ctx=f_c, mask_ctx=m_c, s_test=s_t)["params"]
n_params = sum(int(np.size(x)) for x in jax.tree.leaves(params))
tx = optax.chain(optax.clip_by_global_norm(0.5), optax.adamw(1e-4, weight_decay=1e-4))
opt_state = tx.init(params)

@jax.jit
def step(params, opt_state, batch):
    s_c, f_c, m_c, s_t, f_t = batch
    def loss_fn(p):
        out = model.apply({"params": p}, s_ctx=s_c, f_ctx=f_c, mask_ctx=m_c, s_test=s_t,
                          training=True)
        return out.nll(f_t)
    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

t0 = time.perf_counter()
params, opt_state, loss = step(params, opt_state, batches[0])
jax.block_until_ready(loss)
compile_s = time.perf_counter() - t0
times = []
for b in batches[1:]:
    t0 = time.perf_counter()
    params, opt_state, loss = step(params, opt_state, b)
    jax.block_until_ready(loss)
    times.append(time.perf_counter() - t0)
per_step, fastest = float(np.median(times)), min(times)
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
from importlib.metadata import version
print(json.dumps({"params": n_params, "compile_s": compile_s, "step_s": per_step, "times": times,
                  "step_min_s": fastest,
                  "rss_mb": rss, "loss": float(loss), "version": "dl4bi " + version("dl4bi"),
                  "jax": jax.__version__}))
"""


def run_worker(python: str, code: str, steps: int, timeout: float) -> dict | str:
    """Run a worker in a fresh process; return its JSON result or an error description."""
    args = [python, "-c", textwrap.dedent(code), str(steps), str(BATCH), str(N_CONTEXT),
            str(N_TARGET)]  # fmt: skip
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"could not run ({type(err).__name__}: {err})"
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"failed (exit {done.returncode}: {tail[:200]})"
    return json.loads(lines[-1])


def combine(rounds: list[dict | str]) -> dict | str:
    """One result from a worker's rounds: step statistics over all their timed steps."""
    ok = [r for r in rounds if isinstance(r, dict)]
    if not ok:
        return rounds[0]
    times = [t for r in ok for t in r["times"]]
    out = dict(ok[0])
    out.update(
        step_s=float(np.median(times)),
        step_min_s=min(times),
        round_s=[r["step_s"] for r in ok],
        compile_s=float(np.median([r["compile_s"] for r in ok])),
        rss_mb=max(r["rss_mb"] for r in ok),
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8, help="timed steps after compilation")
    parser.add_argument(
        "--quick", action="store_true", help="3 timed steps, 1 round; the docs are not written"
    )
    parser.add_argument("--reference-python", default=DEFAULT_REFERENCE,
                        help="interpreter with dl4bi installed ('' to skip)")  # fmt: skip
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per worker")
    parser.add_argument("--rounds", type=int, default=2,
                        help="fresh processes per implementation, run alternately")  # fmt: skip
    parser.add_argument("--no-write", action="store_true", help="do not update the docs")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.rounds, args.no_write = 3, 1, True

    workers = {"xnp": (sys.executable, XNP_WORKER)}
    if args.reference_python and Path(args.reference_python).exists():
        workers["dl4bi"] = (args.reference_python, REFERENCE_WORKER)
    # rounds alternate between the implementations, so that a stretch of load from
    # other jobs on a shared machine falls on both rather than on one
    runs: dict[str, list[dict | str]] = {name: [] for name in workers}
    for _ in range(args.rounds):
        for name, (python, code) in workers.items():
            runs[name].append(run_worker(python, code, args.steps, args.timeout))
    results: dict[str, dict | str] = {name: combine(rs) for name, rs in runs.items()}
    if "dl4bi" not in results:
        results["dl4bi"] = f"not measured (no interpreter at {args.reference_python!r})"
    print(json.dumps(results, indent=2))

    from _report import exp_rate, least_seconds, machine, matmul_gflops, write_section

    gflops, gexp = matmul_gflops(), exp_rate()

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())

    rows = []
    for name, r in results.items():
        if isinstance(r, str):
            rows.append(f"| {name} | {r} | | | | | |")
            continue
        rows.append(
            f"| {r['version']} (JAX {r['jax']}) | {r['params']:,} | {r['compile_s']:.1f} | "
            f"{r['step_s']:.2f} | {r['step_min_s']:.2f} | {1 / r['step_s']:.2f} | "
            f"{r['rss_mb']:,.0f} |"
        )
    xnp, ref = results["xnp"], results["dl4bi"]
    summary = ""
    if isinstance(xnp, dict) and isinstance(ref, dict):
        summary = (
            f"\nxnp is **{ref['step_s'] / xnp['step_s']:.1f}× faster per step** and uses "
            f"{xnp['rss_mb'] / ref['rss_mb']:.2f}× the peak memory of the reference.\n"
        )
    if isinstance(xnp, dict) and "flops" in xnp:
        least = least_seconds(xnp["flops"], xnp["transcendentals"], gflops, gexp)
        summary += (
            f"\nThe least time the arithmetic allows: XLA's count of the step's operations "
            f"(forward and backward of the same model with dense attention, compiled, not run), "
            f"{xnp['flops'] / 1e9:.1f} GFLOP at the measured matmul rate ({gflops:.1f} GFLOP/s, "
            f"optimistic for element-wise work) plus {xnp['transcendentals'] / 1e9:.2f} G "
            f"exponentials at the measured rate of XLA's fused exponentials ({gexp:.2f} G/s; "
            f"xnp's native CPU kernels compute the attention's faster, so this is a yardstick "
            f"rather than a bound for xnp): "
            f"**{least:.2f} s** per step; xnp's step runs at {least / xnp['step_s']:.0%} of that "
            f"rate"
            + (
                f"; at these rates an implementation could be at most "
                f"{ref['step_s'] / least:.1f}× faster than the reference"
                if isinstance(ref, dict)
                else ""
            )
            + ".\n"
        )
    rounds_text = "; ".join(
        f"{name} " + ", ".join(f"{x:.2f}" for x in r["round_s"]) + " s"
        for name, r in results.items()
        if isinstance(r, dict)
    )
    markdown = f"""
## Training throughput: paper-size BSA-TNP on the 2-D GP task

`recipes/benchmarks/train_throughput.py`: one training step (forward, backward, AdamW
with clipping) of the paper-size BSA-TNP on batches of {BATCH} GP tasks with
{N_CONTEXT} (padded) context and {N_TARGET} target points, each implementation in its
own process; {args.rounds} rounds of fresh processes, alternating between the two;
median (and fastest) of the {args.rounds} × {args.steps} steps timed one by one after
compilation, the same rule for both (per-round medians: {rounds_text}).  Peak RSS is
the whole process (data, parameters, compiled code).  Machine: {machine()}; load
average at the end of the run {load} (other jobs sharing the cores slow both rows).

| implementation | parameters | compile (s) | s / step | fastest (s) | steps / s | peak RSS (MB) |
|---|---|---|---|---|---|---|
{chr(10).join(rows)}
{summary}"""
    print(markdown)
    if not args.no_write:
        write_section("train-throughput", markdown)


if __name__ == "__main__":
    main()
