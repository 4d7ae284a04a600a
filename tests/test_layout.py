"""The package's layout rules, checked on its source (the layers are import-linter's).

`lint-imports` (run by .ci/run, contracts in pyproject.toml) keeps the layers;
these tests keep the rest of the house rules: small modules, unique module
names, no private name crossing a module boundary, no import of the top-level
package from inside it, a docstring on every package, and a cheap, lazy import.
"""

from __future__ import annotations

import ast
import collections
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "xnp"
MODULES = sorted(PACKAGE.rglob("*.py"))
MAX_LINES = 500


def relative(path: Path) -> str:
    return str(path.relative_to(PACKAGE.parent))


def imports(path: Path) -> list[ast.Import | ast.ImportFrom]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]


def test_modules_stay_small():
    long = {relative(p): n for p in MODULES if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them by concern): {long}"


def test_module_file_names_are_unique():
    names = collections.defaultdict(list)
    for path in MODULES:
        if path.name not in ("__init__.py", "__main__.py"):
            names[path.name].append(relative(path))
    clashes = {name: where for name, where in names.items() if len(where) > 1}
    assert not clashes, f"modules that share a file name: {clashes}"


def test_nothing_imports_the_top_level_package():
    # `import xnp` or `from xnp import ...` inside xnp runs the package's own
    # __init__ from below (an import cycle); import the module that holds the name
    found = []
    for path in MODULES:
        for node in imports(path):
            if isinstance(node, ast.Import):
                found += [relative(path) for a in node.names if a.name == "xnp"]
            elif node.level == 0 and node.module == "xnp":
                found.append(relative(path))
    assert not found, f"modules importing the top-level package: {sorted(set(found))}"


def test_private_names_do_not_cross_modules():
    found = []
    for path in MODULES:
        for node in imports(path):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("xnp"):
                private = [
                    a.name
                    for a in node.names
                    if a.name.startswith("_") and not a.name.endswith("__")
                ]
                found += [f"{relative(path)}: {node.module}.{n}" for n in private]
    assert not found, f"private names imported across modules: {found}"


def test_every_package_says_what_it_holds():
    missing = [
        relative(p)
        for p in PACKAGE.rglob("__init__.py")
        if not ast.get_docstring(ast.parse(p.read_text()))
    ]
    assert not missing, f"packages without a docstring: {missing}"


def run_python(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip()


def test_import_of_the_geometry_loads_neither_xarray_nor_flax():
    loaded = run_python(
        "import sys, xnp.geo, xnp.units, xnp.arrays\n"
        "print(sorted(m for m in ('xarray', 'flax', 'optax', 'dask') if m in sys.modules))"
    )
    assert loaded == "[]", f"import xnp.geo loaded {loaded}"


@pytest.mark.parametrize("order", ["xnp first", "xarray first"])
def test_the_accessor_is_registered_whatever_the_import_order(order):
    first, second = ("xnp", "xarray") if order == "xnp first" else ("xarray", "xnp")
    out = run_python(
        f"import {first}, {second}\nimport xarray as xr\n"
        "print(type(xr.Dataset().np).__name__, type(xr.DataArray([1.0]).np).__name__)"
    )
    assert out == "NPDatasetAccessor NPDataArrayAccessor"


def test_the_public_names_resolve_lazily():
    import xnp

    for name in xnp.__all__:
        assert getattr(xnp, name) is not None, name
    for function in (xnp.pretrained, xnp.evaluate, xnp.predict, xnp.fit, xnp.load):
        assert callable(function), function
    assert xnp.validation.__name__ == "xnp.scoring.cross_validation"
    assert set(xnp.__all__) <= set(dir(xnp))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = xnp.nope


def test_the_layers_hold():
    lint = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    if not Path(lint).exists():
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    result = subprocess.run(
        [lint, "--config", str(PACKAGE.parent / "pyproject.toml")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=PACKAGE.parent,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-5000:]


def test_the_command_line_answers_help_and_usage_errors_without_jax_or_xarray():
    # `xnp --help` and a usage error must come at once: nothing heavy is imported
    loaded = run_python(
        "import sys, io\n"
        "from contextlib import redirect_stderr, redirect_stdout\n"
        "from xnp.cli import main\n"
        "with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):\n"
        "    assert main(['--help']) == 0\n"
        "    assert main(['fit', 'data.nc']) == 2\n"
        "    assert main(['predict', 'm', 'c', '--out', 'p.nc', '--chunks', 'lat']) == 2\n"
        "print(sorted(m for m in ('xarray', 'jax', 'flax', 'dask', 'scipy') if m in sys.modules))"
    )
    assert loaded == "[]", f"xnp --help loaded {loaded}"
