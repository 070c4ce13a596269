"""Every code block of README.md and docs/*.md runs in a test.

- ```python blocks: a page's blocks run in order in one namespace (later examples build on earlier
  ones), in a subprocess of their own (pages set environment variables and logging) in an empty folder;
  docs/lightning.md's run one by one in tests/test_docs_lightning.py. docs/distributed.md's run under
  ``torchrun`` with 2 processes (slow), after a prelude that builds the GPT-2 and data they call "yours".
- ```bash blocks: each is named in ``SHELL`` with the test that runs it (slow): the README's in a fresh clone
  with real installs, docs/distributed.md's on this host (two torchrun "machines"; the SLURM recipes under
  a local stand-in for ``srun`` that gives each task its SLURM variables).
- ```text blocks are output; docs/optimizers.md's error is compared with the real one, the README's
  quickstart output in tests/test_examples.py (slow).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests._docs import ROOT, blocks, pages

PYTHON_PAGES = sorted(p for p in pages() if any(lang == "python" for lang, _ in blocks(p)))
IN_PROCESS = {
    "docs/lightning.md": "tests/test_docs_lightning.py",
    "README.md": "test_the_readme_python_blocks_run",
}
UNDER_TORCHRUN = {"docs/distributed.md"}
DISTRIBUTED_PRELUDE = """
import torch
from transformers import GPT2Config, GPT2LMHeadModel
from hf_lightning import Trainer, TrainingArguments

torch.manual_seed(0)
config = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=16, bos_token_id=0, eos_token_id=0)
data = [{"input_ids": r, "labels": r.clone()} for r in torch.randint(0, 64, (32, 16))]
"""

# Each shell block (its first line) and the test that runs it.
SHELL = {
    'git clone "$REPO_URL" hf_lightning && cd hf_lightning': "test_readme_commands_in_a_fresh_clone",
    "python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 "
    '&& pip install -e ".[transformers]" && python examples/quickstart.py': (
        "test_readme_commands_in_a_fresh_clone"
    ),
    "python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 "
    '&& pip install -e ".[test]" && python -m pytest -m "not slow"': (
        "test_readme_commands_in_a_fresh_clone (its install; the suite is .ci/run's, "
        "test_ci_runs_the_readme_test_command)"
    ),
    "torchrun --nproc_per_node=2 examples/train_fsdp.py": (
        "tests/test_examples.py::test_the_readme_command_runs_at_full_length[train_fsdp]"
    ),
    "# on machine 0 (HOST) and machine 1, R = 0 and 1": "test_two_machine_torchrun_runs_on_one_host",
    "#SBATCH --nodes=2 --ntasks-per-node=8 --gpus-per-node=8": "test_slurm_recipe_runs_under_a_local_srun",
    "#SBATCH --nodes=2 --ntasks-per-node=1 --gpus-per-node=8": "test_slurm_recipe_runs_under_a_local_srun",
}


def _shell_blocks() -> list[tuple[str, str]]:
    return [(page, code) for page in pages() for lang, code in blocks(page) if lang == "bash"]


def _run_page(page: str, cwd, launcher: list[str] | None = None, **env: str) -> subprocess.CompletedProcess:
    environ = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **env}
    environ.pop("PYTHONWARNINGS", None)
    if page == "docs/hub.md":  # it points huggingface_hub at a local Hub, from a shell not set offline
        for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
            environ.pop(name, None)
    command = [sys.executable, *(launcher or []), "-m", "tests._docs", page]
    return subprocess.run(command, cwd=cwd, env=environ, capture_output=True, text=True, timeout=1200)


def test_every_block_has_a_known_language_and_a_runner():
    """Each block is python (run below), bash (named in SHELL) or text (output)."""
    for page in pages():
        for lang, code in blocks(page):
            assert lang in ("python", "bash", "text"), (page, lang, code[:80])
    shell = {code.splitlines()[0] for _, code in _shell_blocks()}
    assert shell == set(SHELL)


def test_the_fsdp_command_is_the_readme_example_that_its_test_runs():
    """docs/distributed.md's one-machine command is the README table's train_fsdp command."""
    from tests._venv import readme_examples

    assert readme_examples()["train_fsdp"][0] in SHELL


@pytest.mark.parametrize("page", [p for p in PYTHON_PAGES if p not in IN_PROCESS and p not in UNDER_TORCHRUN])
def test_the_python_blocks_of_the_page_run(page, tmp_path):
    """The page's Python blocks, in order, exit 0 from an empty folder."""
    run = _run_page(page, tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-4000:]
    count = sum(lang == "python" for lang, _ in blocks(page))
    assert len(re.findall(rf"^--- {re.escape(page)}\[\d+\]$", run.stdout, flags=re.M)) == count


def test_the_readme_python_blocks_run():
    """The README's import lines import (in this process: they change nothing global)."""
    for index, (lang, code) in enumerate(blocks("README.md")):
        if lang == "python":
            exec(compile(code, f"README.md[{index}]", "exec"), {"__name__": "__main__"})


@pytest.mark.slow
@pytest.mark.parametrize("page", sorted(UNDER_TORCHRUN))
def test_the_distributed_python_blocks_run_under_torchrun(page, tmp_path):
    """docs/distributed.md's FSDP and DeepSpeed blocks on 2 gloo processes: sharded checkpoints, resume,
    full weights saved."""
    launcher = ["-m", "torch.distributed.run", "--nproc_per_node=2"]
    run = _run_page(page, tmp_path, launcher, DOCS_PRELUDE=DISTRIBUTED_PRELUDE)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-4000:]
    assert (tmp_path / "out" / "checkpoint-2" / "pytorch_model_fsdp_0").is_dir()
    assert (tmp_path / "final" / "model.safetensors").is_file()


def test_the_optimizers_page_shows_the_real_missing_package_error(monkeypatch):
    """docs/optimizers.md's ```text block is the ImportError a missing galore-torch raises."""
    import torch

    from hf_lightning import TrainingArguments
    from hf_lightning.optim import get_optimizer_cls_and_kwargs

    shown = next(code for lang, code in blocks("docs/optimizers.md") if lang == "text").strip()
    for name in ["galore_torch"] + [m for m in sys.modules if m.startswith("galore_torch.")]:
        monkeypatch.setitem(sys.modules, name, None)
    args = TrainingArguments("out", optim="galore_adamw", optim_target_modules=["x"], report_to="none")
    with pytest.raises(ImportError) as raised:
        get_optimizer_cls_and_kwargs(args, torch.nn.Linear(2, 2))
    assert f"ImportError: {raised.value}" == shown


def test_ci_runs_the_readme_test_command():
    """.ci/run installs what the README's test command installs and runs its pytest selection."""
    readme = next(code for _, code in _shell_blocks() if '".[test]"' in code)
    ci = (ROOT / ".ci" / "run").read_text()
    assert "pip install torch==2.13.0" in readme and "python -m pip install -q torch==2.13.0" in ci
    assert 'pip install -e ".[test]"' in readme and 'python -m pip install -q -e ".[test]"' in ci
    assert 'python -m pytest -m "not slow"' in readme
    assert re.search(r'^python -m pytest -q -m "not slow" -p no:cacheprovider$', ci, flags=re.M)


def _bash(script: str, cwd, timeout: float, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    environ["PATH"] = os.pathsep.join(
        p for p in environ.get("PATH", "").split(os.pathsep) if not p.startswith(sys.prefix)
    )
    environ.update(env)
    return subprocess.run(
        ["bash", "-e", "-c", script], cwd=cwd, env=environ, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.slow
def test_readme_commands_in_a_fresh_clone(tmp_path):
    """The README's clone, quickstart and test commands, as written, in a clone of the committed project:
    a real venv and real installs from the package index (minutes; it needs the index), then the
    quickstart's full run, and the test command with its selection narrowed to tests/test_first_run.py."""
    readme = [code.strip() for page, code in _shell_blocks() if page == "README.md"]
    clone, quickstart, tests = readme
    run = _bash(clone, tmp_path, 600, REPO_URL=str(ROOT))
    assert run.returncode == 0, run.stderr[-3000:]
    project = tmp_path / "hf_lightning"
    run = _bash(quickstart, project, 3600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert re.search(r"^after 150 steps: eval loss \d", run.stdout, flags=re.M)
    narrowed = tests.replace(
        'python -m pytest -m "not slow"', 'python -m pytest -m "not slow" tests/test_first_run.py'
    )
    run = _bash(narrowed, project, 3600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert re.search(r"\d+ passed", run.stdout)


@pytest.mark.slow
def test_two_machine_torchrun_runs_on_one_host(tmp_path):
    """docs/distributed.md's two-machine command with HOST=127.0.0.1, R=0 and 1, one process per "machine"
    and examples/train_fsdp.py as train.py: both launchers exit 0 and each rank holds its shard."""
    from tests._ddp import _free_port

    code = next(code for _, code in _shell_blocks() if code.startswith("# on machine 0"))
    command = code.splitlines()[1]
    port = str(_free_port())
    nodes = []
    for rank in ("0", "1"):
        line = (
            command.replace("--node_rank=R", f"--node_rank={rank}")
            .replace("--master_addr=HOST", "--master_addr=127.0.0.1")
            .replace("--nproc_per_node=8", "--nproc_per_node=1")
            .replace("--master_port=29500", f"--master_port={port}")
            .replace("train.py", str(ROOT / "examples" / "train_fsdp.py"))
        )
        words = line.split()
        assert words[0] == "torchrun"
        argv = [sys.executable, "-m", "torch.distributed.run", *words[1:]]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        nodes.append(
            subprocess.Popen(
                argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
        )
    logs = [node.communicate(timeout=900)[0] for node in nodes]
    for node, log in zip(nodes, logs):
        assert node.returncode == 0, log[-4000:]
    assert "rank 0: holds" in logs[0] and "rank 1: holds" in logs[1]


# A local stand-in for srun: SLURM_NNODES x SLURM_NTASKS_PER_NODE tasks of the command on this host, each
# with the variables srun gives a task; and for scontrol, this host as the allocation's only name.
_FAKE_SRUN = """#!/usr/bin/env bash
pids=()
for ((node = 0; node < SLURM_NNODES; node++)); do
  for ((task = 0; task < SLURM_NTASKS_PER_NODE; task++)); do
    SLURM_PROCID=$((node * SLURM_NTASKS_PER_NODE + task)) SLURM_LOCALID=$task SLURM_NODEID=$node "$@" &
    pids+=($!)
  done
done
rc=0
for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
exit $rc
"""
_FAKE_SCONTROL = "#!/usr/bin/env bash\necho localhost\n"


@pytest.mark.slow
@pytest.mark.parametrize("tasks_per_node", ["8", "1"], ids=["srun-per-device", "torchrun-per-node"])
def test_slurm_recipe_runs_under_a_local_srun(tasks_per_node, tmp_path):
    """Each SLURM recipe of docs/distributed.md, scaled to 2 "nodes" of 1 process on this host, under a
    local srun stand-in (the variables a task gets, no SLURM): examples/train_fsdp.py as train.py trains
    on both ranks and each holds its shard."""
    from tests._ddp import _free_port

    code = next(
        c
        for _, c in _shell_blocks()
        if c.startswith(f"#SBATCH --nodes=2 --ntasks-per-node={tasks_per_node} ")
    )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # torchrun is torch's console script; this test's venv may lack it (its packages come from another venv)
    torchrun = f'#!/usr/bin/env bash\nexec "{sys.executable}" -m torch.distributed.run "$@"\n'
    for name, text in (("srun", _FAKE_SRUN), ("scontrol", _FAKE_SCONTROL), ("torchrun", torchrun)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    script = (
        code.replace("--nproc_per_node=8", "--nproc_per_node=1")
        .replace(":29500", f":{_free_port()}")
        .replace("train.py", str(ROOT / "examples" / "train_fsdp.py"))
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(
        PATH=os.pathsep.join([str(bin_dir), os.path.dirname(sys.executable), env.get("PATH", "")]),
        OMP_NUM_THREADS="1",
        SLURM_NNODES="2",
        SLURM_NTASKS_PER_NODE="1",  # 8 devices per node in the docs, 1 process here
        SLURM_NTASKS="2",
        SLURM_JOB_NODELIST="localhost",
        SLURM_NODELIST="localhost",
        SLURM_JOB_ID="4242",
        SLURM_JOB_NAME="train",
        MASTER_PORT=str(_free_port()),
    )
    run = subprocess.run(
        ["bash", "-e", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-4000:]
    assert "rank 0: holds" in run.stdout and "rank 1: holds" in run.stdout
