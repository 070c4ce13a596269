"""docs/lightning.md's examples run as written (each ```python block, in a fresh folder)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "lightning.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)


def test_the_page_has_examples():
    """docs/lightning.md holds runnable examples."""
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_example_runs_as_written(index, tmp_path, monkeypatch):
    """Example {index} of docs/lightning.md runs without error in an empty working folder."""
    monkeypatch.chdir(tmp_path)
    exec(compile(BLOCKS[index], f"docs/lightning.md[{index}]", "exec"), {"__name__": "__main__"})
