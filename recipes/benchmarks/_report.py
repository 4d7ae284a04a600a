"""Shared helpers of the benchmark scripts: timing, machine info, docs/benchmarks.md."""

from __future__ import annotations

import os
import platform
import re
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import xarray as xr

DOC = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"
#: The real datasets next to the repository (see ../shared/data/README).
SHARED_DATA = Path(
    os.environ.get("XNP_DATA") or Path(__file__).resolve().parents[3] / "shared" / "data"
)
HEADER = (
    "# Benchmarks\n\n"
    "Every table is written by the script named in its section; rerun it to update.\n"
)


def best_time(fn: Callable[[], object], *, repeat: int = 3, min_time: float = 0.0) -> float:
    """Best wall time of ``fn()`` (results blocked on) over ``repeat`` runs, after a warm-up."""
    jax.block_until_ready(fn())
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        best = min(best, time.perf_counter() - start)
        if best > min_time and best > 5.0:
            break
    return best


def matmul_gflops(n: int = 4096) -> float:
    """Measure the float32 matmul rate (GFLOP/s) through XLA, n×n by n×n."""
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
    mm = jax.jit(lambda x: x @ x)
    return 2 * n**3 / best_time(lambda: mm(a), repeat=5) / 1e9


def exp_rate(n: int = 1 << 22, terms: int = 8) -> float:
    """Measure the float32 exponential rate (G exp/s) of XLA's fused element-wise loops.

    ``terms`` exponentials of differently scaled copies of each element are summed,
    the pattern of an RBF attention bias, so the loop is bound by the exponentials.
    """
    x = -10.0 * jax.random.uniform(jax.random.key(0), (n,), jnp.float32)
    scales = jnp.linspace(0.5, 2.0, terms)
    fn = jax.jit(lambda x: sum(jnp.exp(x * scales[k]) for k in range(terms)))
    # one call is a few milliseconds: best of many, so a burst of load does not decide
    return terms * n / best_time(lambda: fn(x), repeat=100) / 1e9


def least_seconds(flops: float, transcendentals: float, gflops: float, gexp: float) -> float:
    """Least time of ``flops`` and ``transcendentals`` at measured rates (GFLOP/s, G exp/s).

    A floor, not an estimate: every operation is counted at the matmul rate, which
    element-wise work does not reach, and exponentials at the fused-loop rate.
    """
    return flops / (gflops * 1e9) + transcendentals / (gexp * 1e9)


def machine() -> str:
    """One line describing the machine and software."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            names = [ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    return (f"{cpu}, {os.cpu_count()} cores, JAX {jax.__version__} "
            f"({jax.default_backend()}), Python {platform.python_version()}")  # fmt: skip


def _section_pattern(name: str) -> tuple[str, str, re.Pattern]:
    """The markers of section ``name`` of docs/benchmarks.md and a pattern matching it."""
    begin, end = f"<!-- begin {name} -->", f"<!-- end {name} -->"
    return begin, end, re.compile(re.escape(begin) + r"(.*?)" + re.escape(end), re.S)


def read_section(name: str) -> str:
    """The text of section ``name`` of docs/benchmarks.md ('' if absent)."""
    found = _section_pattern(name)[2].search(DOC.read_text()) if DOC.exists() else None
    return found.group(1) if found else ""


def write_section(name: str, markdown: str) -> None:
    """Replace (or append) section ``name`` of docs/benchmarks.md, atomically."""
    DOC.parent.mkdir(parents=True, exist_ok=True)
    text = DOC.read_text() if DOC.exists() else HEADER
    begin, end, pattern = _section_pattern(name)
    block = f"{begin}\n{markdown.strip()}\n{end}"
    text = pattern.sub(lambda _: block, text) if pattern.search(text) else f"{text}\n{block}\n"
    fd, tmp = tempfile.mkstemp(dir=DOC.parent, prefix=".benchmarks.", suffix=".md")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, DOC)


def open_era5() -> xr.Dataset:
    """The ERA5 UK 2 m temperature file (March 2019, hourly), loaded; exits if absent."""
    path = SHARED_DATA / "era5_t2m_uk_2019-03-01_21.nc"
    if not path.exists():
        raise SystemExit(f"{path} is absent: this benchmark needs the shared ERA5 UK file.")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", xr.SerializationWarning)
        return xr.open_dataset(path).load()


def plot_learning_curves(models: dict, path: Path, *, title: str, ylabel: str) -> None:
    """Validation NLL against training minutes of fitted models, one line each, to ``path``.

    Minutes are the step times the fit's training-loop seconds per step (the history
    records steps; the loop's seconds are spread evenly over them).
    """
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.0, 4.0), layout="constrained")
    ax = fig.subplots()
    for name, model in models.items():
        run = model.training
        history = model.history_.dropna("step", subset=["val_nll"])
        minutes = history.step.values * run["train_seconds"] / run["step"] / 60.0
        ax.plot(minutes, history.val_nll.values, marker=".", label=name)
    ax.set_xlabel("training time (min, 2 CPU cores)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=7)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
