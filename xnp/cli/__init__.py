"""The ``xnp`` command: fit, predict, evaluate and a self-contained demo from the shell.

::

    xnp demo [--out DIR] [--steps N] [--data FILE --variable NAME] [--model MODEL]
    xnp fit DATA VARIABLE --out MODEL_DIR [--model NAME] [--steps N] ...
    xnp predict MODEL CONTEXT [TARGETS] --out FILE [--time T] [--chunks lat=64,lon=64] ...
    xnp evaluate PRED TRUTH [--dim DIMS] [--out FILE]

``app`` (:func:`main`: exit statuses), ``console`` (messages on stderr),
``parser`` (:func:`build_parser`), ``options`` (option values), ``checks`` (what
the commands check before any work), one module per command (``fit_command``,
``predict_command``, ``evaluate_command``, ``demo``) and ``tables``.  Files are
read and written by :mod:`xnp.storage`.

This is the top layer: it may import anything in xnp, but imports the models,
:mod:`xnp.api`, JAX and flax only inside the command functions, so that
``xnp --help`` stays cheap.

Examples
--------
>>> main(["--version"])  # doctest: +ELLIPSIS
xnp ...
0
"""

from xnp.cli.app import main
from xnp.cli.parser import build_parser
from xnp.cli.tables import format_table

__all__ = ["build_parser", "format_table", "main"]
