"""perfseer calibrate --help shows the measurement table's columns with an example."""

import pytest

from perfseer.cli.main import main


def test_calibrate_help_shows_the_csv_format(capsys):
    with pytest.raises(SystemExit):
        main(["calibrate", "--help"])
    out = capsys.readouterr().out
    lines = out.splitlines()
    header = "  model,input_shape,batch_size,phase,device,latency_ms"
    i = lines.index(header)  # the example keeps its lines, unwrapped
    assert lines[i + 1].strip().startswith("timm:resnet50,3x224x224,32,infer,")
    assert lines[i + 2].count(",") == 5
    assert max(len(line) for line in lines[i - 5:i + 3]) <= 80
