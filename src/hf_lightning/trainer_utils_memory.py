"""Memory utilities of the Trainer: the per-stage memory report (``skip_memory_metrics=False``) and the
batch-size finder behind ``auto_find_batch_size``.

`TrainerMemoryTracker` reports, for each stage (``init``, ``train``, ``eval``, ``test``), the metrics
transformers reports: ``{stage}_mem_cpu_alloc_delta`` / ``{stage}_mem_cpu_peaked_delta`` (resident set
size), ``{stage}_mem_gpu_alloc_delta`` / ``{stage}_mem_gpu_peaked_delta`` when CUDA is available, and
``before_init_mem_cpu`` / ``before_init_mem_gpu`` with the first report. *alloc* is end minus start;
*peaked* is how far the peak rose above the end value; their sum is what the stage needed at most. CPU
memory is read with psutil when it is installed, else from ``/proc/self/statm``, else from the
``resource`` module (transformers reports nothing without psutil).
"""

from __future__ import annotations

import functools
import gc
import inspect
import os
import threading
from collections.abc import Callable
from typing import Any, cast

import torch

from hf_lightning.utils.logging import get_logger

__all__ = ["TrainerMemoryTracker", "find_executable_batch_size", "is_out_of_memory_error"]

logger = get_logger(__name__)


def _rss_reader() -> Callable[[], int]:
    """A function returning the resident set size of this process in bytes, with the best source at hand."""
    try:
        import psutil

        process = psutil.Process()
        return lambda: process.memory_info().rss
    except ImportError:
        pass
    if os.path.exists("/proc/self/statm"):
        page_size = os.sysconf("SC_PAGE_SIZE")

        def read_statm() -> int:
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * page_size

        return read_statm
    import resource
    import sys

    unit = 1 if sys.platform == "darwin" else 1024  # ru_maxrss is in bytes on macOS, KiB elsewhere
    return lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * unit


class TrainerMemoryTracker:
    """Measures CPU (and CUDA) memory per Trainer stage and adds the deltas to the stage's metrics.

    ``start()`` and ``stop_and_update_metrics(metrics)`` name the stage after the calling method, as in
    transformers (``__init__`` -> init, ``train`` -> train, ``evaluate`` -> eval, ``predict`` -> test), or
    take it explicitly (``stage="eval"``) when called from elsewhere. A stage started while another one
    runs (an evaluation during training) is ignored. With ``skip_memory_metrics=True`` nothing is measured.
    """

    stages = {
        "__init__": "init",
        "train": "train",
        "_inner_training_loop": "train",
        "_finalize_training": "train",
        "evaluate": "eval",
        "predict": "test",
    }
    #: Seconds between two reads of the resident set size while a stage runs.
    peak_poll_interval = 0.001
    cpu_mem_used_peak: int  # set by start(), raised by the poller while a stage runs

    def __init__(self, skip_memory_metrics: bool = False):
        self.skip_memory_metrics = skip_memory_metrics
        self.cur_stage: str | None = None
        self.cpu: dict[str, dict[str, int]] = {}
        self.gpu: dict[str, dict[str, int]] = {}
        self.init_reported = False
        self.cuda = (not skip_memory_metrics) and torch.cuda.is_available()
        self.cpu_mem_used = _rss_reader()
        self._stop_polling = threading.Event()
        self._poller: threading.Thread | None = None

    def _resolve_stage(self, stage: str | None) -> str:
        """The stage for an explicit name, or for the method that called ``start``/``stop_and_update_metrics``."""
        if stage is None:
            stage = cast(Any, inspect.currentframe()).f_back.f_back.f_code.co_name  # frames exist in CPython
        if stage in self.stages:
            return self.stages[stage]
        if stage in self.stages.values():
            return stage
        raise ValueError(
            f"TrainerMemoryTracker was called from or for {stage!r}; expected one of: "
            f"{', '.join(sorted(set(self.stages) | set(self.stages.values())))}"
        )

    def _poll_peak(self) -> None:
        self.cpu_mem_used_peak = max(self.cpu_mem_used_peak, self.cpu_mem_used())
        while not self._stop_polling.wait(self.peak_poll_interval):
            self.cpu_mem_used_peak = max(self.cpu_mem_used_peak, self.cpu_mem_used())

    def start(self, stage: str | None = None) -> None:
        """Start measuring a stage (named after the caller unless ``stage`` is given)."""
        if self.skip_memory_metrics:
            return
        stage = self._resolve_stage(stage)
        if self.cur_stage is not None and self.cur_stage != stage:
            return
        self.cur_stage = stage
        gc.collect()
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()
            torch.cuda.empty_cache()
            self.gpu_mem_used_at_start = torch.cuda.memory_allocated()
        self.cpu_mem_used_at_start = self.cpu_mem_used()
        self.cpu_mem_used_peak = self.cpu_mem_used_at_start
        self._stop_polling.clear()
        self._poller = threading.Thread(target=self._poll_peak, daemon=True)
        self._poller.start()

    def stop(self, stage: str) -> None:
        """Stop measuring ``stage`` and record its begin/end/alloc/peaked values."""
        if self.cur_stage is not None and self.cur_stage != stage:
            return
        self._stop_polling.set()
        if self._poller is not None:
            self._poller.join()
            self._poller = None
        gc.collect()
        if self.cuda:
            torch.cuda.empty_cache()
            now, peak = torch.cuda.memory_allocated(), torch.cuda.max_memory_allocated()
            begin = self.gpu_mem_used_at_start
            self.gpu[stage] = {"begin": begin, "end": now, "alloc": now - begin, "peaked": max(0, peak - now)}
        now = self.cpu_mem_used()
        begin = self.cpu_mem_used_at_start
        peak = max(self.cpu_mem_used_peak, now)
        self.cpu[stage] = {"begin": begin, "end": now, "alloc": now - begin, "peaked": max(0, peak - now)}
        self.cur_stage = None

    def update_metrics(self, stage: str, metrics: dict[str, Any]) -> None:
        """Add the ``{stage}_mem_*_delta`` metrics; the first report also carries the init stage's."""
        if self.skip_memory_metrics:
            return
        if self.cur_stage is not None and self.cur_stage != stage:
            return
        stages = [stage]
        if not self.init_reported:
            stages.insert(0, "init")
            self.init_reported = True
        for name in stages:
            for kind in ("alloc", "peaked"):
                if kind in self.cpu.get(name, {}):
                    metrics[f"{name}_mem_cpu_{kind}_delta"] = self.cpu[name][kind]
                if self.cuda and kind in self.gpu.get(name, {}):
                    metrics[f"{name}_mem_gpu_{kind}_delta"] = self.gpu[name][kind]
        if stages[0] == "init" and "init" in self.cpu:
            metrics["before_init_mem_cpu"] = self.cpu["init"]["begin"]
            if self.cuda and "init" in self.gpu:
                metrics["before_init_mem_gpu"] = self.gpu["init"]["begin"]

    def stop_and_update_metrics(
        self, metrics: dict[str, Any] | None = None, stage: str | None = None
    ) -> None:
        """`stop` the current stage and, if ``metrics`` is given, `update_metrics` it."""
        if self.skip_memory_metrics:
            return
        stage = self._resolve_stage(stage)
        self.stop(stage)
        if metrics is not None:
            self.update_metrics(stage, metrics)


_OUT_OF_MEMORY_MESSAGES = (
    "out of memory",  # CUDA, HIP, XPU, MPS
    "can't allocate memory",  # CPU
    "CUDNN_STATUS_NOT_SUPPORTED",  # cuDNN failing on a too-large batch
    "PT_DEVMEM Allocation failed",  # HPU
)


def is_out_of_memory_error(error: BaseException) -> bool:
    """Whether ``error`` is torch running out of memory (``torch.OutOfMemoryError`` or a RuntimeError saying so)."""
    oom_type = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", None)
    if oom_type is not None and isinstance(error, oom_type):
        return True
    if isinstance(error, RuntimeError) and error.args:
        return any(message in str(error.args[0]) for message in _OUT_OF_MEMORY_MESSAGES)
    return False


def _release_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def find_executable_batch_size(
    function: Callable | None = None, starting_batch_size: int = 128, auto_find_batch_size: bool = False
):
    """Wrap ``function`` (whose first parameter is ``batch_size``) to run with ``starting_batch_size``.

    With ``auto_find_batch_size`` the batch size is passed positionally and multiplied by 0.9 (as
    accelerate does for transformers) after every out-of-memory error until the call succeeds (the batch size found is kept for later calls); a
    RuntimeError is raised once it would reach 0. Without it, ``function`` is simply bound to
    ``batch_size=starting_batch_size``. Used as ``@find_executable_batch_size(starting_batch_size=...)``
    when ``function`` is omitted.
    """
    if function is None:
        return functools.partial(
            find_executable_batch_size,
            starting_batch_size=starting_batch_size,
            auto_find_batch_size=auto_find_batch_size,
        )
    if not auto_find_batch_size:
        return functools.partial(function, batch_size=starting_batch_size)
    batch_size = starting_batch_size

    @functools.wraps(function)
    def run_with_largest_batch_size(*args, **kwargs):
        nonlocal batch_size
        _release_memory()
        while True:
            if batch_size == 0:
                raise RuntimeError(
                    f"`auto_find_batch_size` (starting_batch_size={starting_batch_size}): every batch "
                    "size down to 1 ran out of memory."
                )
            try:
                return function(batch_size, *args, **kwargs)
            except Exception as error:
                if not is_out_of_memory_error(error):
                    raise
            # Outside the except block the failed call's frames (and their tensors) are already released.
            smaller = int(batch_size * 0.9)
            logger.warning(
                "auto_find_batch_size: out of memory with batch_size=%d; retrying with %d.",
                batch_size,
                smaller,
            )
            batch_size = smaller
            _release_memory()

    return run_with_largest_batch_size
