"""hf_lightning's library logging, in the shape of ``transformers.utils.logging``.

Every module of hf_lightning logs under the ``hf_lightning`` root logger. Its *verbosity* is, in order:

1. the level set through this module (``set_verbosity*``) or the ``HF_LIGHTNING_VERBOSITY`` variable;
2. transformers' library verbosity once transformers' logging is set up (importing transformers does it),
   read live; records are then printed by transformers' handlers and propagate as transformers' do;
3. otherwise nothing of its own: the application's logging configuration decides (``logging.basicConfig``).

The bridge of 2. lives in :mod:`hf_lightning.utils.transformers_bridge`; see ``docs/logging.md``.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from logging import (  # noqa: F401 - the level constants are part of this module's API
    CRITICAL,
    DEBUG,
    ERROR,
    FATAL,
    INFO,
    NOTSET,
    WARN,
    WARNING,
)

from hf_lightning.utils.transformers_bridge import (
    attach_twin_filter,
    install_library_root,
    set_own_level,
    to_transformers_handlers,
)

__all__ = [
    "CRITICAL",
    "DEBUG",
    "ERROR",
    "FATAL",
    "INFO",
    "NOTSET",
    "WARN",
    "WARNING",
    "add_handler",
    "disable_default_handler",
    "disable_propagation",
    "enable_default_handler",
    "enable_explicit_format",
    "enable_propagation",
    "get_log_levels_dict",
    "get_logger",
    "get_verbosity",
    "remove_handler",
    "reset_format",
    "set_verbosity",
    "set_verbosity_debug",
    "set_verbosity_error",
    "set_verbosity_info",
    "set_verbosity_warning",
]

LIBRARY_NAME = "hf_lightning"
VERBOSITY_ENV = "HF_LIGHTNING_VERBOSITY"

log_levels = {
    "detail": logging.DEBUG,
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}

_EXPLICIT_FORMAT = "[%(levelname)s|%(filename)s:%(lineno)s] %(asctime)s >> %(message)s"
_lock = threading.Lock()
_configured = False


class _DefaultHandler(logging.StreamHandler):
    """transformers' stderr handler once transformers' logging is set up; else ``[hf_lightning] message``.

    With transformers loaded (the usual case: it builds the model) a record goes where transformers'
    Trainer sends its own: to the handlers of transformers' library root (its stderr handler, in its
    format). Without it, hf_lightning's records propagate to the application's handlers
    (``logging.basicConfig``) and this handler prints them only when the application configured none,
    so that ``log_level="info"`` shows the Trainer's lines in a bare script.
    """

    def handle(self, record: logging.LogRecord) -> bool:
        if to_transformers_handlers(record):
            return True
        return bool(super().handle(record))

    def __init__(self) -> None:
        super().__init__(sys.stderr)
        self.setFormatter(logging.Formatter(f"[{LIBRARY_NAME}] %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        if _root().propagate and logging.getLogger().handlers:
            return
        self.stream = sys.stderr  # the stream of now (pytest and tools replace sys.stderr)
        super().emit(record)


_default_handler: logging.Handler = _DefaultHandler()


def _root() -> logging.Logger:
    return logging.getLogger(LIBRARY_NAME)


def _env_level() -> int | None:
    name = os.environ.get(VERBOSITY_ENV)
    if not name:
        return None
    if name not in log_levels:
        logging.getLogger().warning(
            "Unknown option %s=%s, has to be one of: %s", VERBOSITY_ENV, name, ", ".join(log_levels)
        )
        return None
    return log_levels[name]


def _configure() -> None:
    """Install the bridged root logger once and apply ``HF_LIGHTNING_VERBOSITY``."""
    global _configured
    with _lock:
        if _configured:
            return
        root = install_library_root(LIBRARY_NAME)
        root.addHandler(_default_handler)
        level = _env_level()
        if level is not None:
            set_own_level(root, level)
        _configured = True


def get_log_levels_dict() -> dict[str, int]:
    """The names ``log_level`` and ``HF_LIGHTNING_VERBOSITY`` accept, with their levels."""
    return log_levels


def get_logger(name: str | None = None) -> logging.Logger:
    """The logger ``name`` (default: the library root ``hf_lightning``), bridged to its transformers twin."""
    _configure()
    return attach_twin_filter(logging.getLogger(LIBRARY_NAME if name is None else name))


def get_verbosity() -> int:
    """The effective level of hf_lightning's root logger (30 = WARNING unless a script changed it)."""
    _configure()
    return _root().getEffectiveLevel()


def set_verbosity(verbosity: int) -> None:
    """Set hf_lightning's library verbosity (it stops following transformers' until NOTSET is set)."""
    _configure()
    set_own_level(_root(), verbosity)


def set_verbosity_info() -> None:
    """Set the verbosity to INFO."""
    set_verbosity(INFO)


def set_verbosity_warning() -> None:
    """Set the verbosity to WARNING."""
    set_verbosity(WARNING)


def set_verbosity_debug() -> None:
    """Set the verbosity to DEBUG."""
    set_verbosity(DEBUG)


def set_verbosity_error() -> None:
    """Set the verbosity to ERROR."""
    set_verbosity(ERROR)


def enable_default_handler() -> None:
    """Hand records to transformers' handlers, or without transformers print those no application handler
    prints on stderr as ``[hf_lightning] message`` (the default)."""
    _configure()
    _root().addHandler(_default_handler)


def disable_default_handler() -> None:
    """Remove hf_lightning's default stderr handler."""
    _configure()
    _root().removeHandler(_default_handler)


def add_handler(handler: logging.Handler) -> None:
    """Add ``handler`` to hf_lightning's root logger."""
    _configure()
    _root().addHandler(handler)


def remove_handler(handler: logging.Handler) -> None:
    """Remove ``handler`` from hf_lightning's root logger."""
    _configure()
    _root().removeHandler(handler)


def disable_propagation() -> None:
    """Stop hf_lightning's records at its root logger (they reach only its own handlers)."""
    _configure()
    _root().propagate = False


def enable_propagation() -> None:
    """Let hf_lightning's records reach the application's handlers too (by default ours propagate as
    transformers' do: not unless ``CI`` is set or ``transformers.utils.logging.enable_propagation()``)."""
    _configure()
    _root().propagate = True


def enable_explicit_format() -> None:
    """Format every handler of hf_lightning's root logger as ``[LEVEL|file:line] time >> message``."""
    _configure()
    for handler in _root().handlers:
        handler.setFormatter(logging.Formatter(_EXPLICIT_FORMAT))


def reset_format() -> None:
    """Give every handler of hf_lightning's root logger the default format back."""
    _configure()
    for handler in _root().handlers:
        handler.setFormatter(None)
