"""How a model's own loss reduces over a batch, found out from what the model does.

transformers' Trainer assumes that a model whose ``forward`` takes ``**kwargs`` divides its loss by
``num_items_in_batch``; many heads do not (they average over their own batch, or sum), and their
accumulated loss is then ``gradient_accumulation_steps`` times too large. Here the model is asked
once, on the first batch with labels, by running its loss under ``torch.no_grad()`` in eval mode
(no dropout, no BatchNorm statistics updated) with the random number generators forked, so the
probe changes no training number:

- **the reduction**: the loss is computed with a ``num_items_in_batch`` no mean over the batch's items
  divides by (``2 * items + 1``) and compared with the cross-entropy of its own logits: divided by that
  count (``"count"``, transformers' assumption), a mean or a sum over the target items. Most losses answer
  in that one forward. Otherwise it is computed with a second count; when it changes, the model divides
  by the count (plus terms of its own, as an MoE's auxiliary loss); when not, the loss of the whole batch
  is compared with those of its two halves (a mean over the items weighs them by their counts; a sum adds
  them up): ``"mean"`` or ``"sum"``.
- **the label shift** (does the loss predict ``labels[..., 1:]``?): transformers' own loss registry
  answers first, as in transformers (``LOSS_MAPPING[model.loss_type]`` is the causal-LM loss and the
  model is not an encoder-decoder: causal LMs, and decoder-only vision-language models whose loss
  type is ``ForConditionalGeneration``). Where the registry is silent (no ``loss_type``, as for
  GPT-2), the model's loss is compared with the cross-entropy of its logits over shifted and
  unshifted labels.

What cannot be found out is warned about once, naming what was assumed (transformers' reading).
The answer is cached per model object. Under several processes each one probes its own first
batch; what is asked (does the loss use the count, does it shift) is the model's, so they agree.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from hf_lightning.utils.logging import get_logger

__all__ = [
    "LossRule",
    "unwrap_model",
    "cached_loss_rule",
    "forget_loss_rule",
    "probe_loss_rule",
    "registry_shifts_labels",
]

logger = get_logger(__name__)

IGNORE_INDEX = -100
_RULES: weakref.WeakKeyDictionary[nn.Module, LossRule] = weakref.WeakKeyDictionary()
_RAISED: weakref.WeakKeyDictionary[nn.Module, int] = (
    weakref.WeakKeyDictionary()
)  # id of the labels it raised on


@dataclass(frozen=True)
class LossRule:
    """How one model's loss reduces over a batch (see the module docstring).

    ``reduction``: ``"count"`` (divides by ``num_items_in_batch``), ``"mean"`` (a mean over its own
    target items), ``"sum"``, or ``"unknown"`` (treated as transformers treats it: as ``"count"``
    when ``forward`` takes ``**kwargs``). ``shift_labels``: whether the loss predicts
    ``labels[..., 1:]``; ``shift_known``: False where that was assumed (unshifted).
    """

    reduction: str
    shift_labels: bool
    shift_known: bool = True
    raised: bool = field(default=False, compare=False)  # the model raised on the probe's forward

    @property
    def passes_count(self) -> bool:
        """Whether ``num_items_in_batch`` is passed to the model (it divides by it, or nobody knows)."""
        return self.reduction in ("count", "unknown")

    @property
    def reweights(self) -> bool:
        """Whether each micro-batch's mean is weighted by its share of the window's target items."""
        return self.reduction == "mean"


def unwrap_model(model: nn.Module) -> nn.Module:
    """The user's model inside DDP/compile wrappers (``.module`` / ``._orig_mod`` chains)."""
    while True:
        inner = getattr(model, "module", None) or getattr(model, "_orig_mod", None)
        if not isinstance(inner, nn.Module):
            return model
        model = inner


def registry_shifts_labels(model: nn.Module) -> bool | None:
    """transformers' own answer: the registry's loss for ``model.loss_type`` is the causal-LM loss and the
    model is no encoder-decoder. None when the registry is silent (no known ``loss_type``)."""
    model = _base_model(model)
    loss_type = getattr(model, "loss_type", None)
    try:
        from transformers.loss.loss_utils import LOSS_MAPPING, ForCausalLMLoss  # noqa: PLC0415
    except ImportError:  # transformers is optional: nothing to ask
        return None
    if not isinstance(loss_type, str) or loss_type not in LOSS_MAPPING:
        return None
    config = getattr(model, "config", None)
    return LOSS_MAPPING[loss_type] is ForCausalLMLoss and not getattr(config, "is_encoder_decoder", False)


def cached_loss_rule(model: nn.Module) -> LossRule | None:
    """The rule already found for ``model`` (or the model it wraps), or None."""
    return _RULES.get(unwrap_model(model))


def forget_loss_rule(model: nn.Module) -> None:
    """Drop the cached rule of ``model`` (a new probe runs at the next batch with labels)."""
    _RULES.pop(unwrap_model(model), None)
    _RAISED.pop(unwrap_model(model), None)


def probe_loss_rule(
    model: nn.Module,
    batch: Mapping[str, Any],
    *,
    accepts_loss_kwargs: bool,
    shift_labels: bool | None = None,
) -> LossRule:
    """The rule of ``model``'s loss, probed on ``batch`` (which holds ``labels``) the first time; cached.

    ``accepts_loss_kwargs``: whether the model is given ``num_items_in_batch`` (transformers' reading of
    its signature). ``shift_labels``, when not None, is the user's answer for the shift (not probed).
    A model that declares ``accepts_loss_kwargs = True`` is taken at its word: it divides by the count.
    """
    key = unwrap_model(model)
    known = _RULES.get(key)
    if known is not None:
        return known
    registry = registry_shifts_labels(key) if shift_labels is None else shift_labels
    declared = getattr(_base_model(key), "accepts_loss_kwargs", None) is True
    with _QuietProbe(model):
        rule = _probe(model, batch, accepts_loss_kwargs, registry, declared)
    marker = id(batch.get("labels"))  # the same labels object in every copy of this batch
    if rule.raised and _RAISED.setdefault(key, marker) == marker:
        # the real forward raises it next: no warning about assumptions; a model that raises only under the
        # probe is asked again at its next batch, then assumed
        return rule
    labels = batch.get("labels")
    # labels that are not one tensor (DETR's list of dicts) give no count: the loss is divided by the steps
    counted = accepts_loss_kwargs and isinstance(labels, torch.Tensor)
    _warn_assumptions(key, rule, counted, _multi_dim(labels))
    _RULES[key] = rule
    return rule


# --- the probe --------------------------------------------------------------------------------
class _QuietProbe:
    """Eval mode, no gradients and forked random generators around the probe; the modes restored after."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model

    def __enter__(self) -> None:
        self.modes = [(module, module.training) for module in self.model.modules()]
        cuda = torch.cuda.is_available() and any(p.is_cuda for p in self.model.parameters())
        self.rng = torch.random.fork_rng(devices=[torch.cuda.current_device()] if cuda else [])
        self.rng.__enter__()
        self.no_grad = torch.no_grad()
        self.no_grad.__enter__()
        self.model.eval()

    def __exit__(self, *exc: Any) -> None:
        for module, training in self.modes:
            module.training = training
        self.no_grad.__exit__(*exc)
        self.rng.__exit__(*exc)


class _Unknown(Exception):
    """The model did not answer (no loss, an error, a non-finite value)."""


def _probe(
    model: nn.Module, batch: Mapping[str, Any], accepts: bool, registry: bool | None, declared: bool
) -> LossRule:
    labels = batch.get("labels")
    try:
        if accepts:
            # a count no mean over this batch's items divides by: one forward tells most losses apart
            count = 2 * (_items(labels, False) or 1) + 1
            first, outputs = _loss(model, batch, num_items_in_batch=_count_like(labels, count))
            if declared:
                return _counting_rule(first * count, outputs, labels, registry)
            found = _from_logits(first, outputs, labels, registry, count)
            if found is not None:
                return found
            second, _ = _loss(model, batch, num_items_in_batch=_count_like(labels, 2 * count))
            if not _close(first, second):  # loss = total / count (+ terms without the count)
                return _counting_rule((first - second) * 2 * count, outputs, labels, registry)
        else:
            first, outputs = _loss(model, batch)
    except _Unknown as unknown:
        return LossRule("unknown", bool(registry), registry is not None, raised=unknown.__cause__ is not None)
    return _own_reduction(model, batch, first, outputs, registry)


def _counting_rule(total: float, outputs: Any, labels: Any, registry: bool | None) -> LossRule:
    """A loss that divides by the count; its shift from the registry, else from the total it divides."""
    if registry is not None:
        return LossRule("count", registry)
    sums = _cross_entropy_sums(outputs, labels) or {}
    shift = _best_match(total, {shift: value for shift, (value, _) in sums.items()})
    if shift is not None:
        return LossRule("count", shift)
    return LossRule("count", False, shift_known=not _multi_dim(labels))


def _own_reduction(
    model: nn.Module, batch: Mapping[str, Any], loss: float, outputs: Any, registry: bool | None
) -> LossRule:
    """A loss that ignores the count: a mean or a sum over its target items, told from its logits or its halves."""
    found = _from_logits(loss, outputs, batch.get("labels"), registry)
    if found is not None:
        return found
    shift = bool(registry)
    known = registry is not None or not _multi_dim(batch.get("labels"))
    halves = _halves(batch)
    if halves is None:
        return LossRule("unknown", shift, known)
    try:
        losses = [_loss(model, half)[0] for half in halves]
    except _Unknown:
        return LossRule("unknown", shift, known)
    counts = [_items(half.get("labels"), shift) for half in halves]
    mean = (losses[0] * counts[0] + losses[1] * counts[1]) / max(sum(counts), 1)
    total = losses[0] + losses[1]
    is_mean, is_sum = _close(loss, mean, 1e-4), _close(loss, total, 1e-4)
    if is_mean != is_sum:
        return LossRule("mean" if is_mean else "sum", shift, known)
    return LossRule("unknown", shift, known)


def _from_logits(
    loss: float, outputs: Any, labels: Any, registry: bool | None, count: int | None = None
) -> LossRule | None:
    """The reduction (and the shift, where the registry is silent) when the loss is its logits' cross-entropy:
    a mean or a sum over the target items, or (when the model was given ``count`` as ``num_items_in_batch``)
    the sum divided by it."""
    sums = _cross_entropy_sums(outputs, labels)
    if sums is None:
        return None
    candidates = {}
    for shift, (total, items) in sums.items():
        if registry is None or shift == registry:
            candidates["mean", shift] = total / max(items, 1)
            candidates["sum", shift] = total
            if count is not None:
                candidates["count", shift] = total / count
    found = _best_match(loss, candidates)
    return LossRule(*found) if found is not None else None


def _best_match(value: float, candidates: dict[Any, float]) -> Any:
    """The candidate ``value`` is (within 1e-4, and ten times closer than any other), or None."""
    errors = sorted((abs(value - c) / max(abs(value), abs(c), 1e-12), key) for key, c in candidates.items())
    if not errors or errors[0][0] > 1e-4:
        return None
    if len(errors) > 1 and errors[1][0] <= max(10 * errors[0][0], 1e-6):
        return None  # two readings fit this batch alike
    return errors[0][1]


def _cross_entropy_sums(outputs: Any, labels: Any) -> dict[bool, tuple[float, int]] | None:
    """{shift: (summed cross-entropy of the logits over the labels, number of target items)}, or None."""
    logits = _logits(outputs)
    if not isinstance(logits, torch.Tensor) or not isinstance(labels, torch.Tensor):
        return None
    if labels.is_floating_point() or logits.dim() != labels.dim() + 1 or logits.shape[:-1] != labels.shape:
        return None
    pairs = {False: (logits, labels)}
    if labels.dim() >= 2 and labels.shape[-1] >= 2:
        pairs[True] = (logits[..., :-1, :], labels[..., 1:])
    sums = {}
    try:
        for shift, (scores, targets) in pairs.items():
            targets = targets.reshape(-1).to(scores.device)
            value = nn.functional.cross_entropy(
                scores.reshape(-1, scores.shape[-1]).float(),
                targets,
                ignore_index=IGNORE_INDEX,
                reduction="sum",
            )
            sums[shift] = (float(value), int(targets.ne(IGNORE_INDEX).sum()))
    except (RuntimeError, IndexError, ValueError):  # labels that are no class indices of these logits
        return None
    return sums


# --- small helpers ----------------------------------------------------------------------------
def _loss(model: nn.Module, batch: Mapping[str, Any], **extra: Any) -> tuple[float, Any]:
    try:
        outputs = model(**batch, **extra)
    except Exception as error:  # the probe never breaks training: the real forward raises it again
        logger.debug("loss probe: the model raised %r", error)
        raise _Unknown from error
    if isinstance(outputs, Mapping):
        loss = outputs.get("loss")
    elif isinstance(outputs, (tuple, list)) and outputs:
        loss = outputs[0]
    else:
        loss = outputs
    if not isinstance(loss, torch.Tensor) or loss.numel() == 0:
        raise _Unknown
    value = float(loss.detach().float().mean())
    if not math.isfinite(value) or value == 0.0:
        raise _Unknown
    return value, outputs


def _logits(outputs: Any) -> Any:
    if isinstance(outputs, Mapping):
        return outputs.get("logits")
    if isinstance(outputs, (tuple, list)) and len(outputs) > 1:
        return outputs[1]
    return None


def _items(labels: Any, shift: bool) -> int:
    if not isinstance(labels, torch.Tensor):
        return 0
    if shift and labels.dim() >= 2:
        labels = labels[..., 1:]
    return int(labels.ne(IGNORE_INDEX).sum())


def _count_like(labels: Any, count: int) -> Any:
    return torch.tensor(count, device=labels.device) if isinstance(labels, torch.Tensor) else count


def _multi_dim(labels: Any) -> bool:
    return isinstance(labels, torch.Tensor) and labels.dim() >= 2


def _close(a: float, b: float, rel: float = 1e-3) -> bool:
    return abs(a - b) <= rel * max(abs(a), abs(b))


def _halves(batch: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The batch's first and second halves by rows, or None when its values do not all share the rows."""
    labels = batch.get("labels")
    rows = labels.shape[0] if isinstance(labels, torch.Tensor) and labels.dim() >= 1 else 0
    if rows < 2:
        return None
    for value in batch.values():
        if isinstance(value, torch.Tensor) and (value.dim() == 0 or value.shape[0] != rows):
            return None
        if isinstance(value, (list, tuple)) and len(value) != rows:
            return None
    cut = rows // 2
    return [
        {k: v[part] if isinstance(v, (torch.Tensor, list, tuple)) else v for k, v in batch.items()}
        for part in (slice(0, cut), slice(cut, rows))
    ]


def _base_model(model: nn.Module) -> nn.Module:
    model = unwrap_model(model)
    base = getattr(model, "get_base_model", None)  # a PEFT model: its base model's loss type
    return base() if callable(base) else model


def _warn_assumptions(model: nn.Module, rule: LossRule, accepts: bool, multi_dim: bool) -> None:
    name = type(_base_model(model)).__name__
    if rule.reduction == "unknown" and accepts:
        logger.warning(
            "hf_lightning could not tell from %s's loss whether it divides by `num_items_in_batch`: assumed "
            "it does, as transformers does (were it a mean over its batch, the loss of an accumulated step "
            "would be `gradient_accumulation_steps` times too large). Set `model.accepts_loss_kwargs = False` "
            "if its loss is a mean over the micro-batch.",
            name,
        )
    if not rule.shift_known and multi_dim:
        logger.warning(
            "hf_lightning could not tell whether %s's loss predicts `labels[..., 1:]`: `num_items_in_batch` "
            "counts the unshifted labels. Set `trainer.loss_shifts_labels = True` if the loss shifts them.",
            name,
        )
