// The perfseer page: a form -> POST /v1/predict -> a table and plots.  No framework, no CDN.
"use strict";
const $ = id => document.getElementById(id);

async function api(path, options) {
  const r = await fetch(path, options);
  let body = null;
  try { body = await r.json(); } catch (e) { /* not JSON */ }
  if (!r.ok) {
    const err = body && body.error ? body.error : {message: `HTTP ${r.status}`, fix: ""};
    throw new Error(err.message + (err.fix ? `\nFix: ${err.fix}` : ""));
  }
  return body;
}

function showError(message) { const e = $("error"); e.textContent = message; e.hidden = !message; }
function setStatus(text) { $("status").textContent = text; }

// The page starts on a GPU: the predictors measured on this one are ticked (else on the first GPU
// that has any), never a CPU's by default.
const DEFAULT_GPU = "rtx3090";
let DEVICES = {};      // GPUs with a memory size, for the memory form
let DEVICE_ITEMS = []; // every device of /v1/devices, with the predictors measured on it

async function loadPredictors() {
  const box = $("predictors");
  try {
    const items = await api("/v1/predictors");
    const gpus = DEVICE_ITEMS.filter(d => d.kind === "gpu" && (d.predictors || []).length);
    const first = gpus.find(d => d.name === DEFAULT_GPU) || gpus[0];
    const ticked = new Set(first ? first.predictors : []);
    box.textContent = "";
    items.forEach(p => {
      const label = document.createElement("label");
      const cb = document.createElement("input");
      cb.type = "checkbox"; cb.value = p.name; cb.name = "predictor"; cb.checked = ticked.has(p.name);
      label.appendChild(cb);
      label.appendChild(document.createTextNode(` ${p.name}`));
      label.title = `${p.model}: ${p.devices.join(", ")} (${p.phases.join(", ")})`;
      box.appendChild(label);
    });
  } catch (e) { box.textContent = "could not list predictors: " + e.message; }
}

async function loadDevices() {
  try {
    DEVICE_ITEMS = await api("/v1/devices");
    const sel = $("mem-device");
    for (const d of DEVICE_ITEMS.filter(d => d.kind === "gpu" && d.memory_gib)) {
      DEVICES[d.name] = d;
      const o = document.createElement("option");
      o.value = d.name; o.textContent = `${d.name} (${d.memory_gib} GiB)`;
      sel.appendChild(o);
    }
  } catch (e) { /* memory then runs without a device; predictors then start unticked */ }
}

// A typed device name (or alias) -> its /v1/devices item, or undefined.
function deviceItem(name) {
  const n = name.toLowerCase();
  return DEVICE_ITEMS.find(d => d.name.toLowerCase() === n || (d.aliases || []).some(a => a.toLowerCase() === n)
                                || (d.settings || []).some(s => s.toLowerCase() === n || s.split("/")[0].toLowerCase() === n));
}

function typedDevices() { return $("devices").value.split(/[ ,]+/).filter(Boolean); }

// Typing devices ticks the predictors measured on them (the ticked ones stay ticked).
function tickTyped() {
  const boxes = [...document.querySelectorAll("input[name=predictor]")];
  for (const name of typedDevices()) {
    const d = deviceItem(name);
    for (const p of (d && d.predictors) || []) {
      const cb = boxes.find(b => b.value === p);
      if (cb) cb.checked = true;
    }
  }
}

// rows: arrays of cell texts; classOf(rowIndex, cellIndex) names a cell's CSS class, if any
function fillTable(table, cols, rows, classOf = () => "") {
  const thead = table.querySelector("thead"), tbody = table.querySelector("tbody");
  thead.textContent = ""; tbody.textContent = "";
  const hr = document.createElement("tr");
  for (const c of cols) { const th = document.createElement("th"); th.textContent = c; hr.appendChild(th); }
  thead.appendChild(hr);
  rows.forEach((cells, i) => {
    const tr = document.createElement("tr");
    cells.forEach((c, j) => {
      const td = document.createElement("td");
      if (c instanceof Node) td.appendChild(c); else td.textContent = c;
      const cls = classOf(i, j);
      if (cls) td.className = cls;
      tr.appendChild(td);
    });
    tbody.appendChild(tr);
  });
}

const MiB = 1048576;
function renderMemory(res, device) {
  $("memory").hidden = false;
  const est = res.estimates;
  const rows = est.map(e => [e.batch, e.phase, e.method, (e.total / MiB).toFixed(0), (e.peak_allocated / MiB).toFixed(0),
                             ((e.breakdown.activations || 0) / MiB).toFixed(0), e.fits === null ? "" : (e.fits ? "yes" : "NO")]);
  fillTable($("memory-table"), ["batch", "phase", "method", "total MiB", "allocated MiB", "activations MiB", "fits"], rows);
  const notes = [];
  if (res.max_batch) notes.push(`largest batch that fits ${device}: ${res.max_batch.batch}`);
  const last = est[est.length - 1];
  if (last && last.mig && last.mig.length) notes.push(`smallest MIG slice for batch ${last.batch}: ` + last.mig.map(m => `${m.device} ${m.smallest || "none"}`).join(", "));
  $("memory-note").textContent = notes.join(" · ");
  const hlines = [];
  const d = DEVICES[device];
  if (d) {
    hlines.push({y: d.memory_gib * 1024, label: `${device} ${d.memory_gib} GiB`});
    for (const m of d.mig_profiles || []) hlines.push({y: m.memory_gib * 1024, label: m.name});
  }
  $("plots").appendChild(linePlot({title: "Peak GPU memory (simulated)", xlabel: "batch size", ylabel: "MiB",
    series: [{name: `${est[0].phase} · ${est[0].precision}`, points: est.map(e => [e.batch, e.total / MiB])}], hlines}));
}

let completionTimer = null;
function complete() {
  clearTimeout(completionTimer);
  completionTimer = setTimeout(async () => {
    const q = $("model").value;
    if (q.length < 2 || q.startsWith("upload:")) return;
    try {
      const names = await api(`/v1/models?q=${encodeURIComponent(q)}&limit=30`);
      const list = $("model-names"); list.textContent = "";
      for (const n of names) { const o = document.createElement("option"); o.value = n; list.appendChild(o); }
    } catch (e) { /* completion is a convenience */ }
  }, 200);
}

async function upload() {
  const f = $("upload").files[0];
  if (!f) return;
  showError(""); setStatus(`uploading ${f.name}…`);
  const form = new FormData(); form.append("file", f);
  try {
    const r = await api("/v1/models", {method: "POST", body: form});
    $("model").value = r.model;
    setStatus(`${f.name}: ${(r.summary.params / 1e6).toFixed(2)} M parameters, ${(r.summary.macs / 1e9).toFixed(2)} GMACs`);
  } catch (e) { setStatus(""); showError(e.message); }
}

function parseBatches(text) {
  const parts = text.split(/[ ,]+/).filter(Boolean);
  const out = parts.map(Number);
  if (!out.length || out.some(b => !Number.isInteger(b) || b < 1)) throw new Error(`cannot read batch sizes '${text}'\nFix: write positive integers separated by commas, e.g. 1,8,32`);
  return out;
}

function fmtValue(v, unit) { return `${Number(v).toPrecision(4)} ${unit || ""}`.trim(); }
// A refused row (value null) shows its reason, never a number.
function fmtRow(r) { return r.value === null || r.value === undefined ? "refused: " + (r.reason || "no answer") : fmtValue(r.value, r.unit); }

// "measured-device predictor rtx3090-... (trained on ...)" -> "measured-device predictor rtx3090-..."
function shortBasis(basis) { return basis ? String(basis).split(" (")[0] : ""; }

// The long form of a row, behind a click: every reason, the full basis, the fall-back.
function details(r) {
  const lines = [];
  if (r.value === null || r.value === undefined) lines.push("refused: " + (r.reason || "no answer"));
  if (r.fallback_from) lines.push(`fell back from ${r.fallback_from.basis}: ${r.fallback_from.reason}`);
  for (const m of r.domain_reasons || []) lines.push("out of domain: " + m);
  for (const f of r.flags || []) lines.push("flag: " + f);
  if (r.basis) lines.push("basis: " + r.basis);
  if (r.precision) lines.push("precision: " + r.precision);
  if (r.parallel) lines.push("layout: " + r.parallel);
  for (const n of r.notes || []) lines.push("note: " + n);
  if (r.memory_note) lines.push(r.memory_note);
  if (r.memory_basis && r.memory_basis !== "not asked") lines.push("memory: " + r.memory_basis);
  for (const n of r.energy_notes || []) lines.push("energy: " + n);
  if (!lines.length) return "";
  const d = document.createElement("details");
  const s = document.createElement("summary"); s.textContent = "details"; d.appendChild(s);
  const ul = document.createElement("ul");
  for (const l of lines) { const li = document.createElement("li"); li.textContent = l; ul.appendChild(li); }
  d.appendChild(ul);
  return d;
}

// W, J per sample and utilisation % of a row with the power model's fields, else blanks
function energyCells(r) {
  const num = (v, d) => (v === null || v === undefined) ? "" : Number(v).toFixed(d);
  const j = r.energy_j_per_sample;
  return [num(r.power_w, 0), j === null || j === undefined ? "" : Number(j).toPrecision(3), num(r.util_pct, 0)];
}

// The layout of the "Several GPUs" controls, or null for one GPU
function severalLayout() {
  const num = id => { const v = $(id).value.trim(); return v === "" ? null : Number(v); };
  const gpus = num("gpus"), tp = num("tp"), pp = num("pp"), nodes = num("nodes");
  if (!((gpus && gpus > 1) || (tp && tp > 1) || (pp && pp > 1))) return null;
  const lay = {parallel: $("parallel").value};
  if (gpus) lay.gpus = gpus;
  if (tp) lay.tp = tp;
  if (pp) lay.pp = pp;
  if (nodes && nodes > 1) lay.nodes = nodes;
  if ($("node").value.trim()) lay.node = $("node").value.trim();
  if ($("interconnect").value) lay.interconnect = $("interconnect").value;
  if ($("gpus-memory").checked || $("mem-on").checked) lay.memory = true;
  return lay;
}

const GiB = 1073741824;
const ms = v => (v === null || v === undefined) ? "" : Number(v).toPrecision(3);

// One compact row per global batch size: the step and its compute / communication / bubble split
function renderSeveral(rows) {
  const withMem = rows.some(r => r.memory_per_gpu_bytes);
  const cols = ["batch", "device", "per GPU", "step ms", "compute", "comm", "bubble"];
  if (withMem) cols.push("memory / GPU");
  cols.push("samples / s", "basis", "");
  const cells = rows.map(r => {
    const c = [r.batch_size, r.device, r.per_gpu_batch ?? "", fmtRow(r).replace(/ ms$/, ""), ms(r.compute_ms),
               ms(r.comm_ms), ms(r.bubble_ms)];
    if (withMem) c.push(r.memory_per_gpu_bytes ? `${(r.memory_per_gpu_bytes / GiB).toFixed(2)} GiB` + (r.memory_fits === false ? " (no fit)" : "") : "-");
    c.push(r.throughput_per_s ? Number(r.throughput_per_s).toPrecision(4) : "", shortBasis(r.basis).split(";")[0], details(r));
    return c;
  });
  const memAt = cols.indexOf("memory / GPU");
  fillTable($("table"), cols, cells, (i, j) => (j === memAt && rows[i].memory_fits === false ? "out" : ""));
}

function render(res) {
  $("result").hidden = false;
  $("result-title").textContent = res.model + (res.layout ? ` · ${res.layout}` : "");
  const s = res.summary;
  $("summary").textContent = `${(s.params / 1e6).toFixed(2)} M parameters · ${(s.macs / 1e9).toFixed(3)} GMACs per sample · ${s.num_nodes} operators` + (res.cached ? " · graph from cache" : "");
  const w = $("warnings"); w.textContent = "";
  for (const m of res.warnings || []) { const li = document.createElement("li"); li.textContent = m; w.appendChild(li); }
  const rows = res.predictions;
  const hasInterval = rows.some(r => Array.isArray(r.interval));
  const hasDomain = rows.some(r => "in_domain" in r);
  const hasEnergy = rows.some(r => r.power_w !== undefined && r.power_w !== null);
  const cols = ["batch", "device", "phase", "metric", "predicted", "throughput /s"];
  if (hasInterval) cols.push("90 % interval");
  if (hasEnergy) cols.push("W", "J / sample", "util %");
  if (hasDomain) cols.push("domain");
  cols.push("basis", "");
  const domainAt = cols.indexOf("domain");
  // each row short; its reasons, its basis in full and what it fell back from on demand
  const cellRows = rows.map(r => {
    const cells = [r.batch_size, r.device, r.phase, r.metric, fmtRow(r),
                   r.throughput_per_s ? Number(r.throughput_per_s).toPrecision(4) : ""];
    if (hasInterval) cells.push(Array.isArray(r.interval) ? `${Number(r.interval[0]).toPrecision(3)}–${Number(r.interval[1]).toPrecision(3)}` : "");
    if (hasEnergy) cells.push(...energyCells(r));
    if (hasDomain) cells.push(r.in_domain === false ? "out" : (r.in_domain ? "in" : "-"));
    cells.push(shortBasis(r.basis), details(r));
    return cells;
  });
  if (res.layout) renderSeveral(rows);
  else fillTable($("table"), cols, cellRows, (i, j) => (j === domainAt && rows[i].in_domain === false ? "out" : ""));
  const plots = $("plots"); plots.textContent = "";
  const lat = rows.filter(r => r.metric === "latency_ms" && r.value !== null && r.value !== undefined);
  const groups = {};
  for (const r of lat) (groups[`${r.device} · ${r.phase}`] ||= []).push(r);
  const series = (f, band) => Object.entries(groups).map(([name, rs]) => ({
    name, points: rs.map(r => [r.batch_size, f(r)]),
    band: band && rs.every(r => Array.isArray(r.interval)) ? rs.map(r => [r.batch_size, band(r)[0], band(r)[1]]) : null}));
  if (lat.length) {
    plots.appendChild(linePlot({title: "Latency per step", xlabel: "batch size", ylabel: "ms",
                                series: series(r => r.value, r => r.interval)}));
    plots.appendChild(linePlot({title: "Throughput", xlabel: "batch size", ylabel: "samples / s",
                                series: series(r => r.throughput_per_s, r => [r.batch_size * 1000 / r.interval[1], r.batch_size * 1000 / r.interval[0]])}));
  }
  const mem = rows.filter(r => r.metric === "memory_mb");
  if (mem.length) {
    const mg = {};
    for (const r of mem) (mg[`${r.device} · ${r.phase}`] ||= []).push(r);
    plots.appendChild(linePlot({title: "Peak memory", xlabel: "batch size", ylabel: "MiB",
      series: Object.entries(mg).map(([name, rs]) => ({name, points: rs.map(r => [r.batch_size, r.value])}))}));
  }
}

async function submit(ev) {
  ev.preventDefault();
  showError("");
  let batch;
  try { batch = parseBatches($("batch").value); } catch (e) { showError(e.message); return; }
  const body = {model: $("model").value.trim(), batch,
                predictors: [...document.querySelectorAll("input[name=predictor]:checked")].map(c => c.value)};
  if ($("shape").value.trim()) body.input_shape = $("shape").value.trim();
  if ($("seq").value) body.seq_len = Number($("seq").value);
  if ($("phase").value) body.phase = $("phase").value;
  if ($("energy").checked) body.energy = true;
  // typed devices and ticked predictors are both answered: a device a ticked predictor was measured
  // on is answered by that predictor, the others by the routing (measured, transfer or spec model)
  const chosen = new Set(body.predictors);
  const devs = typedDevices().filter(n => !((deviceItem(n) || {}).predictors || []).some(p => chosen.has(p)));
  const asks = [];
  const layout = severalLayout();
  if (layout) {  // several GPUs: one typed device answers, the ticked predictors are not used
    const typed = typedDevices();
    if (typed.length !== 1) { showError("several GPUs are predicted for one GPU model\nFix: type one GPU in the devices box, e.g. a100-80gb-sxm"); return; }
    asks.push({...body, ...layout, predictors: [], devices: typed});
  } else {
    if (body.predictors.length || !devs.length) asks.push(body);
    if (devs.length) asks.push({...body, predictors: [], devices: devs});
  }
  $("go").disabled = true; setStatus("predicting… (a model seen for the first time is exported first)");
  $("memory").hidden = true;
  const t0 = performance.now();
  try {
    const answers = [];
    for (const ask of asks)
      answers.push(await api("/v1/predict", {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(ask)}));
    const res = {...answers[0], predictions: answers.flatMap(a => a.predictions),
                 warnings: [...new Set(answers.flatMap(a => a.warnings || []))]};
    render(res);
    if ($("mem-on").checked && !layout) {  // several GPUs: the memory per GPU is on the rows
      setStatus("simulating memory…");
      const device = $("mem-device").value;
      const mreq = {model: body.model, batch, phase: body.phase || "train", optimizer: $("mem-opt").value,
                    precision: $("mem-prec").value, mig: !!device && (DEVICES[device] || {}).mig_profiles?.length > 0,
                    max_batch: !!device};
      if (device) mreq.device = device;
      if (body.input_shape) mreq.input_shape = body.input_shape;
      renderMemory(await api("/v1/memory", {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(mreq)}), device);
    }
    setStatus(`done in ${((performance.now() - t0) / 1000).toFixed(2)} s`);
  } catch (e) {
    $("result").hidden = true; setStatus(""); showError(e.message);
  } finally { $("go").disabled = false; }
}

$("form").addEventListener("submit", submit);
$("model").addEventListener("input", complete);
$("upload").addEventListener("change", upload);
$("devices").addEventListener("change", tickTyped);
loadDevices().then(loadPredictors);
