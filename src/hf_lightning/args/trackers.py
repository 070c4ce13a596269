"""The reporting integrations ``report_to`` names, once: which packages each needs and its pip line.

``available_integrations`` answers ``report_to="all"`` in transformers' order (``args/normalize.py``);
the engine's loggers (``hf_lightning.adapters.loggers``) ask :func:`installed` and :func:`pip_package`
before building a Lightning logger, so both agree on what "installed" means.
"""

from __future__ import annotations

import importlib.util
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # building the arguments imports no torch (hf_lightning.plan does)
    from hf_lightning.plan.reporting import TrackerSettings

__all__ = ["INTEGRATIONS", "available_integrations", "installed", "pip_package", "tracker_settings"]

INTEGRATIONS: dict[str, tuple[tuple[tuple[str, ...], ...], str | None]] = {
    "comet_ml": ((("comet_ml",),), "comet-ml"),
    "dagshub": ((("dagshub",), ("mlflow",)), "dagshub"),
    "dvclive": ((("dvclive",),), "dvclive"),
    "mlflow": ((("mlflow",),), "mlflow"),
    "neptune": ((("neptune",),), "neptune"),
    "tensorboard": ((("tensorboard", "tensorboardX"),), "tensorboard"),
    "wandb": ((("wandb",),), "wandb"),
    "codecarbon": ((("codecarbon",),), "codecarbon"),
    "clearml": ((("clearml",),), "clearml"),
    "swanlab": ((("swanlab",),), "swanlab"),
    "trackio": ((("trackio",),), "trackio"),
    "csv": ((), None),
}
"""name -> (modules it needs: each inner tuple is alternatives, any one suffices; its pip package), in
transformers' order of ``report_to="all"``. ``csv`` (Lightning's ``CSVLogger``) needs nothing and is not
part of ``"all"``."""

_ALL = tuple(name for name in INTEGRATIONS if name != "csv")


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def installed(name: str) -> bool:
    """Whether the packages integration ``name`` needs can be imported (every group, one of each)."""
    needs, _ = INTEGRATIONS[name]
    return all(any(_has(module) for module in group) for group in needs)


def pip_package(name: str) -> str | None:
    """What ``pip install`` brings integration ``name``."""
    return INTEGRATIONS[name][1]


def available_integrations() -> list[str]:
    """Reporting integrations whose packages are installed, in transformers' order (``report_to="all"``)."""
    mlflow_off = os.getenv("DISABLE_MLFLOW_INTEGRATION", "").upper() == "TRUE"
    found = [name for name in _ALL if installed(name) and not (mlflow_off and name in ("mlflow", "dagshub"))]
    if _has("azureml") and _has("azureml.core") and not _has("mlflow"):
        found.insert(0, "azure_ml")
    return found


def tracker_settings(args: Any) -> TrackerSettings:
    """The :class:`TrackerSettings` of ``args``: what the Lightning loggers of ``report_to`` are built from."""
    from hf_lightning.plan.reporting import TrackerSettings

    return TrackerSettings(
        report_to=args.report_to,
        output_dir=args.output_dir if args.output_dir is not None else "trainer_output",
        run_name=args.run_name,
        project=getattr(args, "project", None) or "huggingface",
    )
