"""The ``fbnet:`` reference emits ONNX directly (:mod:`perfseer.sources.nas.fbnet_onnx`): its
PerfGraph equals that of the PyTorch builder's ``torch.onnx`` export, node for node, and its
parameter counts match hand counts from the specification in ``../shared/datasets/README.md``."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

import perfseer
from helpers import assert_user_error
from perfseer.errors import ModelLoadError, ShapeError
from perfseer.features.perfgraph import build_perfgraph
from perfseer.graph.extract import extract_graph
from perfseer.sources.nas.fbnet import NUM_BLOCKS, SEARCH_SPACE, block_positions, build_fbnet
from perfseer.sources.nas.fbnet_onnx import fbnet_skeleton
from perfseer.graph.torch_export import skeleton_from_module

BATCH = 3

# Block positions whose shape changes (C_in != C_out or stride 2): 1 (16 -> 24), 5 (24 -> 32, s2),
# 9 (32 -> 64, s2), 13 (64 -> 112), 17 (112 -> 184, s2), 21 (184 -> 352).
CHANGING = [i for i, (c_in, c_out, s) in enumerate(block_positions()) if c_in != c_out or s != 1]
STRIDE2 = [i for i, (_, _, s) in enumerate(block_positions()) if s == 2]

ALL_SKIP = " ".join(["skip"] * NUM_BLOCKS)  # identity first block, six conv 1x1 skips, head
MIXED = " ".join([
    "k3_e1",                                    # stage 1: 16 -> 16, stride 1 (residual)
    "skip", "k5_e6_g2", "skip", "k3_e3",        # stage 2: skip conv 1x1 16 -> 24, identity skip
    "k5_e1_g2", "k3_e6", "skip", "k5_e3",       # stage 3: grouped block with stride 2
    "k3_e1_g2", "k5_e6_g2", "skip", "k3_e1",    # stage 4
    "k5_e6", "skip", "k3_e3", "k5_e1_g2",       # stage 5: 64 -> 112 without a residual
    "skip", "k3_e6", "k5_e1", "skip",           # stage 6: skip conv 1x1 with stride 2
    "k3_e1_g2",                                 # stage 7: grouped last block
])
# Every choice of the space, three of them at the stride-2 positions; a grouped first block.
COVER = " ".join([
    "k3_e1_g2",
    "k3_e6", "k5_e1", "k5_e6", "skip",
    "k3_e3", "k3_e1", "k5_e3", "k5_e1_g2",
    "k3_e6", "skip", "k5_e6", "k3_e3",
    "k3_e1", "k5_e1", "k3_e1_g2", "k3_e6",
    "k5_e6", "k5_e1_g2", "k3_e3", "skip",
    "k5_e3",
])
# Blocks outside the searched space that the parser accepts (7x7, expansion 2, 4 and 8 groups)
# at the shape-changing positions without a stride, the last of the space's choices at the
# stride-2 ones; k3_e6 and k5_e1_g8 alternate elsewhere.
WIDE_AT = {5: "k3_e1", 9: "k5_e1", 17: "k5_e3"}
WIDE_BLOCKS = [WIDE_AT.get(i, "k7_e2_g4" if i in CHANGING else ("k3_e6" if i % 2 else "k5_e1_g8"))
               for i in range(NUM_BLOCKS)]
WIDE = " ".join(WIDE_BLOCKS)

ARCHS = {"all_skip": ALL_SKIP, "mixed": MIXED, "cover": COVER, "wide": WIDE}


def test_the_architectures_cover_every_block_choice_and_position_kind():
    blocks = {name: arch.split(" ") for name, arch in ARCHS.items()}
    assert set(SEARCH_SPACE) <= {b for bs in blocks.values() for b in bs}
    for choice in SEARCH_SPACE:  # every choice where the shape changes, and where stride is 2
        assert any(bs[i] == choice for bs in blocks.values() for i in CHANGING), choice
        assert any(bs[i] == choice for bs in blocks.values() for i in STRIDE2), choice
    assert {bs[0] for bs in blocks.values()} >= {"skip", "k3_e1", "k3_e1_g2"}  # first block
    assert {bs[-1] for bs in blocks.values()} >= {"skip", "k3_e1_g2", "k7_e2_g4"}  # last block


@functools.lru_cache(maxsize=None)
def exported(arch: str, input_shape=(3, 32, 32)):
    """The PyTorch builder on the meta device, exported (seconds): PerfGraph and parameter count."""
    with torch.device("meta"):
        module = build_fbnet(arch)
    skeleton = skeleton_from_module(module.eval(), input_shape, on_meta=True, source=f"fbnet:{arch}")
    return build_perfgraph(extract_graph(skeleton, batch=BATCH)), sum(p.numel() for p in module.parameters())


def assert_same_perfgraph(direct, reference):
    assert direct.op_types == reference.op_types
    assert [n.name for n in direct.graph.nodes] == [n.name for n in reference.graph.nodes]
    assert [n.attrs for n in direct.graph.nodes] == [n.attrs for n in reference.graph.nodes]
    np.testing.assert_array_equal(direct.edge_index, reference.edge_index)
    for a, b in ((direct.x, reference.x), (direct.edge_attr, reference.edge_attr), (direct.u, reference.u)):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=0)
    assert direct.graph.name == reference.graph.name
    assert len(direct.graph.outputs) == len(reference.graph.outputs) == 1
    assert not direct.uncovered_ops


@pytest.mark.parametrize("name", list(ARCHS))
def test_direct_onnx_fbnet_equals_the_pytorch_export(name):
    arch = ARCHS[name]
    reference, module_params = exported(arch)
    direct = perfseer.extract(f"fbnet:{arch}", batch=BATCH)
    assert_same_perfgraph(direct, reference)
    assert direct.params == reference.params == module_params


def test_direct_onnx_fbnet_equals_the_export_at_another_resolution():
    # 36 -> 18 -> 9 -> 5 -> 3: odd sizes under stride 2, in the shuffles' reshapes too
    reference, _ = exported(MIXED, (3, 36, 36))
    direct = perfseer.extract(f"fbnet:{MIXED}", batch=BATCH, input_shape=(3, 36, 36))
    assert_same_perfgraph(direct, reference)
    assert direct.macs > perfseer.extract(f"fbnet:{MIXED}", batch=BATCH).macs


def test_direct_onnx_fbnet_rebinds_its_batch():
    direct = perfseer.extract(f"fbnet:{MIXED}", batch=1)
    reference, _ = exported(MIXED)
    assert_same_perfgraph(direct.with_batch(BATCH), reference)


def test_the_emitted_graph_has_no_exporter_scaffolding():
    ops = {n.op_type for n in fbnet_skeleton(MIXED).model.graph.node}
    assert ops == {"Conv", "BatchNormalization", "Relu", "Add", "Reshape", "Transpose", "Identity", "ReduceMean",
                   "Gemm", "Constant"}


# -- parameter counts by hand ----------------------------------------------------------------------------

STEM = 3 * 16 * 9 + 2 * 16                               # conv 3x3 (no bias) + BN
HEAD = 352 * 1504 + 2 * 1504 + 1504 * 100 + 100          # conv 1x1 + BN, linear with bias


def block(c_in, c_out, k, e, g=1):
    """kK_eE_gG: grouped 1x1 expansion + BN, depthwise KxK + BN, grouped 1x1 projection + BN."""
    mid = c_in * e
    return (c_in // g) * mid + 2 * mid + k * k * mid + 2 * mid + (mid // g) * c_out + 2 * c_out


# All k5_e6_g2: 1 + 4 blocks per stage at 16 -> 16, then (C_prev -> C) and 3 x (C -> C).
K5E6G2 = " ".join(["k5_e6_g2"] * NUM_BLOCKS)
HAND = {
    K5E6G2: STEM + block(16, 16, 5, 6, 2)
    + sum(block(c_in, c, 5, 6, 2) + 3 * block(c, c, 5, 6, 2)
          for c_in, c in ((16, 24), (24, 32), (32, 64), (64, 112), (112, 184)))
    + block(184, 352, 5, 6, 2) + HEAD,
    # "wide", block by block: 0 k5_e1_g8 (16 -> 16), 1 k7_e2_g4 (16 -> 24), ...
    WIDE: STEM + block(16, 16, 5, 1, 8)
    + block(16, 24, 7, 2, 4) + block(24, 24, 5, 1, 8) + block(24, 24, 3, 6) + block(24, 24, 5, 1, 8)
    + block(24, 32, 3, 1) + block(32, 32, 5, 1, 8) + block(32, 32, 3, 6) + block(32, 32, 5, 1, 8)
    + block(32, 64, 5, 1) + block(64, 64, 5, 1, 8) + block(64, 64, 3, 6) + block(64, 64, 5, 1, 8)
    + block(64, 112, 7, 2, 4) + block(112, 112, 5, 1, 8) + block(112, 112, 3, 6) + block(112, 112, 5, 1, 8)
    + block(112, 184, 5, 3) + block(184, 184, 5, 1, 8) + block(184, 184, 3, 6) + block(184, 184, 5, 1, 8)
    + block(184, 352, 7, 2, 4) + HEAD,
}


def test_hand_count_of_one_grouped_block():
    # k7_e2_g4 at 112 -> 184: 1x1 112 -> 224 in 4 groups (28 * 224), BN; depthwise 7x7 on 224, BN;
    # 1x1 224 -> 184 in 4 groups (56 * 184), BN
    assert block(112, 184, 7, 2, 4) == 28 * 224 + 2 * 224 + 49 * 224 + 2 * 224 + 56 * 184 + 2 * 184


@pytest.mark.parametrize("arch", list(HAND), ids=["k5_e6_g2", "wide"])
def test_direct_onnx_fbnet_parameter_count_by_hand(arch):
    assert perfseer.extract(f"fbnet:{arch}").params == HAND[arch]
    with torch.device("meta"):
        assert sum(p.numel() for p in build_fbnet(arch).parameters()) == HAND[arch]


def test_all_skip_parameter_count_by_hand():
    skips = sum(c_in * c_out + 2 * c_out for i, (c_in, c_out, _) in enumerate(block_positions()) if i in CHANGING)
    assert perfseer.extract(f"fbnet:{ALL_SKIP}").params == STEM + skips + HEAD == 780_660


# -- errors -----------------------------------------------------------------------------------------------

def test_malformed_blocks_and_bad_input_shapes_are_one_line_errors():
    with pytest.raises(ModelLoadError) as e:
        fbnet_skeleton(ALL_SKIP.replace("skip", "k3_e1_g3", 1))
    assert_user_error(str(e.value), "3 groups")
    for shape in ((1, 32, 32), (32, 32)):
        with pytest.raises(ShapeError) as e:
            perfseer.extract(f"fbnet:{ALL_SKIP}", input_shape=shape)
        assert_user_error(str(e.value), "3 x H x W")
