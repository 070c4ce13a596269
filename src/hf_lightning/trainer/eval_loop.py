"""``EvaluationLoop`` (``trainer.eval_loop``): the loop shared by ``evaluate()`` and ``predict()``.

``Trainer.evaluation_loop`` and ``Trainer.prediction_step`` keep transformers' signatures (users
override them) and call this part; it calls ``prediction_step``, ``compute_loss`` and
``_prepare_inputs`` back through the Trainer.

One pass over the dataloader, as transformers runs it::

    for each batch:
        loss, logits, labels = prediction_step(model, batch)      # overridable
        losses: the batch loss repeated once per sample            # so eval_loss is a per-sample mean
        pad logits / labels / inputs to the longest sequence over the ranks
        logits = preprocess_logits_for_metrics(logits, labels)     # per batch, before accumulation
        gather across ranks (dataset order, padding samples dropped)
        accumulate (not with batch_eval_metrics, except for predict)
        on_prediction_step
        batch_eval_metrics: compute_metrics(batch, compute_result=is_last_batch)
        else every eval_accumulation_steps batches: move what was accumulated to CPU / NumPy
    compute_metrics(EvalPrediction(all predictions, all labels[, inputs][, losses]))
    eval_loss = mean of the per-sample losses; every key prefixed with metric_key_prefix

Where the model runs and how ranks gather is ``hf_lightning.adapters.evaluation``'s job.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from hf_lightning.eval_utils import (
    EvalAccumulator,
    find_batch_size,
    lookahead,
    make_eval_prediction,
    mean_eval_loss,
    nested_detach,
    prefix_metric_keys,
)
from hf_lightning.trainer.engine_door import ENGINE
from hf_lightning.trainer_utils import EvalLoopOutput, denumpify_detensorize, has_length
from hf_lightning.utils.logging import get_logger

if TYPE_CHECKING:
    from hf_lightning.trainer.trainer import Trainer

__all__ = ["EvaluationLoop"]

logger = get_logger(__name__)


class _EvalRun:
    """One evaluation loop: its settings, its collective, and what it has accumulated so far."""

    def __init__(
        self,
        do_concat: bool,
        predictions_padding_index: int,
        collective: Any,
        description: str,
        prediction_loss_only: bool,
        ignore_keys: list[str] | None,
    ) -> None:
        self.collective, self.description = collective, description
        self.prediction_loss_only, self.ignore_keys = prediction_loss_only, ignore_keys
        self.losses = EvalAccumulator(do_concat)
        self.preds = EvalAccumulator(do_concat, predictions_padding_index)
        self.labels = EvalAccumulator(do_concat)
        self.inputs = EvalAccumulator(do_concat)
        self.metrics: dict[str, Any] | None = None
        self.observed = 0

    def offload(self) -> None:
        for accumulator in (self.losses, self.preds, self.labels, self.inputs):
            accumulator.to_cpu_and_numpy()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


class EvaluationLoop:
    """One pass of ``prediction_step`` over a dataloader, gathered and scored; owns the model-preparation facts."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        self.model_preparation_time: float | None = None
        """Seconds the engine took to prepare the model for the first evaluation outside training."""
        self.model_prepared = False

    def run(
        self,
        dataloader: Any,
        description: str,
        prediction_loss_only: bool | None = None,
        ignore_keys: list[str] | None = None,
        metric_key_prefix: str = "eval",
    ) -> EvalLoopOutput:
        """Run ``prediction_step`` over ``dataloader`` and compute the metrics (with or without labels)."""
        if prediction_loss_only is None:
            prediction_loss_only = self.trainer.plan.evaluation.prediction_loss_only
        engine = ENGINE.EvalEngine(self.trainer.accelerator, settings=self.trainer.plan.eval_placement)
        model = self._prepare_model_for_eval(engine)
        self._log_eval_header(dataloader, description)
        model.eval()
        self._set_optimizer_mode("eval")
        self.trainer.callback_handler.eval_dataloader = dataloader
        run = _EvalRun(
            self.trainer.plan.evaluation.eval_do_concat_batches,
            self.trainer._predictions_padding_index(),
            self._eval_collective(engine, dataloader),
            description,
            prediction_loss_only,
            ignore_keys,
        )
        step = -1
        with engine.session(model):  # a schedule-free optimizer stays in eval mode (saving follows),
            for step, (is_last, inputs) in enumerate(lookahead(dataloader)):  # as in transformers; the
                self._eval_step(run, model, inputs, step, is_last)  # next training step switches it back
        if step < 0:  # transformers: silent, metrics of nothing
            logger.warning(
                "%s at step %d: the %s dataset is empty (its dataloader yielded no batch), so the `%s_*` "
                "metrics describe no example.",
                description,
                self.trainer.state.global_step,
                metric_key_prefix,
                metric_key_prefix,
            )
        return self._eval_output(run, dataloader, metric_key_prefix)

    def _eval_step(self, run: _EvalRun, model: nn.Module, inputs: Any, step: int, is_last: bool) -> None:
        args, settings = self.trainer.args, self.trainer.plan.evaluation
        batch_size = find_batch_size(inputs)
        run.observed += batch_size or 0
        outputs = self.trainer.prediction_step(
            model, inputs, run.prediction_loss_only, ignore_keys=run.ignore_keys
        )
        keep = run.description == "Prediction" or not settings.batch_eval_metrics
        losses, logits, labels = self._gather_step(
            run, step, keep, inputs, outputs, batch_size or args.eval_batch_size
        )
        training = self.trainer.run  # the run object holds control
        training.control = self.trainer.callback_handler.on_prediction_step(
            args, self.trainer.state, self.trainer.control
        )
        if settings.batch_eval_metrics:
            if self.trainer.compute_metrics is not None and logits is not None and labels is not None:
                prediction = make_eval_prediction(
                    logits,
                    labels,
                    inputs=inputs,
                    losses=losses,
                    include_for_metrics=settings.include_for_metrics,
                )
                run.metrics = self.trainer.compute_metrics(prediction, compute_result=is_last)
        elif (
            settings.eval_accumulation_steps is not None
            and (step + 1) % settings.eval_accumulation_steps == 0
        ):
            run.offload()

    def _gather_step(
        self,
        run: _EvalRun,
        step: int,
        keep: bool,
        inputs: Any,
        outputs: tuple[Any, Any, Any],
        batch_size: int,
    ) -> tuple[Any, Any, Any]:
        """Pad, preprocess, gather and (when ``keep``) accumulate one batch's outputs."""
        collective, (losses, logits, labels) = run.collective, outputs
        if losses is not None:
            # gathered from several processes: eval_batch_size copies of each rank's, as transformers (also
            # when a batch holds more rows than samples: a preference pair's two); one process: one per row
            gathers = self.trainer.accelerator.split_batches or collective.active
            repeat = self.trainer.args.eval_batch_size if gathers else None
            losses = collective.gather(losses.repeat(repeat or batch_size), step)
            run.losses.add(losses)
        if "inputs" in self.trainer.plan.evaluation.include_for_metrics:
            decoded = collective.gather(collective.pad_across_processes(self._eval_main_input(inputs)), step)
            if keep:
                run.inputs.add(decoded)
        if labels is not None:
            labels = collective.pad_across_processes(labels)
        if logits is not None:
            logits = collective.pad_across_processes(logits, pad_index=run.preds.padding_index)
            if self.trainer.preprocess_logits_for_metrics is not None:
                logits = self.trainer.preprocess_logits_for_metrics(logits, labels)
            logits = collective.gather(logits, step)
            if keep:
                run.preds.add(logits)
        if labels is not None:
            labels = collective.gather(labels, step)
            if keep:
                run.labels.add(labels)
        return losses, logits, labels

    def _eval_output(self, run: _EvalRun, dataloader: Any, prefix: str) -> EvalLoopOutput:
        plan = self.trainer.plan
        losses, preds = run.losses.get_arrays(), run.preds.get_arrays()
        labels, inputs = run.labels.get_arrays(), run.inputs.get_arrays()
        metrics = run.metrics
        if (
            self.trainer.compute_metrics is not None
            and preds is not None
            and labels is not None
            and not plan.evaluation.batch_eval_metrics
        ):
            metrics = self.trainer.compute_metrics(
                make_eval_prediction(
                    preds,
                    labels,
                    inputs=inputs,
                    losses=losses,
                    include_for_metrics=plan.evaluation.include_for_metrics,
                )
            )
            if not isinstance(metrics, Mapping):  # transformers fails on it with a TypeError of its own
                raise TypeError(
                    f"`compute_metrics` returned {type(metrics).__name__}; it must return a dict of metric names "
                    "to values, e.g. {'accuracy': 0.9}"
                )
        metrics = dict(denumpify_detensorize(metrics)) if metrics is not None else {}
        loss = mean_eval_loss(losses, plan.module.logging_nan_inf_filter)
        if loss is not None:
            metrics[f"{prefix}_loss"] = loss
        if self.model_preparation_time is not None:
            metrics[f"{prefix}_model_preparation_time"] = self.model_preparation_time
        prefix_metric_keys(metrics, prefix)
        return EvalLoopOutput(
            predictions=preds,
            label_ids=labels,
            metrics=metrics,
            num_samples=self._eval_num_samples(dataloader, run.observed),
        )

    def predict_step(
        self,
        model: nn.Module,
        inputs: dict[str, Any],
        prediction_loss_only: bool,
        ignore_keys: list[str] | None = None,
    ) -> tuple[Any, Any, Any]:
        """``(loss, logits, labels)`` of one batch, each None when absent (only the loss with
        ``prediction_loss_only``). Output keys in ``ignore_keys`` are left out of the logits."""
        has_labels = bool(self.trainer.label_names) and all(
            inputs.get(k) is not None for k in self.trainer.label_names
        )
        return_loss = inputs.get("return_loss")
        if return_loss is None:
            return_loss = self._can_return_loss()
        with_loss = has_labels or (not self.trainer.label_names and bool(return_loss))
        inputs = self.trainer._prepare_inputs(inputs)
        if ignore_keys is None:
            ignore_keys = self._default_ignore_keys()
        labels = None
        if with_loss:
            labels = nested_detach(tuple(inputs.get(name) for name in self.trainer.label_names))
            labels = labels[0] if len(labels) == 1 else labels
        loss, outputs = self._eval_forward(model, inputs, with_loss, prediction_loss_only)
        if prediction_loss_only:
            return loss, None, None
        logits = _logits_of(outputs, list(ignore_keys), with_loss)
        if logits is None:
            return loss, None, labels
        logits = nested_detach(logits)
        if isinstance(logits, (tuple, list)) and len(logits) == 1:
            logits = logits[0]
        return loss, logits, labels

    def _eval_forward(
        self, model: nn.Module, inputs: dict[str, Any], with_loss: bool, loss_only: bool
    ) -> tuple[Any, Any]:
        """``(loss or None, outputs)`` of the model on one batch, without gradients.

        Only the loss wanted, with Liger kernels: the model is asked to skip its logits
        (``skip_logits=True``), as transformers asks it.
        """
        with torch.no_grad(), self.trainer.compute_loss_context_manager():
            if not with_loss:
                return None, model(**inputs)
            num_items = self._eval_num_items(model, inputs)
            if self.trainer.plan.runtime.use_liger_kernel and loss_only:
                inputs = {**inputs, "skip_logits": True}
            loss, outputs = self.trainer.compute_loss(
                model, inputs, return_outputs=True, num_items_in_batch=num_items
            )
        return loss.detach().mean(), outputs

    # --- helpers ---------------------------------------------------------------------------
    def _prepare_model_for_eval(self, engine: Any) -> nn.Module:
        prepared_before = self.trainer.run.started or self.model_prepared
        model, seconds = engine.prepare_model(self.trainer.model, in_train=self.trainer.is_in_train)
        if not engine.in_lightning and not prepared_before:
            # transformers reports the time its accelerator took to prepare the model, once
            self.model_preparation_time = seconds
            self.model_prepared = True
        return model

    def _eval_collective(self, engine: Any, dataloader: Any) -> Any:
        world_size, _ = engine.world()
        sampler = ENGINE.eval_shard_rule(dataloader)  # ours, or accelerate's for a subclass's sampler
        if world_size > 1 and sampler is None:
            logger.warning(
                "The evaluation dataloader is not sharded by hf_lightning (an IterableDataset or a "
                "custom loader): each of the %d processes keeps the results of its own batches.",
                world_size,
            )
        return ENGINE.EvalCollective(world_size, sampler, self.trainer.plan.evaluation.eval_use_gather_object)

    def _set_optimizer_mode(self, mode: str) -> None:
        """Schedule-free optimizers have ``train()`` / ``eval()``; switch them with the model."""
        switch = getattr(self.trainer.optimizer, mode, None)
        if callable(switch):
            switch()

    def _log_eval_header(self, dataloader: Any, description: str) -> None:
        logger.info("\n***** Running %s *****", description)
        if has_length(dataloader):
            logger.info("  Num examples = %d", self.trainer.num_examples(dataloader))
        else:
            logger.info("  Num examples: Unknown")
        logger.info("  Batch size = %d", self.trainer.args.eval_batch_size)

    def _eval_num_samples(self, dataloader: Any, observed: int) -> int:
        dataset = getattr(dataloader, "dataset", None)
        if dataset is not None and has_length(dataset):
            num_samples = len(dataset)
        elif has_length(dataloader):
            num_samples = self.trainer.num_examples(dataloader)
        else:
            num_samples = observed
        return observed if num_samples == 0 and observed > 0 else num_samples

    def _eval_main_input(self, inputs: dict[str, Any]) -> Any:
        name = getattr(self.trainer.model, "main_input_name", "input_ids")
        return self.trainer._prepare_inputs({name: inputs[name]})[name]

    def _eval_num_items(self, model: nn.Module, inputs: dict[str, Any]) -> Any:
        """``num_items_in_batch`` of one evaluation batch, as transformers counts it."""
        count = self.trainer.steps.loss_settings().count(model, [inputs])
        if count is None:
            return None
        count = count.to(self.trainer.accelerator.device)
        if (
            self.trainer.plan.module.average_tokens_across_devices
            and self.trainer.accelerator.num_processes > 1
        ):
            count = self.trainer.accelerator.reduce(count, "sum")
        return count

    def _can_return_loss(self) -> bool:
        """``trainer.can_return_loss``: ``model.forward`` has ``return_loss=True`` (CLIP-like models), or a
        subclass says so (sentence-transformers' does)."""
        return bool(getattr(self.trainer, "can_return_loss", False))

    def _default_ignore_keys(self) -> list[str]:
        config = getattr(self.trainer.model, "config", None)
        if config is None:
            return []
        return list(getattr(config, "keys_to_ignore_at_inference", ["cache"]))


def _logits_of(outputs: Any, ignore_keys: list[str], with_loss: bool) -> Any:
    if isinstance(outputs, Mapping):
        skip = ignore_keys + ["loss"] if with_loss else ignore_keys
        return tuple(value for key, value in outputs.items() if key not in skip)
    if isinstance(outputs, torch.Tensor):
        return None if with_loss else outputs
    return outputs[1:] if with_loss else outputs
