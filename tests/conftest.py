"""Shared test settings: one thread (tiny models run ~30x faster on 2 cores), offline, quiet."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_DISABLED", "true")
os.environ.setdefault("PYTHONHASHSEED", "0")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _one_thread():
    """Keep every test on one intra-op thread, even after a library changed it."""
    torch.set_num_threads(1)
    yield
