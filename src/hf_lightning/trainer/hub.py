"""``HubPublisher`` (``trainer.hub``): the Hub workflow, through huggingface_hub's ``HfApi``.

When transformers pushes, we push (docs/hub.md)::

    Trainer(...) with push_to_hub      init_hf_repo: create the repository (exist_ok), check the token
    save_model()                       push_to_hub("Model save")
    each checkpoint save               _push_from_checkpoint: the model files copied to output_dir, pushed
                                       in the background ("Training in progress, step N"); hub_strategy
                                       "checkpoint" adds the folder as last-checkpoint/, "all_checkpoints"
                                       as checkpoint-N/; skipped while a push is in flight unless
                                       hub_always_push
    end of train()                     _finish_current_push: wait for the background pushes
    push_to_hub()                      the model card, then output_dir without checkpoint folders

Only the main process pushes. A background push that fails logs a warning naming its commit and
training goes on; a push the caller waits for raises :class:`HubPushError`, naming the repository
and the local folder where the model is safe.
"""

from __future__ import annotations

import os
import shutil
from concurrent.futures import Future, wait
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hf_lightning.checkpoint.io import write_training_args
from hf_lightning.checkpoint.leftovers import TEMPORARY_PATTERNS
from hf_lightning.checkpoint.peft_adapters import (
    ADAPTER_CONFIG_NAME,
    ADAPTER_SAFE_WEIGHTS_NAME,
    ADAPTER_WEIGHTS_NAME,
)
from hf_lightning.checkpoint.weights import SAFE_WEIGHTS_INDEX_NAME, WEIGHTS_INDEX_NAME
from hf_lightning.utils.logging import get_logger

if TYPE_CHECKING:
    from hf_lightning.trainer.trainer import Trainer

__all__ = ["HubPushError", "HubPublisher", "hub_api"]

logger = get_logger(__name__)

IGNORE_PATTERNS = ["_*", "checkpoint-*", *TEMPORARY_PATTERNS]
"""Never pushed from output_dir: transformers' private files and checkpoint folders (its own patterns), and
every name hf_lightning writes only while a save or rotation runs, and its lock (``checkpoint/leftovers.py``)."""
MODEL_FILES = (
    "config.json",
    "generation_config.json",
    "pytorch_model.bin",
    "model.safetensors",
    ADAPTER_CONFIG_NAME,
    ADAPTER_WEIGHTS_NAME,
    ADAPTER_SAFE_WEIGHTS_NAME,
)
"""A checkpoint's files copied to output_dir for each push: the model's (a ``PeftModel``'s adapter files too)."""


class HubPushError(RuntimeError):
    """A push the caller waited for failed; the message names the repository and the local folder."""


def hub_api() -> Any:
    """An ``HfApi`` on the endpoint of ``HF_ENDPOINT`` as it is now (huggingface_hub reads it at import)."""
    from huggingface_hub import HfApi

    from hf_lightning import __version__

    return HfApi(
        endpoint=os.environ.get("HF_ENDPOINT") or None,
        library_name="hf_lightning",
        library_version=__version__,
    )


class HubPublisher:
    """Creates the repository and pushes; owns the pushes in flight."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        self.in_flight: list[Future] = []
        """The background pushes of the current checkpoint push (transformers' ``push_in_progress``)."""
        self._api: Any = None
        self.hub_model_id: str | None = None
        """transformers' ``trainer.hub_model_id``: the repository ``init_hf_repo`` created (None: none yet)."""

    @property
    def api(self) -> Any:
        """This Trainer's ``HfApi``: one background worker, so its pushes land in order."""
        if self._api is None:
            self._api = hub_api()
        return self._api

    def open_repository(self) -> None:
        """At ``Trainer`` construction: no repository yet; create it when ``push_to_hub`` is set."""
        self.hub_model_id = None
        if self.trainer.plan.hub.push_to_hub:
            self.trainer.init_hf_repo()

    def init_repo(self, token: str | None = None, private: bool | None = None) -> None:
        """``Trainer.init_hf_repo``: create ``hub_model_id`` (default: output_dir's name under the token's user).

        A missing or rejected token is an error here, before training starts.
        """
        t = self.trainer
        if not t.is_world_process_zero():
            return
        hub = t.plan.hub
        name = hub.hub_model_id or Path(str(t.plan.checkpoint.output_dir)).absolute().name
        token = token if token is not None else hub.hub_token
        private = private if private is not None else hub.hub_private_repo
        from huggingface_hub.errors import HfHubHTTPError

        try:
            url = self.api.create_repo(name, token=token, private=private, exist_ok=True)
        except HfHubHTTPError as exc:
            status = exc.response.status_code if exc.response is not None else None
            if status in (401, 403):
                raise ValueError(
                    f"push_to_hub: the Hub refused the token for the repository {name!r} (HTTP {status}). "
                    "Pass a token with write access as `hub_token` (or log in with `hf auth login`)."
                ) from exc
            raise
        self.hub_model_id = url.repo_id
        self.in_flight = []

    # --- pushing --------------------------------------------------------------------------------
    def push(
        self,
        commit_message: str | None = "End of training",
        blocking: bool = True,
        token: str | None = None,
        revision: str | None = None,
        private: bool | None = None,
        **kwargs: Any,
    ) -> Any:
        """``Trainer.push_to_hub``: save the model, write the model card, upload output_dir (not its checkpoints).

        Returns huggingface_hub's ``CommitInfo`` (a ``Future`` of it when not ``blocking``); ``kwargs`` go
        to ``create_model_card``. A failed push raises :class:`HubPushError`; the local files stay.
        """
        t = self.trainer
        args, hub, output_dir = t.args, t.plan.hub, str(t.plan.checkpoint.output_dir)
        t.callback_handler.on_push_begin(args, t.state, t.control)
        model_name = kwargs.pop("model_name", None)
        if model_name is None and args.should_save:
            model_name = (
                Path(output_dir).name if hub.hub_model_id is None else hub.hub_model_id.split("/")[-1]
            )
        token = token if token is not None else hub.hub_token
        if t.hub_model_id is None:
            t.init_hf_repo(token=token, private=private)
        t.save_model(_internal_call=True)
        if not t.is_world_process_zero():
            return None
        self._add_model_tags(kwargs)
        t.create_model_card(model_name=model_name, **kwargs)
        revision = revision if revision is not None else hub.hub_revision
        t._finish_current_push()
        try:
            return self.api.upload_folder(
                repo_id=t.hub_model_id,
                folder_path=output_dir,
                commit_message=commit_message,
                token=token,
                run_as_future=not blocking,
                ignore_patterns=IGNORE_PATTERNS,
                revision=revision,
            )
        except Exception as exc:
            raise HubPushError(
                f"Pushing to the Hub repository {t.hub_model_id!r} failed ({type(exc).__name__}: {exc}). "
                f"The model is safe at the local path {os.path.abspath(output_dir)}; "
                "call `trainer.push_to_hub()` again to retry."
            ) from exc

    def _add_model_tags(self, kwargs: dict[str, Any]) -> None:
        tags = getattr(self.trainer.model, "model_tags", None)
        if tags is None:
            return
        current = kwargs.get("tags") or []
        current = [current] if isinstance(current, str) else list(current)
        kwargs["tags"] = current + [tag for tag in tags if tag not in current]

    def push_from_checkpoint(self, checkpoint_folder: str) -> None:
        """``Trainer._push_from_checkpoint``: push the model of a new checkpoint in the background."""
        t = self.trainer
        args, plan = t.args, t.plan
        strategy = plan.hub.hub_strategy
        if not t.is_world_process_zero() or strategy == "end":
            return
        if not plan.hub.hub_always_push and not self.is_done():
            logger.info("Skipping the push of %s: the previous push is still in flight.", checkpoint_folder)
            return
        t.callback_handler.on_push_begin(args, t.state, t.control)
        output_dir = str(plan.checkpoint.output_dir)
        self._copy_model_files(checkpoint_folder, output_dir)
        if t.processing_class is not None:
            t.processing_class.save_pretrained(output_dir)
        write_training_args(output_dir, args)
        if plan.schedule.save_strategy == "steps":
            message = f"Training in progress, step {t.state.global_step}"
        else:
            message = f"Training in progress, epoch {int(t.state.epoch or 0)}"
        jobs = [self._submit(message, output_dir, ignore_patterns=IGNORE_PATTERNS)]
        if strategy in ("checkpoint", "all_checkpoints"):
            in_repo = "last-checkpoint" if strategy == "checkpoint" else Path(checkpoint_folder).name
            jobs.append(
                self._submit(
                    message + ", checkpoint",
                    checkpoint_folder,
                    path_in_repo=in_repo,
                    ignore_patterns=list(TEMPORARY_PATTERNS),  # a rank file being replaced
                )
            )
        self.in_flight = [job for job in self.in_flight if not job.done()] + jobs

    def _submit(self, message: str, folder: str, **options: Any) -> Future:
        """Upload ``folder`` in the background (one worker: in order); a failure is logged as a warning."""
        hub = self.trainer.plan.hub
        job = self.api.upload_folder(
            repo_id=self.trainer.hub_model_id,
            folder_path=folder,
            commit_message=message,
            token=hub.hub_token,
            revision=hub.hub_revision,
            run_as_future=True,
            **options,
        )
        job.add_done_callback(self._warn_on_failure(message))
        return job

    def _copy_model_files(self, checkpoint_folder: str, output_dir: str) -> None:
        """The checkpoint's model files into output_dir (no second save of the weights), shards included."""
        names = list(MODEL_FILES)
        for index_name in (WEIGHTS_INDEX_NAME, SAFE_WEIGHTS_INDEX_NAME):
            index_path = os.path.join(checkpoint_folder, index_name)
            if os.path.isfile(index_path):
                import json

                with open(index_path, encoding="utf-8") as handle:
                    names += [index_name, *set(json.load(handle)["weight_map"].values())]
        for name in names:
            source = os.path.join(checkpoint_folder, name)
            if os.path.isfile(source):
                shutil.copy(source, os.path.join(output_dir, name))

    def _warn_on_failure(self, commit: str) -> Any:
        repo = self.trainer.hub_model_id

        def check(job: Future) -> None:
            exc = job.exception()
            if exc is not None:
                logger.warning(
                    "The push %r to the Hub repository %s failed (%s: %s); training goes on and the local "
                    "files are untouched. A later push sends them again.",
                    commit,
                    repo,
                    type(exc).__name__,
                    exc,
                )

        return check

    def is_done(self) -> bool:
        """Whether no push is in flight."""
        return all(job.done() for job in self.in_flight)

    def finish_current_push(self) -> None:
        """``Trainer._finish_current_push``: wait for the pushes in flight (at the end of ``train()``)."""
        if not self.is_done():
            logger.info(
                "Waiting for the current checkpoint push to be finished, this might take a couple of minutes."
            )
            wait(self.in_flight)
