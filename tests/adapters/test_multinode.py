"""Multi-node: two ``torchrun --nnodes=2`` launchers on 127.0.0.1 train like one node with 2 processes.

Each launcher starts one process (node ranks 0 and 1). torchrun's variables (``WORLD_SIZE=2``,
``LOCAL_WORLD_SIZE=1``) make the plan ask Lightning for 2 nodes of 1 device; Lightning recognises the
launch through its ``TorchElasticEnvironment``.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from hf_lightning import TrainingArguments
from hf_lightning.adapters.plan import to_lightning
from tests._ddp import ROOT, _free_port, run_ranks

WORKER = os.path.join(ROOT, "tests", "fsdp_worker.py")


def _torchrun_node(node_rank: int, port: int, out: str) -> subprocess.Popen:
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--node_rank={node_rank}",
        "--nproc_per_node=1", "--master_addr=127.0.0.1", f"--master_port={port}", WORKER, out, "ddp",
    ]  # fmt: skip
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict]]:
    """The same training as 2 nodes × 1 process (torchrun) and as 1 node × 2 processes."""
    multi, single = tmp_path_factory.mktemp("multinode"), tmp_path_factory.mktemp("one_node")
    port = _free_port()
    nodes = [_torchrun_node(rank, port, str(multi)) for rank in (0, 1)]
    logs = [node.communicate(timeout=300)[0] for node in nodes]
    for rank, node in enumerate(nodes):
        assert node.returncode == 0, f"node {rank} failed:\n{logs[rank][-4000:]}"
    run_ranks(WORKER, [str(single), "ddp"], world=2)
    srun = tmp_path_factory.mktemp("srun")
    run_ranks(WORKER, [str(srun), "ddp"], world=2, launcher="srun")
    load = lambda folder: [torch.load(folder / f"ddp_rank{r}.pt", weights_only=True) for r in range(2)]  # noqa: E731
    return {"multi": load(multi), "single": load(single), "srun": load(srun)}


SRUN_TASK = {"SLURM_NTASKS": "4", "SLURM_NTASKS_PER_NODE": "2", "SLURM_PROCID": "3", "SLURM_LOCALID": "1",
             "SLURM_NODEID": "1", "SLURM_JOB_NAME": "train"}  # fmt: skip


def test_srun_task_plans_its_nodes_and_devices(tmp_path) -> None:
    """An ``srun --ntasks-per-node=2`` task of 4 (no torchrun) plans 2 nodes of 2 devices; Lightning's own
    SLURMEnvironment takes it from there (no cluster plugin is forced)."""
    plan = to_lightning(TrainingArguments(str(tmp_path), use_cpu=True), env=SRUN_TASK)
    assert (plan.trainer_settings["num_nodes"], plan.trainer_settings["devices"]) == (2, 2)
    assert plan.plugins == ()


def test_srun_task_gives_the_arguments_its_ranks(tmp_path, monkeypatch) -> None:
    """``TrainingArguments`` reads an srun task's ranks: world 4, process 3, local process 1, not the saver."""
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in SRUN_TASK.items():
        monkeypatch.setenv(name, value)
    args = TrainingArguments(str(tmp_path), use_cpu=True)
    assert (args.world_size, args.process_index, args.local_process_index) == (4, 3, 1)
    assert not args.should_save and not args.should_log


def test_interactive_slurm_allocation_is_not_an_srun_launch(tmp_path) -> None:
    """As Lightning, a job named ``interactive`` (or ``bash``) is one process, not an srun task."""
    plan = to_lightning(
        TrainingArguments(str(tmp_path), use_cpu=True), env={**SRUN_TASK, "SLURM_JOB_NAME": "bash"}
    )
    assert (plan.trainer_settings["num_nodes"], plan.trainer_settings["devices"]) == (1, 1)


def test_srun_ntasks_without_ntasks_per_node_is_refused(tmp_path) -> None:
    """``srun --ntasks=4`` alone does not say how tasks spread over nodes: a ValueError naming the fix."""
    env = {key: value for key, value in SRUN_TASK.items() if key != "SLURM_NTASKS_PER_NODE"}
    with pytest.raises(ValueError, match="--ntasks-per-node"):
        to_lightning(TrainingArguments(str(tmp_path), use_cpu=True), env=env)


def test_torchrun_inside_slurm_keeps_torchruns_ranks(tmp_path) -> None:
    """``srun torchrun ...``: torchrun's variables win, and Lightning gets TorchElasticEnvironment (its own
    detection would pick SLURMEnvironment and SLURM's per-node task ranks)."""
    from lightning.fabric.plugins.environments import TorchElasticEnvironment

    env = {
        **SRUN_TASK,
        "SLURM_NTASKS": "2",
        "SLURM_NTASKS_PER_NODE": "1",
        "WORLD_SIZE": "16",
        "LOCAL_WORLD_SIZE": "8",
    }
    plan = to_lightning(TrainingArguments(str(tmp_path), use_cpu=True), env=env)
    assert (plan.trainer_settings["num_nodes"], plan.trainer_settings["devices"]) == (2, 8)
    assert [type(plugin) for plugin in plan.plugins] == [TorchElasticEnvironment]


def test_launcher_variables_plan_two_nodes(tmp_path) -> None:
    """torchrun's WORLD_SIZE=2 and LOCAL_WORLD_SIZE=1 plan 2 nodes of 1 device each."""
    plan = to_lightning(
        TrainingArguments(str(tmp_path), use_cpu=True), env={"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1"}
    )
    assert (plan.trainer_settings["num_nodes"], plan.trainer_settings["devices"]) == (2, 1)


@pytest.mark.slow
@pytest.mark.ddp
def test_two_nodes_train_to_the_weights_of_one_node(runs) -> None:
    """Both nodes end with the weights of a 2-process single-node run (within 1e-6) and log its losses."""
    reference = runs["single"][0]
    for record in runs["multi"]:
        for name, value in reference["state"].items():
            torch.testing.assert_close(record["state"][name], value, rtol=0, atol=1e-6, msg=name)
        assert record["losses"] == pytest.approx(reference["losses"], abs=1e-6)


@pytest.mark.slow
@pytest.mark.ddp
def test_log_on_each_node_lets_each_node_log(runs) -> None:
    """With ``log_on_each_node`` (default) each node's first process logs; without it only the first node's."""
    assert [r["should_log"] for r in runs["multi"]] == [True, True]
    assert [r["should_log_once"] for r in runs["multi"]] == [True, False]
    assert [r["should_log"] for r in runs["single"]] == [True, False]


@pytest.mark.slow
@pytest.mark.ddp
def test_save_on_each_node_lets_each_node_save(runs) -> None:
    """Without ``save_on_each_node`` only the first node saves; with it, each node's first process does."""
    assert [r["should_save"] for r in runs["multi"]] == [True, False]
    assert [r["should_save_each_node"] for r in runs["multi"]] == [True, True]
    assert [r["should_save_each_node"] for r in runs["single"]] == [True, False]


@pytest.mark.slow
@pytest.mark.ddp
def test_srun_without_torchrun_trains_like_torchrun(runs) -> None:
    """Two processes with only srun's SLURM variables train to the torchrun-style run's weights and losses."""
    reference = runs["single"][0]
    for record in runs["srun"]:
        for name, value in reference["state"].items():
            torch.testing.assert_close(record["state"][name], value, rtol=0, atol=1e-6, msg=name)
        assert record["losses"] == pytest.approx(reference["losses"], abs=1e-6)
    assert [r["should_save"] for r in runs["srun"]] == [True, False]
