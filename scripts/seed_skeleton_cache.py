"""Copy the timm export cache of scripts/zoo_cache.py into the dataset builder's skeleton cache.

``scripts/zoo_cache.py`` exports every timm-benchmark model once (re-parameterised, at the
resolution of its newest benchmark file).  ``perfseer data build``
would export the same models again under the reference ``timm:NAME@reparam``; this script files
the existing exports under that reference instead, so a timm dataset build only exports what the
zoo cache lacks (other resolutions, training-time forms).  Both caches hold the same thing: the
exporter's skeleton of ``timm:NAME@reparam`` at ``3xSxS``.

With ``--table`` (a measurement table from ``perfseer data import timm-benchmark``), the export is
also filed under the plain ``timm:NAME`` (the unfused form training rows name) for each model of
the table whose definition has nothing to fuse: ``timm.utils.reparameterize_model`` only changes
modules that have a ``fuse``, ``reparameterize`` or ``switch_to_deploy`` method, so for a model
without one both references are the same graph (checked on a meta-device build of the model).

    python scripts/seed_skeleton_cache.py --cache .cache/skeletons
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ZOO = Path(os.environ.get("PERFSEER_ZOO_CACHE", ROOT / ".cache" / "zoo")) / "timm"


def main() -> None:
    from perfseer.data.dataset import SkeletonCache, default_cache_dir
    from perfseer.graph.onnx_io import read_skeleton

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, default=None, help="skeleton cache folder (default: the builder's)")
    ap.add_argument("--table", type=Path, default=None, help="also file unfused twins this table asks for")
    args = ap.parse_args()
    cache = SkeletonCache(args.cache if args.cache is not None else default_cache_dir())
    cache.prepare()
    index = ZOO / "index.jsonl"
    if not index.is_file():
        raise SystemExit(f"no zoo cache at {ZOO}: run python scripts/zoo_cache.py --zoo timm first")
    added = present = 0
    for line in index.read_text().splitlines():
        rec = json.loads(line)
        if not rec.get("ok"):
            continue
        ref, shape = f"timm:{rec['model']}@reparam", f"3x{rec['img_size']}x{rec['img_size']}"
        if cache.skeleton_path(ref, shape).is_file():
            present += 1
            continue
        skel = read_skeleton(ZOO / f"{rec['model']}@{rec['img_size']}.onnx")
        skel.input_shape_applied = True  # exported at that resolution
        cache.put(ref, shape, skel)
        added += 1
    print(f"filed {added} exports under timm:NAME@reparam ({present} already there) in {cache.directory}")
    if args.table is not None:
        twins = _unfused_twins(cache, args.table)
        print(f"filed {twins} exports under timm:NAME (models with nothing to re-parameterise)")


def _fusable(name: str) -> bool:
    import torch

    from perfseer.sources.zoo import import_zoo

    timm = import_zoo("timm")  # defines torchvision's operator schemas first
    with torch.device("meta"):
        module = timm.create_model(name, pretrained=False)
    return any(hasattr(m, a) for m in module.modules() for a in ("fuse", "reparameterize", "switch_to_deploy"))


def _unfused_twins(cache, table: Path) -> int:
    from perfseer.data.table import read_table

    df = read_table(table)
    pairs = df.loc[df["model"].str.startswith("timm:") & ~df["model"].str.endswith("@reparam"),
                   ["model", "input_shape"]].drop_duplicates()
    filed = 0
    for ref, shape in pairs.itertuples(index=False):
        fused = cache.skeleton_path(ref + "@reparam", shape)
        if not fused.is_file() or cache.skeleton_path(ref, shape).is_file():
            continue
        try:
            if _fusable(ref.partition(":")[2]):
                continue
        except Exception:  # noqa: BLE001 - not buildable here: the dataset build reports it
            continue
        skel = cache.get(ref + "@reparam", shape)
        if skel is not None:
            cache.put(ref, shape, skel)
            filed += 1
    return filed


if __name__ == "__main__":
    main()
