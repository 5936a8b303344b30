"""The timm benchmark importer: file names -> device strings, columns by name, dropped rows."""

from __future__ import annotations

import pytest

from helpers import assert_user_error
from perfseer.data.importers import import_benchmark
from perfseer.data.importers.timm_benchmark import import_timm_benchmark, parse_file_name
from perfseer.errors import TableError


@pytest.mark.parametrize("name,device,phase,precision", [
    ("benchmark-infer-amp-nchw-pt240-cu124-rtx3090.csv", "rtx3090/amp-nchw-pt240", "infer", "amp"),
    ("benchmark-infer-fp32-nchw-pt240-cpu-i9_10940x-dynamo.csv", "i9_10940x/fp32-nchw-pt240-dynamo", "infer", "fp32"),
    ("benchmark-infer-fp32-nchw-pt240-cpu-i7_12700h-dynamo.csv", "i7_12700h/fp32-nchw-pt240-dynamo", "infer", "fp32"),
    ("benchmark-infer-amp-nhwc-pt240-cu124-rtx4090.csv", "rtx4090/amp-nhwc-pt240", "infer", "amp"),
    ("benchmark-infer-amp-nchw-pt291-cu128-4090.csv", "rtx4090/amp-nchw-pt291", "infer", "amp"),
    ("benchmark-infer-amp-nchw-pt291-cu128-4090-dynamo.csv", "rtx4090/amp-nchw-pt291-dynamo", "infer", "amp"),
    ("benchmark-infer-amp-nchw-pt291-cu130-5090.csv", "rtx5090/amp-nchw-pt291", "infer", "amp"),
    ("benchmark-infer-amp-nchw-pt291-cu130-pro6000maxq.csv", "rtxpro6000maxq/amp-nchw-pt291", "infer", "amp"),
    ("benchmark-infer-amp_bf16-nchw-pt291-cu130-pro6000maxq-dynamo.csv",
     "rtxpro6000maxq/amp_bf16-nchw-pt291-dynamo", "infer", "amp_bf16"),
    ("benchmark-infer-bf16-nchw-pt291-cu130-pro6000maxq-dynamo.csv",
     "rtxpro6000maxq/bf16-nchw-pt291-dynamo", "infer", "bf16"),
    ("benchmark-train-amp-nhwc-pt112-cu113-rtx3090.csv", "rtx3090/amp-nhwc-pt112", "train", "amp"),
])
def test_file_names(name, device, phase, precision):
    meta = parse_file_name(name)
    assert (meta.device_string, meta.phase, meta.precision) == (device, phase, precision)
    assert meta.dynamo == name.endswith("-dynamo.csv")


@pytest.mark.parametrize("name", ["benchmark-infer-amp-nchw-cu124-rtx3090.csv",   # no pt version
                                  "benchmark-eval-amp-nchw-pt240-cu124-rtx3090.csv",  # no such phase
                                  "benchmark-infer-amp-nchw-pt240-cu124-rtx3090-eager.csv"])
def test_bad_file_names(name):
    with pytest.raises(TableError) as e:
        parse_file_name(name)
    assert_user_error(str(e.value), name, "benchmark-{infer|train}")


INFER_A = "benchmark-infer-amp-nchw-pt240-cu124-rtx4090.csv"
INFER_B = "benchmark-infer-amp-nchw-pt291-cu128-4090.csv"
TRAIN = "benchmark-train-amp-nhwc-pt112-cu113-rtx3090.csv"


def write(folder, name, text):
    (folder / name).write_text(text.replace("\n", "\r\n"))  # timm's files end lines with CRLF


def test_columns_are_read_by_name(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    write(a, INFER_A, "model,infer_samples_per_sec,infer_step_time,infer_batch_size,infer_img_size,param_count\n"
                      "resnet50,2000.0,128.0,256,224,25.56\n"
                      "vit_small_patch16_384,500.0,64.0,32.0,384,22.2\n")
    write(b, INFER_A, "model,infer_img_size,infer_batch_size,param_count,infer_step_time,infer_samples_per_sec\n"
                      "resnet50,224,256,25.56,128.0,2000.0\n"
                      "vit_small_patch16_384,384,32.0,22.2,64.0,500.0\n")
    ta, _ = import_timm_benchmark(a)
    tb, _ = import_timm_benchmark(b)
    assert ta.equals(tb)
    # inference rows name the fused (re-parameterised) form timm's benchmark runs
    assert ta["model"].tolist() == ["timm:resnet50@reparam", "timm:vit_small_patch16_384@reparam"]
    assert ta["input_shape"].tolist() == ["3x224x224", "3x384x384"]
    assert ta["batch_size"].tolist() == [256, 32]
    assert ta["latency_ms"].tolist() == [128.0, 64.0]
    assert set(ta["device"]) == {"rtx4090/amp-nchw-pt240"} and set(ta["phase"]) == {"infer"}
    assert set(ta["precision"]) == {"amp"} and set(ta["source"]) == {INFER_A}


def test_folder_import(tmp_path):
    write(tmp_path, INFER_A, "model,infer_img_size,infer_samples_per_sec,infer_step_time,infer_batch_size\n"
                             "resnet50,224,2000.0,128.0,256\n"
                             "resnet50,288,1200.0,213.3,256\n"          # the same model at a second resolution
                             "tiny,224,0,,1024\n"                      # missing step time
                             "tiny2,224,0,n/a,1024\n"                  # non-numeric
                             "tiny3,224,1e9,0.04,1024\n"               # <= 0.05 ms
                             "tiny4,224,1,1.0,0\n"                     # batch 0
                             "tiny5,,1,1.0,8\n"                        # no image size
                             ",224,1,1.0,8\n")                         # no model name
    write(tmp_path, INFER_B, "model,infer_img_size,infer_samples_per_sec,infer_step_time,infer_batch_size\n"
                             "resnet50,224,3000.0,85.0,256.0\n")
    write(tmp_path, TRAIN, "model,train_samples_per_sec,train_step_time,train_batch_size,train_img_size\n"
                           "resnet50,700.0,365.7,256,176\n")
    (tmp_path / "README.md").write_text("results\n")
    (tmp_path / "results-imagenet.csv").write_text("model,top1\nresnet50,80.4\n")
    table, report = import_timm_benchmark(tmp_path)

    assert report.files == [INFER_A, INFER_B, TRAIN]
    assert report.ignored == ["README.md", "results-imagenet.csv"]
    assert dict(report.rows) == {"rtx4090/amp-nchw-pt240": 2, "rtx4090/amp-nchw-pt291": 1, "rtx3090/amp-nhwc-pt112": 1}
    assert report.dropped_by_reason() == {"missing latency": 1, "non-numeric latency": 1, "latency <= 0.05 ms": 1,
                                          "bad batch size": 1, "bad input size": 1, "missing model name": 1}
    assert report.dropped_by_device() == {"rtx4090/amp-nchw-pt240": 6}
    assert len(table) == report.total_rows == 4

    rows = {(r.device, r.input_shape): r for r in table.itertuples()}
    assert rows[("rtx4090/amp-nchw-pt240", "3x288x288")].latency_ms == 213.3
    assert rows[("rtx4090/amp-nchw-pt291", "3x224x224")].batch_size == 256
    train = rows[("rtx3090/amp-nhwc-pt112", "3x176x176")]
    assert (train.phase, train.batch_size, train.latency_ms, train.source) == ("train", 256, 365.7, TRAIN)
    assert not train.model.endswith("@reparam")  # training runs the unfused model


def test_missing_column(tmp_path):
    write(tmp_path, TRAIN, "model,infer_step_time,infer_batch_size,infer_img_size\nresnet50,1,1,224\n")
    with pytest.raises(TableError) as e:
        import_timm_benchmark(tmp_path)
    assert_user_error(str(e.value), TRAIN, "train_step_time")


def test_bad_file_name_in_folder(tmp_path):
    write(tmp_path, "benchmark-infer-amp.csv", "model\n")
    with pytest.raises(TableError, match="benchmark-infer-amp.csv"):
        import_timm_benchmark(tmp_path)


def test_empty_and_missing_folders(tmp_path):
    (tmp_path / "notes.txt").write_text("")
    for folder, words in ((tmp_path, "no timm result files"), (tmp_path / "nope", "no folder")):
        with pytest.raises(TableError) as e:
            import_benchmark("timm-benchmark", folder)
        assert_user_error(str(e.value), words)
    with pytest.raises(TableError, match="choose one of help-nas, timm-benchmark"):
        import_benchmark("mlperf", tmp_path)
