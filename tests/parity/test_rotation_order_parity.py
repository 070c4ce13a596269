"""``save_total_limit`` rotation deletes in transformers' order: oldest *written* first (its ``use_mtime=True``),
and by step, with transformers' warning, when the folders' times span under a second."""

from __future__ import annotations

import logging
import os

import pytest
from transformers.trainer_utils import rotate_checkpoints as their_rotate

from hf_lightning.checkpoint import folders
from hf_lightning.checkpoint.durability import wait_for_durability

MTIME_WARNING = "mtime may not be reliable on this filesystem, falling back to numerical ordering"


def _make(root, times: dict[int, float]) -> None:
    for step, when in times.items():
        path = root / f"checkpoint-{step}"
        path.mkdir(parents=True)
        (path / "trainer_state.json").write_text("{}")
        os.utime(path, (when, when))


def _left(root) -> list[str]:
    return sorted(name for name in os.listdir(root) if name.startswith("checkpoint-"))


@pytest.mark.parametrize(
    "times",
    [
        {2: 1000.0, 4: 1010.0, 6: 990.0},  # checkpoint-6 written first (an earlier run), -4 last
        {2: 1000.0, 4: 1000.2, 6: 1000.4},  # all within a second: by step
    ],
)
def test_rotation_deletes_what_transformers_deletes(tmp_path, times, caplog, monkeypatch):
    monkeypatch.setattr(folders, "_MTIME_WARNED", [])
    _make(tmp_path / "theirs", times)
    _make(tmp_path / "ours", times)
    their_rotate(str(tmp_path / "theirs"), save_total_limit=2, use_mtime=True)
    with caplog.at_level(logging.WARNING):
        folders.rotate_checkpoints(tmp_path / "ours", 2)
        wait_for_durability()
    assert _left(tmp_path / "ours") == _left(tmp_path / "theirs")
    warned = MTIME_WARNING in caplog.text
    assert warned == (max(times.values()) - min(times.values()) < 1.0)


def test_the_unreliable_mtime_warning_comes_before_the_count_as_in_transformers(
    tmp_path, caplog, monkeypatch
):
    """transformers orders the folders (and warns) before it counts them: two checkpoints written within a second
    under ``save_total_limit=2`` delete nothing and still warn, once per process."""
    monkeypatch.setattr(folders, "_MTIME_WARNED", [])
    _make(tmp_path, {2: 1000.0, 4: 1000.3})
    with caplog.at_level(logging.WARNING):
        assert folders.rotate_checkpoints(tmp_path, 2) == []
        assert folders.rotate_checkpoints(tmp_path, 2) == []
    assert caplog.text.count(MTIME_WARNING) == 1
    assert _left(tmp_path) == ["checkpoint-2", "checkpoint-4"]
