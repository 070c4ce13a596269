"""Shared test settings: one thread (tiny models run ~30x faster on 2 cores), offline, quiet."""

from __future__ import annotations

import os
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_DISABLED", "true")
os.environ.setdefault("TRACKIO_DIR", os.path.join(tempfile.gettempdir(), "hf-lightning-trackio-tests"))
os.environ.setdefault("PYTHONHASHSEED", "0")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _one_thread():
    """Keep every test on one intra-op thread, even after a library changed it."""
    torch.set_num_threads(1)
    yield


@pytest.fixture
def hub_server(tmp_path, monkeypatch):
    """A test Hub (tests/hub_server.py) on 127.0.0.1, reached through HF_ENDPOINT; online mode for it.

    huggingface_hub reads HF_HUB_OFFLINE and HF_ENDPOINT when it is imported, so besides the environment
    those settings (and the download URL built from the endpoint) are set for the test (settings only: no client code is replaced).
    """
    import huggingface_hub.constants as hub_constants

    from tests.hub_server import TOKEN, HubServer

    server = HubServer(tmp_path / "hub-server").start()
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub_constants, "ENDPOINT", server.url)
    template = server.url + "/{repo_id}/resolve/{revision}/{filename}"
    monkeypatch.setattr(hub_constants, "HUGGINGFACE_CO_URL_TEMPLATE", template)
    yield server
    server.stop()


_DEADLINE = float(os.environ.get("HF_LIGHTNING_TEST_DEADLINE", "0") or 0)
"""Unix time after which no further test starts (``.ci/run`` sets it for the slow tests, which run only while
CI time allows); unset or 0: no deadline."""
_PAST_DEADLINE: list[str] = []


def pytest_runtest_setup(item):
    if _DEADLINE and time.time() > _DEADLINE:
        _PAST_DEADLINE.append(item.nodeid)
        pytest.skip("not started: the run's time budget (HF_LIGHTNING_TEST_DEADLINE) is spent")


def pytest_terminal_summary(terminalreporter):
    if _PAST_DEADLINE:
        terminalreporter.write_line(
            f"{len(_PAST_DEADLINE)} tests not started: the time budget (HF_LIGHTNING_TEST_DEADLINE) was spent "
            f"first; the first of them: {_PAST_DEADLINE[0]}"
        )
