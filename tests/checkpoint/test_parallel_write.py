"""A save writes the model's files in a second thread while it writes the optimizer's (checkpoint/store.py):
the two overlap, every error is raised by the save, and nothing is written after it returns or raises."""

from __future__ import annotations

import errno
import os
import threading

import pytest
import safetensors.torch
import torch

from hf_lightning.checkpoint.io import DiskFullError
from hf_lightning.checkpoint.store import save_checkpoint
from tests.checkpoint.test_checkpoint import JsonState, TinyTied, make_optim, train_steps

optimizer_started = threading.Event()


class HookedModel(TinyTied):
    """A model whose ``save_pretrained`` runs ``before`` first, then writes ``model.safetensors``."""

    def __init__(self, before) -> None:
        torch.manual_seed(0)
        super().__init__()
        self.before = before

    def save_pretrained(self, folder: str, **kwargs) -> None:
        self.before()
        tensors = {name: t.contiguous() for name, t in self.state_dict().items() if name != "head.weight"}
        safetensors.torch.save_file(tensors, os.path.join(folder, "model.safetensors"))


class SignallingOptimizer:
    """An optimizer whose ``state_dict()`` says it was asked, then runs ``then``."""

    def __init__(self, optimizer, then=lambda: None) -> None:
        self.optimizer, self.then = optimizer, then

    def state_dict(self):
        optimizer_started.set()
        self.then()
        return self.optimizer.state_dict()


def save(tmp_path, model, optimizer_then=lambda: None):
    optimizer, scheduler = make_optim(model)
    train_steps(model, optimizer, scheduler, 1)
    optimizer_started.clear()
    return save_checkpoint(tmp_path / "out", 1, model=model, optimizer=SignallingOptimizer(optimizer, optimizer_then),
                           scheduler=scheduler, state=JsonState(1))  # fmt: skip


def test_the_weights_are_written_while_the_optimizer_state_is(tmp_path):
    """The model's save waits until the optimizer's has begun: a save that wrote one after the other would
    never get there."""

    def wait_for_the_optimizer() -> None:
        if not optimizer_started.wait(timeout=30):
            raise TimeoutError("the optimizer's state was not written beside the weights")

    folder = save(tmp_path, HookedModel(wait_for_the_optimizer))
    assert {"model.safetensors", "optimizer.pt", "scheduler.pt"} <= set(os.listdir(folder))


def test_a_full_disk_while_writing_the_weights_is_raised_and_nothing_is_left(tmp_path):
    """ENOSPC in the model's thread: DiskFullError naming the checkpoint; no folder, no staging."""

    def full() -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(DiskFullError, match="checkpoint-1"):
        save(tmp_path, HookedModel(full))
    assert os.listdir(tmp_path / "out") == []


def test_the_optimizers_error_is_raised_after_the_weights_thread_ended(tmp_path):
    """The optimizer's state fails while the weights are still being written: its error is raised only once
    the model's thread has ended, and that thread leaves nothing behind."""
    release, ended = threading.Event(), threading.Event()

    def slow_weights() -> None:
        assert release.wait(timeout=30)

    class Broken(RuntimeError):
        pass

    def fail() -> None:
        release.set()
        raise Broken("state_dict failed")

    model = HookedModel(slow_weights)
    original = model.save_pretrained

    def tracked(folder: str, **kwargs) -> None:
        try:
            original(folder, **kwargs)
        finally:
            ended.set()

    model.save_pretrained = tracked
    with pytest.raises(Broken):
        save(tmp_path, model, optimizer_then=fail)
    assert ended.is_set()
    assert os.listdir(tmp_path / "out") == []


def test_when_both_fail_the_optimizers_error_is_raised(tmp_path):
    """Both threads fail: the save raises the optimizer's error (this thread's), never hidden by the other."""

    def weights_fail() -> None:
        assert optimizer_started.wait(timeout=30)
        raise OSError(errno.EIO, "weights")

    def fail() -> None:
        raise ValueError("optimizer")

    with pytest.raises(ValueError, match="optimizer"):
        save(tmp_path, HookedModel(weights_fail), optimizer_then=fail)
    assert os.listdir(tmp_path / "out") == []
