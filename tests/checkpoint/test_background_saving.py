"""Background saving (``callbacks=[BackgroundCheckpointing()]``): the files of a synchronous save, byte for
byte; training goes on while they are written; a kill mid-write leaves the last complete checkpoint; an
error of the background save is raised in the training process; several processes keep their barriers.

Run as a script (by the DDP test), it trains on one rank of 2 processes."""

from __future__ import annotations

import errno
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import threading
from collections import OrderedDict

import pytest
import torch

import hf_lightning
from hf_lightning.callbacks.background_checkpointing import BackgroundCheckpointing
from hf_lightning.checkpoint import INCOMPLETE_SENTINEL_NAME, DiskFullError, is_checkpoint_complete
from hf_lightning.checkpoint.background import BackgroundSaver, host_copy, snapshot_save_options
from hf_lightning.trainer_utils import get_last_checkpoint
from tests._ddp import run_ranks
from tests.checkpoint.test_crash_safety import make_trainer
from tests.tiny import tiny_gpt2

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def gpt2_trainer(
    output_dir: str, callbacks=(), processing_class=None, evaluate: bool = False, **kwargs
) -> hf_lightning.Trainer:
    """A tiny GPT-2 without dropout (tied embeddings, save_pretrained), 4 steps, a save every 2."""
    g = torch.Generator().manual_seed(0)
    data = [{"input_ids": row, "labels": row.clone()} for row in torch.randint(0, 256, (16, 12), generator=g)]
    args = hf_lightning.TrainingArguments(
        **{
            "output_dir": output_dir,
            "report_to": "none",
            "use_cpu": True,
            "disable_tqdm": True,
            "max_steps": 4,
            "per_device_train_batch_size": 4,
            "logging_steps": 1,
            "save_steps": 2,
            **kwargs,
        }
    )
    return hf_lightning.Trainer(
        model=tiny_gpt2(dropout=0.0),
        args=args,
        train_dataset=data,
        eval_dataset=data[:4] if evaluate else None,
        callbacks=list(callbacks),
        processing_class=processing_class,
    )


def warm_up(folder: pathlib.Path) -> None:
    """One step, unsaved: the first train() of a process imports modules that draw from Python's random
    generator, so its RNG files differ from a later run's however it saves."""
    gpt2_trainer(str(folder / "warm-up"), max_steps=1, save_strategy="no").train()


def _files(folder: pathlib.Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def test_host_copy_keeps_aliases_and_is_not_the_live_state():
    """Tied tensors stay tied and views stay views in the copy; later updates of the original do not reach it."""
    base = torch.arange(6.0)
    state = OrderedDict(a=base, tied=base, view=base[2:4], other=torch.ones(2))
    state._metadata = {"": {"version": 1}}
    copied = host_copy(state)
    assert copied["a"].untyped_storage().data_ptr() == copied["tied"].untyped_storage().data_ptr()
    assert copied["view"].storage_offset() == 2
    assert copied["view"].untyped_storage().data_ptr() == copied["a"].untyped_storage().data_ptr()
    assert copied["a"].untyped_storage().data_ptr() != base.untyped_storage().data_ptr()
    base.add_(100)
    assert copied["a"].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0] and copied["view"].tolist() == [2.0, 3.0]
    assert type(copied) is OrderedDict and copied._metadata == {"": {"version": 1}}


def test_a_snapshot_is_copied_into_the_previous_snapshots_buffers():
    """The second snapshot writes the state into the first one's host memory (same addresses), with the new
    values and its aliases; a storage that changed size gets new memory, one no longer saved is freed."""
    weight, grown = torch.arange(4.0), torch.zeros(2)
    buffers: dict = {}
    first = snapshot_save_options(
        {}, {"w": weight, "tied": weight, "grown": grown, "gone": torch.ones(3)}, buffers
    )
    kept = first["model_state_dict"]["w"].untyped_storage().data_ptr()
    weight.add_(10)
    grown = torch.zeros(5)
    second = snapshot_save_options({}, {"w": weight, "tied": weight, "grown": grown}, buffers)[
        "model_state_dict"
    ]
    assert second["w"].untyped_storage().data_ptr() == kept
    assert second["w"].tolist() == [10.0, 11.0, 12.0, 13.0]
    assert second["tied"].untyped_storage().data_ptr() == kept
    assert second["w"].untyped_storage().data_ptr() != weight.untyped_storage().data_ptr()
    assert second["grown"].tolist() == [0.0] * 5
    assert len(buffers) == 2  # w and the new grown: the copy of "gone" (and the old grown) is no longer held


def test_prepared_host_memory_takes_the_first_snapshot():
    """prepare() makes host memory of the state's sizes (ahead of the first save); the first snapshot copies
    the state into it instead of new memory, and a storage that changed meanwhile gets memory of its own."""
    weight, bias, moved = torch.arange(4.0), torch.ones(2), torch.zeros(3)
    saver = BackgroundSaver()
    saver.prepare([{"w": weight, "tied": weight}, {"state": {0: {"b": bias, "m": moved}}}])
    prepared = {key: storage.data_ptr() for key, storage in saver.host_buffers().items()}
    assert sorted(key[2] for key in prepared) == [8, 12, 16]  # bytes of bias, moved, weight
    moved = torch.zeros(3)  # a new storage: its prepared memory is not used
    frozen = snapshot_save_options(
        {}, {"w": weight, "tied": weight, "b": bias, "m": moved}, saver.host_buffers()
    )
    copied = frozen["model_state_dict"]
    assert copied["w"].untyped_storage().data_ptr() in prepared.values()
    assert copied["b"].untyped_storage().data_ptr() in prepared.values()
    assert copied["m"].untyped_storage().data_ptr() not in prepared.values()
    assert (
        copied["w"].tolist() == [0.0, 1.0, 2.0, 3.0] and copied["tied"].data_ptr() == copied["w"].data_ptr()
    )
    saver.release()
    assert saver.buffers == {}


def test_the_host_copy_is_prepared_kept_between_saves_and_freed_at_the_end_of_train(tmp_path):
    """The first background save copies into the memory prepared after the first step, each later one into
    the last one's buffers; train()'s end frees them. Without saves nothing is prepared."""
    background = BackgroundCheckpointing()
    calls = []
    real = snapshot_save_options

    def spy(options, state_dict, buffers=None):
        given = {storage.data_ptr() for storage in (buffers or {}).values()}
        frozen = real(options, state_dict, buffers)
        used = {tensor.untyped_storage().data_ptr() for tensor in frozen["model_state_dict"].values()}
        used |= {
            tensor.untyped_storage().data_ptr()
            for entry in frozen["optimizer_state_dict"]["state"].values()
            for tensor in entry.values()
            if isinstance(tensor, torch.Tensor) and tensor.dim()
        }
        calls.append((given, used))
        return frozen

    import hf_lightning.checkpoint.background as module

    module.snapshot_save_options, restore = spy, module.snapshot_save_options
    try:
        gpt2_trainer(str(tmp_path / "out"), [background]).train()
    finally:
        module.snapshot_save_options = restore
    assert len(calls) == 2
    for given, used in calls:  # the first save's memory was prepared, the second's is the first's copy
        assert given and used <= given
    assert background.saver.buffers == {}
    prepared = []
    background.saver.prepare = lambda states: prepared.append(states)  # type: ignore[method-assign]
    gpt2_trainer(str(tmp_path / "none"), [background], save_strategy="no").train()
    assert prepared == []


@pytest.mark.parametrize("limit", [None, 1])
def test_background_saves_write_the_files_of_synchronous_saves(tmp_path, monkeypatch, limit):
    """Every checkpoint file (weights with tied embeddings, optimizer, RNG, state, manifest) is byte for byte
    the synchronous save's, and save_total_limit rotates the same folders."""
    warm_up(tmp_path)
    runs = {}
    for name, callbacks in (("sync", []), ("background", [BackgroundCheckpointing()])):
        (tmp_path / name).mkdir()
        monkeypatch.chdir(tmp_path / name)  # the same relative output_dir: the same training_args.json
        gpt2_trainer("out", callbacks, save_total_limit=limit).train()
        runs[name] = tmp_path / name / "out"
    names = sorted(p.name for p in runs["sync"].iterdir() if p.name.startswith("checkpoint-"))
    assert names == (["checkpoint-2", "checkpoint-4"] if limit is None else ["checkpoint-4"])
    assert sorted(os.listdir(runs["background"])) == sorted(os.listdir(runs["sync"]))
    for name in names:
        sync, background = _files(runs["sync"] / name), _files(runs["background"] / name)
        assert sorted(background) == sorted(sync)
        assert {"model.safetensors", "optimizer.pt", "checkpoint-manifest.json"} <= set(sync)
        for file in sync:
            assert background[file] == sync[file], file


class WaitForNextStep:
    """A processing class whose first save_pretrained (part of the save) returns once the next step ended."""

    def __init__(self) -> None:
        self.next_step_ended = threading.Event()
        self.released_by_the_step: list[bool] = []

    def save_pretrained(self, folder: str) -> None:
        if not self.released_by_the_step:
            self.released_by_the_step.append(self.next_step_ended.wait(timeout=120))


class EndOfStep(hf_lightning.TrainerCallback):
    def __init__(self, event: threading.Event, saved_steps: tuple[int, ...]) -> None:
        self.event, self.saved_steps = event, saved_steps

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step - 1 in self.saved_steps:
            self.event.set()


def test_training_goes_on_while_the_files_are_written(tmp_path):
    """The step after a save runs while that save is still writing: the save waits for it, and completes."""
    processor = WaitForNextStep()
    callbacks = [BackgroundCheckpointing(), EndOfStep(processor.next_step_ended, (2,))]
    gpt2_trainer(str(tmp_path), callbacks, processing_class=processor, max_steps=3, save_steps=2).train()
    assert processor.released_by_the_step == [True]
    assert is_checkpoint_complete(tmp_path / "checkpoint-2")


class FullDiskOnSecondSave:
    calls = 0

    def save_pretrained(self, folder: str) -> None:
        FullDiskOnSecondSave.calls += 1
        if FullDiskOnSecondSave.calls == 2:
            raise OSError(errno.ENOSPC, "No space left on device", folder)


def test_an_error_of_a_background_save_is_raised_in_the_training_process(tmp_path, caplog):
    """A save failing behind the training raises its own error from train() (a full disk: DiskFullError, as a
    synchronous save reports it); the folder is never published and its staging folder is removed."""
    FullDiskOnSecondSave.calls = 0
    trainer = make_trainer(str(tmp_path), callbacks=[BackgroundCheckpointing()])
    trainer.processing_class = FullDiskOnSecondSave()
    with caplog.at_level("ERROR"), pytest.raises(DiskFullError, match="No space left on device"):
        trainer.train()
    assert f"The background save of {tmp_path / 'checkpoint-2'} failed" in caplog.text
    assert is_checkpoint_complete(tmp_path / "checkpoint-1")
    assert not (tmp_path / "checkpoint-2").exists()
    assert not (tmp_path / ".tmp-checkpoint-2").exists()  # it would hold the space a full disk needs back
    assert not any(name.startswith("checkpoint-") and name > "checkpoint-2" for name in os.listdir(tmp_path))


def test_the_saver_raises_a_jobs_error_once_and_runs_the_follow_up_of_a_success():
    """wait() raises the job's exception in the caller; a successful job's follow-up gets its result."""
    saver = BackgroundSaver()
    results = []
    saver.submit(lambda: 42, "first", then=results.append)
    saver.wait()
    assert results == [42] and not saver.busy
    saver.submit(lambda: 1 / 0, "second")
    with pytest.raises(ZeroDivisionError):
        saver.wait()
    saver.wait()  # raised once


CHILD = """
import os, signal, sys
import torch
torch.set_num_threads(1)
sys.path.insert(0, {root!r})
from hf_lightning.callbacks.background_checkpointing import BackgroundCheckpointing
from tests.checkpoint.test_crash_safety import make_trainer

class KillDuringThirdSave:
    calls = 0
    def save_pretrained(self, folder):  # in the saver thread, after the weights were written
        KillDuringThirdSave.calls += 1
        if KillDuringThirdSave.calls == 3:
            os.kill(os.getpid(), signal.SIGKILL)

make_trainer({out!r}, processing_class=KillDuringThirdSave(), callbacks=[BackgroundCheckpointing()]).train()
"""


def test_sigkill_during_a_background_save_leaves_the_last_complete_checkpoint(tmp_path):
    """Killed while the saver thread writes checkpoint-3: checkpoint-1 and -2 are complete, -3 is staging
    only, and resuming ends where an uninterrupted run does."""
    script = tmp_path / "child.py"
    out = tmp_path / "out"
    script.write_text(textwrap.dedent(CHILD.format(root=ROOT, out=str(out))))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]
    assert sorted(n for n in os.listdir(out) if n.startswith("checkpoint-")) == [
        "checkpoint-1",
        "checkpoint-2",
    ]
    assert (out / ".tmp-checkpoint-3" / INCOMPLETE_SENTINEL_NAME).is_file()
    assert get_last_checkpoint(str(out)) == str(out / "checkpoint-2")
    resumed = make_trainer(str(out))
    resumed.train(resume_from_checkpoint=True)
    straight = make_trainer(str(tmp_path / "straight"), save_strategy="no")
    straight.train()
    for name, value in straight.model.state_dict().items():
        torch.testing.assert_close(resumed.model.state_dict()[name], value, rtol=0, atol=0)


def test_load_best_model_at_end_waits_for_the_last_background_save(tmp_path):
    """The best checkpoint is loaded at the end of train() after every background save was published."""
    trainer = gpt2_trainer(
        str(tmp_path),
        [BackgroundCheckpointing()],
        evaluate=True,
        eval_strategy="steps",
        eval_steps=2,
        load_best_model_at_end=True,
        save_total_limit=1,
    )
    trainer.train()
    best = trainer.state.best_model_checkpoint
    assert best is not None and is_checkpoint_complete(best)
    assert sorted(n for n in os.listdir(tmp_path) if n.startswith("checkpoint-")) == [os.path.basename(best)]


@pytest.mark.slow
@pytest.mark.ddp
def test_two_processes_save_in_the_background_as_they_save_synchronously(tmp_path):
    """2 gloo processes: background saves publish the folders of synchronous saves (every rank's RNG file),
    byte for byte, and rotate the same ones."""
    run_ranks(__file__, [str(tmp_path)], world=2)
    for step in ("checkpoint-2", "checkpoint-4"):
        sync, background = (_files(tmp_path / name / "out" / step) for name in ("sync", "background"))
        assert {"rng_state_0.pth", "rng_state_1.pth"} <= set(sync)
        assert background == sync


if __name__ == "__main__":
    torch.set_num_threads(1)
    target = pathlib.Path(sys.argv[1])
    warm_up(target)
    for name, callbacks in (("sync", []), ("background", [BackgroundCheckpointing()])):
        folder = target / name
        folder.mkdir(parents=True, exist_ok=True)
        os.chdir(folder)
        gpt2_trainer("out", callbacks, save_total_limit=2, max_steps=4).train()
