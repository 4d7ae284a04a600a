"""``python -m xnp``: the ``xnp`` command (see :mod:`xnp.cli`)."""

import sys

from xnp.cli import main

if __name__ == "__main__":
    sys.exit(main())
