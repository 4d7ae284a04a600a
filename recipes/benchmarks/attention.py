"""Biased Scan Attention against dense attention: time, memory, achieved GFLOP/s.

    python recipes/benchmarks/attention.py [--sizes 1024 4096 16384] [--no-write]

For each size N (Nq = Nk = N, batch 1, 4 heads of dimension 32, float32) it
measures the forward pass and the forward+backward pass of BSA, without a bias
and with the paper's spatial bias (great-circle distance, 5 RBF basis functions
per head), next to dense attention where its score matrix fits in memory.
GFLOP/s counts the two attention matmuls only (4·B·H·Nq·Nk·D forward; 2.5× that
for forward+backward), so it is comparable with the machine's own matmul rate,
measured in the same run.  Memory is XLA's compiled temporary-buffer size.  The
biased runs pass the bias bounds, as the BSA-TNP model does.
"""

from __future__ import annotations

import argparse
import inspect
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
from flax import nnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import best_time, machine, matmul_gflops, write_section

from xnp.nn.attention import biased_scan_attention, dense_attention
from xnp.nn.bias import SpaceTimeBias

H, D = 4, 32
DENSE_LIMIT_BYTES = 6 * 2**30  # run dense only when its temporaries fit comfortably


def inputs(n: int):
    ks = jax.random.split(jax.random.key(n), 5)
    q, k, v = (jax.random.normal(kk, (1, n, H, D), jnp.float32) for kk in ks[:3])
    lat = jnp.rad2deg(jnp.arcsin(jax.random.uniform(ks[3], (1, n), minval=-1, maxval=1)))
    lon = jax.random.uniform(ks[4], (1, n), minval=-180, maxval=180)
    return q, k, v, jnp.stack([lat, lon], -1)


def build(attn, bias: SpaceTimeBias | None, grad: bool):
    def fwd(q, k, v, feats):
        if bias is None:
            return attn(q, k, v)
        return attn(q, k, v, bias_fn=bias.bind(), q_feats=feats, k_feats=feats,
                    bias_bounds=bias.bounds())  # fmt: skip

    if not grad:
        return jax.jit(fwd)

    def loss(q, k, v, feats):
        return jnp.sum(fwd(q, k, v, feats))

    return jax.jit(jax.grad(loss, argnums=(0, 1, 2)))


def measure(attn, bias, grad, args):
    fn = build(attn, bias, grad)
    compiled = fn.lower(*args).compile()
    temp = compiled.memory_analysis().temp_size_in_bytes
    return temp, compiled


def targets(rows: list[dict], peak: float) -> list[str]:
    """Issue 2's targets at the largest N, and BSA against dense, computed from the rows."""
    n = max(r["N"] for r in rows)
    out = []
    for label, goal in (("none", 0.60), ("great-circle RBF ×5", 0.30)):
        r = next(r for r in rows if r["N"] == n and r["bias"] == label and r["pass"] == "fwd")
        share = r["bsa_gflops"] / peak
        verdict = "met" if share >= goal else "not met"
        out.append(
            f"* N = {n}, bias {label}, forward: {share:.0%} of the matmul rate "
            f"(target ≥ {goal:.0%}: {verdict})."
        )
    timed = [r for r in rows if r["dense"] is not None]
    slower = [r for r in timed if r["bsa"] > r["dense"]]
    if slower:
        cases = "; ".join(
            f"N = {r['N']} {r['bias']} {r['pass']} ({r['dense'] / r['bsa']:.2f}×)" for r in slower
        )
        out.append(f"* BSA is slower than dense attention in: {cases}.")
    else:
        out.append(
            f"* BSA is at least as fast as dense attention in all {len(timed)} timed cases."
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument(
        "--quick", action="store_true", help="sizes 1024 and 4096 only; the docs are not written"
    )
    parser.add_argument("--no-write", action="store_true", help="do not update docs")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.no_write = [n for n in args.sizes if n <= 4096], True

    defaults = inspect.signature(biased_scan_attention).parameters
    tiles = (defaults["q_chunk"].default, defaults["k_chunk"].default)
    peak = matmul_gflops()
    print(f"{machine()}\nmatmul rate: {peak:.1f} GFLOP/s")
    bias = SpaceTimeBias(H, spatial="great_circle", spatial_scale=1000.0, n_basis_space=5,
                         rngs=nnx.Rngs(0))  # fmt: skip
    rows = []
    for n in args.sizes:
        q, k, v, s = inputs(n)
        feats = bias.features(s, jnp.zeros_like(s[..., :1]))
        flops = 4 * H * n * n * D
        for label, b in (("none", None), ("great-circle RBF ×5", bias)):
            for grad in (False, True):
                pass_name = "fwd+bwd" if grad else "fwd"
                work = flops * (2.5 if grad else 1.0)
                row = {"N": n, "bias": label, "pass": pass_name}
                for name, attn in (("bsa", biased_scan_attention), ("dense", dense_attention)):
                    temp, compiled = measure(attn, b, grad, (q, k, v, feats))
                    if name == "dense" and temp > DENSE_LIMIT_BYTES:
                        row[name] = None
                        row[f"{name}_mem"] = temp
                        continue
                    t = best_time(lambda c=compiled, a=(q, k, v, feats): c(*a))
                    row[name] = t
                    row[f"{name}_mem"] = temp
                    row[f"{name}_gflops"] = work / t / 1e9
                rows.append(row)
                dense_t = "—" if row["dense"] is None else f"{row['dense']:.3f}s"
                print(f"N={n:6d} {label:20s} {pass_name:8s} BSA {row['bsa']:.3f}s "
                      f"({row['bsa_gflops']:.1f} GFLOP/s, {row['bsa_gflops'] / peak:.0%} of "
                      f"matmul, {row['bsa_mem'] / 2**20:.1f} MiB)  dense {dense_t} "
                      f"({row['dense_mem'] / 2**20:.0f} MiB)", flush=True)  # fmt: skip

    if args.no_write:
        return
    lines = [
        "## Biased Scan Attention vs dense attention",
        "",
        "`python recipes/benchmarks/attention.py` — batch 1, 4 heads × 32, float32, Nq = Nk = N,",
        f"default tiles ({tiles[0]} × {tiles[1]}). GFLOP/s counts the attention matmuls only;",
        "memory is XLA's compiled temporary buffers. Dense is skipped where its temporaries",
        "exceed 6 GiB.",
        "",
        f"Machine: {machine()}. Measured matmul rate: **{peak:.1f} GFLOP/s**.",
        "",
        "| N | bias | pass | BSA time | BSA GFLOP/s | % of matmul | BSA memory | dense time "
        "| dense memory | BSA speed-up |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        dense_t = "skipped (> 6 GiB)" if r["dense"] is None else f"{r['dense']:.3f} s"
        speed = "—" if r["dense"] is None else f"{r['dense'] / r['bsa']:.2f}×"
        lines.append(
            f"| {r['N']} | {r['bias']} | {r['pass']} | {r['bsa']:.3f} s | {r['bsa_gflops']:.1f} "
            f"| {r['bsa_gflops'] / peak:.0%} | {r['bsa_mem'] / 2**20:.1f} MiB | {dense_t} "
            f"| {r['dense_mem'] / 2**20:,.0f} MiB | {speed} |"
        )
    lines += ["", *targets(rows, peak)]
    write_section("attention", "\n".join(lines))
    print("wrote docs/benchmarks.md")


if __name__ == "__main__":
    main()
