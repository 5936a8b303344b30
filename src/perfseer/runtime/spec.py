"""The spec model as users hold it: a whole model's latency on any registered GPU, from the
GPU's spec sheet and the model's PerfGraph, with no measurement of that GPU.

Example::

    from perfseer.runtime.spec import load_spec_model

    sm = load_spec_model()
    sm.predict("timm:resnet50", batch=[1, 32], device="l4", precision="fp16")
    # [{"model": ..., "batch_size": 1, "metric": "latency_ms", "value": ..., "basis": "spec model ..."}, ...]

The bundled model (``perfseer/predictors/spec-kernels.*``) is a :class:`~perfseer.specmodel.net.KernelModel`
trained on NeuSight's kernel measurements of five GPUs (P4, P100, T4, V100, A100-40GB; FP32);
its card records the command that trained it.  For inference at ``fp16``/``bf16`` an optional
whole-model calibration (``calibration`` in the card: a linear correction of ``log10`` latency learned on
measured GPUs' timm runs, without any device feature) is applied; the card says on which data.
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections import OrderedDict
from collections.abc import Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from perfseer.devices import get_device
from perfseer.errors import PerfseerError
from perfseer.features.extract import extract
from perfseer.features.perfgraph import PerfGraph
from perfseer.kept import remember
from perfseer.runtime.threads import limited
from perfseer.specmodel import kernels as kt
from perfseer.specmodel.anygpu import AnyGpuError, AnyGpuModel
from perfseer.specmodel.anygpu import read_card as read_anygpu_card
from perfseer.specmodel.compose import PRECISION_BYTES, step_kernels
from perfseer.specmodel.net import KernelModel, SpecModelError
from perfseer.specmodel.trust import assess_row, build_domain, forget_op_masks, interval_kind
from perfseer.trust.bounds import refuse_above_ceiling

BUNDLED_CARD = Path(__file__).resolve().parents[1] / "predictors" / "spec-kernels.json"
# the any-GPU operator model's constants and the route's choice per (model kind, phase, precision),
# with the leave-one-GPU-out numbers it was chosen on (benchmarks/lib/anygpu_logo.py --fit-all)
ANYGPU_CARD = Path(__file__).resolve().parents[1] / "predictors" / "spec-anygpu.json"
PRECISIONS = tuple(PRECISION_BYTES)
AUTOCAST_KERNELS = {"amp-fp16": "fp16", "amp-bf16": "bf16"}  # what the spec model composes autocast from


def calibration_features(table, pred_us: np.ndarray) -> np.ndarray:
    """Whole-model inputs of the calibration: log10 of the summed kernel prediction (ms), of the
    number of kernels, and the share of the prediction in GEMM/conv kernels."""
    total = max(float(pred_us.sum()), 1e-6)
    mm = float(pred_us[table["family"].isin(["gemm", "conv"]).to_numpy()].sum())
    return np.array([1.0, np.log10(total / 1000), np.log10(max(len(table), 1)), mm / total])


CACHE_SIZE = 64  # kernel tables (and the other per-graph compositions) a SpecModel keeps
US_CACHE_SIZE = 1024  # per-(graph, GPU) kernel predictions: a comparison's ~7 batch sizes on every GPU


def _digest(x, op_types, edge_index, dropout) -> bytes:
    """A key of a graph's content: its node features, operators, edges and dropouts."""
    h = hashlib.blake2b(digest_size=16)
    xa = np.ascontiguousarray(np.asarray(x))
    h.update(str((xa.dtype.str, xa.shape)).encode())
    h.update(xa.tobytes())
    h.update("\0".join(map(str, op_types)).encode())
    if edge_index is not None:
        e = np.ascontiguousarray(np.asarray(edge_index, dtype=np.int64))
        h.update(str(e.shape).encode())
        h.update(e.tobytes())
    else:
        h.update(b"no edges")
    h.update(np.asarray(list(dropout), dtype=float).tobytes())
    return h.digest()


def _sums_by(labels, us: np.ndarray) -> dict:
    """``{label: summed µs / 1000}`` (ms) per distinct label, labels in sorted order."""
    keys, inv = np.unique(labels.to_numpy(dtype=object).astype(str), return_inverse=True)
    return {str(k): float(v) / 1000 for k, v in zip(keys, np.bincount(inv.ravel(), weights=us, minlength=len(keys)))}


class SpecModel:
    """A kernel model plus the rules that compose kernels into a model's step."""

    def __init__(self, kernels: KernelModel, card: dict | None = None):
        self.kernels = kernels
        self.card = card or {}
        self.name = self.card.get("name", "spec-kernels")
        self._tables: OrderedDict = OrderedDict()  # graph key -> kernel table (:meth:`_kernels_and_us`)
        self._us: OrderedDict = OrderedDict()  # (graph key, device spec) -> kernel µs
        self._ahead = threading.local()  # .specs: the GPUs a comparison asks next (:meth:`expecting`)
        self._prepared: OrderedDict = OrderedDict()  # (graph key, precision, autocast, fused) -> anygpu.Prepared
        self._columns: OrderedDict = OrderedDict()  # graph key -> its kernel table's columns as arrays
        self._cells: OrderedDict = OrderedDict()  # (graph key, phase, precision) -> its route cell

    def graph_latency(self, x: np.ndarray, op_types, spec, phase: str = "infer", precision: str = "fp32",
                      params: float = 0.0, optimizer: str = "adamw", calibrate: bool = True,
                      edge_index: np.ndarray | None = None, dropout=()) -> dict:
        """Latency of one step of a graph (node features ``x`` and ``op_types``; its
        ``edge_index``, when given, joins linear layers' bias ``Add`` to their GEMM:
        :func:`perfseer.specmodel.compose.node_kernels`; ``dropout``, the element counts of a
        training step's dropouts, :attr:`~perfseer.features.perfgraph.PerfGraph.dropout_elements`)
        on ``spec``.

        Returns:
            ``{"latency_ms", "kernels", "by_pass": {fw, bw, opt}, "by_family": {...},
            "calibrated": bool, "kernel_table", "kernel_us"}`` (the last two: the step's kernels
            and each one's predicted µs, before any calibration).
        """
        self._check(spec, precision)
        table, us, gkey = self._kernels_and_us(x, op_types, spec, phase, precision, params, optimizer, edge_index,
                                               dropout)
        if not len(table):
            return {"latency_ms": 0.0, "kernels": 0, "kernel_table": table, "kernel_us": np.zeros(0), "by_pass": {},
                    "by_family": {}, "calibrated": False, "graph_key": gkey}
        total = float(us.sum()) / 1000
        cal = (self.card.get("calibration") or {}).get(precision if precision in ("fp16", "bf16") else "none")
        calibrated = False
        if calibrate and cal and phase == "infer":  # fitted on inference runs only
            z = float(calibration_features(table, us) @ np.asarray(cal["coef"], dtype=float))
            total *= 10 ** z
            calibrated = True
        return {"latency_ms": total, "kernels": len(table), "kernel_table": table, "kernel_us": us,
                "by_pass": _sums_by(table["pass"], us), "by_family": _sums_by(table["family"], us),
                "calibrated": calibrated, "graph_key": gkey}

    @staticmethod
    def _check(spec, precision: str) -> None:
        """Refuse a device that is not a GPU and a precision the spec model does not compose."""
        if spec.kind != "gpu":
            raise SpecModelError(
                f"the spec model predicts GPUs; {spec.name} is a {spec.kind}",
                "use a measured predictor for a CPU (perfseer predictors lists them), or collect measurements "
                "(perfseer collect)")
        if precision not in PRECISIONS:
            raise SpecModelError(f"unknown precision {precision!r}", f"use one of {', '.join(PRECISIONS)}")

    def clear_cache(self) -> None:
        """Forget the kept kernel tables and predictions (to time a first call on a graph)."""
        self._tables.clear()
        self._us.clear()
        self._prepared.clear()
        self._columns.clear()
        self._cells.clear()
        forget_op_masks()  # the trust reasons' per-graph operators

    def _table(self, x, op_types, phase, precision, params, optimizer, edge_index, dropout):
        """The step's kernel table (kept, not copied: callers must not modify it) and its graph key
        (the graph's content, the step's settings), composed once per key."""
        gkey = (_digest(x, op_types, edge_index, dropout), phase, precision, optimizer, float(params))
        table = self._tables.get(gkey)
        if table is None:
            table = step_kernels(x, op_types, phase=phase, precision=precision, optimizer=optimizer, params=params,
                                 edge_index=edge_index, dropout=dropout)
            remember(self._tables, gkey, table, CACHE_SIZE)
        return table, gkey

    @contextmanager
    def expecting(self, specs):
        """Within the block, a graph's kernels missing on one GPU are predicted for every GPU of
        ``specs`` at once (one pass of the kernel networks instead of one per GPU): what a
        comparison of many GPUs asks next.  Per thread: a service's other requests are unaffected."""
        before = getattr(self._ahead, "specs", ())
        self._ahead.specs = tuple({repr(s): s for s in specs if s.kind == "gpu"}.items())
        try:
            yield self
        finally:
            self._ahead.specs = before

    def _kernel_us(self, table, gkey, spec, precision) -> np.ndarray:
        """The kernel networks' µs of each kernel of ``table`` on ``spec`` (kept per graph key and
        device, not copied; with the GPUs :meth:`expecting` names, predicted for them too)."""
        ukey = (gkey, repr(spec))
        us = self._us.get(ukey)
        if us is None:
            if not len(table):
                remember(self._us, ukey, np.zeros(0), US_CACHE_SIZE)
                return self._us[ukey]
            cols = self._columns.get(gkey)
            if cols is None:  # the table's columns as arrays, read once per graph for every device
                cols = {k: v for k, v in kt.columns(table).items() if k not in ("node", "op", "pass")}
                remember(self._columns, gkey, cols, CACHE_SIZE)
            group = [(ukey[1], spec)] + [(r, s) for r, s in getattr(self._ahead, "specs", ())
                                         if r != ukey[1] and (gkey, r) not in self._us]
            n = len(table)
            many = {k: np.tile(v, len(group)) for k, v in cols.items()} if len(group) > 1 else cols
            dev = kt.device_frame([s for _, s in group for _ in range(n)], [precision] * (n * len(group)),
                                  many["family"], frame=False)
            with limited(1):  # small products, one thread (runtime.threads)
                out = self.kernels.predict(many, dev)
            for i, (r, _) in enumerate(group):
                remember(self._us, (gkey, r), out[i * n:(i + 1) * n], US_CACHE_SIZE)
            us = self._us[ukey]
        return us

    def _kernels_and_us(self, x, op_types, spec, phase, precision, params, optimizer, edge_index, dropout):
        """The step's kernel table and each kernel's predicted µs, from a small cache keyed by the
        graph's content (node features, operators, edges), the step's settings and the device's
        spec: a warm repeated call (a sweep over devices or a service answering the same model)
        composes and runs the kernel networks once.  Returns copies (callers may modify them) and
        the graph key."""
        table, gkey = self._table(x, op_types, phase, precision, params, optimizer, edge_index, dropout)
        us = self._kernel_us(table, gkey, spec, precision)
        return table.copy(), us.copy(), gkey

    def anygpu_table(self, m: AnyGpuModel, gkey, table, precision: str, autocast: bool):
        """``table`` (the kernels of the graph keyed ``gkey``) as ``m`` composes it, its columns read
        (:meth:`~perfseer.specmodel.anygpu.AnyGpuModel.prepared`), once per graph: a comparison
        asks the same step on every GPU."""
        key = (gkey, precision, bool(autocast), m.fused_attention)
        hit = self._prepared.get(key)
        if hit is None:
            hit = m.prepared(table, precision, autocast)
            remember(self._prepared, key, hit, CACHE_SIZE)
        return hit

    def predict(self, model, batch: int | Sequence[int] = 1, device: str = "h100-sxm", phase: str = "infer",
                precision: str = "fp32", input_shape=None, dims=None, optimizer: str = "adamw",
                seq_len: int | None = None, cell_precision: str | None = None, use_route: bool = True) -> list[dict]:
        """Predict ``model``'s step latency on ``device`` at each batch size.

        The answer comes from the basis the route facts (:data:`ANYGPU_CARD`) chose for the
        model's kind (``cnn`` / ``transformer``), the phase and the precision (``cell_precision``:
        ``fp32``, ``fp16`` for a model cast to 16 bits, ``amp`` for autocast; default from
        ``precision``): the any-GPU operator model where it won on leave-one-GPU-out, else the
        kernel networks (``use_route=False``: always the kernel networks).

        Returns:
            One dict per batch size: ``model``, ``batch_size``, ``metric`` (``latency_ms``),
            ``unit``, ``device`` (the registry name), ``phase``, ``precision``, ``value``,
            ``interval`` (90 %, or ``None``), ``in_domain``, ``domain_reasons``, ``flags``
            (:mod:`perfseer.specmodel.trust`), ``basis`` and ``kernels`` (how many kernels the
            step launches).
        """

        spec = get_device(device)
        self._check(spec, precision)
        batches = [batch] if isinstance(batch, int) else list(batch)
        if not batches or any(not isinstance(b, (int, np.integer)) or isinstance(b, bool) or b < 1 for b in batches):
            raise SpecModelError(f"batch sizes must be integers >= 1, got {batch!r}", "pass e.g. batch=[1, 8, 64]")
        pg = model if isinstance(model, PerfGraph) else extract(model, batch=int(batches[0]), input_shape=input_shape,
                                                                 dims=dims, seq_len=seq_len)
        name = str(model) if not isinstance(model, PerfGraph) else pg.graph.name
        out = []
        for b in batches:
            g = pg.at_batch(int(b))
            table, gkey = self._table(g.x, g.op_types, phase, precision, float(g.params), optimizer, g.edge_index,
                                      g.dropout_elements)
            ckey = (gkey, phase, cell_precision or _cell_precision(precision))
            cell = self._cells.get(ckey)
            if cell is None:
                cell = route_cell(table, *ckey[1:])
                remember(self._cells, ckey, cell, CACHE_SIZE)
            choice = route_choice(cell) if use_route else None
            if choice in ("anygpu", "roofline"):  # the kernel networks run only where the trust reasons need them
                out.append(self._routed_row(choice, name, b, spec, phase, precision, cell, table, gkey,
                                            lambda t=table, k=gkey: self._kernel_us(t, k, spec, precision), g))
                continue
            r = self.graph_latency(g.x, g.op_types, spec, phase=phase, precision=precision, params=float(g.params),
                                   optimizer=optimizer, edge_index=g.edge_index, dropout=g.dropout_elements)
            if choice == "blend":
                out.append(self._routed_row(choice, name, b, spec, phase, precision, cell, r["kernel_table"],
                                            r["graph_key"], r["kernel_us"], g))
                continue
            trust = assess_row(r["latency_ms"], spec, precision, phase, r["calibrated"], self.card,
                               r["kernel_table"], r["kernel_us"], g.x, g.op_types, g.u, key=r["graph_key"])
            out.append(refuse_above_ceiling(
                {"model": name, "batch_size": int(b), "metric": "latency_ms", "unit": "ms", "device": spec.name,
                 "phase": phase, "precision": precision, **trust, "basis": self.basis(spec, precision, r["calibrated"]),
                 "basis_kind": "kernels", "basis_seen": self._trained(spec),
                 "kernels": r["kernels"], "unseen_ops": []}))
        return out

    def _routed_row(self, choice, name, b, spec, phase, precision, cell, table, gkey, us, g) -> dict:
        """A row answered by the any-GPU operator model or the roofline (the route's choice for
        ``cell``); ``us``: the kernel networks' µs of ``table``'s kernels, or a function giving them
        (the trust reasons call it only where they need it)."""
        m = load_anygpu()
        # as eager PyTorch runs it (in an AMP cell with autocast's casts), composed once per graph
        step = self.anygpu_table(m, gkey, table, precision, cell.endswith("/amp"))
        if choice == "anygpu":
            ms = m.step_ms(step, spec, precision, eager=True)["latency_ms"]
            q = m.interval_q(*cell.split("/"))
        elif choice == "blend":  # the geometric mean of the any-GPU model and the kernel networks (uncalibrated)
            ms = math.sqrt(m.step_ms(step, spec, precision, eager=True)["latency_ms"]
                           * float(np.asarray(us).sum()) / 1000)
            q = ((m.card.get("intervals_by_basis") or {}).get(cell) or {}).get("blend")
        else:
            dev = kt.device_frame([spec] * len(table), [precision] * len(table), table["family"])
            tf, tm = kt.roofline_us(table, dev)
            ms = float(np.maximum(tf, tm).sum()) / 1000
            q = ((m.card.get("intervals_by_basis") or {}).get(cell) or {}).get("roofline")
        card = {"domain": _anygpu_domain(m),
                "intervals": {interval_kind(precision, phase, False): {"q": q}} if q is not None else {},
                "ood_factor": 2.0}
        trust = assess_row(ms, spec, precision, phase, False, card, table, us, g.x, g.op_types, g.u, key=gkey)
        v = (m.card.get("route") or {}).get(cell, {}).get("validation_mape") or {}
        score = ("; chosen for " + cell + " on leave-one-GPU-out: "
                 + ", ".join(f"{k} {x:.1f} %" for k, x in v.items() if x is not None) if v else "")
        measured = spec.name in m.card.get("trained_on", [])
        seen = "measured in its data" if measured else "no measurement of it"
        n_gpus = len(m.card.get("trained_on", []))
        what = {"anygpu": f"any-GPU operator model ({m.name}: {len(m.params)} constants shared by {n_gpus} GPUs",
                "blend": f"geometric mean of the any-GPU operator model ({m.name}, {n_gpus} GPUs) and the spec "
                         f"model's kernel networks ({self.name}",
                "roofline": "roofline (sum over the kernels of max(FLOPs / peak, bytes / bandwidth)"}[choice]
        return refuse_above_ceiling(
            {"model": name, "batch_size": int(b), "metric": "latency_ms", "unit": "ms", "device": spec.name,
             "phase": phase, "precision": precision, **trust,
             "basis": f"spec model by the route facts: {what}; {spec.name} from its spec sheet, {precision}, "
                      f"{seen}{score})",
             "basis_kind": choice, "basis_seen": measured, "kernels": len(table), "unseen_ops": []})

    def answer(self, pg, batches: Sequence[int], options, graphs=None, family=None) -> list[dict]:
        """:class:`~perfseer.runtime.answer.Answerer`: :meth:`predict` of ``pg`` on ``options.device``
        (phase ``infer`` and precision fp32 unless the options say otherwise)."""
        options.single_device(f"the spec model ({self.name})")
        asked = options.precision or "fp32"
        kernels = AUTOCAST_KERNELS.get(asked, asked)
        if kernels not in PRECISIONS:
            raise SpecModelError(f"the spec model has no {asked} kernels (it composes {', '.join(PRECISIONS)} ones)",
                                 "ask --precision fp32, tf32, fp16, bf16, amp-fp16 or amp-bf16")
        rows = self.predict(pg, batch=list(batches), device=options.device, phase=options.phase or "infer",
                            precision=kernels, cell_precision="amp" if asked.startswith("amp") else None)
        if kernels != asked:  # autocast: its matmuls and convolutions, which dominate, in 16 bits
            for r in rows:
                r["precision"] = asked
                r["basis"] += f" ({asked} as {kernels} kernels)"
        return rows

    def _trained(self, spec) -> bool:
        """Whether ``spec``'s own kernels are in the kernel networks' training data."""
        return spec.name in ((self.card.get("training") or {}).get("devices") or [])

    def basis(self, spec, precision: str, calibrated: bool) -> str:
        cal = " + whole-model calibration" if calibrated else ""
        seen = "its FP32 kernels in the training data" if self._trained(spec) else "no measurement of it"
        return f"spec model ({self.name}{cal}; {spec.name} from its spec sheet, {precision}, {seen})"


_BUNDLED: SpecModel | None = None


def load_spec_model(card_path=None) -> SpecModel:
    """The bundled spec model, or one saved by :meth:`KernelModel.save` at ``card_path``.

    Raises:
        SpecModelError: the files are missing or corrupt.
    """
    global _BUNDLED
    if card_path is None and _BUNDLED is not None:
        return _BUNDLED
    path = Path(card_path) if card_path is not None else BUNDLED_CARD
    if not path.is_file():
        raise SpecModelError(f"no spec model at {path}", "reinstall perfseer, or train one with "
                                                         "scripts/train_spec_model.py")
    km, card = KernelModel.load(path)
    sm = SpecModel(km, card)
    if card_path is None:
        _BUNDLED = sm
    return sm


def _cell_precision(precision: str) -> str:
    return "fp32" if precision in ("fp32", "tf32") else "fp16"


def route_cell(table, phase: str, precision: str) -> str:
    """``kind/phase/precision`` of a step: ``cnn`` when convolutions hold most of its FLOPs, else
    ``transformer``; ``precision`` ``fp32``, ``fp16`` or ``amp``."""
    f = table["flops"].to_numpy(dtype=float)
    conv = f[(table["family"] == "conv").to_numpy()].sum()
    kind = "cnn" if conv > 0.5 * max(f.sum(), 1.0) else "transformer"
    return f"{kind}/{phase}/{precision}"


_ANYGPU: AnyGpuModel | None = None


def load_anygpu(card_path=None) -> AnyGpuModel:
    """The bundled any-GPU operator model (or the card at ``card_path``).

    Raises:
        AnyGpuError: the card is missing or not an any-GPU card.
    """
    global _ANYGPU
    if card_path is None and _ANYGPU is not None:
        return _ANYGPU
    m = AnyGpuModel(read_anygpu_card(card_path or ANYGPU_CARD))
    if card_path is None:
        _ANYGPU = m
    return m


_DOMAINS: dict = {}


def _anygpu_domain(m: AnyGpuModel):
    """The device domain of the any-GPU model's training GPUs (built once per model and registry)."""
    from perfseer.devices.registry import registry

    names = tuple(m.card.get("trained_on", []))
    key = (id(m), id(registry()), names)
    if key not in _DOMAINS:
        trained = [get_device(n) for n in names]
        _DOMAINS.clear()
        _DOMAINS[key] = build_domain(trained, precisions=("fp32", "fp16", "bf16", "tf32")) if trained else None
    return _DOMAINS[key]


def route_choice(cell: str) -> str | None:
    """The basis the route facts chose for ``cell`` (``anygpu``, ``spec`` or ``roofline``), or
    ``None`` without a fact for it (or without the card)."""
    try:
        card = load_anygpu().card
    except AnyGpuError:
        return None
    choice = ((card.get("route") or {}).get(cell) or {}).get("choice")
    return choice if choice in ("anygpu", "spec", "roofline", "blend") else None


class NoPredictorForDeviceError(PerfseerError):
    """Neither a measured predictor nor the spec model can answer for a device."""
