"""docs/architecture.md stays true: every file or folder it names exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
PATH = re.compile(r"`((?:src|adapters|tests|tools|docs|benchmarks|examples)/[\w/.]*?)(?:::\w+)?`")


def _named_paths() -> list[str]:
    return sorted(set(PATH.findall(DOC.read_text(encoding="utf-8"))))


def test_the_page_names_the_homes_of_the_features():
    """The feature table is there and names many files (the regex finds them)."""
    assert len(_named_paths()) > 40


def test_every_path_in_the_architecture_page_exists():
    """Each `src/...`, `adapters/...`, `tests/...` path of the page is a file or folder of the tree."""
    missing = [path for path in _named_paths() if not (ROOT / path.rstrip("/")).exists()]
    assert missing == []
