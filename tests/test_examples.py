"""Every script in examples/ runs from the install the README names for it, and names that install when it
is missing.

The README's "Three ways in" table gives each example its command and its extra. Each run here is a
subprocess in a simulated fresh venv holding hf-lightning with that extra only (tests/_venv.py hides every
other installed distribution); with a smaller install the example stops with its own
``pip install "hf-lightning[extra]"`` line, never a ``ModuleNotFoundError`` traceback. The quickstart's
short run is in tests/test_first_run.py and run_clm.py's in tests/test_example_run_clm.py; the slow tests
run every README command at its full length.
"""

from __future__ import annotations

import math
import re
import sys

import pytest

from tests._venv import ROOT, example_argv, readme_examples, run_in_venv

EXAMPLES = readme_examples()
# A line no user can act on: warnings (Python's, transformers', torch's `W1201 ...` log lines), Lightning's
# tips and device lines.
NOISE = re.compile(r"(?i)warn|deprecat|unrecogni[sz]ed|💡|tip:|GPU available|TPU available|^W\d{4} ")

# Short runs of the examples the other test files do not run (arguments added to the README's command),
# and what their stdout must show.
SHORT = {
    "lightning_user": (["--max_epochs", "1"], [r"before training: eval loss \d", r"after 6 optimizer steps"]),
    "hpsearch_optuna": (
        ["--n_trials", "2", "--max_steps", "4", "--output_dir", "out"],
        [r"2 trials \(2 complete, 0 pruned\)", r"best trial \d+: eval loss \d"],
    ),
}
ELSEWHERE = {"quickstart": "tests/test_first_run.py", "run_clm": "tests/test_example_run_clm.py"}
# Ray's local instance and torchrun's two processes take minutes on 2 cores: slow only.
SLOW_SHORT = {
    "hpsearch_ray": (
        ["--n_trials", "2", "--max_steps", "4", "--output_dir", "out"],
        [r"best trial \w+: eval loss"],
    ),
    "train_fsdp": ([], [r"rank 0: holds [\d,]+ of [\d,]+ parameter elements"]),
}


def _noise(text: str) -> list[str]:
    return [line for line in re.split(r"[\r\n]+", text) if NOISE.search(line)]


def test_the_readme_table_lists_every_example():
    """Each script of examples/ (not the helper modules) has its row: command and extra."""
    scripts = {p.stem for p in (ROOT / "examples").glob("*.py") if not p.name.startswith("_")}
    assert set(EXAMPLES) == scripts
    assert set(SHORT) | set(ELSEWHERE) | set(SLOW_SHORT) == scripts


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_without_its_extra_the_example_names_the_install_line(name, tmp_path):
    """With hf-lightning alone (and, for the `examples` extra, the quickstart's `transformers` install) the
    example exits 1 with the README's install line, no ModuleNotFoundError traceback."""
    command, extra = EXAMPLES[name]
    for installed in {(), ("transformers",)} - {(extra,)}:
        run = run_in_venv(installed, example_argv(command), cwd=tmp_path, timeout=300)
        assert run.returncode == 1, (installed, run.stdout[-2000:], run.stderr[-3000:])
        assert f'pip install "hf-lightning[{extra}]"' in run.stderr, (installed, run.stderr[-3000:])
        assert "ModuleNotFoundError" not in run.stderr
        if not command.startswith("torchrun"):  # torchrun adds its own report of a failed process
            assert "Traceback" not in run.stderr


@pytest.mark.parametrize("name", sorted(SHORT))
def test_the_example_runs_from_its_extra(name, tmp_path):
    """A short run exits 0, prints its results, and prints no warning, tip or device line."""
    command, extra = EXAMPLES[name]
    args, expected = SHORT[name]
    run = run_in_venv((extra,), example_argv(command, *args), cwd=tmp_path, OMP_NUM_THREADS="1")
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    for pattern in expected:
        assert re.search(pattern, run.stdout), (pattern, run.stdout[-2000:])
    assert _noise(run.stdout + run.stderr) == []


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SLOW_SHORT))
def test_the_slow_example_runs_from_its_extra(name, tmp_path):
    """Ray's and torchrun's examples, shortened, exit 0 and print their results."""
    command, extra = EXAMPLES[name]
    args, expected = SLOW_SHORT[name]
    run = run_in_venv((extra,), example_argv(command, *args), cwd=tmp_path, timeout=900, OMP_NUM_THREADS="1")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    for pattern in expected:
        assert re.search(pattern, run.stdout), (pattern, run.stdout[-3000:])


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_the_readme_command_runs_at_full_length(name, tmp_path):
    """The README's command itself, from its extra: exit 0, no traceback."""
    command, extra = EXAMPLES[name]
    run = run_in_venv((extra,), example_argv(command), cwd=tmp_path, timeout=1800)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "Traceback" not in run.stderr
    if name == "quickstart":
        _assert_the_readme_shows_the_quickstart_output(run.stdout)


def _assert_the_readme_shows_the_quickstart_output(stdout: str) -> None:
    """The README's ```text block is the quickstart's stdout: line for line on the Python it names
    (3.11.7; the runtime figures aside), the same lines with other figures on another patch version."""
    from tests._docs import blocks

    shown = next(code for lang, code in blocks("README.md") if lang == "text").strip().splitlines()
    printed = stdout.strip().splitlines()
    timing = re.compile(r"'train_(runtime|samples_per_second|steps_per_second)': '[^']*'")
    digits = re.compile(r"\d+(\.\d+)?(e-\d+)?")
    assert [digits.sub("N", x) for x in printed] == [digits.sub("N", x) for x in shown]
    if sys.version_info[:3] == (3, 11, 7):  # the help topics differ between patch versions, so the figures do
        # the same figures, up to the last printed digit: CPUs with other vector units round differently
        ours = [float(m.group()) for x in printed for m in digits.finditer(timing.sub("", x))]
        readme = [float(m.group()) for x in shown for m in digits.finditer(timing.sub("", x))]
        assert len(ours) == len(readme)
        assert all(math.isclose(a, b, rel_tol=2e-3) for a, b in zip(ours, readme)), (printed, shown)


def test_a_vendored_package_stays_importable_after_ray_was_imported_here(tmp_path):
    """Ray puts ``ray/thirdparty_files`` (its own psutil) on ``sys.path`` once imported; the simulated venv
    must not take that copy for the psutil distribution it hides, or ``import ray`` fails in the child
    only after some earlier test imported Ray (CI's slow run)."""
    import ray  # noqa: F401 - what the Ray tests do before this one in a whole run (ray[tune] is a test extra)

    run = run_in_venv(("examples",), ["-c", "import ray.tune; print('imported')"], cwd=tmp_path, timeout=300)
    assert run.returncode == 0 and "imported" in run.stdout, run.stderr[-3000:]
