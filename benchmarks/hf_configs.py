"""The shipped ``hf:`` configurations, built: class, parameters, layers, width.

Builds every model of ``perfseer/graph/hf_configs.json`` on the meta device (nothing exported,
nothing allocated; about a second each) and prints its class and parameter count (each tied
tensor once) — the check that the shipped configuration values are those of the released
checkpoints, whose parameter counts are published on their model cards.

    PYTHONPATH=src python benchmarks/hf_configs.py [--json]
"""

from __future__ import annotations

import argparse
import json


def rows() -> list[dict]:
    from perfseer.errors import PerfseerError
    from perfseer.sources.hf import build_model, known_models, parse_reference

    out = []
    for name in known_models():
        ref = parse_reference(name)
        try:
            model, config = build_model(ref)
        except PerfseerError as e:
            out.append({"name": name, "error": str(e)})
            continue
        out.append({"name": name, "class": type(model).__name__, "model_type": config.model_type,
                    "attention": config._attn_implementation,
                    "params": sum(p.numel() for p in model.parameters())})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    table = rows()
    if args.json:
        print(json.dumps(table, indent=1))
        return
    print("| name | class | attention | parameters |\n| --- | --- | --- | ---: |")
    for r in table:
        if "error" in r:
            print(f"| `{r['name']}` | error: {r['error']} | | |")
        else:
            print(f"| `{r['name']}` | {r['class']} | {r['attention']} | {r['params']:,} |")


if __name__ == "__main__":
    main()
