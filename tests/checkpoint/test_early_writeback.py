"""The early writeback of checkpoint/sealing.py: a ``torch.save`` file starts going to the disk while it is
written, in a durable save and in a deferred one alike (else the kernel throttles a large save)."""

from __future__ import annotations

import threading

import pytest

from hf_lightning.checkpoint import sealing
from hf_lightning.checkpoint.sealing import FolderSealer

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
