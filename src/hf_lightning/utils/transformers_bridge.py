"""How a script's transformers logging settings govern hf_lightning's records.

Scripts written for transformers set *its* verbosity (``transformers.utils.logging.set_verbosity_info()``)
and configure *its* loggers (``logging.getLogger("transformers.trainer").setLevel(...)``). With the
Trainer API swapped for hf_lightning's, two bridges keep those settings meaningful:

- **verbosity**: hf_lightning's root logger, while no level was set on it, takes transformers' library
  verbosity as its level, read live each time, once a script changed it from transformers' default
  (WARNING) or set ``TRANSFORMERS_VERBOSITY``. Nothing is imported: transformers counts only when loaded.
- **twin loggers**: each hf_lightning module speaking for a transformers module has a *twin* logger
  (``hf_lightning.trainer.*`` -> ``transformers.trainer``, see :data:`TWINS`). A record of ours is
  dropped when its twin is disabled, has a level of its own above the record's, or a filter of its own
  rejects it; handlers attached to the twin or to its ancestors up to the ``transformers`` logger (a
  ``CaptureLogger(transformers.logging.get_logger())``) receive it too, transformers' own stderr handler
  excepted.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from typing import Any

__all__ = [
    "TWINS",
    "TwinLoggerFilter",
    "attach_twin_filter",
    "install_library_root",
    "install_twin_filters",
    "twin_of",
]

#: hf_lightning logger prefix -> the transformers logger whose records those modules reproduce
TWINS: tuple[tuple[str, str], ...] = (
    ("hf_lightning.trainer.seq2seq", "transformers.trainer_seq2seq"),
    ("hf_lightning.trainer", "transformers.trainer"),
    ("hf_lightning.checkpoint", "transformers.trainer"),
    ("hf_lightning.callbacks", "transformers.trainer_callback"),
    ("hf_lightning.trainer_utils", "transformers.trainer_utils"),
    ("hf_lightning.args", "transformers.training_args"),
    ("hf_lightning.optim", "transformers.optimization"),
)

_TRANSFORMERS_ROOT = "transformers"


def twin_of(name: str) -> str | None:
    """The transformers logger name that ``name`` speaks for, or None."""
    for prefix, twin in TWINS:
        if name == prefix or name.startswith(prefix + "."):
            return twin
    return None


def _transformers_verbosity() -> int:
    """transformers' library level when a script changed it, else NOTSET."""
    if _TRANSFORMERS_ROOT not in sys.modules:
        return logging.NOTSET
    existing = logging.Logger.manager.loggerDict.get(_TRANSFORMERS_ROOT)
    if not isinstance(existing, logging.Logger):
        return logging.NOTSET
    level = existing.level
    if level == logging.WARNING and not os.environ.get("TRANSFORMERS_VERBOSITY"):
        return logging.NOTSET  # transformers' untouched default: the application decides
    return level


class _BridgedLevel:
    """A logger whose level, while none of its own is set, is transformers' verbosity (read live)."""

    @property
    def level(self) -> int:
        own = self.__dict__.get("_own_level", logging.NOTSET)
        return own if own != logging.NOTSET else _transformers_verbosity()

    @level.setter
    def level(self, value: int) -> None:
        self.__dict__["_own_level"] = value


class _LibraryRootLogger(_BridgedLevel, logging.Logger):
    """hf_lightning's root logger (a plain ``logging.Logger`` with the bridged level)."""


def install_library_root(name: str) -> logging.Logger:
    """Make the logger ``name`` a bridged root (idempotent) and return it.

    The existing logger object is kept (handlers, filters, references held by user code) and its class
    gains the bridged level; a custom logger class (``logging.setLoggerClass``) keeps its own methods.
    """
    logger = logging.getLogger(name)
    if not isinstance(logger, _BridgedLevel):
        own = logger.__dict__.pop("level", logging.NOTSET)
        kind = type(logger)
        bridged = (
            _LibraryRootLogger
            if kind is logging.Logger
            else type(f"Bridged{kind.__name__}", (_BridgedLevel, kind), {})
        )
        logger.__class__ = bridged
        logger.setLevel(own)  # also clears the loggers' cached isEnabledFor answers
    return logger


class TwinLoggerFilter(logging.Filter):
    """Apply the twin transformers logger's own level, filters and handlers to a record of ours."""

    def filter(self, record: logging.LogRecord) -> bool:
        name = twin_of(record.name)
        if name is None:
            return True
        twin = _existing(name)
        if twin is not None and (twin.disabled or record.levelno < twin.level or not twin.filter(record)):
            return False
        replaced = _replaced_method(name, twin, record.levelno)
        if replaced is not None:  # a test's mock.patch on the twin: it receives the line in place of ours
            replaced(record.getMessage())
            return False
        # a twin transformers never created: its nearest existing ancestor's handlers still apply
        start = twin or _existing(_TRANSFORMERS_ROOT)
        default = getattr(sys.modules.get("transformers.utils.logging"), "_default_handler", None)
        theirs = [  # transformers' own stderr handler would print our line a second time
            handler
            for logger in _propagation_path(start)
            if (logger.name + ".").startswith(_TRANSFORMERS_ROOT + ".")
            for handler in logger.handlers
            if handler is not default and record.levelno >= handler.level
        ]
        if theirs:
            # each handler gets the record once: one also on our own propagation path (pytest's capture
            # handlers sit on the root and on every non-propagating logger, ``transformers`` included)
            # is left to that path
            ours = {
                id(h) for logger in _propagation_path(logging.getLogger(record.name)) for h in logger.handlers
            }
            for handler in theirs:
                if id(handler) not in ours:
                    handler.handle(record)
        return True


_METHODS = {
    logging.DEBUG: "debug",
    logging.INFO: "info",
    logging.WARNING: "warning",
    logging.ERROR: "error",
    logging.CRITICAL: "critical",
}


def _replaced_method(name: str, twin: logging.Logger | None, levelno: int) -> Any:
    """The twin module's ``logger.<level>`` when a script replaced it, else None.

    ``mock.patch("transformers.trainer.logger.warning")`` sets the method on the logger object;
    ``mock.patch("transformers.trainer.logger")`` replaces the module's logger object itself. Either way
    transformers' line would reach the replacement and no handler, so ours does the same.
    """
    method = _METHODS.get(levelno)
    module = sys.modules.get(name)
    held = getattr(module, "logger", None) if module is not None else None
    if method is None or held is None:
        return None
    if held is not twin:
        return getattr(held, method, None)
    return held.__dict__.get(method)


def _existing(name: str) -> logging.Logger | None:
    logger = logging.Logger.manager.loggerDict.get(name) if name else None
    return logger if isinstance(logger, logging.Logger) else None


def _propagation_path(logger: logging.Logger | None) -> Iterator[logging.Logger]:
    """``logger`` and the ancestors a record of it propagates to (up to the first that stops it)."""
    while isinstance(logger, logging.Logger):
        yield logger
        if not logger.propagate:
            return
        logger = logger.parent


_TWIN_FILTER = TwinLoggerFilter()


def attach_twin_filter(logger: logging.Logger) -> logging.Logger:
    """Give ``logger`` the twin filter when its name has a twin (idempotent); returns it."""
    if twin_of(logger.name) and _TWIN_FILTER not in logger.filters:
        logger.addFilter(_TWIN_FILTER)
    return logger


def install_twin_filters() -> None:
    """Attach the twin filter to every existing hf_lightning logger that has a twin (idempotent)."""
    for logger in list(logging.Logger.manager.loggerDict.values()):
        if isinstance(logger, logging.Logger):
            attach_twin_filter(logger)
