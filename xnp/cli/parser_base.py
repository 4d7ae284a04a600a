"""Pieces every ``xnp`` subcommand parser shares.

The epilog, the help formatter, the common options and the lazy command runner.

Standard library only, so that building the parser imports neither xarray nor JAX.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from typing import Any

__all__ = ["EPILOG", "Formatter", "add_common", "command"]

EPILOG = """\
exit status:
  0    success
  1    the command failed (missing or unreadable file, unknown variable,
       incompatible model, ...); the reason is printed as "xnp: error: ..."
  2    invalid command line (unknown option or bad option value)
  130  interrupted
"""


def command(module: str, name: str) -> Callable[..., int]:
    """The function ``name`` of ``xnp.cli.<module>``, imported when the command runs.

    The command modules import xarray and the data layer; ``xnp --help`` and an
    invalid command line need none of it.
    """

    def run(*args: Any) -> int:
        return getattr(importlib.import_module(f"xnp.cli.{module}"), name)(*args)

    run.__name__ = name
    return run


class Formatter(argparse.HelpFormatter):
    """Wraps one-paragraph descriptions; keeps multi-line text (the epilog) as written."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=32)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def add_common(sub: argparse.ArgumentParser) -> None:
    """Options every subcommand has (they may also come before the subcommand)."""
    group = sub.add_argument_group("output and logging")
    group.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=argparse.SUPPRESS,
        help="print only warnings and errors (and no progress bars)",
    )
    group.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=argparse.SUPPRESS,
        help="print debugging messages",
    )
    group.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help="show the full traceback when a command fails",
    )
