"""The step benchmark's turn-taking (benchmarks/bench_step.py): the protocol, and a short real run."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_step.py"


def _bench_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_step", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_pacer_reports_the_first_step_then_one_median_per_turn(monkeypatch):
    """After the warm-up steps the child reports and waits; each turn of ``block`` steps reports the
    median interval from the turn's start; after the last block it no longer waits."""
    bench = _bench_module()
    clock = iter(
        [
            0.0,
            1.0,
            2.0,  # warm-up steps
            10.0,
            10.1,
            10.3,
            10.4,  # turn 1 starts at 10.0: intervals 0.1, 0.2, 0.1
            20.0,
            20.5,
            21.5,
            21.6,
        ]
    )  # turn 2 starts at 20.0: intervals 0.5, 1.0, 0.1
    monkeypatch.setattr(bench.time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(bench.sys, "stdin", io.StringIO("go\ngo\n"))
    out = io.StringIO()
    monkeypatch.setattr(bench.sys, "stdout", out)
    pacer = bench.Pacer(block=3, blocks=2)
    assert pacer.total_steps == bench.WARMUP_STEPS + 6
    for _ in range(pacer.total_steps):
        pacer.step_end()
    messages = [json.loads(line[len(bench.MARK) :]) for line in out.getvalue().splitlines()]
    assert list(messages[0]) == ["first_step_end"]
    assert [m["step"] for m in messages[1:]] == pytest.approx([0.1, 0.5])
    assert bench.sys.stdin.read() == ""  # both turns were taken, no third wait


@pytest.mark.slow
def test_a_short_benchmark_run_prints_one_row_per_framework(tmp_path):
    """Four real processes take turns; every framework gets a row and a block time per cycle."""
    record = tmp_path / "runs.json"
    out = subprocess.run(
        [
            sys.executable,
            str(BENCH),
            "--rounds",
            "1",
            "--cycles",
            "2",
            "--block",
            "2",
            "--workloads",
            "W1 GA1",
            "--json",
            str(record),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    rows = [line for line in out.stdout.splitlines() if line.startswith("| W1 GA1 |")]
    assert len(rows) == 4
    runs = json.loads(record.read_text())["W1 GA1"]
    assert len(runs) == 1 and all(
        len(runs[0][fw]["steps"]) == 2 and runs[0][fw]["startup"] > 0
        for fw in ("raw torch", "plain Lightning", "transformers.Trainer", "hf_lightning.Trainer")
    )


@pytest.mark.slow
def test_the_floor_row_and_the_null_workload(tmp_path):
    """``--floor`` adds Lightning's loop around the raw step as a fifth process; ``W0`` (a 4-weight model)
    runs every framework, and each row says its microseconds per step over the raw loop."""
    record = tmp_path / "runs.json"
    out = subprocess.run(
        [sys.executable, str(BENCH), "--floor", "--rounds", "1", "--cycles", "2", "--block", "1"]
        + ["--workloads", "W0 GA4", "--json", str(record)],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    rows = {line.split(" | ")[1]: line for line in out.stdout.splitlines() if line.startswith("| W0 GA4 |")}
    assert set(rows) == {
        "raw torch",
        "plain Lightning",
        "transformers.Trainer",
        "hf_lightning.Trainer",
        "Lightning loop, raw step",
    }
    assert rows["raw torch"].split(" | ")[3] == "0"  # the raw loop is 0 µs over itself
    runs = json.loads(record.read_text())["W0 GA4"]
    assert all(len(runs[0][fw]["steps"]) == 2 for fw in rows)
    # the floor steps Lightning's optimizer: its process ended at max_steps (a run past it would hang here)
