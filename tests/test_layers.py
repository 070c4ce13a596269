"""The architectural rule (DESIGN.md) holds: engines only in adapters/, imports pointing down."""

from __future__ import annotations

import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _checker():
    spec = importlib.util.spec_from_file_location("check_layers", ROOT / "tools" / "check_layers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_engine_import_in_src_and_no_facade_import_in_adapters():
    """src/hf_lightning imports no lightning/optuna/ray; adapters/ never imports the facade."""
    assert _checker().violations() == []


def test_checker_catches_a_violation(tmp_path):
    """The checker reports an engine import (so the rule test above can fail)."""
    bad = tmp_path / "bad.py"
    bad.write_text("import lightning as L\nfrom optuna import trial\n")
    assert [m for _, m in _checker().imported_modules(bad)] == ["lightning", "optuna"]
