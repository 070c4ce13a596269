"""examples/run_clm.py, shaped like transformers' official script, runs end to end and resumes.

It runs from the install the README names for it: a simulated fresh venv holding only that extra
(tests/_venv.py).
"""

from __future__ import annotations

import json
import re

from tests._venv import ROOT, readme_examples, run_in_venv

SCRIPT = ROOT / "examples" / "run_clm.py"
COMMON = [
    "--do_train",
    "--do_eval",
    "--save_steps",
    "3",
    "--logging_steps",
    "2",
    "--per_device_train_batch_size",
    "4",
    "--max_train_samples",
    "64",
    "--max_eval_samples",
    "16",
    "--report_to",
    "none",
    "--use_cpu",
    "true",
]


def _run(output_dir, max_steps):
    extra = readme_examples()["run_clm"][1]
    argv = [str(SCRIPT), "--output_dir", str(output_dir), "--max_steps", str(max_steps), *COMMON]
    return run_in_venv((extra,), argv, cwd=output_dir, OMP_NUM_THREADS="1", TQDM_DISABLE="1")


def test_run_clm_trains_then_resumes_with_a_model_card_and_info_lines(tmp_path):
    """Fresh run, then the same output_dir again: both exit 0, write README.md and print the INFO lines."""
    first = _run(tmp_path, 6)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    card = (tmp_path / "README.md").read_text()
    assert "generated_from_trainer" in card and "pydoc_data" in card  # transformers' card for this run
    second = _run(tmp_path, 8)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    for run in (first, second):
        out = run.stdout + run.stderr
        assert "Training/evaluation parameters" in out  # the script's own INFO line
        assert "***** Running training *****" in out  # the Trainer's INFO block
        assert "***** train metrics *****" in out and "***** eval metrics *****" in out
    assert (
        f"Checkpoint detected, resuming training at {tmp_path / 'checkpoint-6'}"
        in second.stdout + second.stderr
    )
    state = json.loads((tmp_path / "trainer_state.json").read_text())
    assert state["global_step"] == 8
    assert (tmp_path / "README.md").exists() and (tmp_path / "eval_results.json").exists()
    note = re.search(r"Perplexity (\d+) after 8 steps\. A model that has learnt nothing", second.stdout)
    assert note is not None, second.stdout[-2000:]  # the script says what its perplexity means
    eval_results = json.loads((tmp_path / "eval_results.json").read_text())
    assert int(note.group(1)) == round(eval_results["perplexity"])
