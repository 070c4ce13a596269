"""Faults and bad input that transformers 5.24 meets silently, late or with a message that does not say what
happened; here each is an error or a warning naming the field, folder or file (docs/divergences.md)."""

from __future__ import annotations

import pytest
import transformers

import hf_lightning
from tests.tiny import RegressionModel, regression_data

BASE = dict(report_to="none", use_cpu=True, disable_tqdm=True, seed=0, per_device_train_batch_size=4)


def _trainer(lib, output_dir, **kwargs):
    args = lib.TrainingArguments(output_dir=str(output_dir), **{**BASE, **kwargs})
    return lib.Trainer(model=RegressionModel(), args=args, train_dataset=regression_data(8))


# --- output_dir ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("below", "error"), [(False, FileExistsError), (True, NotADirectoryError)])
def test_output_dir_that_is_a_file_is_refused_at_construction(tmp_path, below, error):
    """Trainer() raises transformers' exception type at once (it fails in its own makedirs), naming output_dir."""
    file = tmp_path / "afile"
    file.write_text("not a folder")
    output_dir = file / "sub" if below else file
    with pytest.raises(error):  # parity: transformers fails in Trainer.__init__ too
        _trainer(transformers, output_dir, max_steps=2)
    with pytest.raises(
        error, match=rf"output_dir='{output_dir}'.*{'lies inside' if below else 'is an existing file'}"
    ):
        _trainer(hf_lightning, output_dir, max_steps=2)
