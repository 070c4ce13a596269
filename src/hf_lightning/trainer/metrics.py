"""``log_metrics``, ``metrics_format`` and ``save_metrics``: the metrics a script prints and writes at the end.

Only the world-zero process prints or writes (the Trainer checks). Reading the memory keys
(``skip_memory_metrics=False``): ``{stage}_mem_{cpu|gpu}_alloc_delta`` is how much more memory was in use
at the end of the stage (``init``, ``train``, ``eval``, ``test``) than at its start (negative when it freed
more than it took); ``{stage}_mem_{cpu|gpu}_peaked_delta`` is how far above that end value the usage peaked
in between. Their sum is what the stage needed at most. The ``init`` figures are reported with the first
stage that runs. CPU figures are the process' resident set size sampled by a thread (a short peak can be
missed); GPU figures are ``torch.cuda.memory_allocated`` / ``max_memory_allocated`` of the current device.
"""

from __future__ import annotations

import datetime
import json
import os
from typing import Any

__all__ = ["metrics_format", "print_metrics", "write_metrics"]


def _secs2timedelta(secs: float) -> str:
    """Seconds as ``H:MM:SS.cc``."""
    centis = int(abs(secs - int(secs)) * 100)
    return f"{datetime.timedelta(seconds=int(secs))}.{centis:02d}"


def metrics_format(metrics: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``metrics`` for reading: memory in MB, runtimes as ``H:MM:SS.cc``, ``total_flos`` in GF,
    other floats rounded to 4 decimals."""
    formatted = dict(metrics)
    for key, value in formatted.items():
        if "_mem_" in key:
            formatted[key] = f"{int(value) >> 20}MB"
        elif "_runtime" in key:
            formatted[key] = _secs2timedelta(value)
        elif key == "total_flos":
            formatted[key] = f"{int(value) >> 30}GF"
        elif isinstance(value, float):
            formatted[key] = round(value, 4)
    return formatted


def print_metrics(split: str, metrics: dict[str, Any]) -> None:
    """``Trainer.log_metrics``: ``metrics`` of ``split`` as an aligned table, keys sorted."""
    print(f"***** {split} metrics *****")
    formatted = metrics_format(metrics)
    if not formatted:
        return
    key_width = max(len(str(key)) for key in formatted)
    value_width = max(len(str(value)) for value in formatted.values())
    for key in sorted(formatted):
        print(f"  {key: <{key_width}} = {formatted[key]:>{value_width}}")


def write_metrics(output_dir: str, split: str, metrics: dict[str, Any], combined: bool) -> None:
    """``Trainer.save_metrics``: ``{split}_results.json`` (and merged into ``all_results.json``)."""
    os.makedirs(output_dir, exist_ok=True)
    _write_json(os.path.join(output_dir, f"{split}_results.json"), metrics)
    if combined:
        path = os.path.join(output_dir, "all_results.json")
        merged: dict[str, Any] = {}
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                merged = json.load(f)
        merged.update(metrics)
        _write_json(path, merged)


def _write_json(path: str, data: dict[str, Any]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=4, sort_keys=True)
