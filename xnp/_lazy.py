"""Lazy imports: public names resolved on first use (PEP 562), and a post-import hook.

``import xnp.geo`` should not load the training loop, xarray or flax; yet
``xnp.fit`` and ``from xnp.train import TrainConfig`` should work.  A package
lists where each public name lives, and :func:`exports` gives it the module
``__getattr__`` and ``__dir__`` that import the defining module on first use.
:func:`after_import` runs a callback once a module is imported (xnp registers
its xarray accessor when xarray arrives).

This module sits at the bottom of the package and imports nothing of xnp.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["after_import", "exports"]


def exports(
    package: str, names: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``, resolving ``names`` lazily.

    Parameters
    ----------
    package : str
        The package's ``__name__``.
    names : mapping of str to str
        Public name to where it lives: ``"module:attribute"``, or ``"module"`` for
        a module itself.  Module paths are absolute.
    namespace : dict
        The package's ``globals()``: a resolved name is stored there, so each is
        imported once.

    Examples
    --------
    >>> ns = {}
    >>> getattr_, dir_ = exports("pkg", {"sqrt": "math:sqrt", "json": "json"}, ns)
    >>> getattr_("sqrt")(4.0), getattr_("json").__name__, "sqrt" in ns
    (2.0, 'json', True)
    """

    def __getattr__(name: str) -> Any:
        where = names.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, attribute = where.partition(":")
        value = importlib.import_module(module)
        if attribute:
            value = getattr(value, attribute)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(names))

    return __getattr__, __dir__


class _AfterImport(importlib.abc.MetaPathFinder):
    """Run a callback once a module has been imported (the accessor waits for xarray)."""

    def __init__(self, module: str, callback: Callable[[], None]) -> None:
        self.module, self.callback = module, callback

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.module:
            return None
        sys.meta_path.remove(self)  # once; and let the other finders find the module
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _Loader(spec.loader, self.callback)
        return spec


class _Loader(importlib.abc.Loader):
    """A loader that runs ``callback`` after ``inner`` has executed the module."""

    def __init__(self, inner: importlib.abc.Loader, callback: Callable[[], None]) -> None:
        self.inner, self.callback = inner, callback

    def create_module(self, spec: Any) -> Any:
        return self.inner.create_module(spec)

    def exec_module(self, module: Any) -> None:
        module.__spec__.loader = module.__loader__ = self.inner  # leave no trace
        self.inner.exec_module(module)
        self.callback()

    def __getattr__(self, name: str) -> Any:  # resources and the rest: the real loader's
        return getattr(self.inner, name)


def after_import(module: str, callback: Callable[[], None]) -> None:
    """Call ``callback()`` once ``module`` is imported: now if it is, else right after.

    ``import xnp`` registers the ``np`` accessor this way: xarray is imported only
    by code that uses it (``import xnp.geo`` does not), and the accessor is there
    as soon as it is.

    Examples
    --------
    >>> calls = []
    >>> after_import("json", lambda: calls.append("json"))
    >>> calls
    ['json']
    """
    if module in sys.modules:
        callback()
        return
    if not any(isinstance(f, _AfterImport) and f.module == module for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(module, callback))
