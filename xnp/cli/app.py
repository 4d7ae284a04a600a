"""The ``xnp`` command's entry point: parse, run one command, map its outcome to an exit status.

Exit status: 0 on success; 1 when the command fails at run time (missing or
unreadable file, unknown variable, incompatible model, ...), after printing
``xnp: error: <message>`` on stderr without a traceback (``--debug`` shows it);
2 for an invalid command line (unknown option, bad option value, or a
:class:`~xnp.errors.UsageError`); 130 when interrupted.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Sequence

from xnp.cli.console import log_to_stderr, one_line
from xnp.cli.parser import build_parser
from xnp.errors import UsageError, XnpError

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``xnp`` command with ``argv`` (default: ``sys.argv[1:]``).

    Parameters
    ----------
    argv : sequence of str, optional
        The arguments after the program name.

    Returns
    -------
    int
        The exit status: 0 success, 1 the command failed, 2 invalid command line,
        130 interrupted.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # --help, --version or a usage error
        return int(exit_.code or 0) if not isinstance(exit_.code, str) else 2
    if getattr(args, "resume", False) and not args.checkpoint_dir:
        args._parser.print_usage(sys.stderr)
        print("xnp: error: --resume needs --checkpoint-dir", file=sys.stderr)
        return 2
    quiet = bool(getattr(args, "quiet", False))
    if quiet and hasattr(args, "progress"):
        args.progress = False
    verbose = bool(getattr(args, "verbose", False))
    with log_to_stderr(quiet, verbose), contextlib.ExitStack() as files:
        try:
            return int(args.func(args, files))
        except UsageError as err:
            if args.debug:
                raise
            args._parser.print_usage(sys.stderr)
            print(f"xnp: error: {one_line(err)}", file=sys.stderr)
            return 2
        except (XnpError, OSError) as err:
            if args.debug:
                raise
            print(f"xnp: error: {one_line(err)}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print("xnp: interrupted", file=sys.stderr)
            return 130
