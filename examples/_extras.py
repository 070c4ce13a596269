"""What an example needs beyond hf-lightning itself, and the install line when it is missing.

Each example calls ``require(extra, *modules)`` before importing any optional package, so a missing
one stops it with the ``pip install "hf-lightning[extra]"`` line the README names for it (exit status 1)
instead of a ``ModuleNotFoundError`` traceback.
"""

from __future__ import annotations

import importlib.util
import sys

__all__ = ["require"]


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # a dotted name whose parent package is missing
        return False


def require(extra: str, *modules: str) -> None:
    """Exit naming ``pip install "hf-lightning[extra]"`` unless every one of ``modules`` is importable."""
    missing = [module for module in modules if not _installed(module)]
    if missing:
        script = sys.argv[0] if sys.argv and sys.argv[0] else "this example"
        raise SystemExit(
            f"{script} needs {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} not "
            f'installed: pip install "hf-lightning[{extra}]" (or, in a clone, pip install -e ".[{extra}]")'
        )
