"""Which launcher started this process, and the torch launcher variables that follow from it.

``torchrun`` (and any launcher that sets them) gives ``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK`` and
``LOCAL_WORLD_SIZE``. A SLURM job step started by ``srun`` without torchrun gives none of them: each
task has ``SLURM_NTASKS``, ``SLURM_PROCID``, ``SLURM_LOCALID`` and ``SLURM_NTASKS_PER_NODE``
instead. :func:`launcher_variables` reads either as the torch variables, so the arguments
(``world_size``, ``process_index``, ``should_save`` ...) and the plan see the same world, and Lightning
recognises the launch through its ``SLURMEnvironment``. As Lightning, a SLURM allocation whose job
name is ``bash`` or ``interactive`` is not taken as an ``srun`` launch.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["TORCH_LAUNCHER_VARIABLES", "launcher_variables", "started_by_srun"]

TORCH_LAUNCHER_VARIABLES = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE")


def started_by_srun(env: Mapping[str, str]) -> bool:
    """A SLURM task started by ``srun`` itself (no torch launcher variables, not an interactive allocation)."""
    return (
        "SLURM_NTASKS" in env
        and env.get("SLURM_JOB_NAME") not in ("bash", "interactive")
        and not env.get("WORLD_SIZE")
    )


def launcher_variables(env: Mapping[str, str]) -> dict[str, str]:
    """The torch launcher variables of this process: as set, or derived from an ``srun`` task.

    Raises:
        ValueError: ``srun --ntasks=N`` (N > 1) without ``--ntasks-per-node``, which Lightning refuses too.
    """
    if not started_by_srun(env):
        return {name: env[name] for name in TORCH_LAUNCHER_VARIABLES if name in env}
    tasks = env["SLURM_NTASKS"]
    per_node = env.get("SLURM_NTASKS_PER_NODE")
    if per_node is None:
        if tasks not in ("", "1"):
            raise ValueError(
                f"SLURM started {tasks} tasks with `--ntasks={tasks}`, which does not say how many run on each "
                f"node; use `srun --ntasks-per-node=N` (see docs/distributed.md)"
            )
        per_node = "1"
    return {
        "WORLD_SIZE": tasks,
        "RANK": env.get("SLURM_PROCID", "0"),
        "LOCAL_RANK": env.get("SLURM_LOCALID", "0"),
        "LOCAL_WORLD_SIZE": per_node,
    }
