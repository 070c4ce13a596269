"""Run a test worker as ``__main__``, close its process group, and end the process without the
interpreter's finalisation: ``python _rank_main.py script *args``.

transformers.Trainer, run as the oracle, leaves its process group open, and now and then its process
aborts in the interpreter's finalisation after all its work is done ("terminate called without an active
exception", exit code -6; CI saw it on the IterableDataset run). The worker's results are on disk by
then, so the process ends with the script's own exit code once its output is flushed.
"""

from __future__ import annotations

import os
import runpy
import sys
import traceback
from pathlib import Path


def _run(script: str) -> int:
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:
        traceback.print_exc()
        return 1
    finally:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path[0] = str(Path(script).resolve().parent)  # as `python script` would have it
    code = _run(script)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
