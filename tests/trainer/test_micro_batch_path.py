"""The path of one micro-batch (docs/architecture.md, "The path of one batch"), measured on a real run.

From ``HFModule.training_step`` down to the backward a reader passes the module, the run object, the
Trainer's per-batch methods (``trainer/steps.py``, which calls the loss rule of ``loss.py``) and the
accelerator: the engine calls the facade once (``TrainingRun.train_micro_batch``) and the facade calls the
engine once (``accelerator.backward`` -> ``HFModule.manual_backward``).
"""

from __future__ import annotations

import pathlib
import sys

import hf_lightning
from hf_lightning.adapters.module import HFModule
from tests.trainer.test_trainer_parts import make_trainer

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROJECT = (ROOT / "src" / "hf_lightning", ROOT / "adapters")


def _project_file(filename: str) -> str | None:
    path = pathlib.Path(filename).resolve()
    for base in PROJECT:
        if path.is_relative_to(base):
            return str(path.relative_to(ROOT))
    return None


def _stack_at_backward(tmp_path, monkeypatch, **arguments) -> list[str]:
    """The project files on the call stack when the first micro-batch's backward runs, outermost first,
    from ``HFModule.training_step`` on (consecutive frames of one file counted once)."""
    seen: list[list[str]] = []
    backward = HFModule.manual_backward

    def recording(self, loss, *args, **kwargs):
        if not seen:
            frames, frame = [], sys._getframe()
            while frame is not None:
                frames.append(frame)
                if frame.f_code is HFModule.training_step.__code__:
                    break
                frame = frame.f_back
            files = [_project_file(f.f_code.co_filename) for f in reversed(frames)]
            path: list[str] = []
            for name in files:
                if name is not None and (not path or path[-1] != name):
                    path.append(name)
            seen.append(path)
        return backward(self, loss, *args, **kwargs)

    monkeypatch.setattr(HFModule, "manual_backward", recording)
    make_trainer(tmp_path, **arguments).train()
    return seen[0]


def test_one_micro_batch_crosses_once_each_way_in_at_most_five_files(tmp_path, monkeypatch):
    path = _stack_at_backward(tmp_path, monkeypatch, gradient_accumulation_steps=2, max_steps=1)
    assert path == [
        "adapters/module.py",  # HFModule.training_step
        "src/hf_lightning/trainer/run.py",  # TrainingRun.train_micro_batch: the one call into the facade
        "src/hf_lightning/trainer/steps.py",  # Trainer.training_step (compute_loss -> loss.py returned)
        "adapters/accelerator.py",  # accelerator.backward -> HFModule.manual_backward (recorded here): the
    ]  # one call back into the engine
    assert len({*path, "src/hf_lightning/loss.py"}) <= 5


def test_a_training_step_override_is_what_the_run_calls(tmp_path, monkeypatch):
    """The path goes through a subclass's ``training_step`` when it has one (its file is on the stack)."""

    class Counting(hf_lightning.Trainer):
        calls = 0

        def training_step(self, model, inputs, num_items_in_batch=None):
            Counting.calls += 1
            return super().training_step(model, inputs, num_items_in_batch)

    path = _stack_at_backward(tmp_path, monkeypatch, cls=Counting, max_steps=2)
    assert Counting.calls == 2
    assert path[:2] == ["adapters/module.py", "src/hf_lightning/trainer/run.py"]
    assert "src/hf_lightning/trainer/steps.py" in path
