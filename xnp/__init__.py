"""xnp: transformer neural processes for xarray."""

from xnp.errors import XnpError, XnpWarning
from xnp.points import Points

__version__ = "0.1.0.dev0"

__all__ = ["Points", "XnpError", "XnpWarning", "__version__"]
