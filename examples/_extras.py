"""What an example needs beyond hf-lightning itself, and the install line when it is missing.

Each example calls ``require(extra, *modules)`` before importing any optional package, so a missing
one stops it with the ``pip install "hf-lightning[extra]"`` line the README names for it (exit status 1)
instead of a ``ModuleNotFoundError`` traceback.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

__all__ = ["require"]


def _installed(module: str) -> bool:
    """Whether ``module`` is there. A dotted name is imported (finding it imports its parents): a module
    that is missing says so; one whose import fails for another reason raises that error, unhidden."""
    if importlib.util.find_spec(module.split(".")[0]) is None:
        return False
    if "." not in module:
        return True
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        parts = module.split(".")
        if exc.name in {".".join(parts[: i + 1]) for i in range(len(parts))}:
            return False
        raise
    return True


def require(extra: str, *modules: str) -> None:
    """Exit naming ``pip install "hf-lightning[extra]"`` unless every one of ``modules`` is importable."""
    missing = [module for module in modules if not _installed(module)]
    if missing:
        script = sys.argv[0] if sys.argv and sys.argv[0] else "this example"
        raise SystemExit(
            f"{script} needs {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} not "
            f'installed: pip install "hf-lightning[{extra}]" (or, in a clone, pip install -e ".[{extra}]")'
        )
