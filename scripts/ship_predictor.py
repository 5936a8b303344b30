"""Install a retrained predictor (``perfseer train ... --fit train+test``) as the bundled one of the
same name, keeping the replaced predictor's test scores on the card.

The retrained network has seen the test split, so its card has no test score of its own; the
replaced predictor's (trained on train only, same validation split) is kept as
``scores["previous_test"]`` and its training summary as ``training["previous"]``, so that
``perfseer predictors`` shows today's test score next to the new k-fold score.  Both files are
written atomically.  Refused (unless ``--force``) when the new validation MAPE is worse than the
replaced predictor's by more than ``--tolerance`` points.

    python scripts/ship_predictor.py .cache/trust/NAME/NAME.json [--force]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path


#: top-level card fields that training does not write and that the replaced card's role depends on
CARRIED = ("role", "basis")


def main(argv=None) -> int:
    from perfseer.runtime.predictor import BUNDLED

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("card", help="the retrained predictor's card")
    ap.add_argument("--tolerance", type=float, default=0.5, help="validation MAPE points it may lose (default 0.5)")
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args(argv)
    src = Path(args.card)
    new = json.loads(src.read_text())
    name = new["name"]
    old_path = BUNDLED / f"{name}.json"
    old = json.loads(old_path.read_text()) if old_path.is_file() else {}
    if old.get("training", {}).get("fit_splits", ["train"]) == ["train"] and "test" in old.get("scores", {}):
        new["scores"]["previous_test"] = old["scores"]["test"]
        new["training"]["previous"] = {k: old.get(k) for k in ("created",)} | {
            k: old["training"].get(k) for k in ("rows", "epochs_run", "stopped", "wall_time_s")} | {
            "val": old["scores"].get("val")}
    elif "previous_test" in old.get("scores", {}):
        new["scores"]["previous_test"] = old["scores"]["previous_test"]
        new["training"]["previous"] = old["training"].get("previous")
    for key, m in new["scores"].get("val", {}).items():
        before = (old.get("scores", {}).get("val", {}).get(key) or {}).get("mape")
        print(f"{name} {key}: validation MAPE {m['mape']:.2f} % (replaced predictor: "
              f"{before if before is None else round(before, 2)} %)")
        if before is not None and m["mape"] > before + args.tolerance and not args.force:
            print("refused: worse on validation (pass --force to ship anyway)", file=sys.stderr)
            return 1
    # what was set on the replaced card after training (the memory fallback cards' role and basis line)
    for key in CARRIED:
        if key in old and key not in new:
            new[key] = old[key]
            print(f"{name}: kept the replaced card's {key!r}: {old[key]!r}")
    for suffix in (".safetensors",):
        tmp = BUNDLED / f"{name}{suffix}.tmp"
        shutil.copyfile(src.with_suffix(suffix), tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, BUNDLED / f"{name}{suffix}")
    from perfseer.atomic import atomic_write_text

    atomic_write_text(old_path, json.dumps(new, indent=1) + "\n")
    print(f"wrote {old_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
