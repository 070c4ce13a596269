"""The facade's one door to the engine: ``ENGINE``, through which every part of the Trainer reaches
Lightning, Optuna and Ray (``hf_lightning.adapters.engine.Engine``: its members list all the facade asks).

No other facade module imports ``hf_lightning.adapters``; the engine's modules are imported only when a
member is first used, so importing the Trainer loads no engine.
"""

from __future__ import annotations

from hf_lightning.adapters.engine import Engine

__all__ = ["ENGINE"]

ENGINE = Engine()
