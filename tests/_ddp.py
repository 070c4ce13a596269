"""Launch a test file as several CPU processes (gloo), with the variables torchrun would set."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

__all__ = ["run_ranks"]

ROOT = str(Path(__file__).resolve().parents[1])  # on the workers' PYTHONPATH, for `tests.*`
RANK_MAIN = str(Path(__file__).with_name("_rank_main.py"))  # runs the script, then closes its group


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _launcher_env(launcher: str, rank: int, world: int) -> dict[str, str]:
    if launcher == "srun":  # what `srun --ntasks-per-node=WORLD` gives each task (no torch variables)
        return {
            "SLURM_NTASKS": str(world),
            "SLURM_NTASKS_PER_NODE": str(world),
            "SLURM_PROCID": str(rank),
            "SLURM_LOCALID": str(rank),
            "SLURM_NODEID": "0",
            "SLURM_NNODES": "1",
            "SLURM_NODELIST": "localhost",
            "SLURM_JOB_ID": "4242",
            "SLURM_JOB_NAME": "train",
        }
    return {
        "WORLD_SIZE": str(world),
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "LOCAL_WORLD_SIZE": str(world),
    }


def run_ranks(
    script: str,
    args: list[str],
    world: int = 2,
    timeout: float = 300,
    check: bool = True,
    launcher: str = "torchrun",
    close_group: bool = True,
) -> list[tuple[int, str]]:
    """Run ``python script *args`` once per rank and wait; fails with a rank's log when one exits non-zero
    (with ``check``). Returns each rank's exit code and output. ``launcher="srun"`` gives each process
    the variables of an ``srun`` task instead of torchrun's. With ``close_group`` each process closes its
    process group after the script (transformers.Trainer leaves it open: see ``_rank_main.py``)."""
    port = str(_free_port())
    procs = []
    inherited = {
        k: v
        for k, v in os.environ.items()
        if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE") and not k.startswith("SLURM_")
    }
    for rank in range(world):
        env = {
            **inherited,
            **_launcher_env(launcher, rank, world),
            **({} if launcher == "srun" else {"MASTER_ADDR": "127.0.0.1"}),  # srun: from SLURM_NODELIST
            "MASTER_PORT": port,
            "OMP_NUM_THREADS": "1",
            "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]),
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, *([RANK_MAIN] if close_group else []), script, *args],
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
