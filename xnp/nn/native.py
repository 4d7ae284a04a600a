"""Native CPU kernels: C++ XLA FFI handlers compiled on first use, with JAX fallbacks.

The RBF attention bias ``Σ_f a_hf exp(-b_hf z)`` (:func:`xnp.nn.bias.RBFBias.apply`)
costs most of its time in exponentials.  XLA's CPU backend computes the gradient
of its weights as one loop over the score tile per basis function and per sum,
each evaluating its exponentials again: 15 exponentials per pair and head where 5
are needed, and a third of a training step's time.  The handlers in
``_kernels/rbf.cc`` compute the bias (:func:`rbf_bias`) and its gradient
(:func:`rbf_grad`) in one pass each, with a vectorised exponential about 1.5×
as fast as XLA's on the machines measured (``docs/benchmarks.md``).  A third,
:func:`rbf_attention`, is the whole forward pass of biased attention: for a
block of queries it walks over the keys in tiles, computes each tile's distances
once for all heads, the bias, the online softmax and the weighted values, and
stores no ``[Nq, Nk]`` matrix.  :func:`xnp.nn.attention.biased_scan_attention`
uses it for the RBF biases of :class:`xnp.nn.bias.SpaceTimeBias`, in prediction
and in the forward pass of training.  A fourth, :func:`rbf_attention_bwd`, is its
backward pass (FlashAttention-2: scores and softmax recomputed tile by tile), used
in training whenever the point locations need no gradient; otherwise the tiled
JAX backward runs, with the two kernels above inside.

The source is compiled on the machine that runs it, the first time it is needed,
with the system's C++ compiler (``$CXX``, else ``c++``) and ``-march=native``, its
vectors one register wide (16 floats with AVX-512, 8 with AVX2 or less: 16-float
vectors on an AVX2 machine made a training step 2.6× slower, and slower than XLA),
into a cache directory (``$XNP_CACHE_DIR``, else ``$XDG_CACHE_HOME/xnp`` or
``~/.cache/xnp``), under a name that hashes the source, the compiler, the JAX
version and the processor, so a cache shared between different machines never
loads a library built for another.  The write is atomic (temporary file, then
rename), so concurrent processes can build at once.

``XNP_NATIVE`` chooses: ``auto`` (default) uses the kernels when they build and
falls back to the pure-JAX computation, with a log message, when they do not
(no compiler, an unsupported platform); ``0`` never uses them; ``1`` requires
them and raises :class:`~xnp.errors.NativeKernelError` if they cannot be built.
The kernels are registered for the CPU only: on a GPU the JAX path runs.

Examples
--------
>>> import jax.numpy as jnp
>>> a = b = jnp.ones((2, 3))
>>> z, g = jnp.full((1, 4, 5), 0.5), jnp.ones((1, 2, 4, 5))
>>> da, db, dz = rbf_grad(a, b, z, g, want_dz=False)
>>> da.shape, db.shape, dz is None
((2, 3), (2, 3), True)
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from xnp.errors import ConfigError, NativeKernelError
from xnp.nn.dispatch import by_platform

__all__ = [
    "cache_dir",
    "enabled",
    "rbf_attention",
    "rbf_attention_bwd",
    "rbf_bias",
    "rbf_bias_reference",
    "rbf_grad",
    "rbf_grad_reference",
]

log = logging.getLogger(__name__)

_SOURCE = Path(__file__).with_name("_kernels") / "rbf.cc"
_TARGETS = {
    "xnp_rbf_grad": "XnpRbfGrad",
    "xnp_rbf_grad_dz": "XnpRbfGradDz",
    "xnp_rbf_bias": "XnpRbfBias",
    "xnp_rbf_attention": "XnpRbfAttention",
    "xnp_rbf_attention_bwd": "XnpRbfAttentionBwd",
}
_FLAGS = ("-O3", "-march=native", "-fno-math-errno", "-std=c++17", "-shared", "-fPIC", "-w")
_COMPILE_TIMEOUT_S = 300

_lock = threading.Lock()
_state: dict[str, object] = {}  # "ok": bool once decided, "lib": the loaded library


def switch(variable: str) -> str:
    """The setting ``"auto"``, ``"0"`` or ``"1"`` of a kernel's environment switch.

    ``XNP_NATIVE`` here, ``XNP_PALLAS`` for :mod:`xnp.nn.pallas_attention`; unset
    means ``auto``; anything else raises :class:`~xnp.errors.ConfigError`.
    """
    mode = os.environ.get(variable, "auto").strip().lower()
    if mode not in ("auto", "0", "1"):
        raise ConfigError(f"{variable} must be 'auto', '0' or '1'; got {mode!r}.")
    return mode


def cache_dir() -> Path:
    """Directory the compiled kernels are kept in (created on first build)."""
    if os.environ.get("XNP_CACHE_DIR"):
        return Path(os.environ["XNP_CACHE_DIR"]) / "native"
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "xnp" / "native"


def _cpu_fingerprint() -> str:
    """Text naming the processor's model and instruction sets (for the cache key)."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return f"{platform.machine()} {platform.processor()}"
    keep = [
        line
        for line in info.splitlines()
        if line.split(":")[0].strip() in ("model name", "flags", "Features", "CPU part")
    ]
    return "\n".join(sorted(set(keep)))


def _compiler() -> list[str]:
    cxx = os.environ.get("CXX", "c++")
    path = shutil.which(cxx.split()[0])
    if path is None:
        raise NativeKernelError(
            f"no C++ compiler found (looked for {cxx!r}); install g++ or clang++, or set "
            "CXX, or set XNP_NATIVE=0 to use the pure-JAX computation."
        )
    return [path, *cxx.split()[1:]]


def _build() -> Path:
    """Compile the kernels (or find them in the cache) and return the library's path."""
    cxx = _compiler()
    version = subprocess.run([*cxx, "--version"], capture_output=True, text=True, timeout=60)
    key = hashlib.sha256()
    for part in (
        _SOURCE.read_bytes(),
        version.stdout.encode(),
        " ".join(_FLAGS).encode(),
        jax.__version__.encode(),
        _cpu_fingerprint().encode(),
    ):
        key.update(part)
        key.update(b"\0")
    target = cache_dir() / f"rbf-{key.hexdigest()[:20]}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".build-", suffix=".so")
    os.close(fd)
    cmd = [*cxx, *_FLAGS, f"-I{jax.ffi.include_dir()}", str(_SOURCE), "-o", tmp]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=_COMPILE_TIMEOUT_S)
        if done.returncode:
            raise NativeKernelError(
                f"compiling {_SOURCE.name} failed (exit {done.returncode}):\n"
                f"{' '.join(cmd)}\n{done.stderr.strip()[-2000:]}"
            )
        os.replace(tmp, target)  # atomic: another process may have built it meanwhile
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def enabled() -> bool:
    """Whether the native kernels are used on the CPU (building them on first call).

    Returns False when ``XNP_NATIVE=0``, or in the default ``auto`` mode when they
    cannot be built (the reason is logged once); raises
    :class:`~xnp.errors.NativeKernelError` in that case with ``XNP_NATIVE=1``.
    """
    mode = switch("XNP_NATIVE")
    if mode == "0":
        return False
    with _lock:
        if "ok" not in _state:
            try:
                lib = ctypes.cdll.LoadLibrary(str(_build()))
                for name, symbol in _TARGETS.items():
                    fn = jax.ffi.pycapsule(getattr(lib, symbol))
                    jax.ffi.register_ffi_target(name, fn, platform="cpu")
                _state.update(ok=True, lib=lib)
            except (NativeKernelError, OSError, subprocess.SubprocessError) as err:
                _state.update(ok=False, error=err)
                log.info("xnp native kernels unavailable, using pure JAX: %s", err)
        if not _state["ok"] and mode == "1":
            err = _state["error"]
            if isinstance(err, NativeKernelError):
                raise err
            raise NativeKernelError(f"the native kernels could not be loaded: {err}") from err
        return bool(_state["ok"])


def rbf_grad_reference(a, b, z, g, *, want_dz: bool):
    """Cotangents ``(da, db, dz)`` of ``Σ_f a_hf exp(-b_hf z)`` for cotangent ``g``, in JAX.

    ``a``, ``b`` ``[H, F]``, ``z`` ``[B, q, k]``, ``g`` ``[B, H, q, k]``; ``dz`` is
    None unless ``want_dz``.  The pure-JAX computation :func:`rbf_grad` must agree with.
    """
    g = g.astype(jnp.float32)
    z32 = z.astype(jnp.float32)
    axes = (0, 2, 3)
    da, db, dz = [], [], 0.0
    for f in range(a.shape[1]):  # unrolled: XLA fuses the terms
        e = jnp.exp(-b[None, :, f, None, None].astype(jnp.float32) * z32[:, None])
        ge = g * e
        da.append(jnp.sum(ge, axis=axes))
        db.append(-a[:, f] * jnp.sum(ge * z32[:, None], axis=axes))
        if want_dz:
            ab = (a[:, f] * b[:, f]).astype(jnp.float32)
            dz = dz - jnp.sum(ge * ab[None, :, None, None], axis=1)
    return (
        jnp.stack(da, axis=1).astype(a.dtype),
        jnp.stack(db, axis=1).astype(b.dtype),
        dz.astype(z.dtype) if want_dz else None,
    )


def _rbf_grad_native(a, b, z, g, *, want_dz: bool):
    hf = jax.ShapeDtypeStruct(a.shape, jnp.float32)
    outs = (hf, hf) + ((jax.ShapeDtypeStruct(z.shape, jnp.float32),) if want_dz else ())
    name = "xnp_rbf_grad_dz" if want_dz else "xnp_rbf_grad"
    res = jax.ffi.ffi_call(name, outs, vmap_method="sequential")(
        g.astype(jnp.float32),
        z.astype(jnp.float32),
        a.astype(jnp.float32),
        b.astype(jnp.float32),
    )
    return (
        res[0].astype(a.dtype),
        res[1].astype(b.dtype),
        res[2].astype(z.dtype) if want_dz else None,
    )


def rbf_bias_reference(a, b, z):
    """The bias ``Σ_f a_hf exp(-b_hf z)`` ``[B, H, q, k]`` for ``z`` ``[B, q, k]``, in JAX."""
    out = 0.0
    for f in range(a.shape[1]):  # unrolled: XLA fuses the terms into one loop
        out = out + a[None, :, f, None, None] * jnp.exp(-b[None, :, f, None, None] * z[:, None])
    return out


def rbf_bias(a, b, z):
    """:func:`rbf_bias_reference`, by the native kernel on the CPU when :func:`enabled`."""
    if a.shape[1] == 0 or not enabled():
        return rbf_bias_reference(a, b, z)

    def native(a, b, z):
        out = jax.ShapeDtypeStruct((z.shape[0], a.shape[0], *z.shape[1:]), jnp.float32)
        res = jax.ffi.ffi_call("xnp_rbf_bias", out, vmap_method="sequential")(
            z.astype(jnp.float32), a.astype(jnp.float32), b.astype(jnp.float32)
        )
        return res.astype(jnp.result_type(a, b, z))

    return by_platform(a, b, z, cpu=native, default=rbf_bias_reference)


def rbf_grad(a, b, z, g, *, want_dz: bool):
    """:func:`rbf_grad_reference`, by the native kernel on the CPU when :func:`enabled`.

    On other platforms (and with ``XNP_NATIVE=0``) the JAX computation runs.
    """
    if g.shape[1] == 0 or a.shape[1] == 0 or not enabled():
        return rbf_grad_reference(a, b, z, g, want_dz=want_dz)

    def native(*args):
        return _rbf_grad_native(*args, want_dz=want_dz)

    def reference(*args):
        return rbf_grad_reference(*args, want_dz=want_dz)

    return by_platform(a, b, z, g, cpu=native, default=reference)


_METRICS = {"none": 0, "euclidean": 1, "great_circle": 2}


def _attention_operands(q, k, v, mask, q_feats, k_feats, spec, weights):
    """The operands and attributes shared by the forward and backward kernels."""
    f32 = jnp.float32
    b, nq, h, _ = q.shape
    nk = k.shape[1]
    w = [x.astype(f32) for x in weights]
    dummy_w = jnp.zeros((h, 1), f32)
    space = (w.pop(0), w.pop(0)) if spec.metric != "none" else (dummy_w, dummy_w)
    time = (w.pop(0), w.pop(0)) if spec.temporal else (dummy_w, dummy_w)

    def feats(tree, key, n):
        return tree[key].astype(f32) if key in (tree or {}) else jnp.zeros((b, n, 1), f32)

    operands = (
        q.astype(f32),
        k.astype(f32),
        v.astype(f32),
        mask.astype(f32),
        feats(q_feats, "s", nq),  # absent without a spatial metric
        feats(k_feats, "s", nk),
        feats(q_feats, "t", nq),  # absent without a temporal bias
        feats(k_feats, "t", nk),
        *space,
        *time,
    )
    attrs = {
        "metric": np.int32(_METRICS[spec.metric]),
        "time": np.int32(spec.temporal),
        "gc_scale2": np.float32(spec.gc_scale**2),
    }
    return operands, attrs


def rbf_attention(q, k, v, mask, q_feats, k_feats, spec, weights):
    """Biased attention with an RBF bias in one native kernel: ``(out, lse)``.

    The computation of :func:`xnp.nn.attention.biased_scan_attention` with the bias
    ``spec.bias(q_feats, k_feats, *weights)`` (:class:`xnp.nn.bias.RBFSpec`), for
    ``q`` ``[B, Nq, H, D]``, ``k`` ``[B, Nk, H, D]``, ``v`` ``[B, Nk, H, Dv]`` and
    the key mask ``[B, Nk]``: the output ``[B, Nq, H, Dv]`` and the log-sum-exp of
    each query's biased scores ``[B, H, Nq]`` (+inf, and a zero output, for a query
    with no valid key).  The distances are computed inside the kernel and no
    ``[Nq, Nk]`` matrix is ever stored.  CPU only, float32; callers check
    :func:`enabled` and fall back to the tiled JAX computation elsewhere.
    """
    f32 = jnp.float32
    b, nq, h, _ = q.shape
    operands, attrs = _attention_operands(q, k, v, mask, q_feats, k_feats, spec, weights)
    outs = (
        jax.ShapeDtypeStruct((b, nq, h, v.shape[-1]), f32),
        jax.ShapeDtypeStruct((b, h, nq), f32),
    )
    call = jax.ffi.ffi_call("xnp_rbf_attention", outs, vmap_method="sequential")
    out, lse = call(*operands, **attrs)
    return out.astype(v.dtype), lse


def rbf_attention_bwd(q, k, v, mask, q_feats, k_feats, spec, weights, d_out, lse, delta):
    """Cotangents of :func:`rbf_attention`'s output in one native kernel.

    For the output's cotangent ``d_out`` ``[B, Nq, H, Dv]``, the forward's ``lse``
    ``[B, H, Nq]`` and ``delta = Σ_d d_out · out`` ``[B, H, Nq]``, returns
    ``(dq, dk, dv, dweights)``: the cotangents of ``q``, ``k``, ``v`` and of each
    array of ``weights``.  The scores, bias and softmax are recomputed tile by tile
    (FlashAttention-2) and no ``[Nq, Nk]`` matrix is stored.  The features get no
    cotangent: callers use the tiled JAX backward pass when they need one.  The
    result does not depend on the number of threads.  CPU only, float32.
    """
    f32 = jnp.float32
    h = q.shape[2]
    operands, attrs = _attention_operands(q, k, v, mask, q_feats, k_feats, spec, weights)
    n_space, n_time = operands[8].shape[1], operands[10].shape[1]
    outs = (
        jax.ShapeDtypeStruct(q.shape, f32),
        jax.ShapeDtypeStruct(k.shape, f32),
        jax.ShapeDtypeStruct(v.shape, f32),
        jax.ShapeDtypeStruct((h, n_space), f32),
        jax.ShapeDtypeStruct((h, n_space), f32),
        jax.ShapeDtypeStruct((h, n_time), f32),
        jax.ShapeDtypeStruct((h, n_time), f32),
    )
    call = jax.ffi.ffi_call("xnp_rbf_attention_bwd", outs, vmap_method="sequential")
    dq, dk, dv, das, dbs, dat, dbt = call(
        *operands, d_out.astype(f32), lse.astype(f32), delta.astype(f32), **attrs
    )
    dw = ([das, dbs] if spec.metric != "none" else []) + ([dat, dbt] if spec.temporal else [])
    dweights = [g.astype(w.dtype) for g, w in zip(dw, weights, strict=True)]
    return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), dweights
