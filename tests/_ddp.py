"""Launch a test file as several CPU processes (gloo), with the variables torchrun would set."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

__all__ = ["run_ranks"]

ROOT = str(Path(__file__).resolve().parents[1])  # on the workers' PYTHONPATH, for `tests.*`


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_ranks(
    script: str, args: list[str], world: int = 2, timeout: float = 300, check: bool = True
) -> list[tuple[int, str]]:
    """Run ``python script *args`` once per rank and wait; fails with a rank's log when one exits non-zero
    (with ``check``). Returns each rank's exit code and output."""
    port = str(_free_port())
    procs = []
    for rank in range(world):
        env = {
            **os.environ,
            "WORLD_SIZE": str(world),
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": str(world),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
            "OMP_NUM_THREADS": "1",
            "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]),
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, script, *args],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    logs = [proc.communicate(timeout=timeout)[0] for proc in procs]
    for rank, proc in enumerate(procs):
        assert proc.returncode == 0 or not check, (
            f"{Path(script).name} {' '.join(args)}: rank {rank} failed:\n{logs[rank][-4000:]}"
        )
    return [(proc.returncode, log) for proc, log in zip(procs, logs)]
