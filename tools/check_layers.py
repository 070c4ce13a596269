"""The architectural rule of DESIGN.md, checked: src/hf_lightning never imports an engine directly.

The vocabulary and the facade speak HF; only adapters/ imports lightning, optuna or ray. And the
adapters never import the facade (imports point down only). Exit status 1 lists each violation.
"""

from __future__ import annotations

import ast
import pathlib
import sys

ENGINES = {"lightning", "pytorch_lightning", "optuna", "ray"}
FACADE = {"hf_lightning.trainer", "hf_lightning.trainer.seq2seq", "hf_lightning.trainer.hpsearch"}
ROOT = pathlib.Path(__file__).resolve().parents[1]


def imported_modules(path: pathlib.Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


def violations() -> list[str]:
    problems = []
    for path in sorted((ROOT / "src" / "hf_lightning").rglob("*.py")):
        for line, module in imported_modules(path):
            if module.split(".")[0] in ENGINES:
                problems.append(
                    f"{path.relative_to(ROOT)}:{line}: imports {module} (engines belong in adapters/)"
                )
    for path in sorted((ROOT / "adapters").rglob("*.py")):
        for line, module in imported_modules(path):
            if any(module == f or module.startswith(f + ".") for f in FACADE):
                problems.append(
                    f"{path.relative_to(ROOT)}:{line}: imports the facade {module} (imports point down)"
                )
    return problems


if __name__ == "__main__":
    found = violations()
    print("\n".join(found) if found else "layers: ok")
    sys.exit(1 if found else 0)
