"""Safe, atomic model directories: JSON metadata plus safetensors weights.

Nothing here uses pickle: a directory holds JSON files and ``.safetensors`` files
(raw little-endian arrays with a JSON header), so loading can never execute code.

Writes are atomic.  A directory is first written in full next to its target
(``.name.tmp-XXXX``), every file and the directory fsync'ed, and then swapped in
with one ``renameat2(RENAME_EXCHANGE)`` call where Linux offers it (or two renames
elsewhere), so an interrupted save leaves the previous version intact.

Training checkpoints (:class:`CheckpointDir`) are a folder of ``step-XXXXXXXX``
directories and a ``LATEST`` pointer file replaced atomically after each one is
complete; older steps are pruned afterwards.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
import re
import secrets
import shutil
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import jax
import numpy as np
import safetensors.numpy

from xnp.errors import CheckpointError

__all__ = [
    "CheckpointDir",
    "arrays_to_tree",
    "atomic_directory",
    "read_arrays",
    "read_json",
    "tree_to_arrays",
    "write_arrays",
    "write_json",
]

_STEP = re.compile(r"^step-(\d{8})$")


def _key_name(key: Any) -> str | None:
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
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    if not by_path:
        return [f"{i:05d}" for i in range(len(leaves))]
    return [".".join(n for n in map(_key_name, p) if n is not None) for p, _ in leaves]


def _expand(path: str | os.PathLike) -> Path:
    """``path`` as a :class:`~pathlib.Path`, with a leading ``~`` or ``~user`` expanded."""
    return Path(path).expanduser()


def _write_file(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):  # not every platform can open a directory
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_arrays(path: Path, arrays: Mapping[str, np.ndarray]) -> str:
    """Write arrays to a safetensors file (fsync'ed); return its SHA-256."""
    data = safetensors.numpy.save({k: np.asarray(v, order="C") for k, v in arrays.items()})
    _write_file(path, data)
    return hashlib.sha256(data).hexdigest()


def read_arrays(path: Path, sha256: str | None = None) -> dict[str, np.ndarray]:
    """Read a safetensors file, checking its SHA-256 when given."""
    path = _expand(path)
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
    _write_file(path, (json.dumps(blob, indent=2, allow_nan=False) + "\n").encode())


def read_json(path: Path) -> dict[str, Any]:
    """Read a JSON object, raising :class:`~xnp.errors.CheckpointError` on any problem."""
    path = _expand(path)
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
    target = _expand(path)
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
    target = _expand(path)
    check_replaceable(target, marker, recognise)
    with _writing(target):
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = _make_temp_dir(target.parent, prefix=f".{target.name}.tmp-")
    try:
        yield tmp
        with _writing(target):
            _fsync_dir(tmp)
            if not target.exists():
                os.rename(tmp, target)
            elif _exchange(tmp, target):
                pass  # tmp now holds the previous version; removed below
            else:
                old = target.with_name(f".{target.name}.old-{os.getpid()}")
                os.rename(target, old)
                os.rename(tmp, target)
                shutil.rmtree(old, ignore_errors=True)
            _fsync_dir(target.parent)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def _writing(target: Path) -> Iterator[None]:
    """Turn an :class:`OSError` of xnp's own file operations into a :class:`CheckpointError`."""
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


def _nearest_existing(path: Path) -> Path:
    """``path`` or its closest ancestor that exists."""
    while not path.exists() and path.parent != path:
        path = path.parent
    return path


class CheckpointDir:
    """A folder of training checkpoints, ``step-XXXXXXXX`` plus a ``LATEST`` pointer.

    Parameters
    ----------
    path : path-like
        The folder (created on first write; a leading ``~`` is expanded).
    keep : int
        How many of the most recent checkpoints to keep.

    Examples
    --------
    >>> import tempfile
    >>> ckpt = CheckpointDir(tempfile.mkdtemp(), keep=1)
    >>> for step in (10, 20):
    ...     with ckpt.write(step) as tmp:
    ...         _ = (tmp / "config.json").write_text("{}")
    >>> ckpt.latest().name, [p.name for p in ckpt.steps()]
    ('step-00000020', ['step-00000020'])
    """

    def __init__(self, path: str | os.PathLike, keep: int = 2, *, writable: bool = True):
        self.path = _expand(path)
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise CheckpointError(f"keep must be a positive integer; got {keep!r}.")
        self.keep = keep
        self._written: list[str] = []
        if writable:
            self._check_writable()

    def _check_writable(self) -> None:
        """Refuse, before any training, a folder that checkpoints cannot be written to."""
        where = self.path
        if where.exists() and not where.is_dir():
            raise CheckpointError(
                f"The checkpoint folder {where} exists and is not a directory; choose another "
                "checkpoint_dir."
            )
        if (where / "config.json").is_file():
            raise CheckpointError(
                f"{where} holds a saved model (config.json), not training checkpoints; choose "
                "another checkpoint_dir (a new or empty folder, or that of the run to resume)."
            )
        base = _nearest_existing(where)
        if not base.is_dir():
            raise CheckpointError(
                f"Cannot create the checkpoint folder {where}: {base} is a file, not a "
                "directory. Choose another checkpoint_dir."
            )
        if not os.access(base, os.W_OK | os.X_OK):
            raise CheckpointError(
                f"Cannot write checkpoints to {where}: {base} is not writable. Choose another "
                "checkpoint_dir."
            )

    def steps(self) -> list[Path]:
        """Complete checkpoint directories, oldest first."""
        if not self.path.is_dir():
            return []
        found = [p for p in self.path.iterdir() if _STEP.match(p.name) and p.is_dir()]
        return sorted((p for p in found if (p / "config.json").is_file()), key=lambda p: p.name)

    def latest(self) -> Path | None:
        """The most recent complete checkpoint (from ``LATEST``, else the highest step)."""
        pointer = self.path / "LATEST"
        with contextlib.suppress(OSError, ValueError):
            candidate = self.path / pointer.read_text().strip()
            inside = candidate == self.path / candidate.name  # no path out of the folder
            if inside and _STEP.match(candidate.name) and (candidate / "config.json").is_file():
                return candidate
        steps = self.steps()
        return steps[-1] if steps else None

    @contextlib.contextmanager
    def write(self, step: int) -> Iterator[Path]:
        """Write checkpoint ``step`` atomically, point ``LATEST`` at it, prune old ones.

        Only the last ``keep`` checkpoints written through this object survive, so
        steps left over from an earlier run in the same folder are removed too.
        """
        with _writing(self.path):
            self.path.mkdir(parents=True, exist_ok=True)
        name = f"step-{step:08d}"
        with atomic_directory(self.path / name) as tmp:
            yield tmp
        pointer = self.path / ".LATEST.tmp"
        with _writing(self.path / "LATEST"):
            _write_file(pointer, name.encode())
            os.replace(pointer, self.path / "LATEST")
            _fsync_dir(self.path)
        self._written = [n for n in self._written if n != name] + [name]
        survivors = set(self._written[-self.keep :])
        for old in self.path.iterdir():
            stale_tmp = old.name.startswith(".step-") and ".tmp-" in old.name
            # a step folder without config.json was never a checkpoint (they are written
            # whole): someone else's, left alone
            ours = _STEP.match(old.name) and (old / "config.json").is_file()
            if stale_tmp or (ours and old.name not in survivors):
                shutil.rmtree(old, ignore_errors=True)
