"""DeepSpeed ``optimizer``/``scheduler`` sections: hf_lightning's Trainer against transformers' under DeepSpeed.

Both run ``tests/deepspeed_sections_worker.py`` in one process (ZeRO-2 on DeepSpeed's CPU accelerator,
gloo): transformers lets DeepSpeed build what the sections describe; hf_lightning builds the same
objects and hands them to DeepSpeed (``adapters/deepspeed_sections.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests._ddp import run_ranks

pytestmark = [pytest.mark.slow, pytest.mark.ddp]
SECTIONS = ("none", "optimizer", "both", "lora", "retry")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Any]:
    out: Path = tmp_path_factory.mktemp("deepspeed_sections")
    found = {}
    for sections in SECTIONS:
        for library in ("transformers", "hf_lightning"):
            run_ranks("tests/deepspeed_sections_worker.py", [str(out), library, sections], world=1)
            found[library, sections] = torch.load(out / f"{library}_{sections}.pt", weights_only=False)
    return found


@pytest.mark.parametrize("sections", SECTIONS)
def test_weights_and_losses_equal_transformers_under_deepspeed(runs, sections: str) -> None:
    """Without a ``gradient_clipping`` key both clip at 1.0; with the sections' AdamW and WarmupDecayLR (all
    "auto"), the weights after 3 steps equal transformers' within 1e-5 and the logged losses are the same.
    So do a LoRA adapter's (an empty weight-decay group DeepSpeed drops before the scheduler is built) and
    an ``auto_find_batch_size`` retry's (a fresh optimizer for the second attempt, at batch size 3)."""
    ours, theirs = runs["hf_lightning", sections], runs["transformers", sections]
    assert ours["train_batch_size"] == theirs["train_batch_size"] == (3 if sections == "retry" else 2)
    assert ours["losses"] == pytest.approx(theirs["losses"], abs=1e-5)
    for name, value in theirs["state"].items():
        torch.testing.assert_close(ours["state"][name], value, rtol=0, atol=1e-5, msg=name)


@pytest.mark.parametrize("sections", SECTIONS)
def test_learning_rates_logged_as_transformers_logs_them(runs, sections: str) -> None:
    """With a section the engine steps the schedule inside its step, so the rate logged is the one after the
    update (transformers' behaviour); without one, the one the update used."""
    assert runs["hf_lightning", sections]["learning_rates"] == pytest.approx(
        runs["transformers", sections]["learning_rates"], abs=1e-12
    )


def test_the_sections_build_deepspeeds_objects(runs) -> None:
    """``trainer.optimizer`` is the section's AdamW and ``trainer.lr_scheduler`` DeepSpeed's WarmupDecayLR."""
    assert runs["hf_lightning", "both"]["optimizer"] == "AdamW"
    assert (
        runs["hf_lightning", "both"]["scheduler"]
        == runs["transformers", "both"]["scheduler"]
        == "WarmupDecayLR"
    )
    assert runs["hf_lightning", "optimizer"]["scheduler"] == "LambdaLR"
