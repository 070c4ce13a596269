"""The fenced code blocks of a Markdown page, and a runner for its Python ones.

``python -m tests._docs PAGE`` runs the page's ```python blocks in order in one namespace (a page's later
examples build on its earlier ones), in the current folder, after the code in ``$DOCS_PRELUDE`` if set.
"""

from __future__ import annotations

import os
import re
import sys
import textwrap
from pathlib import Path

__all__ = ["ROOT", "blocks", "pages", "run_page"]

ROOT = Path(__file__).resolve().parents[1]
# A fence, possibly indented inside a list item, with its language and body, closed at the same indent.
_FENCE = re.compile(r"^( *)```(\w*)\n(.*?)^\1```", re.S | re.M)


def pages() -> list[str]:
    """README.md and every page of docs/, as paths relative to the project."""
    return ["README.md"] + sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))


def blocks(page: str) -> list[tuple[str, str]]:
    """(language, code) of each fenced block of ``page``, in order, de-indented."""
    text = (ROOT / page).read_text()
    return [(lang, textwrap.dedent(body)) for _, lang, body in _FENCE.findall(text)]


def run_page(page: str) -> None:
    """Execute the page's Python blocks in order in one namespace."""
    namespace: dict = {"__name__": "__main__"}
    prelude = os.environ.get("DOCS_PRELUDE")
    if prelude:
        exec(compile(prelude, f"{page}[prelude]", "exec"), namespace)
    for index, (lang, code) in enumerate(blocks(page)):
        if lang == "python":
            print(f"--- {page}[{index}]", flush=True)
            exec(compile(code, f"{page}[{index}]", "exec"), namespace)


if __name__ == "__main__":
    run_page(sys.argv[1])
