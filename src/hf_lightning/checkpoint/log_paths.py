"""Log lines written while a checkpoint is staged name the folder it is published as.

A checkpoint is written into ``.tmp-checkpoint-N`` and renamed to ``checkpoint-N`` once complete
(``store.py``). transformers' own ``save_pretrained`` logs the paths it writes ("Configuration saved in
…/config.json", "Model weights saved in …/model.safetensors"); transformers' Trainer writes straight into
``checkpoint-N``, so a script (or a user reading the console) sees that name. While a folder is staged,
:func:`final_paths_in_logs` rewrites the staging path to the final one in every log record made, so the
console shows what transformers shows, and the name a reader can open afterwards.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

__all__ = ["final_paths_in_logs"]


def _renamed(value: Any, staging: str, final: str) -> Any:
    return value.replace(staging, final) if isinstance(value, str) and staging in value else value


@contextlib.contextmanager
def final_paths_in_logs(staging: str, final: str) -> Iterator[None]:
    """Within the block, a log record whose message or arguments name ``staging`` names ``final`` instead."""
    previous = logging.getLogRecordFactory()

    def make_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        record.msg = _renamed(record.msg, staging, final)
        if isinstance(record.args, tuple) and record.args:
            record.args = tuple(_renamed(arg, staging, final) for arg in record.args)
        return record

    logging.setLogRecordFactory(make_record)
    try:
        yield
    finally:
        if logging.getLogRecordFactory() is make_record:  # another thread may have wrapped it since
            logging.setLogRecordFactory(previous)
