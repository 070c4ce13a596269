"""The layer rules of ``docs/architecture.md``, checked on the source (an AST walk, nothing imported).

Three layers, imports pointing down only:

- **vocabulary** — ``src/hf_lightning/`` outside ``trainer/``: imports neither the facade, nor the
  adapters, nor an engine (lightning, optuna, ray);
- **facade** — ``src/hf_lightning/trainer/`` (and the top-level modules that re-export it): the only part
  of ``src`` that imports ``hf_lightning.adapters``; no engine;
- **engine** — ``adapters/`` (``hf_lightning.adapters``): never imports the facade.

And no module touches another layer's underscore names: no ``from <other layer> import _name``, no
``module._name`` on a module of another layer, and the engine never reaches into the facade's private
attributes or methods (``trainer._x``): it calls the public methods named in ``adapters/protocols.py``.

Exit status 1 lists each violation. ``python tools/check_layers.py --graph`` prints the arrows between the
layers with their number of imports (relative imports inside ``adapters/`` resolved to
``hf_lightning.adapters.*``).
"""

from __future__ import annotations

import ast
import pathlib
import sys

__all__ = ["imported_modules", "layer_graph", "layer_of", "violations"]

ENGINES = {"lightning", "pytorch_lightning", "lightning_fabric", "lightning_utilities", "optuna", "ray"}
FACADE_PACKAGE = "hf_lightning.trainer"
#: top-level modules whose only job is to re-export the facade under transformers' module paths
FACADE_SHIMS = {"hf_lightning.trainer_seq2seq", "hf_lightning.trainer_pt_utils"}
ROOT = pathlib.Path(__file__).resolve().parents[1]


def module_name(path: pathlib.Path, root: pathlib.Path = ROOT) -> str:
    """The dotted name a source file is imported under."""
    rel = path.relative_to(root)
    parts = list(rel.with_suffix("").parts)
    if parts[0] == "src":
        parts = parts[1:]
    elif parts[0] == "adapters":
        parts = ["hf_lightning", *parts]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def layer_of(module: str) -> str | None:
    """'engine', 'facade', 'vocabulary', 'external-engine' or None (a module outside the project)."""
    top = module.split(".")[0]
    if top in ENGINES:
        return "external-engine"
    if top != "hf_lightning":
        return None
    if module == "hf_lightning.adapters" or module.startswith("hf_lightning.adapters."):
        return "engine"
    if module == FACADE_PACKAGE or module.startswith(FACADE_PACKAGE + ".") or module in FACADE_SHIMS:
        return "facade"
    return "vocabulary"


def imported_modules(path: pathlib.Path, root: pathlib.Path = ROOT) -> list[tuple[int, str]]:
    """Every import in ``path``, a relative one resolved to its absolute module: (line, module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [(line, module) for line, module, _ in _imports(tree, _package_of(path, root))]


def _package_of(path: pathlib.Path, root: pathlib.Path) -> list[str]:
    """The dotted parts of the package a relative import in ``path`` starts from."""
    parts = module_name(path, root).split(".")
    return parts if path.name == "__init__.py" else parts[:-1]


def _imports(tree: ast.AST, package: list[str] | None = None) -> list[tuple[int, str, list[str]]]:
    """(line, absolute module, imported names) of each import; relative ones resolved from ``package``
    (``from .x import y`` in ``hf_lightning.adapters`` is ``hf_lightning.adapters.x``)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module, [alias.name for alias in node.names]))
        elif isinstance(node, ast.ImportFrom) and package is not None:
            base = package[: len(package) - (node.level - 1)] if node.level - 1 <= len(package) else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            if module:
                found.append((node.lineno, module, [alias.name for alias in node.names]))
    return found


ALLOWED = {  # importing layer -> layers it may import
    "vocabulary": {"vocabulary"},
    "facade": {"vocabulary", "facade", "engine"},
    "engine": {"vocabulary", "engine", "external-engine"},
}


def facade_private_names(root: pathlib.Path = ROOT) -> set[str]:
    """Underscore methods and attributes the facade defines (``def _x`` or ``self._x = ...``)."""
    names: set[str] = set()
    for path in (root / "src" / "hf_lightning" / "trainer").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _private(node.name):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _private(node.attr):
                names.add(node.attr)
    return names


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def check_file(path: pathlib.Path, root: pathlib.Path, facade_private: set[str]) -> list[str]:
    """The violations of one source file."""
    here = layer_of(module_name(path, root))
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    where = path.relative_to(root)
    problems = []
    module_aliases: dict[str, str] = {}
    for line, module, names in _imports(tree, _package_of(path, root)):
        there = layer_of(module)
        if there is None or here is None:
            continue
        if there not in ALLOWED[here]:
            problems.append(f"{where}:{line}: the {here} imports {module} ({there}): imports point down only")
        if there != here:
            problems += [
                f"{where}:{line}: imports the private name {n} of {module} ({there})"
                for n in names
                if _private(n)
            ]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                module_aliases[alias.asname or alias.name.split(".")[0]] = alias.name
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not _private(node.attr):
            continue
        base = node.value
        if isinstance(base, ast.Name) and base.id in module_aliases:
            there = layer_of(module_aliases[base.id])
            if there not in (None, here):
                problems.append(
                    f"{where}:{node.lineno}: touches {base.id}.{node.attr}, private to the {there}"
                )
        elif here == "engine" and node.attr in facade_private and not _is_self(base):
            problems.append(
                f"{where}:{node.lineno}: reaches into the facade's private {node.attr} "
                "(call a public method of adapters/protocols.py instead)"
            )
    return problems


def _is_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def violations(root: pathlib.Path = ROOT) -> list[str]:
    """Every violation in the tree under ``root``."""
    facade_private = facade_private_names(root)
    files = sorted((root / "src" / "hf_lightning").rglob("*.py")) + sorted((root / "adapters").rglob("*.py"))
    return [problem for path in files for problem in check_file(path, root, facade_private)]


def layer_graph(root: pathlib.Path = ROOT) -> dict[tuple[str, str], int]:
    """{(importing layer, imported layer): number of imports} over the tree, relative imports resolved
    (the picture an import-graph tool draws of the three layers and the engines)."""
    edges: dict[tuple[str, str], int] = {}
    files = sorted((root / "src" / "hf_lightning").rglob("*.py")) + sorted((root / "adapters").rglob("*.py"))
    for path in files:
        here = layer_of(module_name(path, root))
        for _, module in imported_modules(path, root):
            there = layer_of(module)
            if here is not None and there is not None:
                edges[(here, there)] = edges.get((here, there), 0) + 1
    return edges


if __name__ == "__main__":
    if sys.argv[1:] == ["--graph"]:
        for (here, there), count in sorted(layer_graph().items()):
            print(f"{here:>10} -> {there:<15} {count:4d} imports")
        sys.exit(0)
    found = violations()
    print("\n".join(found) if found else "layers: ok")
    sys.exit(1 if found else 0)
