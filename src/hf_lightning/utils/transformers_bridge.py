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
  ``CaptureLogger(transformers.logging.get_logger())``) receive it too (the library logger's own handlers
  through our default handler, below).
- **transformers' console**: once transformers' logging is set up (importing transformers does it),
  hf_lightning's root logger does what transformers' library root does: its level (while none of its own
  is set) is transformers' library level, its propagation (while none of its own is set) is transformers'
  (off unless ``CI`` is set or a script enabled it), and its default handler hands each record to the
  handlers of transformers' library root: transformers' stderr handler prints our lines in its format
  (``[transformers] message``, or ``enable_explicit_format()``'s), where transformers' Trainer prints them.
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
    "set_own_level",
    "to_transformers_handlers",
    "transformers_library_root",
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


def transformers_library_root() -> logging.Logger | None:
    """transformers' library root logger once transformers set up its logging (its stderr handler), else None."""
    module = sys.modules.get("transformers.utils.logging")
    if module is None or getattr(module, "_default_handler", None) is None:
        return None
    return _existing(_TRANSFORMERS_ROOT)


def _transformers_verbosity() -> int:
    """transformers' library level once its logging is set up; else NOTSET (the application decides)."""
    library = transformers_library_root()
    if library is not None:
        return library.level
    existing = _existing(_TRANSFORMERS_ROOT) if _TRANSFORMERS_ROOT in sys.modules else None
    if existing is None or (
        existing.level == logging.WARNING and not os.environ.get("TRANSFORMERS_VERBOSITY")
    ):
        return logging.NOTSET
    return existing.level


class _BridgedLevel:
    """A logger whose level and propagation, while none of its own is set, are transformers' (read live)."""

    @property
    def level(self) -> int:
        own = self.__dict__.get("_own_level", logging.NOTSET)
        return own if own != logging.NOTSET else _transformers_verbosity()

    @level.setter
    def level(self, value: int) -> None:
        # ``setLevel(logger.level)`` (a save-and-restore, as pytest's ``caplog.at_level``) keeps following
        if self.__dict__.get("_own_level", logging.NOTSET) == logging.NOTSET and value == self.level:
            return
        self.__dict__["_own_level"] = value

    @property
    def propagate(self) -> bool:
        own = self.__dict__.get("_own_propagate")
        if own is not None:
            return bool(own)
        library = transformers_library_root()
        return True if library is None else bool(library.propagate)

    @propagate.setter
    def propagate(self, value: bool | None) -> None:
        """True / False: ours from now on; None: follow transformers' again."""
        self.__dict__["_own_propagate"] = value


class _LibraryRootLogger(_BridgedLevel, logging.Logger):
    """hf_lightning's root logger (a plain ``logging.Logger`` with the bridged level)."""


def set_own_level(logger: logging.Logger, level: int) -> None:
    """Give a bridged root ``level`` as its own (NOTSET: follow transformers' again)."""
    logger.__dict__["_own_level"] = level
    logger.manager._clear_cache()  # type: ignore[attr-defined]


def install_library_root(name: str) -> logging.Logger:
    """Make the logger ``name`` a bridged root (idempotent) and return it.

    The existing logger object is kept (handlers, filters, references held by user code) and its class
    gains the bridged level; a custom logger class (``logging.setLoggerClass``) keeps its own methods.
    """
    logger = logging.getLogger(name)
    if not isinstance(logger, _BridgedLevel):
        own = logger.__dict__.pop("level", logging.NOTSET)
        propagates = logger.__dict__.pop("propagate", True)
        kind = type(logger)
        bridged = (
            _LibraryRootLogger
            if kind is logging.Logger
            else type(f"Bridged{kind.__name__}", (_BridgedLevel, kind), {})
        )
        logger.__class__ = bridged
        set_own_level(logger, own)  # also clears the loggers' cached isEnabledFor answers
        logger.propagate = None if propagates else False  # type: ignore[assignment]
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
        theirs = [  # the library root's own handlers are our default handler's (to_transformers_handlers)
            handler
            for logger in _twin_path(name)
            if logger.name.startswith(_TRANSFORMERS_ROOT + ".")
            for handler in logger.handlers
            if record.levelno >= handler.level
        ]
        if theirs:
            # each handler gets the record once: one also on our own propagation path (pytest's capture
            # handlers sit on the root and on every non-propagating logger, ``transformers`` included)
            # is left to that path
            ours = _our_handler_ids(record)
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


def _twin_path(name: str) -> Iterator[logging.Logger]:
    """The loggers a record of transformers' logger ``name`` would reach, up to the library root.

    A twin transformers never created: its nearest existing ancestor stands for it.
    """
    start = _existing(name)
    parts = name.split(".")
    while start is None and len(parts) > 1:
        parts.pop()
        start = _existing(".".join(parts))
    for logger in _propagation_path(start):
        if logger.name != _TRANSFORMERS_ROOT and not logger.name.startswith(_TRANSFORMERS_ROOT + "."):
            return
        yield logger


def to_transformers_handlers(record: logging.LogRecord) -> bool:
    """Hand ``record`` to the handlers of transformers' library root, as a record of its twin would reach
    them (not when a twin stops propagating first, nor to a handler ours reach anyway). False when
    transformers' logging is not set up."""
    library = transformers_library_root()
    if library is None:
        return False
    twin = twin_of(record.name)
    if twin is not None and library not in _twin_path(twin):
        return True
    ours = _our_handler_ids(record)
    for handler in library.handlers:
        if id(handler) not in ours and record.levelno >= handler.level:
            handler.handle(record)
    return True


def _our_handler_ids(record: logging.LogRecord) -> set[int]:
    """The handlers our own propagation gives ``record`` (a handler also there is left to it)."""
    return {id(h) for logger in _propagation_path(logging.getLogger(record.name)) for h in logger.handlers}


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
