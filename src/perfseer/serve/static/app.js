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

async function loadPredictors() {
  const box = $("predictors");
  try {
    const items = await api("/v1/predictors");
    box.textContent = "";
    items.forEach((p, i) => {
      const label = document.createElement("label");
      const cb = document.createElement("input");
      cb.type = "checkbox"; cb.value = p.name; cb.name = "predictor"; cb.checked = i < 2;
      label.appendChild(cb);
      label.appendChild(document.createTextNode(` ${p.name}`));
      label.title = `${p.model}: ${p.devices.join(", ")} (${p.phases.join(", ")})`;
      box.appendChild(label);
    });
  } catch (e) { box.textContent = "could not list predictors: " + e.message; }
}

let DEVICES = {};
async function loadDevices() {
  try {
    const items = await api("/v1/devices");
    const sel = $("mem-device");
    for (const d of items.filter(d => d.kind === "gpu" && d.memory_gib)) {
      DEVICES[d.name] = d;
      const o = document.createElement("option");
      o.value = d.name; o.textContent = `${d.name} (${d.memory_gib} GiB)`;
      sel.appendChild(o);
    }
  } catch (e) { /* memory then runs without a device */ }
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
      const td = document.createElement("td"); td.textContent = c;
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

function render(res) {
  $("result").hidden = false;
  $("result-title").textContent = res.model;
  const s = res.summary;
  $("summary").textContent = `${(s.params / 1e6).toFixed(2)} M parameters · ${(s.macs / 1e9).toFixed(3)} GMACs per sample · ${s.num_nodes} operators` + (res.cached ? " · graph from cache" : "");
  const w = $("warnings"); w.textContent = "";
  for (const m of res.warnings || []) { const li = document.createElement("li"); li.textContent = m; w.appendChild(li); }
  const rows = res.predictions;
  const hasInterval = rows.some(r => Array.isArray(r.interval));
  const hasDomain = rows.some(r => "in_domain" in r);
  const hasBasis = rows.some(r => r.basis);
  const cols = ["batch", "device", "phase", "metric", "predicted", "throughput /s"];
  if (hasInterval) cols.push("90 % interval");
  if (hasDomain) cols.push("domain");
  if (hasBasis) cols.push("basis");
  const domainAt = cols.indexOf("domain");
  const cellRows = rows.map(r => {
    const cells = [r.batch_size, r.device, r.phase, r.metric, fmtRow(r),
                   r.throughput_per_s ? Number(r.throughput_per_s).toPrecision(4) : ""];
    if (hasInterval) cells.push(Array.isArray(r.interval) ? `${Number(r.interval[0]).toPrecision(3)}–${Number(r.interval[1]).toPrecision(3)}` : "");
    if (hasDomain) cells.push(r.in_domain === false ? "out: " + (r.domain_reasons || []).join("; ") : (r.in_domain ? "in" : "-"));
    if (hasBasis) cells.push(r.basis || "");
    return cells;
  });
  fillTable($("table"), cols, cellRows, (i, j) => (j === domainAt && rows[i].in_domain === false ? "out" : ""));
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
  const devs = $("devices").value.split(/[ ,]+/).filter(Boolean);
  if (devs.length) { body.devices = devs; body.predictors = []; }
  if ($("shape").value.trim()) body.input_shape = $("shape").value.trim();
  if ($("seq").value) body.seq_len = Number($("seq").value);
  if ($("phase").value) body.phase = $("phase").value;
  $("go").disabled = true; setStatus("predicting… (a model seen for the first time is exported first)");
  $("memory").hidden = true;
  const t0 = performance.now();
  try {
    const res = await api("/v1/predict", {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)});
    render(res);
    if ($("mem-on").checked) {
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
loadPredictors();
loadDevices();
