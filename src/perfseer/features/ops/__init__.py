"""Cost functions of ONNX operators, one module per family; importing this package registers them."""

from perfseer.features.ops import (  # noqa: F401  (imported for their registrations)
    activation,
    attention,
    conv,
    detection,
    elementwise,
    linear,
    movement,
    norm,
    pool,
    quantized,
    recurrent,
    reduce,
    resize,
)
from perfseer.features.ops.registry import REGISTRY, NodeView, OpCost, generic_cost, memory_of, register

__all__ = ["REGISTRY", "NodeView", "OpCost", "generic_cost", "memory_of", "register"]
