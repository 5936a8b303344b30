"""The any-GPU route rule (benchmarks.lib.anygpu_logo.route_facts): nested, same vendor, margin, pooled fallback."""

import pandas as pd
import pytest
from benchmarks.lib import anygpu_logo as L


def _row(gpu, cell, anygpu, spec, roofline=90.0, blend=None, seen=False):
    return {"gpu": gpu, "cell": cell, "rows": 5, "spec_seen": seen, "anygpu_mape": anygpu, "spec_mape": spec,
            "roofline_mape": roofline, "blend_mape": (anygpu + spec) / 2 if blend is None else blend}


def test_choice_is_nested_and_needs_a_margin():
    c = "cnn/infer/fp32"
    # spec 20 % better than any-GPU on the three others of each GPU -> spec; the held-out GPU's own score unused
    per = pd.DataFrame([_row("t4", c, 30, 20), _row("a100-40gb-pcie", c, 30, 20), _row("rtx4090", c, 30, 20),
                        _row("h200", c, 10, 99)])
    out, route = L.route_facts(per)
    h200 = out.set_index("gpu").loc["h200"]
    assert h200["route_choice"] == "spec" and h200["route_mape"] == 99  # the nested choice, even where it is wrong
    # the card's fact uses every GPU: any-GPU 25 vs spec 39.75
    assert route[c]["choice"] == "anygpu" and route[c]["pooled_mape"]["spec"] == pytest.approx(39.75)
    # within the margin (spec 10 % better): any-GPU stays
    per["spec_mape"] = [27.0, 27.0, 27.0, 27.0]
    out, route = L.route_facts(per)
    assert set(out["route_choice"]) == {"anygpu"} and route[c]["choice"] == "anygpu"


def test_other_vendors_do_not_choose_and_few_gpus_pool_over_the_phase():
    c, c2 = "transformer/infer/amp", "transformer/infer/fp32"
    # roofline best on the AMD GPUs only: an NVIDIA target keeps any-GPU
    per = pd.DataFrame([_row("mi100", c2, 30, 40, roofline=5), _row("mi210", c2, 30, 40, roofline=5),
                        _row("t4", c2, 10, 30), _row("rtx4090", c, 20, 40), _row("rtx5090", c, 20, 40),
                        _row("h200", c, 20, 40)])
    out = L.route_facts(per)[0].set_index("gpu")
    assert out.loc["h200", "route_choice"] == "anygpu"
    # an AMD GPU has one other AMD GPU: fewer than ROUTE_MIN_GPUS even pooled -> any-GPU
    assert out.loc["mi100", "route_choice"] == "anygpu"
    # t4 has no other GPU on its cell: the pool is every transformer inference cell of NVIDIA GPUs
    _, scores, on = L.route_choice_on(per[(per["gpu"] != "t4") & ~per["gpu"].str.startswith("mi")], c2)
    assert len(on) == 3 and scores["anygpu"] == pytest.approx(20.0)


def test_spec_seen_rows_do_not_vote():
    c = "cnn/infer/fp32"
    per = pd.DataFrame([_row("t4", c, 30, 1, seen=True), _row("a100-40gb-pcie", c, 30, 1, seen=True),
                        _row("v100-pcie-32gb", c, 30, 1, seen=True), _row("rtx4090", c, 30, 40)])
    out, route = L.route_facts(per)
    assert out.set_index("gpu").loc["rtx4090", "route_choice"] == "anygpu" and route[c]["choice"] == "anygpu"
