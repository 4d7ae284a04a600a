"""Safe, atomic files: JSON metadata, safetensors arrays, whole directories.

Nothing here uses pickle: a model directory holds JSON files and ``.safetensors``
files (raw little-endian arrays with a JSON header), so loading can never execute
code.

Writes are atomic.  A directory is first written in full next to its target
(``.name.tmp-XXXX``), every file and the directory fsync'ed, and then swapped in
with one ``renameat2(RENAME_EXCHANGE)`` call where Linux offers it (or two renames
elsewhere), so an interrupted save leaves the previous version intact; a single
file (:func:`atomic_file`) is written beside its target and renamed into place.

This module sits at the bottom of the package: it imports only :mod:`xnp.errors`.
Saved models (:mod:`xnp.saved_model`), training checkpoints
(:mod:`xnp.train.checkpoints`) and the command line's outputs are built on it.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
import secrets
import shutil
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import safetensors.numpy

from xnp.errors import CheckpointError

__all__ = [
    "arrays_to_tree",
    "atomic_directory",
    "atomic_file",
    "check_replaceable",
    "expand",
    "fsync_dir",
    "os_errors_as",
    "read_arrays",
    "read_json",
    "tree_to_arrays",
    "write_arrays",
    "write_bytes",
    "write_json",
]


def _key_name(key: Any) -> str | None:
    import jax  # (here: the CLI checks its files without loading JAX)

    if isinstance(key, jax.tree_util.DictKey):
        return str(key.key)
    if isinstance(key, jax.tree_util.SequenceKey):
        return str(key.idx)
    if isinstance(key, jax.tree_util.GetAttrKey):
        return None if key.name == "value" else key.name
    if isinstance(key, jax.tree_util.FlattenedIndexKey):
        return str(key.key)
    return str(key)


def tree_to_arrays(tree: Any, *, by_path: bool = True) -> dict[str, np.ndarray]:
    """Flatten a pytree of arrays into ``{name: numpy array}``.

    With ``by_path`` the names are the dotted paths (``"blocks.0.attn.q.kernel"``);
    otherwise they are the zero-padded leaf indices (for optimiser states, whose
    structure is rebuilt from a template).

    Examples
    --------
    >>> sorted(tree_to_arrays({"a": np.ones(2), "b": [np.zeros(1)]}))
    ['a', 'b.0']
    >>> sorted(tree_to_arrays((np.ones(2), np.zeros(())), by_path=False))
    ['00000', '00001']
    """
    import jax  # (here: the CLI checks its files without loading JAX)

    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    out: dict[str, np.ndarray] = {}
    for i, (path, leaf) in enumerate(leaves):
        if by_path:
            name = ".".join(n for n in map(_key_name, path) if n is not None)
        else:
            name = f"{i:05d}"
        if name in out:
            raise CheckpointError(f"Two arrays of the tree share the name {name!r}.")
        out[name] = np.asarray(jax.device_get(leaf))
    return out


def arrays_to_tree(template: Any, arrays: Mapping[str, np.ndarray], *, by_path: bool = True):
    """Rebuild a pytree shaped like ``template`` from :func:`tree_to_arrays` output.

    Every leaf must be present with the template's shape and dtype; anything else
    raises :class:`~xnp.errors.CheckpointError` naming the offending array.

    Examples
    --------
    >>> template = {"a": np.zeros(2), "b": [np.zeros(1)]}
    >>> arrays_to_tree(template, {"a": np.ones(2), "b.0": np.ones(1)})["b"][0].tolist()
    [1.0]
    """
    import jax  # (here: the CLI checks its files without loading JAX)

    names = tree_to_arrays_names(template, by_path=by_path)
    leaves, treedef = jax.tree.flatten(template)
    missing = [n for n in names if n not in arrays]
    extra = sorted(set(arrays) - set(names))
    if missing or extra:
        raise CheckpointError(
            f"The stored arrays do not match the model: missing {missing[:5]}"
            f"{' ...' if len(missing) > 5 else ''}, unexpected {extra[:5]}"
            f"{' ...' if len(extra) > 5 else ''}."
        )
    out = []
    for name, leaf in zip(names, leaves, strict=True):
        value = arrays[name]
        if tuple(value.shape) != tuple(leaf.shape) or np.dtype(value.dtype) != np.dtype(
            leaf.dtype
        ):
            raise CheckpointError(
                f"Array {name!r} has shape {tuple(value.shape)} and dtype {value.dtype}; the "
                f"model expects {tuple(leaf.shape)} and {np.dtype(leaf.dtype)}."
            )
        out.append(value)
    return jax.tree.unflatten(treedef, out)


def tree_to_arrays_names(tree: Any, *, by_path: bool = True) -> list[str]:
    """Names :func:`tree_to_arrays` gives the leaves of ``tree``, in leaf order."""
    import jax  # (here: the CLI checks its files without loading JAX)

    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    if not by_path:
        return [f"{i:05d}" for i in range(len(leaves))]
    return [".".join(n for n in map(_key_name, p) if n is not None) for p, _ in leaves]


def expand(path: str | os.PathLike) -> Path:
    """``path`` as a :class:`~pathlib.Path`, with a leading ``~`` or ``~user`` expanded.

    Examples
    --------
    >>> expand("~/model") == Path.home() / "model"
    True
    """
    return Path(path).expanduser()


def write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` and fsync it (not atomic: see :func:`atomic_file`)."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def fsync_dir(path: Path) -> None:
    """Flush a directory's entries to disk (where the platform can open a directory)."""
    with contextlib.suppress(OSError):  # not every platform can open a directory
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_arrays(path: Path, arrays: Mapping[str, np.ndarray]) -> str:
    """Write arrays to a safetensors file (fsync'ed); return its SHA-256."""
    data = safetensors.numpy.save({k: np.asarray(v, order="C") for k, v in arrays.items()})
    write_bytes(path, data)
    return hashlib.sha256(data).hexdigest()


def read_arrays(path: Path, sha256: str | None = None) -> dict[str, np.ndarray]:
    """Read a safetensors file, checking its SHA-256 when given."""
    path = expand(path)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise CheckpointError(f"Cannot read {path}: {err}.") from err
    if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
        raise CheckpointError(
            f"{path} is corrupted: its checksum does not match the one recorded when it was saved."
        )
    try:
        return dict(safetensors.numpy.load(data))
    except Exception as err:  # safetensors raises its own error types
        raise CheckpointError(f"{path} is not a valid safetensors file: {err}.") from err


def write_json(path: Path, blob: Mapping[str, Any]) -> None:
    """Write JSON (strict: no NaN) to ``path`` and fsync it."""
    write_bytes(path, (json.dumps(blob, indent=2, allow_nan=False) + "\n").encode())


def read_json(path: Path) -> dict[str, Any]:
    """Read a JSON object, raising :class:`~xnp.errors.CheckpointError` on any problem."""
    path = expand(path)
    try:
        blob = json.loads(path.read_text())
    except FileNotFoundError as err:
        raise CheckpointError(f"{path} is missing: not an xnp model directory?") from err
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{path} cannot be read as JSON: {err}.") from err
    if not isinstance(blob, dict):
        raise CheckpointError(f"{path} does not hold a JSON object.")
    return blob


def _make_temp_dir(parent: Path, prefix: str) -> Path:
    """Create a new, uniquely named directory in ``parent`` and return its path.

    Unlike :func:`tempfile.mkdtemp`, which always creates mode ``0o700``, the
    directory is made with ``mkdir(path, 0o777)``, so it gets the permissions (and
    default ACLs) any directory created under the current umask gets: a model
    saved by one user stays readable to the colleagues the umask lets in.  Reading
    the umask is not needed (changing it to read it would race with other threads).
    """
    for _ in range(100):
        candidate = parent / f"{prefix}{secrets.token_hex(4)}"
        try:
            os.mkdir(candidate, 0o777)
        except FileExistsError:
            continue
        return candidate
    raise FileExistsError(f"No free temporary directory name {prefix}XXXXXXXX in {parent}.")


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux ``renameat2(RENAME_EXCHANGE)``); False if unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    result = renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange)
    return result == 0


def check_replaceable(
    path: str | os.PathLike,
    marker: str | tuple[str, ...],
    recognise: Callable[[Path], bool] | None = None,
) -> None:
    """Raise :class:`CheckpointError` unless ``path`` is absent, empty or holds ``marker``.

    ``marker`` is a file name, or several (any one will do): what
    :func:`atomic_directory` requires before it replaces an existing directory.
    ``recognise(path)``, when given, must also say the directory is one of ours
    (e.g. that its ``config.json`` is an xnp model's, not any project's).
    """
    target = expand(path)
    markers = (marker,) if isinstance(marker, str) else tuple(marker)
    if not target.exists():
        return
    if any((target / m).is_file() for m in markers) and (recognise is None or recognise(target)):
        return
    if not target.is_dir() or any(target.iterdir()):
        found = [m for m in markers if (target / m).is_file()]
        why = f"its {found[0]} is not xnp's" if found else f"no {' or '.join(markers)}"
        raise CheckpointError(
            f"{target} exists and is not an xnp directory ({why}); refusing to replace it. "
            "Choose another path or remove it."
        )


@contextlib.contextmanager
def atomic_directory(
    path: str | os.PathLike,
    *,
    marker: str | tuple[str, ...] = "config.json",
    recognise: Callable[[Path], bool] | None = None,
) -> Iterator[Path]:
    """Write a directory atomically: yield a temporary directory, then swap it in.

    The caller writes every file into the yielded directory.  When the block ends
    without an error the directory replaces ``path`` in one step; an existing
    ``path`` is replaced only if it holds ``marker`` (or one of several) and, if
    given, ``recognise(path)`` is true (so a directory that is not an xnp one is
    never deleted).  On error the temporary
    directory is removed and ``path`` is untouched.

    A leading ``~`` in ``path`` is expanded to the home directory.  The directory
    gets the permissions of a plain ``mkdir`` under the current umask (e.g. ``0o755``
    under the usual umask ``022``), not the private ``0o700`` of a temporary one.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> with atomic_directory(root / "model") as tmp:
    ...     _ = (tmp / "config.json").write_text("{}")
    >>> sorted(p.name for p in (root / "model").iterdir())
    ['config.json']
    """
    target = expand(path)
    check_replaceable(target, marker, recognise)
    with os_errors_as(target):
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = _make_temp_dir(target.parent, prefix=f".{target.name}.tmp-")
    try:
        yield tmp
        with os_errors_as(target):
            fsync_dir(tmp)
            if not target.exists():
                os.rename(tmp, target)
            elif _exchange(tmp, target):
                pass  # tmp now holds the previous version; removed below
            else:
                old = target.with_name(f".{target.name}.old-{os.getpid()}")
                os.rename(target, old)
                os.rename(tmp, target)
                shutil.rmtree(old, ignore_errors=True)
            fsync_dir(target.parent)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def os_errors_as(target: Path) -> Iterator[None]:
    """Turn an :class:`OSError` of xnp's own file operations into a :class:`CheckpointError`.

    The message names ``target`` and how to fix the usual causes (a read-only or
    full disk, a file in the way of a folder).
    """
    try:
        yield
    except CheckpointError:
        raise
    except OSError as err:
        raise CheckpointError(
            f"Cannot write {target}: {err.strerror or err}"
            f"{f' ({err.filename})' if err.filename else ''}. Choose a path in a writable "
            "directory (not below a file), with free space."
        ) from err


@contextlib.contextmanager
def atomic_file(target: str | os.PathLike) -> Iterator[Path]:
    """A temporary path beside ``target``, renamed to it when the block ends without error.

    An interrupted write never leaves a truncated file under the requested name.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "a.txt"
    >>> with atomic_file(out) as tmp:
    ...     _ = tmp.write_text("done")
    >>> out.read_text()
    'done'
    """
    target = expand(target)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
