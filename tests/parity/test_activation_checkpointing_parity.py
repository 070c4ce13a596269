"""``activation_checkpointing=True`` on models without ``activation_checkpointing_enable``, as transformers:
a model with only the older ``gradient_checkpointing_enable`` (sentence-transformers) is switched on with
transformers' FutureWarning; a model with neither raises AttributeError (``activation_checkpointing.py``)."""

from __future__ import annotations

import pytest
import transformers

import hf_lightning
from tests.tiny import RegressionModel, regression_data


class OlderModel(RegressionModel):
    """Only the deprecated method, with sentence-transformers' signature."""

    def __init__(self) -> None:
        super().__init__()
        self.enabled_with: list = []

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs=None):
        self.enabled_with.append(gradient_checkpointing_kwargs)


def _train(lib, out, model):
    args = lib.TrainingArguments(str(out), max_steps=1, report_to="none", use_cpu=True, save_strategy="no",
                                 activation_checkpointing=True, disable_tqdm=True)  # fmt: skip
    lib.Trainer(model=model, args=args, train_dataset=regression_data(8)).train()


@pytest.mark.parametrize("lib", [transformers, hf_lightning], ids=["transformers", "hf_lightning"])
def test_only_gradient_checkpointing_enable_is_called_with_the_warning(tmp_path, lib):
    model = OlderModel()
    with pytest.warns(
        FutureWarning, match="only defines `gradient_checkpointing_enable`, which is deprecated"
    ):
        try:
            _train(lib, tmp_path, model)
        except TypeError:  # transformers 5.24 passes every_n_layers/offload, which this signature lacks
            assert lib is transformers
            return
    assert model.enabled_with == [None]


@pytest.mark.parametrize("lib", [transformers, hf_lightning], ids=["transformers", "hf_lightning"])
def test_a_model_without_either_method_raises_attribute_error(tmp_path, lib):
    with pytest.raises(AttributeError):
        _train(lib, tmp_path, RegressionModel())
