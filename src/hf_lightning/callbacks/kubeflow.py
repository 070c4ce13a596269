"""Implements ``report_to="kubeflow"``: training progress reported to a Kubeflow Trainer controller.

Inside a Kubeflow TrainJob (with the ``TrainJobRuntimeStatus`` feature gate) the controller injects
``KUBEFLOW_TRAINER_SERVER_URL`` (where to POST the status), ``KUBEFLOW_TRAINER_SERVER_TOKEN`` (a file
holding the service-account token) and ``KUBEFLOW_TRAINER_SERVER_CA_CERT`` (a CA bundle for TLS). As in
transformers, ``TrainingArguments`` then adds ``"kubeflow"`` to ``report_to`` by itself (unless
``DISABLE_KUBEFLOW_INTEGRATION=TRUE``), and this callback posts, from the main process only::

    {"trainerStatus": {"lastUpdatedTime": ..., "progressPercentage": 0..100,
                       "estimatedRemainingSeconds": ..., "metrics": [{"name": ..., "value": "..."}]}}

at the start (0 %), after steps (at most one post every 5 s, capped at 99 %) and at the end (100 %).
A failed post is logged at debug level and never interrupts training.
"""

from __future__ import annotations

import json
import os
import ssl
import time
import urllib.request
from datetime import UTC, datetime
from typing import Any

from hf_lightning.args.normalize import KUBEFLOW_SERVER_URL_ENV as SERVER_URL_ENV
from hf_lightning.args.normalize import is_kubeflow_available
from hf_lightning.callbacks.api import TrainerCallback
from hf_lightning.utils.logging import get_logger

__all__ = ["KubeflowCallback", "is_kubeflow_available"]

logger = get_logger(__name__)

TOKEN_PATH_ENV = "KUBEFLOW_TRAINER_SERVER_TOKEN"
CA_CERT_ENV = "KUBEFLOW_TRAINER_SERVER_CA_CERT"


class KubeflowCallback(TrainerCallback):
    """Posts progress, the estimated time left and the latest logged metrics to the Kubeflow controller."""

    min_update_interval = 5.0
    token_cache_seconds = 300.0

    def __init__(self) -> None:
        if not is_kubeflow_available():
            raise RuntimeError(
                f"KubeflowCallback needs the {SERVER_URL_ENV} environment variable (set by Kubeflow in a "
                "TrainJob with TrainJobRuntimeStatus enabled)."
            )
        self._metrics: dict[str, float] = {}
        self._start: float | None = None
        self._last_post = 0.0
        self._token: tuple[str, float] | None = None

    # --- events ----------------------------------------------------------------------------
    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        self._start, self._metrics = time.time(), {}
        total = {"total_steps": state.max_steps} if state.max_steps else None
        self.post(progress=0, metrics=total, force=True)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self._start is None or not state.is_world_process_zero or logs is None:
            return
        self._metrics.update({k: v for k, v in logs.items() if isinstance(v, (int, float))})

    def on_step_end(self, args, state, control, **kwargs):
        if (
            self._start is None
            or not state.is_world_process_zero
            or not state.max_steps
            or state.max_steps <= 0
        ):
            return
        eta = None
        if state.global_step > 0:
            per_step = (time.time() - self._start) / state.global_step
            eta = int(per_step * (state.max_steps - state.global_step))
        metrics = {**self._metrics, "current_step": state.global_step, "total_steps": state.max_steps}
        if state.epoch is not None:
            metrics["current_epoch"] = round(state.epoch, 2)
        progress = min(int(state.global_step / state.max_steps * 100), 99)  # 100 % only at the end
        self.post(progress=progress, eta=eta, metrics=metrics)

    def on_train_end(self, args, state, control, **kwargs):
        if self._start is None or not state.is_world_process_zero:
            return
        self.post(progress=100, eta=0, metrics=self._metrics, force=True)

    # --- posting ---------------------------------------------------------------------------
    def post(
        self,
        progress: int | None = None,
        eta: int | None = None,
        metrics: dict | None = None,
        force: bool = False,
    ) -> bool:
        """Send one status update; ``False`` when throttled, unauthenticated or failed (never raises)."""
        now = time.monotonic()
        if not force and now - self._last_post < self.min_update_interval:
            return False
        self._last_post = now
        try:
            token = self._read_token()
            url = os.environ.get(SERVER_URL_ENV)
            if not token or not url:
                return False
            request = urllib.request.Request(
                url,
                data=json.dumps({"trainerStatus": _status(progress, eta, metrics)}).encode("utf-8"),
                headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
                method="POST",
            )
            with urllib.request.urlopen(request, timeout=5, context=_ssl_context()) as response:
                return response.status == 200
        except Exception as error:  # a progress report never stops training
            logger.debug(f"[Kubeflow] Failed to update status: {error}")
            return False

    def _read_token(self) -> str | None:
        now = time.monotonic()
        if self._token is not None and now - self._token[1] < self.token_cache_seconds:
            return self._token[0]
        path = os.environ.get(TOKEN_PATH_ENV)
        if not path or not os.path.exists(path):
            return None
        with open(path, encoding="utf-8") as f:
            self._token = (f.read().strip(), now)
        return self._token[0]


def _status(progress: int | None, eta: int | None, metrics: dict | None) -> dict[str, Any]:
    status: dict[str, Any] = {"lastUpdatedTime": datetime.now(UTC).isoformat()}
    if progress is not None:
        status["progressPercentage"] = max(0, min(100, progress))
    if eta is not None:
        status["estimatedRemainingSeconds"] = max(0, int(eta))
    if metrics:
        status["metrics"] = [{"name": str(k), "value": str(v)} for k, v in metrics.items()]
    return status


def _ssl_context() -> ssl.SSLContext | None:
    ca_file = os.environ.get(CA_CERT_ENV)
    if not ca_file:
        return None
    try:
        return ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as error:
        logger.warning(f"[Kubeflow] Failed to create an SSL context with the CA file {ca_file}: {error}")
        return None
