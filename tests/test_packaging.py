"""The wheel holds every package of the tree: pyproject.toml lists its packages by name (setuptools then
installs only those), so a package folder missing from the list is missing from ``pip install .``."""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _tree_packages() -> set[str]:
    found = set()
    for folder, name in (
        (ROOT / "src" / "hf_lightning", "hf_lightning"),
        (ROOT / "adapters", "hf_lightning.adapters"),
    ):
        for init in folder.rglob("__init__.py"):
            parts = init.parent.relative_to(folder).parts
            found.add(".".join((name, *parts)))
    return found


def test_every_package_folder_is_listed_for_the_wheel():
    text = (ROOT / "pyproject.toml").read_text()  # tomllib is Python 3.11+; the project supports 3.10
    block = re.search(r"\[tool\.setuptools\]\s*packages\s*=\s*\[(.*?)\]", text, re.S)
    assert block is not None, "pyproject.toml lists no [tool.setuptools] packages"
    listed = set(re.findall(r'"([\w.]+)"', block.group(1)))
    assert _tree_packages() == listed
