"""NAS-space networks (``nb201:ARCH_STR``, ``fbnet:BLOCKS``): parameter counts and MACs computed by
hand from the specification in ``../shared/datasets/README.md``, extraction through the references,
and one-line errors for malformed architecture strings."""

from __future__ import annotations

import functools
from collections import Counter

import numpy as np
import pytest
import torch

import perfseer
from helpers import assert_user_error
from perfseer.errors import ModelLoadError
from perfseer.sources.nas import build_fbnet, build_nb201

BATCH = 2


@functools.lru_cache(maxsize=None)
def extracted(ref: str):
    """Each reference is exported once per test session (an export takes one to three seconds)."""
    return perfseer.extract(ref, batch=BATCH)


def module_params(module) -> int:
    return sum(p.numel() for p in module.parameters())


def on_meta(build, arch):
    with torch.device("meta"):
        return build(arch)


def names_of(pg, op_type: str) -> list[str]:
    return [n.name for n in pg.graph.nodes if n.op_type == op_type]


# -- NAS-Bench-201 ------------------------------------------------------------------------------------

def nb201(e01, e02, e12, e03, e13, e23) -> str:
    return f"|{e01}~0|+|{e02}~0|{e12}~1|+|{e03}~0|{e13}~1|{e23}~2|"


NB_CONV3 = nb201(*["nor_conv_3x3"] * 6)
NB_SKIP = nb201(*["skip_connect"] * 6)
NB_NONE = nb201(*["none"] * 6)
# node 1 is zero (its only edge is `none`) and is read by a conv 1x1 and a skip edge; node 2 is
# computed but unused (its only outgoing edge is `none`)
NB_MIXED = nb201("none", "avg_pool_3x3", "nor_conv_1x1", "nor_conv_3x3", "skip_connect", "none")

# Parameters shared by every architecture: stem conv 3x3 + BN; two reduction blocks (conv 3x3
# stride 2 + BN, conv 3x3 + BN, shortcut conv 1x1 without BN or bias); last BN; linear 64 -> 10.
NB_STEM = 3 * 16 * 9 + 2 * 16
NB_RED1 = (16 * 32 * 9 + 2 * 32) + (32 * 32 * 9 + 2 * 32) + 16 * 32
NB_RED2 = (32 * 64 * 9 + 2 * 64) + (64 * 64 * 9 + 2 * 64) + 32 * 64
NB_HEAD = 2 * 64 + 64 * 10 + 10
NB_BASE = NB_STEM + NB_RED1 + NB_RED2 + NB_HEAD
# One cell edge at C channels (ReLU, conv without bias, BN)
CONV3 = {c: c * c * 9 + 2 * c for c in (16, 32, 64)}
CONV1 = {c: c * c + 2 * c for c in (16, 32, 64)}

NB_PARAMS = {
    NB_NONE: NB_BASE,
    NB_SKIP: NB_BASE,
    NB_CONV3: NB_BASE + sum(5 * 6 * CONV3[c] for c in (16, 32, 64)),
    NB_MIXED: NB_BASE + sum(5 * (CONV1[c] + CONV3[c]) for c in (16, 32, 64)),
}


def test_nb201_parameter_counts_match_the_published_extremes():
    # NAS-Bench-201 reports 0.073306 M parameters for its smallest networks and 1.531546 M for
    # the all-conv-3x3 one: the hand count above reproduces both.
    assert NB_BASE == 73_306 and NB_PARAMS[NB_CONV3] == 1_531_546


@pytest.mark.parametrize("arch", list(NB_PARAMS))
def test_nb201_parameter_count_by_hand(arch):
    assert module_params(on_meta(build_nb201, arch)) == NB_PARAMS[arch]


# MACs per sample of the layers every architecture has: stem 3x3 at 32x32; per reduction block
# conv 3x3 stride 2 and conv 3x3 at the halved resolution, the shortcut conv 1x1; linear.
NB_BASE_MACS = (16 * 3 * 9 * 32 * 32
                + 32 * 16 * 9 * 16 * 16 + 32 * 32 * 9 * 16 * 16 + 32 * 16 * 16 * 16
                + 64 * 32 * 9 * 8 * 8 + 64 * 64 * 9 * 8 * 8 + 64 * 32 * 8 * 8
                + 64 * 10)
# NB_MIXED adds, per cell at C channels and HxW: a conv 1x1 and a conv 3x3.
NB_MIXED_MACS = NB_BASE_MACS + 5 * sum((c * c + c * c * 9) * hw * hw for c, hw in ((16, 32), (32, 16), (64, 8)))


# (The all-conv-3x3 network, 97 convolutions, takes five seconds to export: its parameters are
# checked above, on the module.)
@pytest.mark.parametrize("arch, macs", [(NB_SKIP, NB_BASE_MACS), (NB_MIXED, NB_MIXED_MACS),
                                        (NB_NONE, NB_BASE_MACS)])
def test_nb201_extract_params_and_macs_by_hand(arch, macs):
    pg = extracted(f"nb201:{arch}")
    assert pg.num_nodes > 0 and not pg.uncovered_ops
    assert pg.params == NB_PARAMS[arch]
    assert pg.macs == BATCH * macs
    assert pg.graph.name == f"nb201:{arch}"


def test_nb201_none_edges_emit_nothing_zero_nodes_are_made_once_per_cell_unused_nodes_stay():
    ops = Counter(extracted(f"nb201:{NB_NONE}").op_types)
    # Every cell's output is zero: one `x * 0` per cell; the reductions' residual adds remain,
    # with their convolutions (applied to zero tensors, as the measured networks do).
    assert ops["Mul"] == 15 and ops["Add"] == 2 and ops["Conv"] == 1 + 2 * 3

    pg = extracted(f"nb201:{NB_MIXED}")
    ops = Counter(pg.op_types)
    assert ops["Mul"] == 15  # zero node 1, made once per cell and read by two edges
    # per cell: conv 1x1 (1->2) into the unused node 2, conv 3x3 (0->3); plus stem and reductions
    assert ops["Conv"] == 1 + 15 * 2 + 2 * 3
    assert ops["AveragePool"] == 15 + 2
    # node 2: pool + conv -> 1 add; node 3: conv + skip -> 1 add; plus the reductions' adds
    assert ops["Add"] == 15 * 2 + 2
    assert len(pg.graph.outputs) == 1 + 15  # the logits, then each cell's unused node 2

    ops = Counter(extracted(f"nb201:{NB_SKIP}").op_types)
    assert ops["Mul"] == 0 and ops["Add"] == 15 * 3 + 2


def test_nb201_module_returns_the_logits_and_unused_nodes_only_when_asked():
    x = torch.empty(4, 3, 32, 32, device="meta")
    assert on_meta(build_nb201, NB_MIXED)(x).shape == (4, 10)
    with torch.device("meta"):
        logits, *unused = build_nb201(NB_MIXED, keep_unused=True)(x)
    assert logits.shape == (4, 10)
    assert [tuple(u.shape) for u in unused] == [(4, 16, 32, 32)] * 5 + [(4, 32, 16, 16)] * 5 + [(4, 64, 8, 8)] * 5
    with torch.device("meta"):
        assert build_nb201(NB_SKIP, keep_unused=True)(x).shape == (4, 10)  # nothing unused


# -- FBNet ----------------------------------------------------------------------------------------------

FB_SKIP = " ".join(["skip"] * 22)
FB_K3E1 = " ".join(["k3_e1"] * 22)
FB_MIXED_BLOCKS = [
    "k3_e1",                                    # stage 1: 16 -> 16, stride 1 (residual)
    "skip", "k5_e6_g2", "skip", "k3_e3",        # stage 2: 16 -> 24, stride 1
    "k5_e1_g2", "k3_e6", "skip", "k5_e3",       # stage 3: 24 -> 32, stride 2
    "k3_e1_g2", "k5_e6_g2", "skip", "k3_e1",    # stage 4: 32 -> 64, stride 2
    "k5_e6", "skip", "k3_e3", "k5_e1_g2",       # stage 5: 64 -> 112, stride 1
    "skip", "k3_e6", "k5_e1", "skip",           # stage 6: 112 -> 184, stride 2
    "k3_e1_g2",                                 # stage 7: 184 -> 352, stride 1
]
FB_MIXED = " ".join(FB_MIXED_BLOCKS)

FB_STEM = 3 * 16 * 9 + 2 * 16
FB_HEAD = 352 * 1504 + 2 * 1504 + 1504 * 100 + 100


def mb(c_in, c_out, k, e, g=1):
    """A kK_eE_gG block: grouped 1x1 expansion + BN, depthwise KxK + BN, grouped 1x1 projection + BN."""
    mid = c_in * e
    return (c_in // g) * mid + 2 * mid + k * k * mid + 2 * mid + (mid // g) * c_out + 2 * c_out


def skip_conv(c_in, c_out):
    """A `skip` block where the shape changes: conv 1x1 + BN."""
    return c_in * c_out + 2 * c_out


FB_PARAMS = {
    FB_SKIP: FB_STEM + skip_conv(16, 24) + skip_conv(24, 32) + skip_conv(32, 64) + skip_conv(64, 112)
    + skip_conv(112, 184) + skip_conv(184, 352) + FB_HEAD,
    FB_K3E1: FB_STEM + mb(16, 16, 3, 1)
    + mb(16, 24, 3, 1) + 3 * mb(24, 24, 3, 1) + mb(24, 32, 3, 1) + 3 * mb(32, 32, 3, 1)
    + mb(32, 64, 3, 1) + 3 * mb(64, 64, 3, 1) + mb(64, 112, 3, 1) + 3 * mb(112, 112, 3, 1)
    + mb(112, 184, 3, 1) + 3 * mb(184, 184, 3, 1) + mb(184, 352, 3, 1) + FB_HEAD,
    FB_MIXED: FB_STEM + mb(16, 16, 3, 1)
    + skip_conv(16, 24) + mb(24, 24, 5, 6, 2) + 0 + mb(24, 24, 3, 3)
    + mb(24, 32, 5, 1, 2) + mb(32, 32, 3, 6) + 0 + mb(32, 32, 5, 3)
    + mb(32, 64, 3, 1, 2) + mb(64, 64, 5, 6, 2) + 0 + mb(64, 64, 3, 1)
    + mb(64, 112, 5, 6) + 0 + mb(112, 112, 3, 3) + mb(112, 112, 5, 1, 2)
    + skip_conv(112, 184) + mb(184, 184, 3, 6) + mb(184, 184, 5, 1) + 0
    + mb(184, 352, 3, 1, 2) + FB_HEAD,
}


def test_fbnet_block_formula_on_one_block():
    # k5_e6_g2 at 24 -> 24: 1x1 24 -> 144 in 2 groups (12 * 144), BN; depthwise 5x5 on 144, BN;
    # 1x1 144 -> 24 in 2 groups (72 * 24), BN
    assert mb(24, 24, 5, 6, 2) == 12 * 144 + 2 * 144 + 25 * 144 + 2 * 144 + 72 * 24 + 2 * 24


@pytest.mark.parametrize("blocks", list(FB_PARAMS))
def test_fbnet_parameter_count_by_hand(blocks):
    assert module_params(on_meta(build_fbnet, blocks)) == FB_PARAMS[blocks]


# MACs per sample of the all-skip network: stem 3x3 at 32x32; the six shape-changing 1x1 convs at
# their output resolutions (32, 16, 8, 8, 4, 4); head 1x1 at 4x4; linear.
FB_SKIP_MACS = (16 * 27 * 32 * 32
                + 24 * 16 * 32 * 32 + 32 * 24 * 16 * 16 + 64 * 32 * 8 * 8 + 112 * 64 * 8 * 8
                + 184 * 112 * 4 * 4 + 352 * 184 * 4 * 4
                + 1504 * 352 * 4 * 4 + 1504 * 100)


def test_fbnet_all_skip_extracts_with_hand_counted_macs():
    pg = extracted(f"fbnet:{FB_SKIP}")
    assert pg.num_nodes > 0 and not pg.uncovered_ops
    assert pg.params == FB_PARAMS[FB_SKIP]
    assert pg.macs == BATCH * FB_SKIP_MACS
    assert "Add" not in pg.op_types and "Transpose" not in pg.op_types


def test_fbnet_shuffles_and_residual_adds_where_the_rules_say():
    pg = extracted(f"fbnet:{FB_MIXED}")
    assert pg.num_nodes > 0 and not pg.uncovered_ops
    assert pg.params == FB_PARAMS[FB_MIXED] == module_params(on_meta(build_fbnet, FB_MIXED))
    grouped = {i for i, b in enumerate(FB_MIXED_BLOCKS) if b.endswith("_g2")}
    assert grouped == {2, 5, 9, 10, 16, 21}
    assert sorted(names_of(pg, "Transpose")) == sorted(f"blocks.{i}.shuffle/Transpose" for i in grouped)
    # residual: a non-skip block with C_in == C_out and stride 1, i.e. not the first block of
    # stages 2-7; block 13 (64 -> 112, stride 1) changes the channels.
    residual = {0, 2, 4, 6, 8, 10, 12, 15, 16, 18, 19}
    assert sorted(names_of(pg, "Add")) == sorted(f"blocks.{i}/Add" for i in residual)


# -- malformed architecture strings -------------------------------------------------------------------

@pytest.mark.parametrize("arch, bad", [
    ("", "''"),
    ("|nor_conv_3x3~0|+|nor_conv_3x3~0|nor_conv_3x3~1|", "2 node group"),
    (NB_SKIP.replace("skip_connect~1|+", "skip_conect~1|+"), "'skip_conect'"),
    (NB_SKIP.replace("|skip_connect~0|+", "|skip_connect~1|+", 1), "'skip_connect~1'"),
    (NB_SKIP.replace("|+|", "+", 1), "'|skip_connect~0'"),
    ("|none~0|+|none~0|none~1|none~2|+|none~0|none~1|none~2|", "3 edge(s)"),
    (NB_SKIP.replace("skip_connect", "nor_conv_3x3", 1) + "\n", "'|skip_connect~0|skip_connect~1|skip_connect~2|\\n'"),
])
def test_nb201_bad_strings(arch, bad):
    with pytest.raises(ModelLoadError) as e:
        build_nb201(arch)
    assert_user_error(str(e.value), bad, "|op~0|+|op~0|op~1|+|op~0|op~1|op~2|")
    if arch:  # ("nb201:" is not a reference but a file name)
        with pytest.raises(ModelLoadError) as e:  # through the reference, before any export
            perfseer.extract(f"nb201:{arch}")
        assert_user_error(str(e.value), bad)


@pytest.mark.parametrize("blocks, bad", [
    (" ".join(["k3_e1"] * 21), "21 space-separated parts"),
    (FB_K3E1 + " skip", "23 space-separated parts"),
    (FB_K3E1.replace("k3_e1", "k3_e2x", 1), "'k3_e2x' at block 1"),
    (FB_SKIP.replace("skip skip", "skip conv", 1), "'conv' at block 2"),
    (FB_SKIP.replace(" ", "  ", 1), "empty block"),
    (FB_K3E1.replace("k3_e1", "k4_e1", 1), "even kernel"),
    (FB_K3E1.replace("k3_e1", "k3_e1_g3", 1), "3 groups"),
    (FB_K3E1.replace("k3_e1", "k3_e1_g1", 1), "groups 1"),
])
def test_fbnet_bad_strings(blocks, bad):
    with pytest.raises(ModelLoadError) as e:
        build_fbnet(blocks)
    assert_user_error(str(e.value), bad)
    with pytest.raises(ModelLoadError) as e:
        perfseer.extract(f"fbnet:{blocks}")
    assert_user_error(str(e.value), bad)


@pytest.mark.parametrize("arch", [
    "|nor_conv_3x3~0|+|none~0|avg_pool_3x3~1|+|skip_connect~0|nor_conv_1x1~1|none~2|",
    "|none~0|+|nor_conv_1x1~0|none~1|+|skip_connect~0|none~1|none~2|",
])
def test_direct_onnx_nb201_equals_the_pytorch_export(arch):
    """The nb201: reference emits ONNX directly; its PerfGraph equals the PyTorch builder's export."""
    import torch

    from perfseer.features.perfgraph import build_perfgraph
    from perfseer.graph.extract import extract_graph
    from perfseer.sources.nas.nb201 import build_nb201
    from perfseer.graph.torch_export import skeleton_from_module

    with torch.device("meta"):
        module = build_nb201(arch, keep_unused=True)
    exported = build_perfgraph(extract_graph(skeleton_from_module(module, (3, 32, 32), on_meta=True), batch=3))
    direct = perfseer.extract(f"nb201:{arch}", batch=3)

    def rows(a):
        return sorted(map(tuple, a.tolist()))

    assert rows(direct.x) == rows(exported.x)
    assert rows(direct.edge_attr) == rows(exported.edge_attr)
    np.testing.assert_array_equal(direct.u, exported.u)
    assert direct.params == exported.params == sum(p.numel() for p in module.parameters())
