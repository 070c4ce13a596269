"""``Seq2SeqTrainer``: the Trainer for sequence-to-sequence models, evaluating with ``generate()``.

With ``Seq2SeqTrainingArguments(predict_with_generate=True)`` evaluation and prediction run
``model.generate`` on each batch, so ``compute_metrics`` receives generated token ids (for ROUGE,
BLEU, ...). ``generation_max_length``, ``generation_num_beams`` and ``**gen_kwargs`` of
``evaluate``/``predict`` control the generation; ``generation_config`` replaces the model's
``GenerationConfig``.

Two documented behaviours where transformers 5.24 differs (docs/divergences.md):

- the evaluation loss is the mean over samples, like ``Trainer.evaluate``: a final partial batch
  weighs as many samples as it holds (transformers counts it as a full batch);
- generated ids are padded with the pad token to the longest generation of the whole set, and the
  labels are padded with -100 (transformers pads each batch's generations, and its labels, with the
  pad token to ``max_length``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn

from hf_lightning.trainer.trainer import Trainer
from hf_lightning.trainer_utils import PredictionOutput

__all__ = ["Seq2SeqTrainer"]


class Seq2SeqTrainer(Trainer):
    """``Trainer`` whose evaluation can generate (``predict_with_generate``); see the module docstring."""

    def __init__(
        self,
        model: nn.Module | None = None,
        args: Any = None,
        data_collator: Any = None,
        train_dataset: Any = None,
        eval_dataset: Any = None,
        processing_class: Any = None,
        model_init: Any = None,
        compute_loss_func: Any = None,
        compute_metrics: Any = None,
        callbacks: list[Any] | None = None,
        optimizers: tuple[Any, Any] = (None, None),
        preprocess_logits_for_metrics: Any = None,
        optimizer_cls_and_kwargs: tuple[Any, dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(
            model=model,
            args=args,
            data_collator=data_collator,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            model_init=model_init,
            compute_loss_func=compute_loss_func,
            compute_metrics=compute_metrics,
            callbacks=callbacks,
            optimizers=optimizers,
            optimizer_cls_and_kwargs=optimizer_cls_and_kwargs,
            preprocess_logits_for_metrics=preprocess_logits_for_metrics,
        )
        self._gen_kwargs: dict[str, Any] = {}
        """The generation settings of the running ``evaluate`` / ``predict`` call."""
        config = getattr(self.args, "generation_config", None)
        if config is not None:
            self.model.generation_config = self.load_generation_config(config)

    @staticmethod
    def load_generation_config(gen_config_arg: Any) -> Any:
        """A ``GenerationConfig`` from ``Seq2SeqTrainingArguments.generation_config``: a copy of the object
        given, or one loaded from a folder, a file or a model id (needs transformers)."""
        if isinstance(gen_config_arg, (str, Path)):
            config = _load_generation_config_file(gen_config_arg)
        else:
            config = copy.deepcopy(gen_config_arg)
        validate = getattr(config, "validate", None)
        if callable(validate):
            try:
                validate(strict=True)
            except ValueError as error:
                raise ValueError(
                    f"`Seq2SeqTrainingArguments(generation_config=...)` is invalid: {error}\n"
                    "Fix these issues to train your model."
                ) from error
        return config

    # --- evaluate / predict ----------------------------------------------------------------
    def evaluate(
        self,
        eval_dataset: Any = None,
        ignore_keys: list[str] | None = None,
        metric_key_prefix: str = "eval",
        **gen_kwargs: Any,
    ) -> dict[str, float]:
        """``Trainer.evaluate``; ``gen_kwargs`` (``max_length``, ``num_beams``, ...) go to ``generate``."""
        datasets = eval_dataset if eval_dataset is not None else self.eval_dataset
        if isinstance(datasets, dict):  # evaluate each, keeping gen_kwargs for every one
            metrics: dict[str, float] = {}
            for name, dataset in datasets.items():
                metrics.update(
                    self.evaluate(
                        dataset if eval_dataset is not None else name,
                        ignore_keys,
                        f"{metric_key_prefix}_{name}",
                        **gen_kwargs,
                    )
                )
            return metrics
        self._gen_kwargs = self._resolve_gen_kwargs(gen_kwargs)
        return super().evaluate(eval_dataset, ignore_keys=ignore_keys, metric_key_prefix=metric_key_prefix)

    def predict(
        self,
        test_dataset: Any,
        ignore_keys: list[str] | None = None,
        metric_key_prefix: str = "test",
        **gen_kwargs: Any,
    ) -> PredictionOutput:
        """``Trainer.predict``; ``gen_kwargs`` (``max_length``, ``num_beams``, ...) go to ``generate``."""
        self._gen_kwargs = self._resolve_gen_kwargs(gen_kwargs)
        return super().predict(test_dataset, ignore_keys=ignore_keys, metric_key_prefix=metric_key_prefix)

    def _resolve_gen_kwargs(self, gen_kwargs: dict[str, Any]) -> dict[str, Any]:
        """``gen_kwargs`` completed with ``generation_max_length`` / ``generation_num_beams``."""
        gen_kwargs = dict(gen_kwargs)
        max_length = getattr(self.args, "generation_max_length", None)
        if (
            gen_kwargs.get("max_length") is None
            and gen_kwargs.get("max_new_tokens") is None
            and max_length is not None
        ):
            gen_kwargs["max_length"] = max_length
        num_beams = getattr(self.args, "generation_num_beams", None)
        if gen_kwargs.get("num_beams") is None and num_beams is not None:
            gen_kwargs["num_beams"] = num_beams
        return gen_kwargs

    # --- one batch -------------------------------------------------------------------------
    def prediction_step(
        self,
        model: nn.Module,
        inputs: dict[str, Any],
        prediction_loss_only: bool,
        ignore_keys: list[str] | None = None,
        **gen_kwargs: Any,
    ) -> tuple[Any, Any, Any]:
        """``(loss, generated ids, labels)`` with ``predict_with_generate``; else ``Trainer.prediction_step``."""
        if not getattr(self.args, "predict_with_generate", False) or prediction_loss_only:
            return super().prediction_step(
                model, inputs, prediction_loss_only=prediction_loss_only, ignore_keys=ignore_keys
            )
        has_labels = "labels" in inputs
        inputs = self._prepare_inputs(inputs)
        if not gen_kwargs:
            gen_kwargs = dict(self._gen_kwargs)
        for key in ("num_beams", "max_length"):
            if key in gen_kwargs and gen_kwargs[key] is None:
                gen_kwargs.pop(key)
        generated = self._generate(inputs, gen_kwargs)
        loss = self._generation_loss(model, inputs) if has_labels else None
        if self.args.prediction_loss_only:
            return loss, None, None
        return loss, generated, inputs["labels"] if has_labels else None

    def _generate(self, inputs: dict[str, Any], gen_kwargs: dict[str, Any]) -> torch.Tensor:
        generation_inputs = inputs
        labels, decoder_ids = inputs.get("labels"), inputs.get("decoder_input_ids")
        if labels is not None and decoder_ids is not None and labels.shape == decoder_ids.shape:
            generation_inputs = {
                k: v for k, v in inputs.items() if k not in ("decoder_input_ids", "decoder_attention_mask")
            }
        with torch.no_grad():
            generated = cast(Any, self.model).generate(**generation_inputs, **gen_kwargs)
        config = getattr(self.model, "generation_config", None)
        if getattr(config, "_from_model_config", False):
            # later saves keep the generation config, as in transformers (config is set: the flag was read)
            cast(Any, config)._from_model_config = False
        return generated

    def _generation_loss(self, model: nn.Module, inputs: dict[str, Any]) -> torch.Tensor:
        with torch.no_grad():
            with self.compute_loss_context_manager():
                outputs = model(**inputs)
            smoother = self._label_smoother()
            if smoother is not None:
                return smoother(outputs, inputs["labels"]).detach().mean()
            loss = outputs["loss"] if isinstance(outputs, Mapping) else outputs[0]
            return loss.detach().mean()

    # --- padding ---------------------------------------------------------------------------
    def _pad_token_id(self) -> int | None:
        tokenizer = self.processing_class
        if tokenizer is not None and hasattr(tokenizer, "pad_token_id"):
            pad = tokenizer.pad_token_id
            return pad if pad is not None else getattr(tokenizer, "eos_token_id", None)
        return getattr(getattr(self.model, "config", None), "pad_token_id", None)

    def _predictions_padding_index(self) -> int:
        """Generated ids of different lengths are padded with the pad token (-100 without generation)."""
        pad = self._pad_token_id() if getattr(self.args, "predict_with_generate", False) else None
        return -100 if pad is None else int(pad)

    def _pad_tensors_to_max_len(self, tensor: torch.Tensor, max_length: int) -> torch.Tensor:
        """``tensor`` padded on the right to ``max_length`` columns with the pad token."""
        pad = self._pad_token_id()
        if pad is None:
            raise ValueError(
                "Padding generated ids needs a pad token: set `pad_token_id` on the model config or "
                "pass a `processing_class` that has one"
            )
        padded = torch.full((tensor.shape[0], max_length), pad, dtype=tensor.dtype, device=tensor.device)
        padded[:, : tensor.shape[-1]] = tensor
        return padded


def _load_generation_config_file(path: str | Path) -> Any:
    try:
        from transformers import GenerationConfig
    except ImportError as error:
        raise ImportError(
            "Loading `Seq2SeqTrainingArguments(generation_config=<path or model id>)` needs "
            "transformers: pip install 'hf-lightning[transformers]', or pass a GenerationConfig "
            "object"
        ) from error
    location: str | Path
    location, file_name = Path(path), None
    if location.is_file():
        location, file_name = location.parent, location.name
    elif not location.is_dir():
        location = path  # a model id on the Hub
    return GenerationConfig.from_pretrained(location, file_name)
