"""Just-in-time (JIT) checkpoints on SIGTERM: the engine-free part.

``TrainingArguments(enable_jit_checkpoint=True)``: when the process receives SIGTERM (a preemption,
``kubectl delete``, Slurm's ``--signal=TERM@N``), the trainer finishes the optimizer step in progress,
writes ``checkpoint-{global_step}`` holding exactly the state after that step, and stops cleanly so the
process exits with status 0. Resuming from that checkpoint continues as if nothing had happened.

This module holds what does not depend on the engine:

- :class:`SigtermWatch` owns the SIGTERM handler while installed and turns a SIGTERM into a checkpoint
  request, ``kill_wait`` seconds later (transformers waits 3 s, so that a SIGKILL that follows the
  SIGTERM at once does not interrupt a save that was just started).
- :func:`should_stop` is the decision every rank takes at the end of each optimizer step: stop when any
  rank has a request (the engine supplies the cross-rank "any").
- :class:`JITTimings` measures the step and save times and reports the grace period the orchestrator
  must allow between SIGTERM and SIGKILL: longest step + save + ``kill_wait``.

The Lightning side (``hf_lightning.adapters.callbacks.jit_checkpoint.JITCheckpoint``) calls these at
its hooks.
"""

from __future__ import annotations

import math
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hf_lightning.utils.logging import get_logger

__all__ = ["DEFAULT_KILL_WAIT", "JITTimings", "SigtermWatch", "should_stop"]

DEFAULT_KILL_WAIT = 3.0
logger = get_logger(__name__)


class SigtermWatch:
    """Owns ``SIGTERM`` between :meth:`install` and :meth:`uninstall`; a SIGTERM becomes :attr:`requested`.

    Args:
        kill_wait: seconds between the SIGTERM and the request (0 requests at once).
    """

    def __init__(self, kill_wait: float = DEFAULT_KILL_WAIT) -> None:
        if isinstance(kill_wait, bool) or not isinstance(kill_wait, (int, float)) or kill_wait < 0:
            raise ValueError(f"`kill_wait={kill_wait!r}` must be a number of seconds >= 0.")
        self.kill_wait = float(kill_wait)
        self.received = False
        self._requested = threading.Event()
        self._timer: threading.Timer | None = None
        self._previous: Any = None
        self.installed = False

    @property
    def requested(self) -> bool:
        """Whether a checkpoint was requested (a SIGTERM arrived and ``kill_wait`` has passed)."""
        return self._requested.is_set()

    def install(self) -> bool:
        """Take over SIGTERM, remembering the current handler; False (logged) outside the main thread."""
        if self.installed:
            return True
        if threading.current_thread() is not threading.main_thread():
            logger.warning(
                "JIT checkpointing needs the main thread to handle SIGTERM; it is off for this run."
            )
            return False
        self._previous = signal.signal(signal.SIGTERM, self._on_sigterm)
        self.installed = True
        return True

    def uninstall(self) -> None:
        """Give SIGTERM back to the handler that was there before :meth:`install`; cancel a pending request."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.installed:
            signal.signal(signal.SIGTERM, self._previous if self._previous is not None else signal.SIG_DFL)
            self.installed = False

    def request(self) -> None:
        """Request a checkpoint now (what a SIGTERM does after ``kill_wait``)."""
        self._requested.set()

    def clear(self) -> None:
        """Forget the request once it was carried out."""
        self._requested.clear()

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        if self.received:
            return
        self.received = True
        logger.warning(
            "SIGTERM received: a checkpoint will be written after the optimizer step in progress%s.",
            f" (in {self.kill_wait:g}s or later)" if self.kill_wait else "",
        )
        if self.kill_wait <= 0:
            self.request()
            return
        self._timer = threading.Timer(self.kill_wait, self.request)
        self._timer.daemon = True
        self._timer.start()


def should_stop(requested_here: bool, any_rank: Callable[[bool], bool] | None = None) -> bool:
    """Whether every rank stops after this optimizer step: some rank has a checkpoint request.

    ``any_rank`` reduces a local boolean across ranks with "any" (every rank must call it at the same
    step); without it, this process decides alone.
    """
    return bool(any_rank(bool(requested_here))) if any_rank is not None else bool(requested_here)


@dataclass
class JITTimings:
    """Measured durations and the grace period they imply."""

    kill_wait: float = DEFAULT_KILL_WAIT
    longest_step: float = 0.0
    last_step: float = 0.0
    steps: int = 0
    last_save: float | None = None

    def record_step(self, seconds: float) -> None:
        """One optimizer step (everything the engine did for it: evaluation or saving included)."""
        self.steps += 1
        self.last_step = seconds
        self.longest_step = max(self.longest_step, seconds)

    def record_save(self, seconds: float) -> None:
        """One checkpoint save."""
        self.last_save = seconds

    def grace_period(self) -> float | None:
        """Longest step + last save + ``kill_wait`` in seconds; None until a save was measured."""
        if self.last_save is None:
            return None
        return self.longest_step + self.last_save + self.kill_wait

    def report(self) -> str:
        """One log line: the measured times and the grace period the orchestrator must allow."""
        measured = (
            f"longest optimizer step {self.longest_step:.3f}s (last {self.last_step:.3f}s, "
            f"{self.steps} steps)"
        )
        grace = self.grace_period()
        if grace is None:
            return (
                f"JIT checkpointing: {measured}; no checkpoint was saved yet, so the save time is unknown. "
                f"The termination grace period must cover a step, a save and kill_wait={self.kill_wait:g}s."
            )
        seconds = max(math.ceil(grace), 1)
        return (
            f"JIT checkpointing: {measured} + save {self.last_save:.3f}s + kill_wait {self.kill_wait:g}s = "
            f"{grace:.3f}s. Give the job a termination grace period of at least {seconds}s "
            f"(Kubernetes terminationGracePeriodSeconds: {seconds}; Slurm --signal=TERM@{seconds}), "
            "with a margin for larger steps."
        )
