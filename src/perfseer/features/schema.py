"""The PerfGraph feature schema: names, order and units of every feature column.

Bump :data:`SCHEMA_VERSION` whenever a column is added, removed, reordered or changes meaning;
saved graphs and trained predictors record it and refuse a mismatch.

Node features ``x`` (PerfSeer §3.1: v = v_hp || v_c || v_m || v_a || v_p):
    hyper-parameters (:data:`HYPERPARAMETERS`, 0 where an operator has no such parameter),
    then FLOPs, MACs, memory access cost (bytes: inputs + weights read + outputs), input bytes,
    output bytes, weight bytes, parameters, arithmetic intensity (FLOPs / memory access),
    and the node's share of the model's FLOPs, memory access and weight bytes.
Edge features ``edge_attr`` (e = e_sz || e_sp): tensor bytes and elements, then its shape read by
    layout: rank, batch, channels, height, width, tokens.  NCHW (rank 4): channels = C,
    height = H, width = W, tokens = H W.  Token sequences (rank 3, B x N x C): channels = C
    (the last axis), height = tokens = N, width = 1.  Rank 2 (B x F): channels = F, the rest 1.
    Rank 5 (N C D H W): channels = C, height = H, width = W, tokens = D H W.
Global features ``u`` (u = u_gp || u_c || u_m || u_a || u_b): :data:`GLOBAL_FEATURES`.

All values are raw (FLOPs, bytes, counts); models should log-scale them (``log1p``).
"""

from __future__ import annotations

SCHEMA_VERSION = "1.0"

HYPERPARAMETERS = (
    "kernel_h", "kernel_w", "stride_h", "stride_w", "pad_h", "pad_w", "dilation_h", "dilation_w",
    "groups", "has_bias", "in_features", "out_features", "ceil_mode", "mm_m", "mm_batch", "num_heads",
    "scale_h", "scale_w", "axis_size", "mode",
)
COST_FEATURES = (
    "flops", "macs", "memory_access_bytes", "input_bytes", "output_bytes", "weight_bytes", "params",
    "arithmetic_intensity", "flops_share", "memory_access_share", "weight_share",
)
NODE_FEATURES = HYPERPARAMETERS + COST_FEATURES
EDGE_FEATURES = ("bytes", "elements", "rank", "batch", "channels", "height", "width", "tokens")
GLOBAL_FEATURES = (
    "num_nodes", "num_edges", "density",
    "flops_total", "flops_mean", "flops_median", "flops_max",
    "memory_access_total", "memory_access_mean", "memory_access_median", "memory_access_max",
    "weight_total", "weight_mean", "weight_median", "weight_max",
    "edge_bytes_mean", "arithmetic_intensity", "batch_size", "params", "macs_total",
)

HP_INDEX = {name: i for i, name in enumerate(HYPERPARAMETERS)}


def describe() -> dict:
    """The schema as a JSON-serialisable dict (stored with saved graphs and predictors)."""
    return {"version": SCHEMA_VERSION, "node": list(NODE_FEATURES), "edge": list(EDGE_FEATURES),
            "global": list(GLOBAL_FEATURES)}
