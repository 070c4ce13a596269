"""``TrainingArguments(auto_find_batch_size=True)``: out-of-memory errors in train() shrink the batch and retry.

The out-of-memory error is simulated: a model whose forward raises ``torch.OutOfMemoryError`` (or a
RuntimeError saying "out of memory") when its batch holds more than ``limit`` samples. transformers
retries through accelerate's ``find_executable_batch_size``, which multiplies the batch size by 0.9
(rounding down) after each failure: 8 → 7 → 6 → ...
"""

from __future__ import annotations

import json
import logging

import pytest
import torch

from hf_lightning import Trainer, TrainingArguments
from tests.tiny import RegressionModel, regression_data


class OutOfMemoryAbove(RegressionModel):
    """A regression model that runs out of memory (simulated) on batches larger than ``limit``."""

    def __init__(
        self,
        limit: int,
        error: type[Exception] = torch.OutOfMemoryError,
        message: str = "CUDA out of memory. Tried to allocate 2.00 GiB (simulated)",
    ) -> None:
        super().__init__()
        self.limit, self.error, self.message = limit, error, message
        self.batch_sizes: list[int] = []

    def forward(self, input_x: torch.Tensor, labels: torch.Tensor | None = None):
        self.batch_sizes.append(len(input_x))
        if len(input_x) > self.limit:
            raise self.error(self.message)
        return super().forward(input_x, labels)


def make_trainer(tmp_path, model: torch.nn.Module, **overrides) -> Trainer:
    kwargs = dict(
        use_cpu=True,
        report_to="none",
        disable_tqdm=True,
        save_strategy="no",
        max_steps=2,
        per_device_train_batch_size=8,
        auto_find_batch_size=True,
        learning_rate=0.1,
    )
    kwargs.update(overrides)
    return Trainer(
        model=model, args=TrainingArguments(str(tmp_path), **kwargs), train_dataset=regression_data(64)
    )


@pytest.mark.parametrize("error", [torch.OutOfMemoryError, RuntimeError])
def test_out_of_memory_retries_with_ninety_percent(tmp_path, error: type[Exception]) -> None:
    """Batch sizes 8, 7, 6 fail, 5 fits: each retry takes int(0.9 × size), and training completes."""
    model = OutOfMemoryAbove(limit=5, error=error)
    trainer = make_trainer(tmp_path, model)
    output = trainer.train()
    assert output.global_step == 2
    assert model.batch_sizes == [8, 7, 6, 5, 5]  # one failed forward per size, then 2 steps at 5
    assert trainer._train_batch_size == 5 and trainer.state.train_batch_size == 5


def test_each_retry_is_logged(tmp_path, caplog: pytest.LogCaptureFixture) -> None:
    """Every retry logs a warning naming the failed and the next batch size."""
    trainer = make_trainer(tmp_path, OutOfMemoryAbove(limit=6))
    with caplog.at_level(logging.WARNING, logger="hf_lightning.trainer_utils_memory"):
        trainer.train()
    retries = [r.getMessage() for r in caplog.records if "auto_find_batch_size" in r.getMessage()]
    assert len(retries) == 2
    assert "batch_size=8; retrying with 7" in retries[0] and "batch_size=7; retrying with 6" in retries[1]


def test_without_auto_find_the_error_propagates(tmp_path) -> None:
    """With auto_find_batch_size=False the out-of-memory error reaches the caller unchanged."""
    trainer = make_trainer(tmp_path, OutOfMemoryAbove(limit=5), auto_find_batch_size=False)
    with pytest.raises(torch.OutOfMemoryError):
        trainer.train()


def test_other_errors_are_not_retried(tmp_path) -> None:
    """A RuntimeError that is not about memory is raised at once, without a retry."""
    model = OutOfMemoryAbove(limit=0, error=RuntimeError, message="shape mismatch")
    with pytest.raises(RuntimeError, match="shape mismatch"):
        make_trainer(tmp_path, model).train()
    assert model.batch_sizes == [8]


def test_no_batch_size_fits_raises_a_clear_error(tmp_path) -> None:
    """When even a batch of 1 runs out of memory, the error names auto_find_batch_size."""
    model = OutOfMemoryAbove(limit=0)
    with pytest.raises(RuntimeError, match=r"auto_find_batch_size.*starting_batch_size=8.*down to 1"):
        make_trainer(tmp_path, model).train()
    assert model.batch_sizes == [8, 7, 6, 5, 4, 3, 2, 1]


def test_found_batch_size_is_saved_and_restored_on_resume(tmp_path) -> None:
    """The checkpoint records the batch size found; resuming with auto_find_batch_size starts from it."""
    first = make_trainer(tmp_path, OutOfMemoryAbove(limit=6), save_strategy="steps", save_steps=2)
    first.train()
    state = json.loads((tmp_path / "checkpoint-2" / "trainer_state.json").read_text())
    assert state["train_batch_size"] == 6
    model = OutOfMemoryAbove(limit=6)
    resumed = make_trainer(tmp_path, model, max_steps=3)
    resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))
    assert model.batch_sizes == [6]  # no retry: the resumed run starts at the size already found
