"""The documentation builds with Sphinx, warnings as errors, offline.

The build runs in a subprocess on a copy of ``docs/`` (autosummary writes its stub
pages into the source tree, which must stay clean), imports the package for
autodoc and executes nothing else: the docstring examples run as doctests through
pytest's ``--doctest-modules``, not here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
MISSING = "the docs tools are not installed (pip install -e '.[docs]')"


@pytest.fixture(scope="module")
def html(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build the HTML documentation once; return the output folder."""
    for module in ("sphinx", "numpydoc", "sphinx_autosummary_accessors", "myst_parser"):
        pytest.importorskip(module, reason=MISSING)
    tmp = tmp_path_factory.mktemp("docs")
    source = tmp / "docs"
    shutil.copytree(
        DOCS, source, ignore=shutil.ignore_patterns("_build", "generated", "__pycache__")
    )
    out = tmp / "html"
    env = {k: v for k, v in os.environ.items() if k != "XNP_DOCS_INTERSPHINX"}  # stay offline
    command = [
        sys.executable, "-m", "sphinx", "-W", "--keep-going", "-j", "1", "-q", "-b", "html",
        "-d", str(tmp / "doctrees"), str(source), str(out),
    ]  # fmt: skip
    result = subprocess.run(
        command, capture_output=True, text=True, env=env, cwd=tmp, timeout=600, check=False
    )
    assert result.returncode == 0, f"sphinx-build failed:\n{result.stderr[-20_000:]}"
    return out


def test_build_has_no_warnings(html: Path) -> None:
    assert (html / "index.html").is_file()


@pytest.mark.parametrize(
    ("page", "text"),
    [
        ("quickstart.html", "The quickest way to see everything at work"),
        ("user-guide/cli.html", "usage: xnp fit"),  # rendered from xnp.cli.build_parser
        ("benchmarks.html", "Biased Scan Attention vs dense attention"),  # docs/benchmarks.md
        ("api/generated/xarray.Dataset.np.fit.html", "Dataset.np.fit"),  # the accessor
        ("api/generated/xnp.fit.html", "checkpoint_dir"),  # numpydoc parameters
        ("models/bsa-tnp.html", "Biased Scan Attention"),
    ],
)
def test_page_content(html: Path, page: str, text: str) -> None:
    assert text in (html / page).read_text(encoding="utf-8")


def test_docstring_references_resolve(html: Path) -> None:
    """A docstring's reference to the defining module reaches the documented page."""
    page = (html / "api" / "generated" / "xnp.NeuralProcess.html").read_text(encoding="utf-8")
    assert 'href="xnp.fit.html' in page  # ":func:`xnp.api.fit`" points at xnp.fit
