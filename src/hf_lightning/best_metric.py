"""The best-metric rule, one for every path: ``Trainer._determine_best_metric``, ``EarlyStoppingCallback``
and the ``HFCheckpoint`` Lightning callback ask these two functions.

- the direction: ``greater_is_better``, by default (transformers' ``TrainingArguments`` default) larger is
  better unless the metric's name ends in "loss";
- an improvement is strict: a value equal to the best is not a new best.
"""

from __future__ import annotations

__all__ = ["default_greater_is_better", "improves"]


def default_greater_is_better(metric: str | None) -> bool:
    """Whether a larger ``metric`` is better when ``greater_is_better`` is not given: unless it ends in "loss"."""
    return not (metric or "").endswith("loss")


def improves(value: float, best: float | None, greater_is_better: bool | None) -> bool:
    """Whether ``value`` is strictly better than ``best`` (always, when there is no best yet)."""
    if best is None:
        return True
    return bool(value > best) if greater_is_better else bool(value < best)
