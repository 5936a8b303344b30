"""Once-for-All MobileNetV3 w1.2 sub-networks (``ofa:ks=..;e=..;d=..;r=..``): parameter counts and
MACs derived by hand from the ``ofa`` package's layer definitions, checked against the package's own
module and the extracted PerfGraph; the resolution; a real HELP reference; malformed references."""

from __future__ import annotations

import functools
import importlib.util
import math

import pytest

# `ofa` imports torchvision unconditionally (the ofa extra installs both); torchvision's import
# needs perfseer's fix for its CPU-incompatible compiled ops (perfseer.sources.zoo) first.
if importlib.util.find_spec("torchvision") is None:
    pytest.skip("the ofa: references need torchvision (pip install 'perfseer[ofa]')", allow_module_level=True)
from perfseer.sources.zoo import import_zoo  # noqa: E402

import_zoo("torchvision")
pytest.importorskip("ofa")

import perfseer  # noqa: E402
from helpers import assert_user_error  # noqa: E402
from perfseer.errors import MissingDependencyError, ModelLoadError  # noqa: E402
from perfseer.sources.nas import ofa as ofa_space  # noqa: E402

BATCH = 2


def ref(ks: int | list, e: int | list, d: int | list, r: int = 224) -> str:
    ks, e, d = ([v] * n if isinstance(v, int) else v for v, n in ((ks, 20), (e, 20), (d, 5)))
    return f"ofa:ks={','.join(map(str, ks))};e={','.join(map(str, e))};d={','.join(map(str, d))};r={r}"


SMALLEST = ref(3, 3, 2)
LARGEST = ref(7, 6, 4)
# Row 0 of HELP's ofa_latency.csv (arch_index 0), as HELP writes it.
HELP_ROW = ("0,7 5 5 5 7 7 5 7 5 7 3 7 5 3 7 3 5 3 5 3,6 4 4 6 6 3 4 3 3 6 3 3 3 6 3 4 6 4 3 6,2 2 2 2 3,204,"
            "12.08,15.11,28.88,4.37,14.19,27.68,9.20,28.96,55.50,7.82,11.63,21.80")
HELP_HEADER = ("arch_index,ks,e,d,r,2080ti_1,2080ti_32,2080ti_64,titan_rtx_1,titan_rtx_32,titan_rtx_64,"
               "titan_xp_1,titan_xp_32,titan_xp_64,v100_1,v100_32,v100_64")


@functools.lru_cache(maxsize=None)
def extracted(reference: str, input_shape=None):
    """Each reference is exported once per session (a few seconds each)."""
    return perfseer.extract(reference, batch=BATCH, input_shape=input_shape)


# -- by hand --------------------------------------------------------------------------------------
# ofa.utils.make_divisible (the TF MobileNet rule), channel divisor 8
def make_divisible(v: float, divisor: int = 8) -> int:
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


STEM = make_divisible(16 * 1.2)                                      # 24 (first conv and first block)
STAGE_WIDTHS = [make_divisible(c * 1.2) for c in (24, 40, 80, 112, 160)]  # 32, 48, 96, 136, 192
STAGE_STRIDES = (2, 2, 2, 1, 2)
STAGE_SE = (False, True, False, True, True)
FINAL_EXPAND, LAST = make_divisible(960 * 1.2), make_divisible(1280 * 1.2)  # 1152, 1536


def by_hand(reference: str) -> tuple[int, int]:
    """``(parameters, MACs per sample)``: convolutions have no bias and are followed by BatchNorm
    (2 parameters per channel), except the SE convolutions (bias, no BN) and the feature-mix conv
    (no bias, no BN); MACs are those of convolutions and the classifier."""
    spec = ofa_space.parse_ofa(reference)
    h = math.ceil(spec.r / 2)  # stride-2 first conv, padding k // 2
    params = STEM * 27 + 2 * STEM + STEM * 9 + 2 * STEM + STEM * STEM + 2 * STEM
    macs = (STEM * 27 + STEM * 9 + STEM * STEM) * h * h
    c_in = STEM
    for stage, (width, stride, se) in enumerate(zip(STAGE_WIDTHS, STAGE_STRIDES, STAGE_SE)):
        for slot in range(4 * stage, 4 * stage + spec.d[stage]):
            k, e = spec.ks[slot], spec.e[slot]
            s = stride if slot == 4 * stage else 1
            mid = make_divisible(round(c_in * e))
            h_out = math.ceil(h / s)
            params += c_in * mid + 2 * mid + mid * k * k + 2 * mid + mid * width + 2 * width
            macs += c_in * mid * h * h + (mid * k * k + mid * width) * h_out * h_out
            if se:
                red = make_divisible(mid // 4)
                params += mid * red + red + red * mid + mid
                macs += 2 * mid * red
            c_in, h = width, h_out
    params += c_in * FINAL_EXPAND + 2 * FINAL_EXPAND + FINAL_EXPAND * LAST + LAST * 1000 + 1000
    macs += c_in * FINAL_EXPAND * h * h + FINAL_EXPAND * LAST + LAST * 1000
    return params, macs


def module_params(reference: str) -> int:
    """The package's own count (``ofa.utils.count_parameters``) of the sub-network it builds."""
    from ofa.utils import count_parameters

    return count_parameters(ofa_space.build_ofa(reference, device="meta"))


# -- parameters -----------------------------------------------------------------------------------

def test_parameter_counts_of_the_extremes():
    # The smallest (ks 3, e 3, d 2) and largest (ks 7, e 6, d 4) sub-networks of OFA-MobileNetV3 w1.2
    assert by_hand(SMALLEST)[0] == module_params(SMALLEST) == 4_602_456
    assert by_hand(LARGEST)[0] == module_params(LARGEST) == 10_701_632


@pytest.mark.parametrize("reference", [SMALLEST, LARGEST], ids=["smallest", "largest"])
def test_extract_params_and_macs_by_hand(reference):
    pg = extracted(reference)
    params, macs = by_hand(reference)
    assert pg.num_nodes > 0 and not pg.uncovered_ops
    assert pg.params == params == module_params(reference)
    assert pg.macs == BATCH * macs
    assert pg.graph.name == reference


def test_resolution_changes_macs_not_params():
    # no input shape given: the export takes 3 x r x r (the hand MACs use r)
    low = SMALLEST.replace("r=224", "r=160")
    a, b = extracted(SMALLEST), extracted(low)
    assert a.params == b.params
    assert b.macs == BATCH * by_hand(low)[1] < a.macs == BATCH * by_hand(SMALLEST)[1]


# -- a real HELP reference --------------------------------------------------------------------------

def test_a_help_reference_from_the_imported_table_builds(tmp_path):
    from perfseer.data.dataset import _NOT_CACHED
    from perfseer.data.importers.help_nas import import_help_nas
    from perfseer.sources.load import split_reference

    (tmp_path / "ofa_latency.csv").write_text(HELP_HEADER + "\n" + HELP_ROW + "\n")
    table, _ = import_help_nas(tmp_path)
    assert table["model"].nunique() == 1
    model, shape = table["model"].iloc[0], table["input_shape"].iloc[0]
    assert model == ref([7, 5, 5, 5, 7, 7, 5, 7, 5, 7, 3, 7, 5, 3, 7, 3, 5, 3, 5, 3],
                        [6, 4, 4, 6, 6, 3, 4, 3, 3, 6, 3, 3, 3, 6, 3, 4, 6, 4, 3, 6], [2, 2, 2, 2, 3], 204)
    assert shape == "3x204x204"
    # the dataset builder exports it once and caches the skeleton
    assert split_reference(model)[0] == "ofa" and "ofa" not in _NOT_CACHED
    pg = extracted(model, (3, 204, 204))
    params, macs = by_hand(model)
    assert not pg.uncovered_ops
    assert pg.params == params == module_params(model)
    assert pg.macs == BATCH * macs


# -- errors ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("bad, names", [
    (ref(3, 3, 2).replace("ks=3,", "ks=", 1), ["ks has 19 values", "20 kernel sizes"]),
    (ref(4, 3, 2), ["ks value 1 of 20 is 4", "3, 5, 7"]),
    (ref(3, 5, 2), ["e value 1 of 20 is 5", "3, 4, 6"]),
    (ref(3, 3, [2, 2, 2, 2, 5]), ["d value 5 of 5 is 5", "2, 3, 4"]),
    (ref(3, 3, [2, 2, 2, 2]), ["d has 4 values", "5 stage depths"]),
    (ref(3, 3, 2, 0), ["r='0'", "positive integer"]),
    (ref(3, 3, 2).replace(";r=224", ""), ["no r="]),
    (ref(3, 3, 2).replace("e=", "x="), ["'x=3"]),
    (ref(3, 3, 2).replace("ks=3,3", "ks=3,a"), ["ks='3,a"]),
    ("ofa:resnet50", ["'resnet50'"]),
])
def test_malformed_references_are_one_line_errors(bad, names):
    with pytest.raises(ModelLoadError) as info:
        perfseer.extract(bad)
    assert_user_error(str(info.value), *names, "ofa:ks=K1,...,K20;e=E1,...,E20;d=D1,...,D5;r=R")


def test_missing_package_names_the_extra(monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ofa" else find_spec(name, *a))
    with pytest.raises(MissingDependencyError) as info:
        ofa_space._import_ofa()
    assert_user_error(str(info.value), "ofa", "pip install 'perfseer[ofa]'")
