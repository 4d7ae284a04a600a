"""Everything issue 29 checks on a GPU, in one script (a few minutes on one H100).

    python recipes/benchmarks/gpu.py [--tiny] [--write]

It prints one table and, with ``--write``, puts it in the ``gpu`` section of
docs/benchmarks.md:

1. the device and the versions of Python, JAX, Flax and xnp;
2. Biased Scan Attention against dense attention on the device, values and
   gradients, with the great-circle RBF bias (N = 2048, 4 heads of 32);
3. the compiled memory of BSA's forward and backward pass at 16,384 × 16,384
   (4 heads of 32, great-circle RBF bias), beside dense attention's; on an NVIDIA
   GPU, the time of that forward and backward pass with the fused Pallas kernels
   (:mod:`xnp.nn.pallas_attention`) and with the tiled JAX path (``XNP_PALLAS=0``),
   float32 and bfloat16, and their largest relative difference (skipped elsewhere);
4. the paper-size training step (BSA-TNP, batch 8, 512 context and 1,024 target
   points, the 2-D GP task) in float32 and bfloat16 (compute dtype), seconds per step;
5. prediction of 1,000,000 targets from 100,000 context points on the sphere with
   a paper-size great-circle BSA-TNP, exact and regional (300 km);
6. one fitted model's predictions on the CPU and on the GPU: the largest relative
   difference of the mean and std (float32: within 1e-4; bfloat16: reported).

``--tiny`` runs every check at toy sizes (a CPU dry run, about a minute); it never
writes.  On a machine without a GPU the script runs on the CPU and says so.

Running it on a GPU machine without internet (the device machines of this project
have JAX with CUDA, Flax, optax, NumPy, SciPy, xarray and pytest, but not dask, zarr,
cf-xarray, pyproj, netCDF4 or cftime): see "xnp on a GPU" in the README, which
carries those as wheels and installs xnp with ``--no-deps``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import best_time, write_section

import xnp
from xnp.data import SpatialTasks
from xnp.nn.attention import biased_scan_attention, dense_attention
from xnp.nn.bias import SpaceTimeBias

H, D = 4, 32


def device_name() -> str:
    dev = jax.devices()[0]
    return f"{dev.platform.upper()} {getattr(dev, 'device_kind', '')}".strip()


def versions() -> list[tuple[str, str]]:
    import flax

    return [
        ("device", f"{device_name()} (×{jax.device_count()})"),
        ("Python", platform.python_version()),
        ("JAX", jax.__version__),
        ("Flax", flax.__version__),
        ("xnp", xnp.__version__),
    ]


def _attention_inputs(n: int, seed: int = 0):
    ks = jax.random.split(jax.random.key(seed), 5)
    q, k, v = (jax.random.normal(kk, (1, n, H, D), jnp.float32) for kk in ks[:3])
    lat = jnp.rad2deg(jnp.arcsin(jax.random.uniform(ks[3], (1, n), minval=-1, maxval=1)))
    lon = jax.random.uniform(ks[4], (1, n), minval=-180, maxval=180)
    return q, k, v, jnp.stack([lat, lon], -1)


def _attention_fn(attn, bias: SpaceTimeBias):
    def loss(q, k, v, s):
        feats = bias.features(s, None)
        out = attn(q, k, v, bias_fn=bias.bind(), q_feats=feats, k_feats=feats,
                   bias_bounds=bias.bounds())  # fmt: skip
        return jnp.sum(out * jnp.cos(out)), out

    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True))


def _bias() -> SpaceTimeBias:
    return SpaceTimeBias(H, spatial="great_circle", spatial_scale=1000.0, temporal=False,
                         rngs=nnx.Rngs(0))  # fmt: skip


def attention_agreement(n: int) -> tuple[float, float]:
    """Largest relative difference BSA vs dense: outputs, and gradients of q, k, v."""
    bias = _bias()
    args = _attention_inputs(n)
    (_, out_b), grads_b = _attention_fn(biased_scan_attention, bias)(*args)
    (_, out_d), grads_d = _attention_fn(dense_attention, bias)(*args)

    def rel(a, b):
        return float(jnp.max(jnp.abs(a - b)) / (jnp.max(jnp.abs(b)) + 1e-30))

    return rel(out_b, out_d), max(rel(a, b) for a, b in zip(grads_b, grads_d, strict=True))


def attention_memory(n: int) -> tuple[float, float]:
    """Compiled temporary memory (MiB) of forward+backward: BSA, and dense attention."""
    bias = _bias()
    args = _attention_inputs(n)
    out = []
    for attn in (biased_scan_attention, dense_attention):
        compiled = _attention_fn(attn, bias).lower(*args).compile()
        out.append(compiled.memory_analysis().temp_size_in_bytes / 2**20)
    return out[0], out[1]


def has_cuda() -> bool:
    """Whether JAX has an NVIDIA GPU here (the fused Pallas kernels run only there)."""
    try:
        return bool(jax.devices("cuda"))
    except RuntimeError:
        return False


def fused_vs_tiled(n: int, dtype: str) -> dict[str, float]:
    """BSA forward+backward seconds with the fused Pallas kernels and the tiled JAX path.

    The same jitted function traced twice, with ``XNP_PALLAS`` unset and ``0``
    (read while tracing); also the largest relative difference of the two outputs
    and gradients, and whether the fused kernels are really in the compiled program.
    """
    bias = _bias()
    q, k, v, s = _attention_inputs(n)
    args = (*(x.astype(dtype) for x in (q, k, v)), s)
    saved = os.environ.get("XNP_PALLAS")
    out = {}
    try:
        for name, mode in (("fused", "auto"), ("tiled", "0")):
            os.environ["XNP_PALLAS"] = mode
            fn = _attention_fn(biased_scan_attention, bias)
            if name == "fused":
                out["kernels used"] = float("xnp_rbf_attention_dq" in fn.lower(*args).as_text())
            out[name] = best_time(lambda fn=fn: fn(*args), repeat=5)
            out[f"{name} result"] = fn(*args)
    finally:
        if saved is None:
            os.environ.pop("XNP_PALLAS", None)
        else:
            os.environ["XNP_PALLAS"] = saved

    def rel(a, b):
        a, b = a.astype(jnp.float32), b.astype(jnp.float32)
        return float(jnp.max(jnp.abs(a - b)) / (jnp.max(jnp.abs(b)) + 1e-30))

    (_, o_f), g_f = out.pop("fused result")
    (_, o_t), g_t = out.pop("tiled result")
    out["difference"] = max(rel(o_f, o_t), *(rel(a, b) for a, b in zip(g_f, g_t, strict=True)))
    return out


def train_step_seconds(dtype: str, batch: int, n_context: int, n_target: int, steps: int
                       ) -> float:  # fmt: skip
    """Seconds per step of the paper-size BSA-TNP on the 2-D GP task (after compiling)."""
    from xnp.data.batch import Batch
    from xnp.data.synthetic import GPTasks, sample_gp_batch
    from xnp.models.bsa_tnp import BSATNP
    from xnp.models.config import BSATNPConfig
    from xnp.train import TrainConfig, fit_step

    cfg = BSATNPConfig(spatial_bias="euclidean", spatial_scale=1.0, dtype=dtype)
    graphdef, params = nnx.split(BSATNP(cfg, rngs=nnx.Rngs(0)))
    config = TrainConfig()
    opt_state = config.init_optimizer(params)
    step = fit_step(graphdef, config.clip_norm, config.weight_decay)
    tasks = GPTasks(n_context=(n_context // 4, n_context), n_target=n_target)

    def make(key):
        ctx, tgt, y = sample_gp_batch(key, tasks, batch_size=batch)
        zeros = lambda n: jnp.zeros((batch, n), jnp.int32)  # noqa: E731
        return Batch(ctx, tgt, y, zeros(ctx.size), zeros(tgt.size))

    batches = [jax.jit(make)(jax.random.key(i)) for i in range(steps + 1)]
    params, opt_state, _ = step(params, opt_state, batches[0], 1e-4)  # compile
    jax.block_until_ready(params)
    t0 = time.perf_counter()
    for b in batches[1:]:
        params, opt_state, loss = step(params, opt_state, b, 1e-4)
    jax.block_until_ready(loss)
    return (time.perf_counter() - t0) / steps


def _points_dataset(s: np.ndarray, f: np.ndarray | None):
    import xarray as xr

    coords = {"lat": ("point", s[:, 0]), "lon": ("point", s[:, 1])}
    if f is None:
        return xr.Dataset(coords=coords)
    return xr.Dataset({"t": ("point", f, {"units": "K"})}, coords=coords)


def prediction_seconds(n_context: int, n_target: int, radius_km: float) -> dict[str, float]:
    """Wall time of exact and regional prediction, paper-size great-circle model."""
    from predict_scale import make_data

    from xnp.data.normalise import Normaliser
    from xnp.models.config import BSATNPConfig

    path = Path("/tmp/xnp_gpu_points.npz")
    data = np.load(make_data(path, n_context, n_target, seed=0))
    normaliser = Normaliser.fit(_points_dataset(data["s_ctx"], data["f_ctx"]), "t")
    model = xnp.NeuralProcess.init(BSATNPConfig(spatial_bias="great_circle"), normaliser, ["t"])
    ctx = _points_dataset(data["s_ctx"], data["f_ctx"])
    tgt = _points_dataset(data["s_tgt"], None)
    out = {}
    for name, radius in (("exact", None), ("regional", radius_km)):
        xnp.predict(model, ctx, tgt.isel(point=slice(0, 4096)), context_radius=radius,
                    memory_budget="8GiB")  # warm-up: compile the common shapes  # fmt: skip
        t0 = time.perf_counter()
        pred = xnp.predict(model, ctx, tgt, context_radius=radius, memory_budget="8GiB")
        mean = np.asarray(pred.t_mean)
        out[name] = time.perf_counter() - t0
        out[f"{name} finite"] = float(np.isfinite(mean).all())
    return out


def cpu_gpu_agreement() -> dict[str, float]:
    """A model fitted here predicts on the CPU and on the default device; relative differences."""
    data = xnp.datasets.gp_sphere(n_lat=12, n_lon=16, n_time=4, seed=3)
    cpu = jax.devices("cpu")[0]
    with jax.default_device(cpu):
        model = data.np.fit("field", model="bsa-tnp-tiny", tasks=SpatialTasks(), steps=20,
                            batch_size=4, progress=False, validation=None)  # fmt: skip
        frame = data.isel(time=0)
        ref = xnp.predict(model, frame, frame.drop_vars("field"))
    out = {}
    for dtype in ("float32", "bfloat16"):
        other = model
        if dtype != "float32":
            other = xnp.NeuralProcess(
                dataclasses.replace(model.config, dtype=dtype), model.params_,
                normaliser=model.normaliser, variables=model.variables, task=model.task,
                coords=model.coords,
            )  # fmt: skip
        got = xnp.predict(other, frame, frame.drop_vars("field"))
        for kind in ("mean", "std"):
            a, b = np.asarray(got[f"field_{kind}"]), np.asarray(ref[f"field_{kind}"])
            out[f"{dtype} {kind}"] = float(np.max(np.abs(a - b)) / np.max(np.abs(b)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="toy sizes (a CPU dry run)")
    parser.add_argument("--write", action="store_true", help="write docs/benchmarks.md")
    args = parser.parse_args()
    tiny = args.tiny
    t_start = time.perf_counter()
    rows = list(versions())

    def add(name: str, value: str) -> None:
        rows.append((name, value))
        print(f"{name}: {value}", flush=True)

    n_check, n_mem = (256, 512) if tiny else (2048, 16_384)
    out_err, grad_err = attention_agreement(n_check)
    add(f"BSA vs dense, N = {n_check}: largest relative difference (output / gradients)",
        f"{out_err:.1e} / {grad_err:.1e}")  # fmt: skip
    bsa_mib, dense_mib = attention_memory(n_mem)
    add(f"forward+backward compiled memory, N = {n_mem:,}² (BSA / dense)",
        f"{bsa_mib:,.0f} MiB / {dense_mib:,.0f} MiB")  # fmt: skip
    for dtype in ("float32", "bfloat16"):
        label = (f"BSA forward+backward, N = {n_mem:,}², {dtype}: fused Pallas kernels / "
                 "tiled JAX (speed-up; largest relative difference)")  # fmt: skip
        if not has_cuda():
            add(label, "skipped (no NVIDIA GPU)")
            continue
        t = fused_vs_tiled(n_mem, dtype)
        used = "" if t["kernels used"] else " (fused kernels not in the program!)"
        add(label, f"{t['fused'] * 1e3:.1f} ms / {t['tiled'] * 1e3:.1f} ms "
            f"({t['tiled'] / t['fused']:.1f}×; {t['difference']:.1e}){used}")  # fmt: skip
    shape = (2, 64, 128, 3) if tiny else (8, 512, 1024, 20)
    for dtype in ("float32", "bfloat16"):
        sec = train_step_seconds(dtype, *shape)
        add(f"paper-size training step ({dtype}; batch {shape[0]}, {shape[1]} context, "
            f"{shape[2]} targets)", f"{sec * 1000:.1f} ms")  # fmt: skip
    n_ctx, n_tgt, radius = (2_000, 20_000, 2000.0) if tiny else (100_000, 1_000_000, 300.0)
    pred = prediction_seconds(n_ctx, n_tgt, radius)
    for name in ("exact", "regional"):
        ok = "" if pred[f"{name} finite"] else " (non-finite output!)"
        label = name if name == "exact" else f"regional ({radius:g} km)"
        add(f"predict {n_tgt:,} targets from {n_ctx:,} context points, {label}",
            f"{pred[name]:.1f} s{ok}")  # fmt: skip
    agree = cpu_gpu_agreement()
    for dtype in ("float32", "bfloat16"):
        diff = f"{agree[f'{dtype} mean']:.1e} / {agree[f'{dtype} std']:.1e}"
        add(f"same model, CPU vs {device_name()}, {dtype}: largest relative difference "
            "(mean / std)", diff)  # fmt: skip
    total = time.perf_counter() - t_start
    table = "| check | result |\n|---|---|\n" + "\n".join(f"| {a} | {b} |" for a, b in rows)
    print(table)
    print(f"total {total:.0f} s")
    if args.write and not tiny:
        write_section(
            "gpu",
            "## xnp on a GPU (`recipes/benchmarks/gpu.py`, issue 29)\n\n"
            f"`python recipes/benchmarks/gpu.py --write`: {total:.0f} s on {device_name()}.\n\n"
            + table
            + "\n",
        )


if __name__ == "__main__":
    main()
