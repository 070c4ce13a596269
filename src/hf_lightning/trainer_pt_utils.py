"""``transformers.trainer_pt_utils``'s path, for the names of it hf_lightning implements (home: ``trainer_utils``).

transformers' ``get_learning_rates`` there is a Trainer method in disguise (it takes the Trainer); ours,
``hf_lightning.optim.get_learning_rates``, takes the optimizer, so it is not re-exported here.
"""

from __future__ import annotations

from hf_lightning.optim import LayerWiseDummyOptimizer, LayerWiseDummyScheduler
from hf_lightning.trainer_utils import get_model_param_count

__all__ = ["LayerWiseDummyOptimizer", "LayerWiseDummyScheduler", "get_model_param_count"]
