"""``args.main_process_first()`` under a launcher: the other ranks wait for the main one, as in transformers,
even before any Trainer exists (the example scripts map their datasets there)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests._ddp import run_ranks

pytestmark = pytest.mark.ddp

WORKER = str(Path(__file__).resolve().parents[1] / "main_process_first_worker.py")


def test_the_other_ranks_enter_after_the_main_process_left(tmp_path):
    """2 CPU processes: rank 1 enters the block only once rank 0 (sleeping 1 s inside it) has left it; the
    process group is open for the wait, as transformers' arguments have it."""
    run_ranks(WORKER, [str(tmp_path)], world=2, timeout=300)
    main, other = (json.loads((tmp_path / f"rank{r}.json").read_text(encoding="utf-8")) for r in (0, 1))
    assert other["entered"] >= main["left"]
    assert main["group"] and other["group"] and (main["rank"], other["rank"]) == (0, 1)
    assert other["state_entered"] >= main["state_left"]  # args.distributed_state.main_process_first()
    assert main["backend"] == other["backend"] == "gloo"
