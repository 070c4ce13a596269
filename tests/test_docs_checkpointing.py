"""docs/checkpointing.md's runnable examples run as written (the page's first example and those of the sections on
loading weights, PEFT adapters and background saving; the JIT and Lightning snippets are fragments)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "checkpointing.md"
SECTIONS = re.split(r"^## ", DOC.read_text(), flags=re.M)
RUNNABLE = ("", "Loading weights back: the model's own path", "PEFT adapters", "Saving in the background")
BLOCKS = [
    block
    for section in SECTIONS
    if section.split("\n", 1)[0].strip() in RUNNABLE or section is SECTIONS[0]
    for block in re.findall(r"```python\n(.*?)```", section, flags=re.S)
]


def test_the_page_has_the_examples():
    """The introduction, the loading, PEFT and background-saving sections each hold an example."""
    assert len(BLOCKS) == 4


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_example_runs_as_written(index, tmp_path, monkeypatch):
    """Example {index} runs in an empty folder and every check it prints says True."""
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(BLOCKS[index], f"docs/checkpointing.md[{index}]", "exec"), {"__name__": "__main__"})
    printed = out.getvalue().split()
    assert "False" not in printed and ("True" in printed or index == 0)
