"""A plain Lightning user under FSDP: ``to_lightning(args)``'s strategy with ``FSDP1Module`` or ``FSDP2Module``.

Each run is 2 gloo processes of ``tests/fsdp_lightning_user_worker.py`` (a ``lightning.Trainer`` built from
``plan.trainer_kwargs``, SGD, GA 2 through ``AccumulationWindows``, 3 optimizer steps).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests._ddp import run_ranks

pytestmark = [pytest.mark.slow, pytest.mark.ddp]


def _run(out: Path, module: str, version: int) -> list[dict[str, Any]]:
    run_ranks("tests/fsdp_lightning_user_worker.py", [str(out), module, str(version)], world=2)
    return [json.loads((out / f"{module}_{version}_rank{rank}.json").read_text()) for rank in range(2)]


@pytest.fixture(scope="module")
def ddp(tmp_path_factory: pytest.TempPathFactory) -> dict[str, float]:
    return _run(tmp_path_factory.mktemp("ddp"), "HFModule", 0)[0]["weights"]


@pytest.mark.parametrize(("module", "version"), [("FSDP1Module", 1), ("FSDP2Module", 2)])
def test_fsdp_module_trains_as_hf_module_under_ddp(tmp_path, ddp, module: str, version: int) -> None:
    """The plan's FSDP strategy with ``FSDP1Module``/``FSDP2Module`` (built from the same arguments) reaches
    the weights ``HFModule`` reaches under DDP, gathered on both ranks."""
    for record in _run(tmp_path, module, version):
        for name, value in ddp.items():
            assert record["weights"][name] == pytest.approx(value, rel=1e-5, abs=1e-5), name


def test_hf_module_under_fsdp1_says_to_use_fsdp1_module(tmp_path) -> None:
    """A plain ``HFModule`` would clip by the norm of its own shards under FSDP1: it refuses, naming the form."""
    for record in _run(tmp_path, "HFModule", 1):
        assert "use `hf_lightning.adapters.FSDP1Module`" in record["error"]
