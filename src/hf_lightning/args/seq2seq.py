"""`Seq2SeqTrainingArguments`: `TrainingArguments` plus the generation settings of `Seq2SeqTrainer`."""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hf_lightning.args.training_args import TrainingArguments

__all__ = ["Seq2SeqTrainingArguments"]


@dataclass
class Seq2SeqTrainingArguments(TrainingArguments):
    """Drop-in for ``transformers.Seq2SeqTrainingArguments``."""

    sortish_sampler: bool = field(
        default=False, metadata={"help": "Sort training samples roughly by length."}
    )
    predict_with_generate: bool = field(
        default=False, metadata={"help": "Evaluate and predict with generate() (for ROUGE, BLEU, ...)."}
    )
    generation_max_length: int | None = field(
        default=None, metadata={"help": "max_length for generate() in evaluation (default: the model's)."}
    )
    generation_num_beams: int | None = field(
        default=None, metadata={"help": "num_beams for generate() in evaluation (default: the model's)."}
    )
    # A transformers GenerationConfig object is accepted too (transformers is not imported here).
    generation_config: str | Path | Any | None = field(
        default=None, metadata={"help": "GenerationConfig, or a model id or folder to load one from."}
    )

    def to_dict(self) -> dict[str, Any]:
        """`TrainingArguments.to_dict`, with a generation config object turned into its dict."""
        d = super().to_dict()
        config = self.generation_config
        if config is not None and not isinstance(config, str | Path) and hasattr(config, "to_dict"):
            d["generation_config"] = config.to_dict()
        return d
