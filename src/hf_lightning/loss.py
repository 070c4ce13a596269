"""The loss of one micro-batch, normalised over the whole gradient-accumulation window.

This is the engine-free core shared by ``Trainer.compute_loss`` and ``HFModule``:

- ``count_items_in_batch`` counts the target tokens of a whole accumulated batch (labels != -100;
  the shifted labels ``labels[..., 1:]`` for causal language models), the ``num_items_in_batch``
  that transformers passes to ``model.forward`` and to ``compute_loss_func``.
- ``compute_model_loss`` runs the model on one micro-batch and returns its share of the window's
  loss, exactly as transformers' ``Trainer.compute_loss`` does.

How the model's own loss reduces over a batch (does it divide by the count, is it a mean, does it
shift the labels) is asked of the model, once: :mod:`hf_lightning.loss_rule`.

Divergences from transformers (listed in ``docs/divergences.md``, each tested):
1. where transformers' loss registry is silent (GPT-2 has no ``loss_type``), the label shift is found
   from the model's loss, so GPT-2's count is of the shifted labels (transformers counts unshifted);
2. a model whose ``forward`` takes ``**kwargs`` but whose loss does not divide by
   ``num_items_in_batch`` (a mean over its own micro-batch: sequence, token and image classification,
   BERT's masked LM, T5 and BART's seq2seq heads; or a sum: CTC) has each micro-batch's mean weighted
   by its share of the window's target items (a sum is kept as it is), so gradient accumulation
   equals the big batch (transformers neither normalises nor divides by the accumulation steps for
   such models: its loss is GA times too large);
5. label smoothing works for a plain ``nn.Module`` without a ``config``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import nn

from hf_lightning.loss_rule import (
    LossRule,
    cached_loss_rule,
    probe_loss_rule,
    registry_shifts_labels,
    unwrap_model,
)

__all__ = [
    "IGNORE_INDEX",
    "LabelSmoother",
    "LossSettings",
    "compute_model_loss",
    "count_items_in_batch",
    "loss_is_scaled_for_ga",
    "loss_shifts_labels",
    "model_accepts_loss_kwargs",
    "unwrap_model",
]

IGNORE_INDEX = -100


def model_accepts_loss_kwargs(model: nn.Module) -> bool:
    """Whether ``model.forward`` takes ``num_items_in_batch`` (an explicit attribute wins, then ``**kwargs``)."""
    model = unwrap_model(model)
    explicit = getattr(model, "accepts_loss_kwargs", None)
    if isinstance(explicit, bool):
        return explicit
    params = inspect.signature(model.forward).parameters.values()
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def loss_shifts_labels(model: nn.Module) -> bool:
    """Whether the model's loss predicts ``labels[..., 1:]``, as far as is known before a batch is seen.

    The probe's answer once a batch has been seen (:func:`hf_lightning.loss_rule.probe_loss_rule`),
    else transformers' loss registry, else False.
    """
    rule = cached_loss_rule(model)
    if rule is not None:
        return rule.shift_labels
    return bool(registry_shifts_labels(model))


def count_items_in_batch(batches: Sequence[Mapping[str, Any]], *, shift_labels: bool) -> torch.Tensor | None:
    """The number of target tokens in a whole accumulated batch, or None when it cannot be counted.

    A collator-provided ``shift_labels`` entry is counted as it is; otherwise ``labels[..., 1:]``
    for causal LMs and ``labels`` for every other model. Positions equal to -100 do not count.
    """
    if not batches or not isinstance(batches[0], Mapping) or "labels" not in batches[0]:
        return None
    total = None
    for batch in batches:
        if "shift_labels" in batch:
            labels = batch["shift_labels"]
        else:
            labels = batch["labels"][..., 1:] if shift_labels else batch["labels"]
        if not isinstance(labels, torch.Tensor):
            return None
        count = labels.ne(IGNORE_INDEX).sum()
        total = count if total is None else total + count.to(total.device)
    return total


@dataclass
class LabelSmoother:
    """Label smoothing on a model's logits: ``(1 - epsilon) * nll + epsilon * uniform``, ignoring -100."""

    epsilon: float = 0.1
    ignore_index: int = IGNORE_INDEX

    def __call__(
        self,
        model_output: Any,
        labels: torch.Tensor,
        shift_labels: bool = False,
        num_items_in_batch: torch.Tensor | int | None = None,
    ) -> torch.Tensor:
        logits = model_output["logits"] if isinstance(model_output, Mapping) else model_output[0]
        if shift_labels:
            logits = logits[..., :-1, :].contiguous()
            labels = labels[..., 1:].contiguous()
        neg_log_probs = -nn.functional.log_softmax(logits, dim=-1)
        if labels.dim() == neg_log_probs.dim() - 1:
            labels = labels.unsqueeze(-1)
        ignored = labels.eq(self.ignore_index)
        nll = neg_log_probs.gather(dim=-1, index=labels.clamp(min=0)).masked_fill(ignored, 0.0)
        smooth = neg_log_probs.sum(dim=-1, keepdim=True, dtype=torch.float32).masked_fill(ignored, 0.0)
        denominator: torch.Tensor | int
        if num_items_in_batch is None:
            denominator = ignored.numel() - ignored.long().sum()
        elif isinstance(num_items_in_batch, torch.Tensor):
            denominator = num_items_in_batch.to(nll.device)
        else:
            denominator = num_items_in_batch
        nll_loss = nll.sum() / denominator
        smooth_loss = smooth.sum() / (denominator * neg_log_probs.shape[-1])
        return (1 - self.epsilon) * nll_loss + self.epsilon * smooth_loss


@dataclass(frozen=True)
class LossSettings:
    """How one model's loss is computed; decided once per training run (the model's rule at its first batch)."""

    accepts_loss_kwargs: bool
    shift_labels: bool | None = None  # None: asked of the model (hf_lightning.loss_rule)
    label_smoother: LabelSmoother | None = None
    compute_loss_func: Callable[..., torch.Tensor] | None = None
    average_tokens_across_devices: bool = True
    world_size: int = 1

    @classmethod
    def for_model(
        cls,
        model: nn.Module,
        *,
        label_smoothing_factor: float = 0.0,
        label_smoother: LabelSmoother | None = None,
        compute_loss_func: Callable[..., torch.Tensor] | None = None,
        average_tokens_across_devices: bool = True,
        world_size: int = 1,
        shift_labels: bool | None = None,
        accepts_loss_kwargs: bool | None = None,
    ) -> LossSettings:
        """Settings for ``model``; explicit ``shift_labels`` / ``accepts_loss_kwargs`` win over the model's answer,
        a ``label_smoother`` already built over ``label_smoothing_factor``. Both training paths build theirs
        here: ``hf_lightning.Trainer`` (``trainer/steps.py``) and ``HFModule``."""
        if label_smoother is None and label_smoothing_factor:
            label_smoother = LabelSmoother(label_smoothing_factor)
        return cls(
            accepts_loss_kwargs=(
                model_accepts_loss_kwargs(model) if accepts_loss_kwargs is None else accepts_loss_kwargs
            ),
            shift_labels=shift_labels,
            label_smoother=label_smoother,
            compute_loss_func=compute_loss_func,
            average_tokens_across_devices=average_tokens_across_devices,
            world_size=world_size,
        )

    def counts_items(self) -> bool:
        """Whether ``num_items_in_batch`` is needed (the model or the loss function normalises by it)."""
        return self.accepts_loss_kwargs or self.compute_loss_func is not None

    def rule(self, model: nn.Module, batch: Mapping[str, Any]) -> LossRule:
        """The model's loss rule, probed on ``batch`` the first time (see :mod:`hf_lightning.loss_rule`)."""
        rule = probe_loss_rule(
            model, batch, accepts_loss_kwargs=self.accepts_loss_kwargs, shift_labels=self.shift_labels
        )
        if self.shift_labels is None or rule.shift_labels == self.shift_labels:
            return rule
        return LossRule(rule.reduction, self.shift_labels)

    def count(self, model: nn.Module, batches: Sequence[Mapping[str, Any]]) -> torch.Tensor | None:
        """``num_items_in_batch`` of one process's window (None when not needed or not countable)."""
        if not self.counts_items() or not batches or not isinstance(batches[0], Mapping):
            return None
        if "labels" not in batches[0]:
            return None
        shift = self.shift_labels
        if shift is None:
            shift = self.rule(model, batches[0]).shift_labels
        return count_items_in_batch(batches, shift_labels=shift)

    def step_items(
        self,
        model: nn.Module,
        batches: Sequence[Mapping[str, Any]],
        reduce_sum: Callable[[torch.Tensor], torch.Tensor] | None,
        device: Any = None,
    ) -> torch.Tensor | None:
        """``num_items_in_batch`` of one optimizer step: this process's count of its window, summed over the
        processes by ``reduce_sum`` when ``average_tokens_across_devices`` (None: a single process), on ``device``
        when given. The one rule of both training paths (``trainer/steps.py``'s ``get_batch_samples`` and
        ``HFModule``)."""
        count = self.count(model, batches)
        if count is not None and device is not None:
            count = count.to(device)
        if count is not None and self.average_tokens_across_devices and reduce_sum is not None:
            count = reduce_sum(count)
        return count

    def loss_is_scaled_for_ga(self, num_items_in_batch: Any) -> bool:
        """Whether the loss is already normalised over the window (else it is divided by the window size)."""
        return loss_is_scaled_for_ga(self.accepts_loss_kwargs, self.compute_loss_func, num_items_in_batch)


def loss_is_scaled_for_ga(
    accepts_loss_kwargs: bool,
    compute_loss_func: Callable[..., Any] | None,
    num_items_in_batch: Any,
    override: bool | None = None,
) -> bool:
    """Whether a micro-batch's loss is already normalised over the accumulation window.

    It is when the model (or ``compute_loss_func``) divided by ``num_items_in_batch`` of the whole
    window; otherwise the caller divides it by the window size. ``override`` (the Trainer's
    ``loss_is_scaled_for_ga`` attribute), when not None, is the answer.
    """
    if override is not None:
        return override
    return (accepts_loss_kwargs and num_items_in_batch is not None) or compute_loss_func is not None


def compute_model_loss(
    model: nn.Module,
    inputs: Mapping[str, Any],
    settings: LossSettings,
    *,
    num_items_in_batch: torch.Tensor | int | None = None,
    return_outputs: bool = False,
) -> Any:
    """Run ``model`` on one micro-batch and return its loss (and outputs), as transformers does.

    A model whose own loss does not divide by the count (its rule, :mod:`hf_lightning.loss_rule`) is
    not given it: a mean is weighted by the micro-batch's share of the window's items, a sum is kept.
    """
    inputs = dict(inputs)
    labels = None
    if (settings.label_smoother is not None or settings.compute_loss_func is not None) and "labels" in inputs:
        labels = inputs.pop("labels")
    rule = None
    if settings.accepts_loss_kwargs and num_items_in_batch is not None:
        if labels is None and "labels" in inputs:  # the model's own loss: does it use the count?
            rule = settings.rule(model, inputs)
        if rule is None or rule.passes_count:
            inputs["num_items_in_batch"] = num_items_in_batch
    outputs = model(**inputs)
    if settings.compute_loss_func is not None:
        loss = settings.compute_loss_func(outputs, labels, num_items_in_batch=num_items_in_batch)
    elif labels is not None:
        smoother = cast(LabelSmoother, settings.label_smoother)  # set: labels were popped for it
        shift = (
            bool(settings.shift_labels) if settings.shift_labels is not None else loss_shifts_labels(model)
        )
        loss = smoother(outputs, labels, shift_labels=shift, num_items_in_batch=num_items_in_batch)
    else:
        loss = _loss_from_outputs(outputs, inputs)
        if rule is not None and rule.reweights:
            loss = _reweighted(loss, inputs, rule.shift_labels, cast(Any, num_items_in_batch))
    if (
        settings.average_tokens_across_devices
        and settings.counts_items()
        and num_items_in_batch is not None
        and settings.world_size > 1
    ):
        # The count is global; DDP averages gradients over ranks, so undo that average here.
        loss = loss * settings.world_size
    return (loss, outputs) if return_outputs else loss


def _reweighted(
    loss: torch.Tensor, inputs: Mapping[str, Any], shift_labels: bool, num_items_in_batch: torch.Tensor | int
) -> torch.Tensor:
    """A micro-batch's mean loss times its share of the window's items: the big batch's mean, summed."""
    own = count_items_in_batch([inputs], shift_labels=shift_labels)
    if own is None:
        return loss
    total = (
        num_items_in_batch.to(loss.device)
        if isinstance(num_items_in_batch, torch.Tensor)
        else num_items_in_batch
    )
    return loss * (own.to(loss.device) / total)


def _loss_from_outputs(outputs: Any, inputs: Mapping[str, Any]) -> torch.Tensor:
    if isinstance(outputs, Mapping):
        if "loss" not in outputs or outputs["loss"] is None:
            raise ValueError(
                "The model did not return a loss from the inputs, only the following keys: "
                f"{','.join(outputs.keys())}. For reference, the inputs it received are "
                f"{','.join(inputs.keys())}."
            )
        return outputs["loss"]
    if isinstance(outputs, torch.Tensor):
        return outputs
    return outputs[0]
