"""``report_to="trackio"``: the run reported to Trackio, through the real ``trackio`` package.

Trackio is local-first: runs are kept in a local SQLite database (``$TRACKIO_DIR``, else
huggingface_hub's cache), and optionally mirrored to a Space or a bucket. As transformers' Trackio
integration, on the main process only:

- when training begins, ``trackio.init(project=args.project, name=args.run_name,
  space_id=args.trackio_space_id, bucket_id=args.trackio_bucket_id, private=args.hub_private_repo,
  resume="allow")``; the arguments (and the model config) become the run's config, with
  ``model/num_parameters``;
- each log is recorded with ``train/``, ``eval/``, ``test/`` names and ``train/global_step`` (the
  end-of-training summary values ``train_runtime``, ``train_loss``, … are not);
- when training ends, ``trackio.finish()``; with a Space, ``trackio.freeze`` makes its static copy
  (``trackio_static_space_id``; ``False`` turns it off);
- when pushing to the Hub without a Space, the logs are synced to a static Space
  (``trackio.sync``) unless ``trackio_static_space_id=False``. A failure there is a warning: the
  model push goes on.
"""

from __future__ import annotations

import logging
import re
import secrets
from typing import Any

from hf_lightning.callbacks import TrainerCallback

from .logging import prefixed_logs

__all__ = ["TrackioReporter", "static_space_name"]

logger = logging.getLogger(__name__)

_SUMMARY_KEYS = (
    "train_runtime",
    "train_samples_per_second",
    "train_steps_per_second",
    "train_loss",
    "total_flos",
)


def static_space_name(project: str) -> str:
    """A Hub-safe Space name for ``project``'s static copy, with a short random suffix."""
    name = re.sub(r"[^a-z0-9._-]", "-", project.strip().lower().replace("/", "-"))
    name = re.sub(r"-+", "-", name).strip("-_.") or "trackio-project"
    return f"{name[:81].rstrip('-')}-static-{secrets.token_hex(3)}"


def _import_trackio() -> Any:
    try:
        import trackio
    except ImportError as exc:
        raise ImportError(
            '`TrainingArguments(report_to="trackio")` needs the trackio package: '
            'pip install "hf-lightning[trackio]"'
        ) from exc
    return trackio


class TrackioReporter(TrainerCallback):
    """Reports the run to Trackio as transformers' ``TrackioCallback`` does (see the module docstring)."""

    transformers_names = ("TrackioCallback",)  # pop_callback(transformers' class) finds it (handler.py)

    def __init__(self) -> None:
        self._trackio = _import_trackio()
        self._initialized = False
        self._space_id: str | None = None
        self._static_space_id: str | None = None

    def setup(self, args: Any, state: Any, model: Any) -> None:
        """Start (or resume) the Trackio run with the arguments as its config."""
        if state.is_world_process_zero:
            config = dict(args.to_dict())
            model_config = getattr(model, "config", None)
            if model_config is not None:
                config = {
                    **(model_config if isinstance(model_config, dict) else model_config.to_dict()),
                    **config,
                }
            self._trackio.init(
                project=args.project,
                name=args.run_name,
                space_id=args.trackio_space_id,
                resume="allow",
                private=args.hub_private_repo,
                bucket_id=args.trackio_bucket_id,
            )
            self._space_id = self._trackio.context_vars.current_space_id.get()
            self._trackio.config.update(config, allow_val_change=True)
            if hasattr(model, "num_parameters"):
                self._trackio.config["model/num_parameters"] = model.num_parameters()
        self._initialized = True

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if not self._initialized:
            self.setup(args, state, model)

    def on_log(self, args, state, control, model=None, logs=None, **kwargs):
        if not self._initialized:
            self.setup(args, state, model)
        if state.is_world_process_zero:
            kept = {key: value for key, value in (logs or {}).items() if key not in _SUMMARY_KEYS}
            self._trackio.log({**prefixed_logs(kept), "train/global_step": state.global_step})

    def on_predict(self, args, state, control, metrics=None, **kwargs):
        if not self._initialized:
            self.setup(args, state, kwargs.get("model"))
        if state.is_world_process_zero:
            self._trackio.log(prefixed_logs(metrics or {}))

    def on_train_end(self, args, state, control, model=None, **kwargs):
        if not state.is_world_process_zero or not self._initialized:
            return
        try:
            self._trackio.finish()
        finally:
            self._initialized = False
        if self._space_id and args.trackio_static_space_id is not False:
            try:
                self._static_space_id = self._trackio.freeze(
                    space_id=self._space_id,
                    project=args.project,
                    new_space_id=self._static_space_id
                    or args.trackio_static_space_id
                    or static_space_name(args.project),
                    private=args.hub_private_repo,
                )
            except Exception as exc:  # the run is recorded locally; a Space is a copy
                logger.warning(f"Trackio could not freeze the Gradio Space after training: {exc}")

    def on_push_begin(self, args, state, control, model=None, **kwargs):
        if not state.is_world_process_zero:
            return
        project = self._trackio.context_vars.current_project.get()
        if project is None or self._space_id or args.trackio_static_space_id is False:
            return
        try:
            self._static_space_id = self._trackio.sync(
                project=project,
                sdk="static",
                space_id=self._static_space_id
                or args.trackio_static_space_id
                or static_space_name(args.project),
                private=args.hub_private_repo,
                bucket_id=args.trackio_bucket_id,
                force=True,
            )
        except Exception as exc:
            logger.warning(f"Trackio could not sync the logs of {project!r} to a static Space: {exc}")
