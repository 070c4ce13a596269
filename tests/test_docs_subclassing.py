"""docs/subclassing.md's examples run as written, each in a fresh Python process and an empty folder.

A fresh process for each: ``use_as_transformers_trainer()`` must run before the library is imported.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "subclassing.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)


def test_the_page_has_examples():
    """docs/subclassing.md holds runnable examples: the TRL binding and a training step of one's own."""
    assert len(BLOCKS) >= 2 and "use_as_transformers_trainer" in BLOCKS[0]


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_example_runs_as_written(index, tmp_path):
    """Example {index} of docs/subclassing.md runs without error in an empty working folder."""
    if "from trl import" in BLOCKS[index]:
        pytest.importorskip("trl")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", BLOCKS[index]],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip(), "the example prints what it shows"
