"""Small Sphinx extension for the xnp documentation.

* ``.. xnp-help:: [COMMAND]`` renders the ``--help`` text of the ``xnp`` command (or
  of one subcommand) from :func:`xnp.cli.build_parser`, so the command-line page
  never drifts from the code.
* Re-exported names resolve: xnp documents each object once, under the name users
  type (``xnp.fit``, ``xnp.NeuralProcess``), while docstrings may refer to it by its
  defining module (``xnp.api.fit.fit``, ``xnp.neural_process.NeuralProcess``) or by a short
  name relative to the current module.  A reference that Sphinx cannot resolve is
  imported and, when it is the same Python object as a documented one, pointed at
  that page.
"""

from __future__ import annotations

import argparse
import importlib
import os
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

_MISSING = object()


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    for action in parser._actions:  # argparse keeps subparsers in a private action
        if isinstance(action, argparse._SubParsersAction) and name in action.choices:
            return action.choices[name]
    raise ValueError(f"the xnp command has no subcommand {name!r}")


class XnpHelp(SphinxDirective):
    """``.. xnp-help:: fit``: the help text of ``xnp fit`` as a literal block."""

    optional_arguments = 1
    has_content = False

    def run(self) -> list[nodes.Node]:
        """The help text, wrapped at 72 columns."""
        from xnp.cli import build_parser

        parser = build_parser()
        if self.arguments:
            parser = _subparser(parser, self.arguments[0])
        previous = os.environ.get("COLUMNS")
        os.environ["COLUMNS"] = "74"  # argparse wraps at COLUMNS - 2: fits the page
        try:
            text = parser.format_help()
        finally:
            if previous is None:
                del os.environ["COLUMNS"]
            else:
                os.environ["COLUMNS"] = previous
        block = nodes.literal_block(text, text)
        block["language"] = "text"
        return [block]


def _import(name: str) -> Any:
    """The object a dotted name refers to (module attributes included), or _MISSING."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for part in parts[i:]:
                obj = getattr(obj, part)
        except AttributeError:
            return _MISSING
        return obj
    return _MISSING


def _documented(app: Sphinx) -> dict[int, str]:
    """``id(object) -> documented name`` of every xnp object with a page (cached)."""
    cache = getattr(app, "_xnp_documented", None)
    if cache is None:
        cache = {}
        for name in sorted(app.env.domains["py"].objects, key=len, reverse=True):
            if name.startswith("xnp."):
                obj = _import(name)
                if obj is not _MISSING:
                    cache[id(obj)] = name  # shortest documented name wins
        app._xnp_documented = cache
    return cache


def _resolve_alias(app: Sphinx, env: Any, node: Any, contnode: nodes.Node) -> Any:
    if node.get("refdomain") != "py":
        return None
    target = str(node.get("reftarget", ""))
    module, cls = node.get("py:module"), node.get("py:class")
    candidates = [target]
    if module:
        candidates.insert(0, f"{module}.{target}")
        if cls:
            candidates.insert(0, f"{module}.{cls}.{target}")
    for name in candidates:
        if not name.startswith("xnp."):
            continue
        obj = _import(name)
        if obj is _MISSING or isinstance(obj, int | float | str | bool | type(None)):
            continue  # small constants are shared objects: identity says nothing
        documented = _documented(app).get(id(obj))
        if documented is not None:
            return env.domains["py"].resolve_xref(
                env, node["refdoc"], app.builder, node["reftype"], documented, node, contnode
            )
    return None


def setup(app: Sphinx) -> dict[str, Any]:
    """Register the directive and the event handlers."""
    app.add_directive("xnp-help", XnpHelp)
    app.connect("missing-reference", _resolve_alias)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
