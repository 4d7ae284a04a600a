"""The version of xnp (one place; the package and every module read it from here)."""

__version__ = "0.1.0.dev0"
