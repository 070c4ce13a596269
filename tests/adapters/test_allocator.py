"""The allocator tuning: on by default on Linux, switched off by HF_LIGHTNING_MALLOC_TUNING=0."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _run(code: str, **env: str) -> str:
    import os

    full_env = {**os.environ, **env}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=full_env, check=True
    ).stdout.strip()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt exists on Linux only")
def test_tuning_applies_once_and_can_be_disabled():
    """retain_freed_memory() tunes glibc by default and does nothing with HF_LIGHTNING_MALLOC_TUNING=0."""
    code = "from hf_lightning.adapters.allocator import retain_freed_memory as r; print(r(), r())"
    assert _run(code) == "True True"
    assert _run(code, HF_LIGHTNING_MALLOC_TUNING="0") == "False False"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt exists on Linux only")
def test_freed_large_buffers_are_reused_without_page_faults():
    """After tuning, a 64 MiB tensor (above glibc's 32 MiB dynamic mmap limit) is reused without page faults."""
    code = """
import resource, torch
from hf_lightning.adapters.allocator import retain_freed_memory
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
def churn():
    for _ in range(5):
        torch.ones(16 * 1024 * 1024)
churn()
before = faults(); churn(); plain = faults() - before
retain_freed_memory(); churn()
rounds = []
for _ in range(3):
    before = faults(); churn(); rounds.append(faults() - before)
tuned = min(rounds)
print(plain, tuned)
"""
    plain, tuned = map(int, _run(code).split())
    assert tuned * 10 < plain
