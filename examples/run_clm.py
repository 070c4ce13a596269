"""Causal language modelling, shaped like transformers' official ``examples/pytorch/language-modeling/run_clm.py``.

The script is the official one's structure with its Trainer-API imports taken from ``hf_lightning``:
``HfArgumentParser`` over model / data / training dataclasses (or one JSON file), logging set up through
transformers' verbosity and ``get_process_log_level()``, last-checkpoint detection, train / evaluate /
predict, ``log_metrics`` / ``save_metrics`` / ``save_state`` and ``create_model_card``.

Offline: the text is Python's own help topics (``pydoc_data.topics``), the tokenizer a small BPE trained
on them (``<|endoftext|>`` is id 0), and the model is built from a config (``--model_type gpt2`` with
``--config_overrides``). Run it twice on the same ``--output_dir`` and the second run resumes::

    python examples/run_clm.py --output_dir clm_output --do_train --do_eval --max_steps 20 --save_steps 10

It needs the ``examples`` extra (``datasets`` beside ``transformers``): pip install -e ".[examples]".
"""

from __future__ import annotations

import logging
import math
import os
import sys
from dataclasses import dataclass, field

from _extras import require

require("examples", "datasets", "transformers")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import datasets  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast  # noqa: E402

from hf_lightning import HfArgumentParser, Trainer, TrainingArguments, default_data_collator, set_seed  # noqa: E402
from hf_lightning.trainer_utils import get_last_checkpoint  # noqa: E402

logger = logging.getLogger(__name__)


@dataclass
class ModelArguments:
    """Which model to train (from scratch: a model type and its config overrides)."""

    model_type: str = field(default="gpt2", metadata={"help": "The model type to train from scratch."})
    config_overrides: str | None = field(
        default="n_layer=2,n_embd=64,n_head=4,n_positions=64",
        metadata={"help": "Config overrides, e.g. n_embd=10,resid_pdrop=0.2"},
    )
    vocab_size: int = field(
        default=2000, metadata={"help": "Size of the BPE vocabulary trained on the corpus."}
    )


@dataclass
class DataTrainingArguments:
    """What data to train and evaluate on."""

    block_size: int = field(default=64, metadata={"help": "Sequence length after tokenization."})
    validation_split_percentage: int = field(
        default=5, metadata={"help": "Share of the text kept for validation."}
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Truncate the training set."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Truncate the evaluation set."})


def corpus() -> list[str]:
    """Python's help topics, one document each."""
    from pydoc_data.topics import topics

    return [topics[key] for key in sorted(topics)]


def train_tokenizer(texts: list[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained on ``texts`` (nothing downloaded)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"])
    backend.train_from_iterator(texts, trainer=trainer)
    eos = "<|endoftext|>"
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token=eos, eos_token=eos, unk_token=eos)


def _perplexity_note(perplexity: float, vocab_size: int, steps: int, learning_rate: float) -> str:
    """What the perplexity says: a model that has learnt nothing scores about the vocabulary size."""
    return (
        f"Perplexity {perplexity:.0f} after {steps} steps. A model that has learnt nothing spreads its guess "
        f"over all {vocab_size} tokens of the vocabulary (perplexity {vocab_size}): this one starts from random "
        f"weights, and at learning rate {learning_rate:g} (transformers' default is 5e-05) a few steps barely "
        "move it (20 steps at 5e-05: about 1950, 200 steps: about 1530). Train longer, or with a larger "
        "--learning_rate, to bring it down."
    )


def main() -> None:
    parser = HfArgumentParser((ModelArguments, DataTrainingArguments, TrainingArguments))
    if len(sys.argv) == 2 and sys.argv[1].endswith(".json"):
        model_args, data_args, training_args = parser.parse_json_file(json_file=os.path.abspath(sys.argv[1]))
    else:
        model_args, data_args, training_args = parser.parse_args_into_dataclasses()

    logging.basicConfig(
        format="%(asctime)s - %(levelname)s - %(name)s - %(message)s",
        datefmt="%m/%d/%Y %H:%M:%S",
        handlers=[logging.StreamHandler(sys.stdout)],
    )
    if training_args.should_log:
        transformers.utils.logging.set_verbosity_info()
    log_level = training_args.get_process_log_level()
    logger.setLevel(log_level)
    datasets.utils.logging.set_verbosity(log_level)
    transformers.utils.logging.set_verbosity(log_level)
    transformers.utils.logging.enable_default_handler()
    transformers.utils.logging.enable_explicit_format()
    logger.warning(
        f"Process rank: {training_args.local_process_index}, device: {training_args.device}, "
        f"n_gpu: {training_args.n_gpu}, distributed training: "
        f"{training_args.parallel_mode.value == 'distributed'}, 16-bits training: {training_args.fp16}"
    )
    logger.info(f"Training/evaluation parameters {training_args}")

    last_checkpoint = None
    if os.path.isdir(training_args.output_dir) and training_args.do_train:
        last_checkpoint = get_last_checkpoint(training_args.output_dir)
        if last_checkpoint is not None and training_args.resume_from_checkpoint is None:
            logger.info(
                f"Checkpoint detected, resuming training at {last_checkpoint}. To avoid this behavior, change "
                "the `--output_dir` or add `--overwrite_output_dir` to train from scratch."
            )
    set_seed(training_args.seed)

    texts = corpus()
    n_validation = max(1, len(texts) * data_args.validation_split_percentage // 100)
    raw = datasets.DatasetDict(
        train=datasets.Dataset.from_dict({"text": texts[n_validation:]}),
        validation=datasets.Dataset.from_dict({"text": texts[:n_validation]}),
    )
    tokenizer = train_tokenizer(texts, model_args.vocab_size)
    config = AutoConfig.for_model(model_args.model_type)
    if model_args.config_overrides:
        logger.info(f"Overriding config: {model_args.config_overrides}")
        config.update_from_string(model_args.config_overrides)
    config.vocab_size = len(tokenizer)
    model = AutoModelForCausalLM.from_config(config)
    # GPT-2's class name does not name its loss, so transformers would warn once and fall back to this one
    model.loss_type = "ForCausalLM"
    logger.info(f"Training new model from scratch - Total size={model.num_parameters() / 2**20:.2f}M params")

    block_size = data_args.block_size

    def tokenize(examples):
        return tokenizer(examples["text"])

    def group_texts(examples):
        concatenated = {k: sum(examples[k], []) for k in examples}
        total = (len(concatenated["input_ids"]) // block_size) * block_size
        result = {
            k: [t[i : i + block_size] for i in range(0, total, block_size)] for k, t in concatenated.items()
        }
        result["labels"] = result["input_ids"].copy()
        return result

    with training_args.main_process_first(desc="dataset map tokenization"):
        tokenized = raw.map(
            tokenize, batched=True, remove_columns=["text"], desc="Running tokenizer on dataset"
        )
        lm_datasets = tokenized.map(
            group_texts, batched=True, desc=f"Grouping texts in chunks of {block_size}"
        )

    train_dataset = eval_dataset = None
    if training_args.do_train:
        train_dataset = lm_datasets["train"]
        if data_args.max_train_samples is not None:
            train_dataset = train_dataset.select(range(min(len(train_dataset), data_args.max_train_samples)))
    if training_args.do_eval:
        eval_dataset = lm_datasets["validation"]
        if data_args.max_eval_samples is not None:
            eval_dataset = eval_dataset.select(range(min(len(eval_dataset), data_args.max_eval_samples)))

    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
        data_collator=default_data_collator,
    )

    if training_args.do_train:
        checkpoint = training_args.resume_from_checkpoint or last_checkpoint
        train_result = trainer.train(resume_from_checkpoint=checkpoint)
        trainer.save_model()
        metrics = train_result.metrics
        metrics["train_samples"] = len(train_dataset)
        trainer.log_metrics("train", metrics)
        trainer.save_metrics("train", metrics)
        trainer.save_state()

    if training_args.do_eval:
        logger.info("*** Evaluate ***")
        metrics = trainer.evaluate()
        metrics["eval_samples"] = len(eval_dataset)
        try:
            metrics["perplexity"] = math.exp(metrics["eval_loss"])
        except OverflowError:
            metrics["perplexity"] = float("inf")
        trainer.log_metrics("eval", metrics)
        trainer.save_metrics("eval", metrics)
        logger.info(
            _perplexity_note(
                metrics["perplexity"], len(tokenizer), trainer.state.global_step, training_args.learning_rate
            )
        )

    if training_args.do_predict:
        logger.info("*** Predict ***")
        output = trainer.predict(eval_dataset if eval_dataset is not None else lm_datasets["validation"])
        trainer.log_metrics("test", output.metrics)
        trainer.save_metrics("test", output.metrics)

    kwargs = {"finetuned_from": None, "tasks": "text-generation"}
    kwargs["dataset_tags"], kwargs["dataset"] = "pydoc_data", "pydoc_data.topics"
    if training_args.push_to_hub:
        trainer.push_to_hub(**kwargs)
    else:
        trainer.create_model_card(**kwargs)


if __name__ == "__main__":
    main()
