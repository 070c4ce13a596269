"""DeepSpeed ZeRO-2 and ZeRO-3 training on 2 CPU processes (DeepSpeed's CPU accelerator, gloo).

``tests/fsdp_worker.py`` trains the same tiny GPT-2 for 4 optimizer steps with GA 2 under DDP and
under ``deepspeed`` configs whose values are ``"auto"`` (filled from the arguments, as transformers
fills them); DeepSpeed must train exactly as DDP does.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests._ddp import run_ranks

pytestmark = [pytest.mark.slow, pytest.mark.ddp]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("deepspeed")
    modes = ("ddp", "zero2", "zero3")
    for mode in modes:
        run_ranks("tests/fsdp_worker.py", [str(out), mode], world=2)
    found = {m: [torch.load(out / f"{m}_rank{r}.pt", weights_only=True) for r in range(2)] for m in modes}
    return {**found, "folder": out}


@pytest.mark.parametrize("mode", ["zero2", "zero3"])
def test_deepspeed_trains_as_ddp(runs, mode: str) -> None:
    """Weights (1e-6), logged losses and gradient norms (DeepSpeed's own, clipped inside its step) equal DDP's."""
    ddp = runs["ddp"][0]
    for record in runs[mode]:
        for name, value in ddp["state"].items():
            torch.testing.assert_close(record["state"][name], value, rtol=0, atol=1e-6, msg=name)
    assert runs[mode][0]["losses"] == pytest.approx(ddp["losses"], abs=1e-6)
    assert runs[mode][0]["grad_norms"] == pytest.approx(ddp["grad_norms"], rel=1e-5)


def test_zero3_partitions_the_parameters(runs) -> None:
    """Under ZeRO-3 each rank holds half of the parameter elements; under ZeRO-2 every rank holds all."""
    whole = runs["ddp"][0]["local_numel"]
    assert [record["local_numel"] for record in runs["zero3"]] == [whole // 2, whole // 2]
    assert [record["local_numel"] for record in runs["zero2"]] == [whole, whole]


def test_save_model_under_zero3_writes_full_weights(runs) -> None:
    """``save_model()`` gathers ZeRO-3's partitions: ``from_pretrained`` loads DDP's weights."""
    from transformers import GPT2LMHeadModel

    loaded = GPT2LMHeadModel.from_pretrained(runs["folder"] / "zero3_saved").state_dict()
    for name, value in runs["ddp"][0]["state"].items():
        torch.testing.assert_close(loaded[name], value, rtol=0, atol=1e-6, msg=name)
