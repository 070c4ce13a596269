"""Deferred durability (checkpoint/durability.py): a synchronous save returns once its checkpoint is published;
the flush to disk and rotation's deletions complete behind, and whatever reads checkpoints waits for them."""

from __future__ import annotations

import errno
import os
import threading

import pytest

from hf_lightning.checkpoint import durability
from hf_lightning.checkpoint.durability import wait_for_durability
from hf_lightning.checkpoint.io import DiskFullError
from hf_lightning.checkpoint.leftovers import remove_leftovers
from hf_lightning.checkpoint.store import (
    checkpoint_path,
    find_resumable_checkpoint,
    is_checkpoint_complete,
    rotate_checkpoints,
)
from tests.checkpoint.test_checkpoint import saved_checkpoint
from tests.checkpoint.test_crash_safety import make_trainer


def visible(out) -> list[str]:
    """What a ``checkpoint-*`` glob shows (transformers' view of output_dir)."""
    return sorted(name for name in os.listdir(out) if name.startswith("checkpoint-"))


def hidden(out) -> list[str]:
    return sorted(name for name in os.listdir(out) if name.startswith(durability.ROTATED_PREFIX))


@pytest.fixture(autouse=True)
def deferred(monkeypatch):
    """Deferred durability is the default: every test here runs with the variable unset, but those of the
    durable save (``HF_LIGHTNING_DEFERRED_DURABILITY=0``) and of its spellings."""
    monkeypatch.delenv("HF_LIGHTNING_DEFERRED_DURABILITY", raising=False)


@pytest.fixture
def held_flush(monkeypatch):
    """The background flush waits until the test sets the returned event."""
    release, real = threading.Event(), durability._flush_tree

    def slow_flush(folder: str) -> None:
        assert release.wait(timeout=60)
        real(folder)

    monkeypatch.setattr(durability, "_flush_tree", slow_flush)
    yield release
    release.set()
    wait_for_durability()


def failing_flush(monkeypatch, code: int) -> None:
    def flush(folder: str) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(durability, "_flush_tree", flush)


def test_a_save_returns_before_its_flush_completes(tmp_path, held_flush):
    """save_checkpoint returns a complete, published folder while the flush to disk is still held."""
    folder, _ = saved_checkpoint(tmp_path, step=1)
    assert not held_flush.is_set() and is_checkpoint_complete(folder)
    held_flush.set()
    wait_for_durability()


def test_rotation_hides_the_old_folder_until_the_new_one_is_durable(tmp_path, held_flush):
    """save_total_limit=1: checkpoint-1 leaves the checkpoint-* listing at once, is deleted after the flush."""
    out = tmp_path / "out"
    saved_checkpoint(tmp_path, step=1)
    held_flush.set()
    wait_for_durability()
    held_flush.clear()
    saved_checkpoint(tmp_path, step=2)
    rotate_checkpoints(out, 1)
    assert visible(out) == ["checkpoint-2"]
    assert hidden(out) == [f".rotated-checkpoint-1-{os.getpid()}"]
    held_flush.set()
    wait_for_durability()
    assert os.listdir(out) == ["checkpoint-2"]


def test_the_next_save_publishes_while_the_previous_flush_runs(tmp_path, held_flush):
    """Two checkpoints may wait for the disk: the second save publishes with the first one's flush held."""
    saved_checkpoint(tmp_path, step=1)
    folder, _ = saved_checkpoint(tmp_path, step=2)
    assert not held_flush.is_set() and is_checkpoint_complete(folder)
    assert visible(tmp_path / "out") == ["checkpoint-1", "checkpoint-2"]


def test_the_save_after_next_waits_for_the_first_flush(tmp_path, held_flush):
    """The disk is never two checkpoints behind: the third save is not published before the first flush."""
    out = tmp_path / "out"
    saved_checkpoint(tmp_path, step=1)
    saved_checkpoint(tmp_path, step=2)
    third = threading.Thread(target=saved_checkpoint, args=(tmp_path,), kwargs={"step": 3})
    third.start()
    third.join(timeout=2)
    assert third.is_alive() and visible(out) == ["checkpoint-1", "checkpoint-2"]
    held_flush.set()
    third.join(timeout=60)
    assert not third.is_alive() and visible(out) == ["checkpoint-1", "checkpoint-2", "checkpoint-3"]


def test_flushes_end_in_publication_order(tmp_path, monkeypatch):
    """The second checkpoint's flush starts only once the first one's has ended."""
    order: list[str] = []
    first_started, release = threading.Event(), threading.Event()
    real = durability._flush_tree

    def recorded(folder: str) -> None:
        name = os.path.basename(folder)
        order.append(f"start {name}")
        if name == "checkpoint-1":
            first_started.set()
            assert release.wait(timeout=60)
        real(folder)
        order.append(f"end {name}")

    monkeypatch.setattr(durability, "_flush_tree", recorded)
    saved_checkpoint(tmp_path, step=1)
    assert first_started.wait(timeout=60)
    saved_checkpoint(tmp_path, step=2)
    release.set()
    wait_for_durability()
    assert order == ["start checkpoint-1", "end checkpoint-1", "start checkpoint-2", "end checkpoint-2"]


def recorded_flushes(monkeypatch) -> tuple[threading.Event, list[tuple[str, bool]]]:
    """Flushes held until the returned event is set; each recorded as (folder name, whether it existed)."""
    release, flushed, real = threading.Event(), [], durability._flush_tree

    def flush(folder: str) -> None:
        assert release.wait(timeout=60)
        flushed.append((os.path.basename(folder), os.path.isdir(folder)))
        real(folder)

    monkeypatch.setattr(durability, "_flush_tree", flush)
    return release, flushed


def test_rotation_waits_for_the_flush_of_the_folder_it_hides(tmp_path, monkeypatch):
    """save_total_limit=1 with two flushes pending: checkpoint-1 is hidden only once it is on disk under its
    name (a flush never walks a folder that has moved), then deleted once checkpoint-2 is durable."""
    release, flushed = recorded_flushes(monkeypatch)
    out = tmp_path / "out"
    saved_checkpoint(tmp_path, step=1)
    saved_checkpoint(tmp_path, step=2)
    rotation = threading.Thread(target=rotate_checkpoints, args=(out, 1))
    rotation.start()
    rotation.join(timeout=1)
    assert rotation.is_alive() and visible(out) == ["checkpoint-1", "checkpoint-2"]
    release.set()
    rotation.join(timeout=60)
    wait_for_durability()
    assert flushed == [("checkpoint-1", True), ("checkpoint-2", True)]
    assert os.listdir(out) == ["checkpoint-2"]


def test_a_step_saved_again_waits_for_the_flush_of_its_first_copy(tmp_path, monkeypatch):
    """checkpoint-1 saved twice: the second copy is published once the first is on disk, and is flushed too."""
    release, flushed = recorded_flushes(monkeypatch)
    out = tmp_path / "out"
    saved_checkpoint(tmp_path, step=1)
    again = threading.Thread(target=saved_checkpoint, args=(tmp_path,), kwargs={"step": 1})
    again.start()
    again.join(timeout=1)
    assert again.is_alive()
    release.set()
    again.join(timeout=60)
    wait_for_durability()
    assert flushed == [("checkpoint-1", True), ("checkpoint-1", True)]
    assert os.listdir(out) == ["checkpoint-1"] and is_checkpoint_complete(checkpoint_path(out, 1))


def test_a_failed_earlier_flush_is_undone_and_the_later_checkpoint_kept(tmp_path, monkeypatch):
    """The flush of checkpoint-1 fails, checkpoint-2's succeeds: the wait raises the first error, removes
    only checkpoint-1."""
    release = threading.Event()
    real = durability._flush_tree

    def flush(folder: str) -> None:
        if os.path.basename(folder) == "checkpoint-1":
            assert release.wait(timeout=60)
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        real(folder)

    monkeypatch.setattr(durability, "_flush_tree", flush)
    out = tmp_path / "out"
    saved_checkpoint(tmp_path, step=1)
    saved_checkpoint(tmp_path, step=2)
    release.set()
    with pytest.raises(OSError) as caught:
        wait_for_durability()
    assert caught.value.errno == errno.EIO
    assert os.listdir(out) == ["checkpoint-2"]
    assert find_resumable_checkpoint(out) == checkpoint_path(out, 2)


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO])
def test_a_failed_flush_is_raised_at_the_next_save_and_undone(tmp_path, monkeypatch, code):
    """The flush of checkpoint-2 fails: the next save raises it (a full disk as DiskFullError naming the
    folder), checkpoint-2 is gone and the checkpoint rotation had set aside is back."""
    out = tmp_path / "out"
    saved_checkpoint(tmp_path, step=1)
    wait_for_durability()
    failing_flush(monkeypatch, code)
    saved_checkpoint(tmp_path, step=2)
    rotate_checkpoints(out, 1)
    expected = DiskFullError if code == errno.ENOSPC else OSError
    with pytest.raises(expected) as caught:
        saved_checkpoint(tmp_path, step=3)
    if code == errno.ENOSPC:
        assert f"The disk is full: writing checkpoint `{checkpoint_path(out, 2)}`" in str(caught.value)
        assert "the checkpoints written before are intact" in str(caught.value)
    assert caught.value.errno == code
    assert os.listdir(out) == ["checkpoint-1"]


def test_resume_search_waits_for_the_flush(tmp_path, held_flush):
    """find_resumable_checkpoint returns only once the newest checkpoint is on disk."""
    saved_checkpoint(tmp_path, step=1)
    found: list[str | None] = []
    search = threading.Thread(target=lambda: found.append(find_resumable_checkpoint(tmp_path / "out")))
    search.start()
    search.join(timeout=0.3)
    assert search.is_alive() and not found
    held_flush.set()
    search.join(timeout=60)
    assert found == [checkpoint_path(tmp_path / "out", 1)]


def test_after_a_power_loss_the_set_aside_folder_is_resumed(tmp_path):
    """The newest checkpoint damaged, the one rotation set aside still hidden: resume uses (and renames
    back) the set-aside one, the last complete checkpoint."""
    out = tmp_path / "out"
    saved_checkpoint(tmp_path, step=1)
    saved_checkpoint(tmp_path, step=2)
    wait_for_durability()
    os.replace(checkpoint_path(out, 1), out / ".rotated-checkpoint-1-4242")  # rotated, flush never done
    with open(os.path.join(checkpoint_path(out, 2), "model.safetensors"), "r+b") as handle:
        handle.seek(-1, os.SEEK_END)
        handle.write(b"\x00" if handle.read(1) != b"\x00" else b"\x01")  # a page the disk never got
    assert find_resumable_checkpoint(out) == checkpoint_path(out, 1)
    assert visible(out) == ["checkpoint-1", "checkpoint-2"]


def test_a_set_aside_folder_left_by_a_kill_gets_its_name_back(tmp_path):
    """remove_leftovers (the start of train) undoes an interrupted rotation instead of deleting a checkpoint."""
    out = tmp_path / "out"
    saved_checkpoint(tmp_path, step=1)
    wait_for_durability()
    os.replace(checkpoint_path(out, 1), out / ".rotated-checkpoint-1-4242")
    remove_leftovers(out)
    assert os.listdir(out) == ["checkpoint-1"]


def test_durable_saves_leave_nothing_to_flush_behind(tmp_path, monkeypatch, held_flush):
    """With HF_LIGHTNING_DEFERRED_DURABILITY=0 nothing is left to flush behind; rotation deletes at once."""
    monkeypatch.setenv("HF_LIGHTNING_DEFERRED_DURABILITY", "0")
    out = tmp_path / "out"
    saved_checkpoint(tmp_path, step=1)
    saved_checkpoint(tmp_path, step=2)
    rotate_checkpoints(out, 1)
    assert os.listdir(out) == ["checkpoint-2"] and not held_flush.is_set()


def test_train_leaves_only_transformers_folders_once_it_returns(tmp_path, monkeypatch):
    """train() with save_total_limit=2: on_save sees transformers' checkpoint-* folders; after train()
    nothing is set aside or pending."""
    seen: list[list[str]] = []
    out = tmp_path / "run"

    from transformers import TrainerCallback

    class Listing(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            seen.append(visible(out))

    make_trainer(str(out), callbacks=[Listing()], save_total_limit=2).train()
    assert seen[-1] == ["checkpoint-5", "checkpoint-6"] and len(seen) == 6
    assert all(len(listing) <= 2 for listing in seen)
    assert visible(out) == ["checkpoint-5", "checkpoint-6"] and hidden(out) == []


def test_a_failed_flush_is_raised_by_train(tmp_path, monkeypatch):
    """The flush of the first checkpoint fails with EIO: train() raises it (at the next save)."""
    failing_flush(monkeypatch, errno.EIO)
    with pytest.raises(OSError) as caught:
        make_trainer(str(tmp_path / "run"), save_total_limit=2).train()
    assert caught.value.errno == errno.EIO
    assert visible(tmp_path / "run") == []


@pytest.mark.parametrize(
    ("value", "deferred"), [("", True), ("1", True), ("On", True), ("0", False), ("no", False)]
)
def test_the_variable_spellings(monkeypatch, value, deferred):
    """Unset or on: the flush follows the save (the default); 0/false/no/off: a save returns once durable."""
    monkeypatch.setenv("HF_LIGHTNING_DEFERRED_DURABILITY", value)
    assert durability.durability_deferred() is deferred


def test_a_value_neither_on_nor_off_is_refused_before_the_first_step(tmp_path, monkeypatch):
    """train() raises at its start, naming the variable and its values; no step ran, nothing was written."""
    monkeypatch.setenv("HF_LIGHTNING_DEFERRED_DURABILITY", "later")
    trainer = make_trainer(str(tmp_path / "run"))
    with pytest.raises(ValueError, match=r"HF_LIGHTNING_DEFERRED_DURABILITY='later'.*use 0 .* or 1"):
        trainer.train()
    assert trainer.state.global_step == 0
    assert not os.path.exists(tmp_path / "run") or visible(tmp_path / "run") == []
