"""``perfseer memory``: JSON, text, and bad input as a clear error with exit status 2."""

import json

from perfseer.cli.main import main
from perfseer.memory.overheads import DEFAULT_CONTEXT_MIB


def test_cli_json_for_an_onnx_example(tmp_path, capsys):
    out = tmp_path / "m.json"
    assert main(["memory", "example:resnet18", "--batch", "1,4", "--phase", "infer", "--device", "a100-40gb",
                 "--json", str(out)]) == 0
    rep = json.loads(out.read_text())
    a, b = rep["estimates"]
    assert (a["batch"], b["batch"]) == (1, 4) and a["method"] == "onnx-liveness"
    assert b["peak_tensor_bytes"] > a["peak_tensor_bytes"] and a["fits"] is True
    text = capsys.readouterr().out
    assert "activations" in text and "total" in text and "fits" in text


def test_cli_bad_input_exits_2(capsys):
    assert main(["memory", "example:resnet18", "--phase", "train"]) == 2
    assert "--phase infer" in capsys.readouterr().err
    assert main(["memory", "example:resnet18", "--phase", "infer", "--device", "no-such-gpu"]) == 2
    assert "unknown device" in capsys.readouterr().err
    assert main(["memory", "example:resnet18", "--phase", "infer", "--max-batch"]) == 2
    assert "needs a device" in capsys.readouterr().err


def test_memory_rows_beside_predictions():
    from perfseer.memory.api import memory_rows

    rows = [{"batch_size": 2, "device": "rtx3090/amp-nchw-pt240", "phase": "infer", "metric": "latency_ms"},
            {"batch_size": 2, "device": "i9_10940x/fp32-nchw-pt240", "phase": "infer", "metric": "latency_ms"}]
    extra, warns = memory_rows("example:resnet18", rows)
    assert [(r["device"], r["metric"], r["unit"], r["precision"]) for r in extra] == \
        [("rtx3090/amp-nchw-pt240", "memory_sim", "MiB", "amp-fp16")]
    assert extra[0]["value"] > DEFAULT_CONTEXT_MIB and not warns  # the CUDA context at least


def test_table_rows_are_a_valid_measurement_table(tmp_path):
    from perfseer.data.table import read_table

    out = tmp_path / "mem.csv"
    for batch in ("1", "2"):
        assert main(["memory", "example:resnet18", "--batch", batch, "--phase", "infer", "--input-shape", "3x224x224",
                     "--device", "h100-sxm", "--table", str(out)]) == 0
    df = read_table(out)
    assert list(df["batch_size"]) == [1, 2] and set(df["device"]) == {"h100-sxm/fp32-sim"}
    assert (df["memory_mb"] > 500).all() and set(df["phase"]) == {"infer"}


def test_json_flag_prints_and_out_writes(tmp_path, capsys):
    import json

    from perfseer.cli.main import main

    out = tmp_path / "m.json"
    nb = "nb201:|nor_conv_3x3~0|+|nor_conv_3x3~0|avg_pool_3x3~1|+|skip_connect~0|nor_conv_3x3~1|skip_connect~2|"
    assert main(["memory", nb, "--batch", "2", "--phase", "infer", "--json", "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(out.read_text())


NB201 = "nb201:|nor_conv_3x3~0|+|nor_conv_3x3~0|avg_pool_3x3~1|+|skip_connect~0|nor_conv_3x3~1|skip_connect~2|"


def test_tensor_lines_are_labelled_at_the_peak_with_their_own_peak(capsys):
    assert main(["memory", NB201, "--batch", "2"]) == 0
    text = capsys.readouterr().out
    line = next(x for x in text.splitlines() if x.strip().startswith("gradients"))
    assert "gradients at the peak" in line and "own peak" in line
    assert "workspace at the peak" not in text  # not a tensor category: no label


def test_category_peaks_bound_the_breakdown():
    from perfseer.memory.api import memory

    est = memory(NB201, batch=2, phase="train")
    for k, v in est.category_peaks.items():
        assert v >= est.breakdown[k]
    assert est.category_peaks["gradients"] > est.breakdown["gradients"]


def test_seq_len_is_the_tokens_of_an_hf_model(capsys):
    from perfseer.cli.memory import input_shape_of

    assert input_shape_of("hf:gpt2", None, 512) == (512,)
    assert input_shape_of("timm:resnet50", "3x64x64", None) == (3, 64, 64)
    assert main(["memory", "timm:resnet50", "--seq-len", "128"]) == 2
    assert "--input-shape" in capsys.readouterr().err
    assert main(["memory", "hf:gpt2", "--seq-len", "128", "--input-shape", "128"]) == 2
    assert "only --seq-len" in capsys.readouterr().err
