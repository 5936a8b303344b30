"""Performance predictors: SeerNet, SeerNet-Multi and the baselines, built by name.

>>> from perfseer.models import build_model
>>> model = build_model("seernet", num_targets=1)
"""

from perfseer.models.base import GraphRegressor, ModelConfig, task_losses
from perfseer.models.blend import Blend, BlendConfig
from perfseer.models.gnn import GAT, GCN, GIN, GATConfig, GCNConfig, GINConfig
from perfseer.models.mlp import MLPNode, MLPNodeConfig
from perfseer.models.pmgns import PMGNS, PMGNSConfig
from perfseer.models.registry import (MODELS, build_from_dict, build_model, config_class, is_neural, neural_models,
                                      register)
from perfseer.models.seernet import SeerBlock, SeerNet, SeerNetConfig, SeerNetMulti, SeerNetMultiConfig, SynMM

__all__ = [
    "Blend", "BlendConfig", "GAT", "GATConfig", "GCN", "GCNConfig", "GIN", "GINConfig", "GraphRegressor", "MLPNode", "MLPNodeConfig",
    "MODELS", "ModelConfig", "PMGNS", "PMGNSConfig", "SeerBlock", "SeerNet", "SeerNetConfig", "SeerNetMulti",
    "SeerNetMultiConfig", "SynMM", "build_from_dict", "build_model", "config_class", "is_neural",
    "neural_models", "register", "task_losses",
]
