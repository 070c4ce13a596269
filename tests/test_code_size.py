"""Code size limits of the product (docs/architecture.md): modules under 400 lines, functions under 60."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = (ROOT / "src", ROOT / "adapters")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def _sources() -> list[Path]:
    return sorted(path for package in PACKAGES for path in package.rglob("*.py"))


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def long_modules() -> list[str]:
    """``"path: N lines"`` for every module over the limit."""
    found = []
    for path in _sources():
        count = len(path.read_text(encoding="utf-8").splitlines())
        if count > MAX_MODULE_LINES:
            found.append(f"{_name(path)}: {count} lines")
    return found


def long_functions() -> list[str]:
    """``"path:line name: N lines"`` for every function (or method) over the limit, decorators excluded."""
    found = []
    for path in _sources():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                count = (node.end_lineno or node.lineno) - node.lineno + 1
                if count > MAX_FUNCTION_LINES:
                    found.append(f"{_name(path)}:{node.lineno} {node.name}: {count} lines")
    return found


def test_the_walk_finds_the_product_sources():
    """The size checks read the files of src/ and adapters/ (an empty walk would pass vacuously)."""
    names = {_name(path) for path in _sources()}
    assert "src/hf_lightning/trainer/trainer.py" in names and "adapters/plan.py" in names


def test_no_module_over_400_lines():
    """Every module of src/ and adapters/ has at most 400 lines; split the ones named."""
    assert long_modules() == []


def test_no_function_over_60_lines():
    """Every function of src/ and adapters/ has at most 60 lines; split the ones named."""
    assert long_functions() == []
