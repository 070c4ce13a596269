"""``HFModule`` under Lightning's ``DeepSpeedStrategy``: DeepSpeed clips and reports the gradient norm.

DeepSpeed's engine owns the backward (``manual_backward`` goes through Lightning to
``engine.backward``) and the update (``optimizer.step()`` is ``engine.step()``): it clips with its
``gradient_clipping`` (``max_grad_norm``, filled by ``adapters/deepspeed.py``) inside the step, so the
module does not clip again and reads the norm DeepSpeed computed, as transformers does
(``get_global_grad_norm``). The Trainer's accumulation windows accumulate: each micro-batch's backward
tells the engine whether it ends the window (``set_gradient_accumulation_boundary``), and the engine
steps once per window, a short last window included. Checkpoints hold the engine's own folder
(``checkpoint/deepspeed_state.py``), registered and read back here once the engine exists.
"""

from __future__ import annotations

from typing import Any

import torch

from hf_lightning.args.deepspeed_config import DeepSpeedSettings, trainer_deepspeed_settings
from hf_lightning.checkpoint.deepspeed_state import load_pending_deepspeed_state, register_deepspeed_engine

from .deepspeed_sections import has_section, section_optimizer, section_scheduler
from .module import HFModule

__all__ = ["DeepSpeedModule"]


class DeepSpeedModule(HFModule):
    """:class:`HFModule` whose backward, clipping and update are DeepSpeed's."""

    _optimizers_given: tuple[Any, Any]
    _backwards = 0
    _engine_steps_schedule = False
    drives_deepspeed = True

    def __init__(
        self, model: Any, args: Any = None, *, deepspeed: DeepSpeedSettings | None = None, **kwargs: Any
    ) -> None:
        """``deepspeed``: the plan's DeepSpeed settings (``to_lightning(args).distributed.deepspeed``); built from
        ``args`` when not given."""
        super().__init__(model, args, **kwargs)
        self.deepspeed = (
            deepspeed if deepspeed is not None or args is None else trainer_deepspeed_settings(args)
        )

    def training_step(self, batch: Any, batch_idx: int) -> None:
        self._backwards = 0
        super().training_step(batch, batch_idx)

    def manual_backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """``engine.backward``: the window's last micro-batch is DeepSpeed's accumulation boundary (where
        ZeRO reduces the accumulated gradients); the loss is already scaled for the accumulation."""
        self._backwards += 1
        engine: Any = self.trainer.strategy.model
        engine.set_gradient_accumulation_boundary(self._backwards >= self.window_size)
        # engine.forward() starts each micro-batch for ZeRO (its micro-step count: accumulate, not copy);
        # the window's micro-batches run inside one engine.forward, so each backward starts one here.
        start = getattr(engine.optimizer, "clear_backward_seen_flag", None)
        if start is not None:
            start()
        kwargs.setdefault("scale_wrt_gas", False)
        super().manual_backward(loss, *args, **kwargs)

    def configure_optimizers(self) -> Any:
        """The given optimizer and scheduler, else those of the configuration's ``optimizer``/``scheduler``
        sections (built as DeepSpeed builds them), else the arguments' (``HFModule``'s)."""
        optimizer, scheduler = self._optimizers_given
        if optimizer is None:
            optimizer = section_optimizer(self.deepspeed, self.model) or self.build_optimizer()
        if scheduler is None:
            total = int(self.trainer.estimated_stepping_batches)
            scheduler = section_scheduler(self.deepspeed, optimizer, total, self.model)
        self._optimizers_given = (optimizer, scheduler)
        return super().configure_optimizers()

    def on_train_start(self) -> None:
        """The engine exists now: register it for checkpoints, and read the DeepSpeed state of a resume."""
        engine: Any = self.trainer.strategy.model
        register_deepspeed_engine(self.model, engine)
        load_pending_deepspeed_state(self.model, engine)
        self._engine_steps_schedule = has_section(self.deepspeed, "optimizer") or has_section(
            self.deepspeed, "scheduler"
        )
        super().on_train_start()

    def step_scheduler(self) -> float:
        """With an ``optimizer`` or ``scheduler`` section transformers lets the engine step the schedule
        inside its step, so the rate it logs is the one after the update's step, as here."""
        if not self._engine_steps_schedule:
            return super().step_scheduler()
        super().step_scheduler()
        return self.current_learning_rate()

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        self.driver.on_pre_optimizer_step()  # DeepSpeed clips inside engine.step()

    def after_optimizer_step(self) -> None:
        engine: Any = self.trainer.strategy.model  # the DeepSpeedEngine wrapping this module
        norm = engine.get_global_grad_norm()
        self.last_grad_norm = float(norm) if norm is not None else 0.0
