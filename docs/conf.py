"""Sphinx configuration of the xnp documentation.

Sphinx + numpydoc + sphinx-autosummary-accessors is the Pangeo/xarray standard (xarray, cf-xarray):
it renders numpydoc docstrings and ``Dataset.np.*`` accessor pages, which mkdocs does not.

Build (warnings are errors; nothing is fetched from the network)::

    sphinx-build -W --keep-going -b html docs docs/_build/html

``XNP_DOCS_INTERSPHINX=1`` links to the xarray, numpy and Python docs through
intersphinx; it downloads their inventories, so it is off by default (CI may be
offline).
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Any

import sphinx_autosummary_accessors

import xnp

sys.path.insert(0, str(Path(__file__).parent / "_ext"))

# -- project --------------------------------------------------------------------------------
project = "xnp"
author = "xnp developers"
copyright = "xnp developers"
release = xnp.__version__
version = ".".join(release.split(".")[:2])

# -- extensions -----------------------------------------------------------------------------
extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "numpydoc",
    "sphinx_autosummary_accessors",
    "myst_parser",
    "xnp_docs",  # _ext/xnp_docs.py: `xnp` command help, aliases of re-exported names
]
if os.environ.get("XNP_DOCS_INTERSPHINX") == "1":
    extensions.append("sphinx.ext.intersphinx")
    intersphinx_mapping = {
        "python": ("https://docs.python.org/3", None),
        "numpy": ("https://numpy.org/doc/stable", None),
        "xarray": ("https://docs.xarray.dev/en/stable", None),
        "dask": ("https://docs.dask.org/en/stable", None),
    }

templates_path = ["_templates", sphinx_autosummary_accessors.templates_path]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", ".gitignore"]

# autodoc / autosummary: import the package, execute nothing else (the docstring
# examples run as doctests under pytest, not here)
autosummary_generate = True
autosummary_imported_members = False
autodoc_typehints = "none"  # numpydoc's Parameters sections give the types
autodoc_member_order = "bysource"
autodoc_default_options = {"exclude-members": "__init__, __new__, __post_init__"}
add_module_names = False

# numpydoc
numpydoc_show_class_members = False  # our class template lists the members itself
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

# Cross-references: internal references (``xnp.*``) must resolve, so the build
# catches stale names in docstrings; references to other projects cannot resolve
# without intersphinx and are not checked.
nitpicky = True
nitpick_ignore_regex = [(r"py:.*", r"(?!xnp\b).*")]

# myst (docs/benchmarks.md and any other Markdown page)
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]

# -- HTML -----------------------------------------------------------------------------------
try:
    importlib.import_module("pydata_sphinx_theme")
except ImportError:  # the default theme ships with Sphinx
    html_theme = "alabaster"
    html_theme_options: dict[str, Any] = {"description": "Transformer neural processes for xarray"}
else:
    html_theme = "pydata_sphinx_theme"
    html_theme_options = {
        "github_url": "https://github.com/xnp-dev/xnp",
        "navigation_with_keys": False,
        "show_toc_level": 2,
        "navbar_align": "left",
    }
    # pages without sub-pages need no left sidebar
    html_sidebars = {page: [] for page in ("index", "quickstart", "conventions", "benchmarks")}
html_title = f"xnp {release}"
html_static_path = ["_static"]
html_css_files = ["xnp.css"]
html_show_sourcelink = False
html_copy_source = False
