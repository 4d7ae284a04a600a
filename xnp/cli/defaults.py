"""Default settings of the commands, which their help texts show.

Kept apart from the commands so that building the parser (``xnp --help``)
imports nothing but this and :mod:`argparse`.
"""

__all__ = [
    "DEMO_FINE_TUNE_LEARNING_RATE",
    "DEMO_FINE_TUNE_STEPS",
    "DEMO_LEARNING_RATE",
    "DEMO_MAX_POINTS",
    "DEMO_MODEL",
    "DEMO_START",
    "DEMO_STEPS",
]

#: Settings of ``xnp demo`` (small enough to finish in about a minute on two CPU cores).
#: By default it fine-tunes the pretrained ``DEMO_START``; ``--from-scratch`` trains
#: ``DEMO_MODEL`` from a random initialisation instead.
DEMO_START = "gp-sphere-cluster-bank"
DEMO_FINE_TUNE_STEPS = 60
DEMO_FINE_TUNE_LEARNING_RATE = 1e-4
DEMO_STEPS = 400
DEMO_MODEL = "bsa-tnp-tiny"
DEMO_MAX_POINTS = 128
DEMO_LEARNING_RATE = 1e-2
