"""transformers' JIT-checkpoint API on hf_lightning (``hf_lightning/trainer_jit_checkpoint.py``):
``CheckpointManager`` and ``JITCheckpointCallback`` with transformers 5.24's names and behaviour, the
callback among the Trainer's callbacks under ``enable_jit_checkpoint``, and SIGTERM given back after
``train()`` (the Lightning JIT callback holds it while training runs: tests/checkpoint/test_jit_checkpoint.py)."""

from __future__ import annotations

import os
import signal
from unittest.mock import Mock, patch

import pytest

from hf_lightning import Trainer, TrainingArguments
from hf_lightning.trainer_jit_checkpoint import CheckpointManager, JITCheckpointCallback
from tests.tiny import RegressionModel, regression_data


@pytest.fixture
def own_sigterm():
    """The test's own SIGTERM handler, put back whatever the test does."""

    def handler(signum, frame):
        raise AssertionError("SIGTERM reached the test's own handler")

    previous = signal.signal(signal.SIGTERM, handler)
    yield handler
    signal.signal(signal.SIGTERM, previous)


def _trainer(tmp_path, enable_jit=True, **kwargs):
    args = TrainingArguments(str(tmp_path), enable_jit_checkpoint=enable_jit, per_device_train_batch_size=4,
                             max_steps=4, save_steps=10, report_to="none", use_cpu=True, disable_tqdm=True,
                             **kwargs)  # fmt: skip
    return Trainer(model=RegressionModel(), args=args, train_dataset=regression_data(16))


def test_the_trainer_lists_the_callback_and_its_manager_takes_sigterm(tmp_path, own_sigterm):
    trainer = _trainer(tmp_path)
    found = [cb for cb in trainer.callback_handler.callbacks if isinstance(cb, JITCheckpointCallback)]
    assert len(found) == 1 and found[0].trainer is trainer and found[0].jit_manager.kill_wait == 3
    assert signal.getsignal(signal.SIGTERM) == found[0].jit_manager._sigterm_handler
    assert found[0].jit_manager._original_sigterm_handler is own_sigterm
    trainer.train()
    assert signal.getsignal(signal.SIGTERM) is own_sigterm  # given back after train()
    assert not [cb for cb in _trainer(tmp_path / "off", enable_jit=False).callback_handler.callbacks
                if isinstance(cb, JITCheckpointCallback)]  # fmt: skip


@patch("threading.Timer")
def test_sigterm_requests_a_checkpoint_after_kill_wait(timer, tmp_path, own_sigterm):
    manager = CheckpointManager(_trainer(tmp_path, enable_jit=False), kill_wait=2)
    manager._sigterm_handler(signal.SIGTERM, None)
    timer.assert_called_once_with(2, manager._enable_checkpoint)
    timer.return_value.start.assert_called_once()
    assert not manager.is_checkpoint_requested
    manager._enable_checkpoint()
    assert manager.is_checkpoint_requested
    timer.reset_mock()
    manager._sigterm_handler(signal.SIGTERM, None)  # already requested: nothing more
    timer.assert_not_called()


def test_execute_writes_the_checkpoint_and_clears_the_request(tmp_path, own_sigterm):
    trainer = _trainer(tmp_path, enable_jit=False)
    manager = CheckpointManager(trainer)
    manager.is_checkpoint_requested = True
    manager.execute_jit_checkpoint()
    folder = tmp_path / "checkpoint-0"
    assert not manager.is_checkpoint_requested
    assert (folder / "trainer_state.json").is_file() and not (
        folder / "checkpoint-is-incomplete.txt"
    ).exists()
    trainer._save_checkpoint = Mock(side_effect=RuntimeError("disk gone"))
    manager.is_checkpoint_requested = True
    with pytest.raises(RuntimeError, match="disk gone"):
        manager.execute_jit_checkpoint()
    assert not manager.is_checkpoint_requested


@pytest.mark.parametrize("event", ["on_pre_optimizer_step", "on_step_begin", "on_step_end", "on_epoch_end"])
def test_callback_checkpoints_and_stops_at_a_requested_boundary(tmp_path, own_sigterm, event):
    trainer = _trainer(tmp_path)
    callback = next(cb for cb in trainer.callback_handler.callbacks if isinstance(cb, JITCheckpointCallback))
    control = Mock(should_training_stop=False, should_save=True)
    with patch.object(callback.jit_manager, "execute_jit_checkpoint") as execute:
        getattr(callback, event)(trainer.args, trainer.state, control)
        execute.assert_not_called()
        assert control.should_training_stop is False
        callback.jit_manager.is_checkpoint_requested = True
        getattr(callback, event)(trainer.args, trainer.state, control)
        execute.assert_called_once()
    assert control.should_training_stop is True
    assert control.should_save is (event in ("on_pre_optimizer_step", "on_step_begin"))
    callback.release()
    assert signal.getsignal(signal.SIGTERM) is own_sigterm


def test_a_request_during_training_saves_that_step_and_stops(tmp_path, own_sigterm):
    """A request seen at the first step's start (a SIGTERM before train() began) writes checkpoint-0 and
    stops after that step, as transformers' loop stops (it checks the stop flag once the step is done)."""
    trainer = _trainer(tmp_path)
    callback = next(cb for cb in trainer.callback_handler.callbacks if isinstance(cb, JITCheckpointCallback))
    callback.jit_manager.is_checkpoint_requested = True
    output = trainer.train()
    assert output.global_step == 1 and os.path.isdir(tmp_path / "checkpoint-0")
    assert not os.path.isdir(tmp_path / "checkpoint-1")
