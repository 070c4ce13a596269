"""The optional packages behind ``optim`` names, and the ``ImportError`` that names the extra to install.

Each package is imported only when its optimizer is asked for. A missing one raises ``ImportError``
naming the ``optim`` value, the package and the ``pip install "hf-lightning[extra]"`` line
(``docs/training.md`` lists every name with its extra).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
from types import ModuleType

__all__ = [
    "OPTIONAL_PACKAGES",
    "MissingOptionalPackageError",
    "package_at_least",
    "package_version",
    "require_package",
]

OPTIONAL_PACKAGES: dict[str, tuple[str, str]] = {
    # import name: (the pip install line, what it is)
    "bitsandbytes": ('pip install "hf-lightning[bitsandbytes]"', "bitsandbytes"),
    "galore_torch": ('pip install "hf-lightning[galore]"', "galore-torch"),
    "apollo_torch": ('pip install "hf-lightning[apollo]"', "apollo-torch"),
    "schedulefree": ('pip install "hf-lightning[schedulefree]"', "schedulefree"),
    "torchao": ('pip install "hf-lightning[torchao]"', "torchao"),
    "lomo_optim": ('pip install "hf-lightning[lomo]"', "lomo-optim"),
    "grokadamw": ('pip install "hf-lightning[grokadamw]"', "grokadamw"),
    "optimi": ('pip install "hf-lightning[optimi]"', "torch-optimi"),
    "liger_kernel": ('pip install "hf-lightning[liger]" (it needs a CUDA GPU with Triton)', "liger-kernel"),
    "torchdistx": (
        "install torchdistx from source (github.com/pytorch/torchdistx; it is not on PyPI)",
        "torchdistx",
    ),
    "torch_xla": ("install torch_xla (a TPU/XLA machine)", "torch_xla"),
    "torch_npu": ("install torch_npu (an Ascend NPU machine)", "torch_npu"),
}
"""Every optional package an ``optim`` name (or ``use_liger_kernel``) imports, with how to install it."""


class MissingOptionalPackageError(ImportError, ValueError):
    """An optional package an argument asked for is missing.

    An ``ImportError``; also a ``ValueError``, the type transformers raises for some ``optim`` names
    (``grokadamw``, ``adamw_anyprecision``, ...), so a script catching either keeps working.
    """


def _distribution(module: str) -> str:
    return OPTIONAL_PACKAGES[module][1]


def _release(version: str) -> tuple[int, ...]:
    """The leading numeric release of a version string: "0.11.0.dev1+cpu" -> (0, 11, 0)."""
    numbers = []
    for part in version.split("+")[0].split("."):
        digits = "".join(c for c in part if c.isdigit()) if part[:1].isdigit() else ""
        if not digits:
            break
        numbers.append(int(digits))
    return tuple(numbers)


def package_version(module: str) -> str | None:
    """The installed version of ``module``'s distribution, or None when it is not known."""
    try:
        return importlib.metadata.version(_distribution(module))
    except importlib.metadata.PackageNotFoundError:
        return getattr(sys.modules.get(module), "__version__", None)


def package_at_least(module: str, version: str) -> bool:
    """Whether ``module``'s installed distribution is ``version`` or newer (True when it is unknown)."""
    found = package_version(module)
    return found is None or _release(found) >= _release(version)


def require_package(module: str, wanted_by: str, min_version: str | None = None) -> ModuleType:
    """Import ``module`` or raise ``ImportError`` naming ``wanted_by``, the package and its extra.

    ``wanted_by`` is what asked for it, e.g. ``"TrainingArguments(optim='lomo')"``. ``module`` may name a
    submodule of a listed package (``"bitsandbytes.optim"``): it is imported itself, as ``from
    bitsandbytes.optim import AdamW`` would.
    """
    package = module.partition(".")[0]
    install, distribution = OPTIONAL_PACKAGES[package]
    try:
        imported = importlib.import_module(module)
    except ImportError as error:
        raise MissingOptionalPackageError(
            f"`{wanted_by}` needs the `{distribution}` package, which is not installed: {install}"
        ) from error
    if min_version is not None:
        if not package_at_least(package, min_version):
            found = package_version(package)
            raise MissingOptionalPackageError(
                f"`{wanted_by}` needs `{distribution}>={min_version}` (found {found}): {install}"
            )
    return imported
