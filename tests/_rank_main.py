"""Run a test worker as ``__main__``, then close its process group: ``python _rank_main.py script *args``.

A gloo group left open to the interpreter's end can abort a process that finished its work ("terminate
called without an active exception"); transformers.Trainer, run as the oracle, never closes its group.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

if __name__ == "__main__":
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path[0] = str(Path(script).resolve().parent)  # as `python script` would have it
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
