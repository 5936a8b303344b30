"""The HELP importer: batch suffixes, the three spaces' model references, dropped values."""

from __future__ import annotations

import pytest

from helpers import assert_user_error
from perfseer.data.importers.help_nas import OFAArch, import_help_nas, split_device_columns
from perfseer.errors import ModelLoadError, TableError


def test_batch_suffixes():
    columns = ["titan_rtx_1", "titan_rtx_32", "titan_rtx_256", "1080ti_1", "1080ti_64", "essential_ph_1",
               "gold_6226", "silver_4210r", "raspi4", "pixel2", "fpga", "v100_32", "lone_1", "board_2",
               "titan_xp_1", "titan_xp_64", "titanxp_32"]
    assert split_device_columns(columns) == {
        "titan_rtx_1": ("titan_rtx", 1), "titan_rtx_32": ("titan_rtx", 32), "titan_rtx_256": ("titan_rtx", 256),
        "1080ti_1": ("1080ti", 1), "1080ti_64": ("1080ti", 64),
        "essential_ph_1": ("essential_ph_1", 1),   # the Essential PH-1 phone: no other batch column
        "gold_6226": ("gold_6226", 1), "silver_4210r": ("silver_4210r", 1),
        "raspi4": ("raspi4", 1), "pixel2": ("pixel2", 1), "fpga": ("fpga", 1),
        "v100_32": ("v100", 32),                   # a batch other than 1 is always a batch
        "lone_1": ("lone_1", 1), "board_2": ("board_2", 1),  # 2 is not one of HELP's batch sizes
        "titan_xp_1": ("titanxp", 1), "titan_xp_64": ("titanxp", 64), "titanxp_32": ("titanxp", 32),
    }


ARCH_A = "|nor_conv_3x3~0|+|nor_conv_3x3~0|avg_pool_3x3~1|+|skip_connect~0|nor_conv_3x3~1|skip_connect~2|"
ARCH_B = "|none~0|+|none~0|none~1|+|none~0|none~1|none~2|"
BLOCKS = " ".join(["k3_e1", "k5_e6_g2", "skip"] * 7 + ["k3_e3"])
KS, E, D = " ".join(["3", "5", "7", "5"] * 5), " ".join(["4", "6", "3", "3"] * 5), "2 3 4 2 3"


def make_folder(folder):
    (folder / "nasbench201_latency.csv").write_text(
        "arch_index,arch_str,titan_rtx_1,titan_rtx_256,essential_ph_1,pixel3,raspi4\n"
        f"0,{ARCH_A},5.5,10.25,9,3.0,12.5\n"
        f"1,{ARCH_B},4.0,8.0,3,0.003,\n"                 # pixel3 <= 0.05 ms, raspi4 missing
        f"2,|nor_conv_3x3~0|+|broken,5.5,10.25,9,3.0,x\n")  # a bad cell string: every column dropped
    # device columns in another order than in the NB201 file
    (folder / "fbnet_latency.csv").write_text(
        f"arch_index,essential_ph_1,blocks,titan_rtx_64,titan_rtx_1\n1,29,{BLOCKS},11.5,10.0\n"
        f"2,31,{BLOCKS} skip,11.5,10.0\n")              # 23 blocks
    (folder / "ofa_latency.csv").write_text(
        f"arch_index,ks,e,d,r,titan_xp_1,titan_xp_32,v100_1,v100_64\n0,{KS},{E},{D},204,9.2,28.9,n/a,20.5\n")
    (folder / "notes.csv").write_text("what,why\na,b\n")


def test_folder_import(tmp_path):
    make_folder(tmp_path)
    table, report = import_help_nas(tmp_path)
    assert report.files == ["fbnet_latency.csv", "nasbench201_latency.csv", "ofa_latency.csv"]
    assert report.ignored == ["notes.csv"]
    assert dict(report.rows) == {"titan_rtx": 2 + 2 + 2, "essential_ph_1": 2 + 1, "pixel3": 1, "raspi4": 1,
                                 "titanxp": 2, "v100": 1}
    assert report.dropped_by_reason() == {"bad architecture": 5 + 3, "latency <= 0.05 ms": 1,
                                          "missing latency": 1, "non-numeric latency": 1}
    assert report.dropped[("v100", "non-numeric latency")] == 1
    assert len(table) == report.total_rows
    assert set(table["phase"]) == {"infer"}

    nb = table[table["source"] == "nasbench201_latency.csv"]
    assert set(nb["model"]) == {f"nb201:{ARCH_A}", f"nb201:{ARCH_B}"}
    assert set(nb["input_shape"]) == {"3x32x32"}
    titan = nb[nb["device"] == "titan_rtx"].set_index(["model", "batch_size"])["latency_ms"]
    assert titan[(f"nb201:{ARCH_A}", 256)] == 10.25 and titan[(f"nb201:{ARCH_B}", 1)] == 4.0
    assert nb[nb["device"] == "essential_ph_1"]["batch_size"].tolist() == [1, 1]

    fb = table[table["source"] == "fbnet_latency.csv"]
    assert set(fb["model"]) == {f"fbnet:{BLOCKS}"} and set(fb["input_shape"]) == {"3x32x32"}
    assert sorted(fb["batch_size"]) == [1, 1, 64]

    ofa = table[table["source"] == "ofa_latency.csv"]
    assert sorted(zip(ofa["device"], ofa["batch_size"])) == [("titanxp", 1), ("titanxp", 32), ("v100", 64)]
    assert set(ofa["input_shape"]) == {"3x204x204"}
    arch = OFAArch.from_ref(ofa["model"].iloc[0])
    assert arch.ks == tuple(int(k) for k in KS.split()) and arch.d == (2, 3, 4, 2, 3) and arch.r == 204
    assert ofa["model"].iloc[0] == f"ofa:ks={KS.replace(' ', ',')};e={E.replace(' ', ',')};d=2,3,4,2,3;r=204"


def test_ofa_reference_round_trip():
    arch = OFAArch(ks=(3,) * 20, e=(6,) * 20, d=(4, 4, 4, 4, 4), r=224)
    assert OFAArch.from_ref(arch.ref) == arch
    assert arch.ref.startswith("ofa:ks=3,3,") and arch.ref.endswith(";d=4,4,4,4,4;r=224")


@pytest.mark.parametrize("ref", ["ofa:ks=3;e=6;d=4;r=224", "ofa:ks=3,x;e=6;d=4;r=224", "timm:resnet50",
                                 "ofa:" + ";".join(["ks=" + ",".join(["3"] * 20), "e=" + ",".join(["6"] * 20),
                                                    "d=4,4,4,4,4", "r=0"])])
def test_bad_ofa_references(ref):
    with pytest.raises(ModelLoadError) as e:
        OFAArch.from_ref(ref)
    assert_user_error(str(e.value), "Once-for-All")


def test_batch_suffix_seen_across_files(tmp_path):
    # 'gpu_1' alone would be a device name; 'gpu_32' in another file makes it batch 1 of 'gpu'
    (tmp_path / "a.csv").write_text(f"arch_str,gpu_1\n{ARCH_A},1.5\n")
    (tmp_path / "b.csv").write_text(f"blocks,gpu_32\n{BLOCKS},2.5\n")
    table, _ = import_help_nas(tmp_path)
    assert set(zip(table["device"], table["batch_size"])) == {("gpu", 1), ("gpu", 32)}


def test_no_help_file(tmp_path):
    (tmp_path / "x.csv").write_text("a,b\n1,2\n")
    with pytest.raises(TableError) as e:
        import_help_nas(tmp_path)
    assert_user_error(str(e.value), "no HELP latency file")


def test_ambiguous_and_deviceless_files(tmp_path):
    (tmp_path / "x.csv").write_text(f"arch_index,arch_str\n0,{ARCH_A}\n")
    with pytest.raises(TableError, match="'x.csv' has no device column"):
        import_help_nas(tmp_path)
    (tmp_path / "x.csv").write_text(f"arch_str,blocks,gpu\n{ARCH_A},{BLOCKS},1.0\n")
    with pytest.raises(TableError, match="several spaces"):
        import_help_nas(tmp_path)
