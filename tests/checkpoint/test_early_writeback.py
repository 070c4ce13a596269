"""The early writeback of checkpoint/sealing.py: a ``torch.save`` file starts going to the disk while it is
written, in a durable save and in a deferred one alike (else the kernel throttles a large save). A deferred
save does not wait for the last writeback: the flush behind it does, and reports its error."""

from __future__ import annotations

import errno
import os
import threading
import time

import pytest

from hf_lightning.checkpoint import durability, sealing
from hf_lightning.checkpoint.durability import wait_for_durability
from hf_lightning.checkpoint.sealing import FolderSealer
from hf_lightning.checkpoint.store import is_checkpoint_complete
from tests.checkpoint.test_checkpoint import saved_checkpoint

BLOCK = 1 << 16


@pytest.mark.parametrize("durable", [True, False])
def test_a_file_is_written_back_while_it_is_written(tmp_path, monkeypatch, durable):
    """Eight blocks with a writeback every block: the disk is asked to write the file back while it is
    written; only a durable sealer flushes it once more when it is complete."""
    flushes: list[str] = []
    final = threading.local()
    real_sync, real_fsync_path = sealing._sync, sealing._fsync_path

    def sync(fd: int) -> None:
        flushes.append("final" if getattr(final, "on", False) else "while writing")
        real_sync(fd)

    def fsync_path(path: str) -> None:
        final.on = True
        try:
            real_fsync_path(path)
        finally:
            final.on = False

    monkeypatch.setattr(sealing, "_WRITEBACK_EVERY", BLOCK)
    monkeypatch.setattr(sealing, "_sync", sync)
    monkeypatch.setattr(sealing, "_fsync_path", fsync_path)
    sealer = FolderSealer(str(tmp_path), durable=durable)
    sealer.write("state.pt", lambda handle: [handle.write(b"x" * BLOCK) for _ in range(8)])
    entries = sealer.finish()
    assert entries["state.pt"]["size"] == 8 * BLOCK
    assert "while writing" in flushes
    assert flushes.count("final") == (1 if durable else 0)


@pytest.fixture
def deferred_saves(monkeypatch):
    """Deferred durability (the default), a writeback every 4 KiB."""
    monkeypatch.delenv("HF_LIGHTNING_DEFERRED_DURABILITY", raising=False)
    monkeypatch.setattr(sealing, "_WRITEBACK_EVERY", 4096)
    yield
    wait_for_durability()


def test_a_deferred_save_leaves_its_writeback_to_the_flush(tmp_path, monkeypatch, deferred_saves):
    """The disk's writeback of a file is held: the save still returns a published checkpoint, and the
    flush behind it (what a resume waits for) ends only after that writeback."""
    release, order = threading.Event(), []
    real_sync, real_flush = sealing._sync, durability._flush_tree

    def held_sync(fd: int) -> None:
        assert release.wait(timeout=60)
        real_sync(fd)
        order.append("writeback")

    def flush(folder: str) -> None:
        order.append("flush")
        real_flush(folder)

    monkeypatch.setattr(sealing, "_sync", held_sync)
    monkeypatch.setattr(durability, "_flush_tree", flush)
    folder, _ = saved_checkpoint(tmp_path, step=1)
    assert is_checkpoint_complete(folder) and not order
    waiting = threading.Thread(target=wait_for_durability)
    waiting.start()
    waiting.join(timeout=0.3)
    assert waiting.is_alive()
    release.set()
    waiting.join(timeout=60)
    assert not waiting.is_alive()
    assert order[-1] == "flush" and "writeback" in order


def test_a_failed_writeback_fails_the_deferred_flush(tmp_path, monkeypatch, deferred_saves):
    """EIO from the disk's writeback of a deferred save: the next wait raises it and the checkpoint is
    withdrawn, as when its flush fails (an error the kernel reports once is not lost)."""
    monkeypatch.setattr(sealing, "_sync", lambda fd: (_ for _ in ()).throw(OSError(errno.EIO, "I/O error")))
    saved_checkpoint(tmp_path, step=1)
    with pytest.raises(OSError) as caught:
        wait_for_durability()
    assert caught.value.errno == errno.EIO
    assert not any(name.startswith("checkpoint-") for name in os.listdir(tmp_path / "out"))


def test_an_earlier_failed_writeback_fails_the_write(tmp_path, monkeypatch):
    """The first writeback fails while the file is still being written: the write raises it."""
    monkeypatch.setattr(sealing, "_WRITEBACK_EVERY", BLOCK)
    monkeypatch.setattr(sealing, "_sync", lambda fd: (_ for _ in ()).throw(OSError(errno.EIO, "I/O error")))
    sealer = FolderSealer(str(tmp_path), durable=False)

    def write(handle) -> None:
        for _ in range(8):
            handle.write(b"x" * BLOCK)
            time.sleep(0.01)  # the writeback thread ends before the next block

    with pytest.raises(OSError) as caught:
        sealer.write("state.pt", write)
    sealer.close()
    assert caught.value.errno == errno.EIO
