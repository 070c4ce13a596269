"""``hf_lightning.trainer_utils.sort_checkpoints`` / ``rotate_checkpoints`` against transformers' on the same
folders: the same order (by step, by modification time, the best checkpoint kept before the newest) and the
same folders left after a rotation."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import transformers.trainer_utils as theirs

from hf_lightning import trainer_utils as ours

STEPS = [5, 40, 10, 300, 25]


def _folders(root: Path, prefix: str = "checkpoint", spread: float = 10.0) -> Path:
    root.mkdir(parents=True)
    for index, step in enumerate(STEPS):
        folder = root / f"{prefix}-{step}"
        folder.mkdir()
        stamp = 1_700_000_000 + spread * (len(STEPS) - index)  # written in the reverse of the listed order
        os.utime(folder, (stamp, stamp))
    (root / f"{prefix}-7.txt").write_text("a file, not a checkpoint")
    return root


@pytest.mark.parametrize("use_mtime", [False, True])
@pytest.mark.parametrize("spread", [10.0, 0.1])  # 0.1 s apart: mtime is not trusted, the step order applies
@pytest.mark.parametrize("best", [None, "checkpoint-10", "checkpoint-300"])
@pytest.mark.parametrize("prefix", ["checkpoint", "ckpt"])
def test_sort_checkpoints_as_transformers(tmp_path, use_mtime, spread, best, prefix):
    root = _folders(tmp_path / "out", prefix, spread)
    best_path = None if best is None else str(root / best.replace("checkpoint", prefix))
    expected = theirs.sort_checkpoints(str(root), prefix, use_mtime, best_path)
    assert ours.sort_checkpoints(str(root), prefix, use_mtime, best_path) == expected
    assert len(expected) == len(STEPS)


@pytest.mark.parametrize("limit", [None, 0, 1, 2, 4, 9])
@pytest.mark.parametrize("best", [None, "checkpoint-5", "checkpoint-300"])
@pytest.mark.parametrize("use_mtime", [False, True])
def test_rotate_checkpoints_leaves_the_folders_transformers_leaves(tmp_path, limit, best, use_mtime):
    left = []
    for name, module in (("theirs", theirs), ("ours", ours)):
        root = _folders(tmp_path / name)
        best_path = None if best is None else str(root / best)
        assert module.rotate_checkpoints(str(root), limit, best_path, use_mtime) is None
        left.append(sorted(p.name for p in root.iterdir()))
    assert left[1] == left[0]
