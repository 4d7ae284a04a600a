"""Default settings of the commands, which their help texts show.

Kept apart from the commands so that building the parser (``xnp --help``)
imports nothing but this and :mod:`argparse`.
"""

__all__ = ["DEMO_LEARNING_RATE", "DEMO_MAX_POINTS", "DEMO_MODEL", "DEMO_STEPS"]

#: Settings of ``xnp demo`` (small enough to finish in about a minute on two CPU cores).
DEMO_STEPS = 400
DEMO_MODEL = "bsa-tnp-tiny"
DEMO_MAX_POINTS = 128
DEMO_LEARNING_RATE = 1e-2
