"""report_to="kubeflow": progress posted to a local Kubeflow-shaped status server during a real run."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from hf_lightning import Trainer, TrainingArguments
from hf_lightning.callbacks.kubeflow import KubeflowCallback, is_kubeflow_available
from tests.tiny import RegressionModel, regression_data


@pytest.fixture
def status_server(tmp_path, monkeypatch):
    """A server on 127.0.0.1 that records each POST (its bearer token and JSON body)."""
    received: list[tuple[str, dict]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's name)
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            received.append((self.headers["Authorization"], body))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    token = tmp_path / "token"
    token.write_text("secret\n")
    monkeypatch.setenv("KUBEFLOW_TRAINER_SERVER_URL", f"http://127.0.0.1:{server.server_port}/status")
    monkeypatch.setenv("KUBEFLOW_TRAINER_SERVER_TOKEN", str(token))
    yield received
    server.shutdown()
    thread.join()
    server.server_close()  # the listening socket


def test_a_run_posts_0_then_100_percent_with_the_token_and_the_metrics(tmp_path, status_server):
    """The first post says 0 % and the total steps, the last 100 % with the logged loss; all carry the token."""
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"), max_steps=4, logging_steps=2, report_to="none", save_strategy="no"
    )
    Trainer(
        RegressionModel(), args, train_dataset=regression_data(32), callbacks=[KubeflowCallback()]
    ).train()
    assert len(status_server) >= 2 and {auth for auth, _ in status_server} == {"Bearer secret"}
    first, last = status_server[0][1]["trainerStatus"], status_server[-1][1]["trainerStatus"]
    assert first["progressPercentage"] == 0 and {"name": "total_steps", "value": "4"} in first["metrics"]
    assert last["progressPercentage"] == 100 and last["estimatedRemainingSeconds"] == 0
    assert "loss" in {m["name"] for m in last["metrics"]}


def test_availability_follows_the_environment():
    """Available with a server URL, unless DISABLE_KUBEFLOW_INTEGRATION=TRUE; never without a URL."""
    url = {"KUBEFLOW_TRAINER_SERVER_URL": "https://controller/status"}
    assert is_kubeflow_available(url)
    assert not is_kubeflow_available({**url, "DISABLE_KUBEFLOW_INTEGRATION": "true"})
    assert not is_kubeflow_available({})


def test_a_server_that_is_down_never_interrupts_training(tmp_path, monkeypatch):
    """Posting to a closed port fails quietly; training finishes."""
    monkeypatch.setenv("KUBEFLOW_TRAINER_SERVER_URL", "http://127.0.0.1:9/status")
    (tmp_path / "token").write_text("t")
    monkeypatch.setenv("KUBEFLOW_TRAINER_SERVER_TOKEN", str(tmp_path / "token"))
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"), max_steps=2, report_to="none", save_strategy="no"
    )
    trainer = Trainer(
        RegressionModel(), args, train_dataset=regression_data(16), callbacks=[KubeflowCallback()]
    )
    assert trainer.train().global_step == 2


def test_inside_a_trainjob_report_to_gains_kubeflow_as_in_transformers(tmp_path, monkeypatch):
    """With the controller's URL set, report_to gets "kubeflow" added, as transformers' does."""
    import transformers

    monkeypatch.setenv("KUBEFLOW_TRAINER_SERVER_URL", "https://controller/status")
    ours = TrainingArguments(output_dir=str(tmp_path), report_to="none")
    theirs = transformers.TrainingArguments(output_dir=str(tmp_path), report_to="none")
    assert ours.report_to == theirs.report_to == ["kubeflow"]


def test_the_trainer_reports_without_an_explicit_callback(tmp_path, status_server):
    """report_to="kubeflow" (added from the environment) installs the callback: the run is posted."""
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"), max_steps=2, report_to="none", save_strategy="no"
    )
    trainer = Trainer(RegressionModel(), args, train_dataset=regression_data(16))
    assert any(isinstance(cb, KubeflowCallback) for cb in trainer.callback_handler.callbacks)
    trainer.train()
    assert status_server[-1][1]["trainerStatus"]["progressPercentage"] == 100
