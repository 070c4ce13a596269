"""The GPU check kit (benchmarks/gpu_check.py) runs end to end in its CPU dry run."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

KIT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"


def _kit():
    spec = importlib.util.spec_from_file_location("gpu_check", KIT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_markdown_table_has_a_row_per_check() -> None:
    """The table names the device and has one row per record, pipes in details escaped."""
    records = [{"check": "a", "status": "pass", "seconds": 1.0, "detail": "x | y"}]
    table = _kit().markdown(records, "GPU X")
    assert table.splitlines()[0] == "GPU check on GPU X"
    assert "| a | pass | 1.0 | x / y |" in table


@pytest.mark.slow
def test_dry_run_writes_json_and_table_without_failures(tmp_path) -> None:
    """``--dry-run`` runs every check on CPU: none fails, the JSON and the .md table are written."""
    kit = _kit()
    out = tmp_path / "smoke.json"
    assert kit.main(["--dry-run", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert [r["check"] for r in report["checks"]] == list(kit.CHECKS)
    assert {r["status"] for r in report["checks"]} <= {"pass", "skipped", "not run"}
    assert (tmp_path / "smoke.md").read_text().startswith("GPU check on CPU (dry run)")
