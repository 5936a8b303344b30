"""The energy table ``perfseer predict --energy`` prints below the latency table."""

from __future__ import annotations


def print_energy(rows: list[dict]) -> None:
    """One line per latency row with power, energy per step and per sample and utilisation,
    then the power model's notes (each once)."""
    from rich import box  # deferred: keeps --help fast
    from rich.console import Console  # deferred: keeps --help fast
    from rich.table import Table  # deferred: keeps --help fast

    mine = [r for r in rows if r.get("metric") == "latency_ms" and "energy_j" in r]
    t = Table(title="energy (power model)", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for c in ("batch", "device", "phase", "power W", "J / step", "J / sample", "util %"):
        t.add_column(c, justify="left" if c in ("device", "phase") else "right")
    notes: list[str] = []
    for r in mine:
        if r.get("energy_j") is None:
            cells = ["-"] * 4
        else:
            cells = [f"{r['power_w']:.0f}", f"{r['energy_j']:.4g}", f"{r['energy_j_per_sample']:.3g}",
                     f"{r['util_pct']:.0f}"]
        t.add_row(str(r["batch_size"]), str(r["device"]), str(r["phase"]), *cells)
        notes += [n for n in r.get("energy_notes") or [] if n not in notes]
    Console().print(t)
    for n in notes:
        print(f"  energy: {n}")
    print("energy: average board power over the step, between the GPU's idle power and its limit; J / step = "
          "power x step time (docs/guide/energy.md)")
