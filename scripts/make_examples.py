"""Regenerate the example model graphs bundled in src/perfseer/examples/ (``example:NAME``).

Each is a torchvision classification model exported by perfseer's own PyTorch frontend: the
graph only (weights are never exported), with exporter metadata and value infos dropped to keep
the files small.  Needs the zoo extra:  python scripts/make_examples.py
"""

from pathlib import Path

import onnx

from perfseer.sources.load import load_skeleton

OUT = Path(__file__).resolve().parents[1] / "src" / "perfseer" / "examples"
MODELS = ("resnet18", "resnet50", "mobilenet_v3_small", "vit_b_16")


def slim(model: onnx.ModelProto) -> onnx.ModelProto:
    for node in model.graph.node:
        del node.metadata_props[:]
        node.doc_string = ""
    del model.graph.value_info[:]
    for vi in (*model.graph.input, *model.graph.output):
        del vi.metadata_props[:]
    for t in model.graph.initializer:
        del t.metadata_props[:]
    return model


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name in MODELS:
        skel = load_skeleton(f"torchvision:{name}")
        path = OUT / f"{name}.onnx"
        onnx.save(slim(skel.model), path)
        print(f"{path.name}: {path.stat().st_size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
