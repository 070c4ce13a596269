"""accelerate's process-wide state is set up as transformers sets it up (``args/accelerate_state.py``).

Code written for transformers reads accelerate's state directly: ``set_seed(seed, device_specific=True)``
(TRL's GRPO, RLOO and distillation trainers), ``AcceleratorState().deepspeed_plugin`` (TRL's
reference-model sync), ``accelerate.logging.get_logger`` (every TRL trainer). The arguments set up the
``PartialState``, the Trainer the ``AcceleratorState``: compared with transformers' Trainer here, and
under a 2-process launch, where the process group is open once the arguments exist.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import transformers
from accelerate.logging import get_logger
from accelerate.state import AcceleratorState, PartialState
from accelerate.utils import set_seed

from hf_lightning import Trainer, TrainingArguments
from tests._ddp import run_ranks
from tests.tiny import tiny_gpt2

WORKER = str(Path(__file__).resolve().parents[1] / "accelerate_state_worker.py")


def _state() -> tuple:
    state = AcceleratorState()
    return (
        state.num_processes,
        state.process_index,
        state.mixed_precision,
        state.distributed_type,
        state.device,
    )


@pytest.fixture(autouse=True)
def _fresh_state():
    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


def test_arguments_set_up_partial_state_so_accelerate_logging_works(tmp_path, caplog):
    """After TrainingArguments alone, accelerate's logger logs (it raises without a state)."""
    TrainingArguments(str(tmp_path), use_cpu=True, report_to="none")
    assert PartialState().device.type == "cpu"
    with caplog.at_level(logging.INFO, logger="tests.accelerate"):
        get_logger("tests.accelerate").info("before any Trainer")
    assert "before any Trainer" in caplog.text


@pytest.mark.parametrize("precision", [{}, {"bf16": True}])
def test_trainer_state_is_transformers_state(tmp_path, precision):
    """After the Trainer is built, AcceleratorState answers as after transformers' Trainer, and
    set_seed(device_specific=True) seeds as there."""
    seen = []
    for trainer_cls, args_cls in ((transformers.Trainer, transformers.TrainingArguments),
                                  (Trainer, TrainingArguments)):  # fmt: skip
        AcceleratorState._reset_state(reset_partial_state=True)
        args = args_cls(str(tmp_path / trainer_cls.__module__), use_cpu=True, report_to="none", **precision)
        trainer_cls(model=tiny_gpt2(), args=args)
        set_seed(7, device_specific=True)
        seen.append((_state(), AcceleratorState().deepspeed_plugin))
    assert seen[1] == seen[0]
    assert seen[1][0][2] == ("bf16" if precision else "no")


def test_later_trainer_with_another_precision_takes_over(tmp_path):
    """A second Trainer in the process with other precision: accelerate's state follows it (transformers'
    Accelerator would raise 'AcceleratorState has already been initialized')."""
    first = TrainingArguments(str(tmp_path / "a"), use_cpu=True, report_to="none")
    second = TrainingArguments(str(tmp_path / "b"), use_cpu=True, report_to="none", bf16=True)
    Trainer(model=tiny_gpt2(), args=first)
    assert AcceleratorState().mixed_precision == "no"
    Trainer(model=tiny_gpt2(), args=second)
    assert AcceleratorState().mixed_precision == "bf16"


def test_use_configured_state_keeps_the_state_set_up_before(tmp_path):
    """accelerator_config={'use_configured_state': True}: the arguments keep the PartialState made before."""
    PartialState(cpu=True)
    PartialState._shared_state["made_by_the_script"] = True
    TrainingArguments(str(tmp_path), use_cpu=True, report_to="none",
                      accelerator_config={"use_configured_state": True})  # fmt: skip
    assert PartialState._shared_state.get("made_by_the_script") is True
    TrainingArguments(str(tmp_path), use_cpu=True, report_to="none")  # without: made anew
    assert PartialState._shared_state and "made_by_the_script" not in PartialState._shared_state


def test_two_processes_share_accelerate_state(tmp_path):
    """Under a 2-process launch: the group is open once the arguments exist (as transformers' arguments
    open it), accelerate's state names each rank, set_seed(device_specific=True) adds the rank, and
    Lightning trains on the same group."""
    run_ranks(WORKER, [str(tmp_path)])
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text(encoding="utf-8")) for r in range(2)]
    for rank, seen in enumerate(ranks):
        assert seen["group_after_args"] is True
        assert seen["partial"] == [2, rank, "MULTI_CPU"]
        assert seen["state"] == [2, rank, "no", "MULTI_CPU"]
        assert seen["seed"] == 100 + rank
        assert seen["steps"] == 2 and seen["rank"] == rank


def test_use_configured_state_after_a_reset_needs_a_new_state(tmp_path):
    """As transformers: after accelerate's state is reset, use_configured_state=True raises until something
    (here accelerate's own Accelerator) sets a state up again, earlier arguments notwithstanding."""
    from accelerate import Accelerator

    TrainingArguments(str(tmp_path), use_cpu=True, report_to="none")
    AcceleratorState._reset_state(reset_partial_state=True)
    with pytest.raises(ValueError, match="use_configured_state"):
        TrainingArguments(str(tmp_path), use_cpu=True, report_to="none",
                          accelerator_config={"use_configured_state": True})  # fmt: skip
    Accelerator(cpu=True)
    TrainingArguments(str(tmp_path), use_cpu=True, report_to="none",
                      accelerator_config={"use_configured_state": True})  # fmt: skip
    assert AcceleratorState().initialized
