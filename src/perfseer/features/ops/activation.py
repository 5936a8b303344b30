"""Element-wise unary operators: FLOPs = per-element cost * output elements.

Transcendental functions (exp, log, erf, tanh, sin...) count as one FLOP; composite activations
count their elementary steps, e.g. Sigmoid = 1 / (1 + exp(-x)): neg, exp, add, div = 4;
HardSwish = x * clip(x + 3, 0, 6) / 6: add, 2 compares, mul, div = 5;
Gelu (erf form) = 0.5 x (1 + erf(x / sqrt 2)): div, erf, add, mul, mul = 5 (tanh form: 9);
Mish = x * tanh(softplus(x)): exp, add, log, tanh, mul = 5; Softplus = log(1 + exp x) = 3.
Type conversion (Cast) and inference-time Dropout do no arithmetic: 0 FLOPs, memory traffic only.
"""

from __future__ import annotations

from perfseer.features.ops.registry import NodeView, OpCost, register

PER_ELEMENT: dict[str, float] = {
    "Relu": 1, "LeakyRelu": 2, "PRelu": 2, "ThresholdedRelu": 1, "Elu": 3, "Selu": 4, "Celu": 4,
    "Sigmoid": 4, "HardSigmoid": 3, "HardSwish": 5, "Swish": 5, "Tanh": 1, "Softplus": 3,
    "Softsign": 3, "Mish": 5, "Erf": 1, "Exp": 1, "Log": 1, "Sqrt": 1, "Reciprocal": 1, "Neg": 1,
    "Abs": 1, "Sin": 1, "Cos": 1, "Tan": 1, "Asin": 1, "Acos": 1, "Atan": 1, "Sinh": 1, "Cosh": 1,
    "Asinh": 1, "Acosh": 1, "Atanh": 1, "Floor": 1, "Ceil": 1, "Round": 1, "Sign": 1, "Not": 1,
    "IsNaN": 1, "IsInf": 1, "Clip": 2, "Shrink": 2, "BitwiseNot": 1,
    "Cast": 0, "CastLike": 0, "Dropout": 0,
}


def _unary(per_element: float):
    def cost(view: NodeView) -> OpCost:
        out = view.out(0)
        return OpCost(flops=per_element * float(out.numel if out is not None else view.in_numel))

    return cost


for _op, _c in PER_ELEMENT.items():
    register(_op)(_unary(_c))


@register("Gelu")
def gelu(view: NodeView) -> OpCost:
    tanh = view.attr("approximate", "none") == "tanh"
    return OpCost(flops=(9 if tanh else 5) * float(view.out(0).numel), hp={"mode": float(tanh)})
