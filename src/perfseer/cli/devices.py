"""``perfseer devices``: the registered GPUs and CPUs with their specs, and adding a spec file."""

from __future__ import annotations

import argparse
import json

from rich import box
from rich.console import Console
from rich.table import Table

from perfseer.devices import add_device_file, get_device, list_devices, user_dir


def add_parser(sub) -> None:
    p = sub.add_parser(
        "devices", help="list known GPUs/CPUs with their specs; add one from a JSON spec file",
        description="List the device registry (bundled spec files plus those in $PERFSEER_DEVICES, default "
                    "~/.config/perfseer/devices), show one device, or add a spec file (format: docs/concepts/spec-model.md).")
    p.add_argument("name", nargs="?", default=None, metavar="DEVICE",
                   help="show one device (name, alias, table device string or GPU:MIGPROFILE) in full")
    p.add_argument("--kind", choices=("gpu", "cpu"), default=None, help="only GPUs or only CPUs")
    p.add_argument("--mig", action="store_true", help="list MIG slices as derived devices too")
    p.add_argument("--add", default=None, metavar="FILE", help="validate a JSON spec file and add it to the user folder")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_devices)


def _fmt(v, digits: int = 4) -> str:
    if v is None:
        return "-"
    return f"{v:.{digits}g}" if isinstance(v, float) else str(v)


def run_devices(args: argparse.Namespace) -> int:
    if args.add:
        specs = add_device_file(args.add)
        print(f"added {', '.join(s.name for s in specs)} to {user_dir()}")
        return 0
    if args.name:
        spec = get_device(args.name)
        if args.json:
            print(json.dumps(spec.to_dict(), indent=1))
        else:
            for k, v in spec.to_dict().items():
                if k == "mig_profiles":
                    v = ", ".join(f"{p['name']} ({p['sms']} SMs)" for p in v) or "-"
                elif isinstance(v, dict):
                    v = ", ".join(f"{a} {b:g}" for a, b in v.items())
                elif isinstance(v, list):
                    v = ", ".join(v) or "-"
                print(f"{k:>18}: {_fmt(v)}")
        return 0
    specs = list_devices(kind=args.kind, include_mig=args.mig)
    if args.json:
        print(json.dumps([s.to_dict() for s in specs], indent=1))
        return 0

    t = Table(title="devices (perfseer devices NAME shows one with its source)", title_justify="left",
              box=box.SIMPLE_HEAD, pad_edge=False)
    for c, j in (("name", "left"), ("mem GiB", "right"), ("GB/s", "right"), ("SMs", "right"), ("fp32", "right"),
                 ("fp16", "right"), ("bf16", "right"), ("MIG", "right")):
        t.add_column(c, justify=j)
    for s in specs:
        p = s.peak_tflops
        t.add_row(s.name, _fmt(s.memory_gib, 3), _fmt(s.mem_bandwidth_gbs), str(s.sms), _fmt(p.get("fp32"), 3),
                  _fmt(p.get("fp16"), 3), _fmt(p.get("bf16"), 3), str(len(s.mig_profiles) or ""))
    Console().print(t)
    print("dense peak TFLOP/s; SMs: compute units (CPU: cores); MIG: profiles (--mig)")
    return 0
