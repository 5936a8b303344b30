// The page's "Which GPU" section: a form -> POST /v1/compare -> the GPUs ranked in a table.
// Uses app.js's api, fillTable, shortBasis, details and energyCells.  No framework, no CDN.
"use strict";
(function () {
  const el = id => document.getElementById(id);

  function render(res) {
    const rows = res.rows;
    const energy = rows.some(r => r.power_w !== undefined && r.power_w !== null);
    const cols = ["rank", "GPU", "ms / step", "90 % interval", "samples / s"];
    if (energy) cols.push("W", "J / sample", "util %");
    cols.push("fits", "basis", "seen", "");
    const cells = rows.map(r => {
      const refused = r.value === null || r.value === undefined;
      const c = [r.rank, r.display_name || r.device,
                 refused ? "refused: " + (r.reason || "no answer") : Number(r.value).toPrecision(4),
                 Array.isArray(r.interval) ? `${Number(r.interval[0]).toPrecision(3)}–${Number(r.interval[1]).toPrecision(3)}` : "",
                 r.throughput_per_s ? Number(r.throughput_per_s).toPrecision(4) : ""];
      if (energy) c.push(...energyCells(r));
      c.push(r.fits === null || r.fits === undefined ? "-" : (r.fits ? "yes" : "NO"),
             r.basis_label || shortBasis(r.basis), r.seen === true ? "yes" : (r.seen === false ? "no" : "-"), details(r));
      return c;
    });
    const fitsAt = cols.indexOf("fits");
    const t = el("cmp-table");
    fillTable(t, cols, cells, (i, j) => (j === fitsAt && rows[i].fits === false ? "out" : ""));
    t.hidden = false;
    const w = el("cmp-warnings"); w.textContent = "";
    for (const m of res.warnings || []) { const li = document.createElement("li"); li.textContent = m; w.appendChild(li); }
  }

  async function submit(ev) {
    ev.preventDefault();
    const err = el("cmp-error"); err.hidden = true;
    const body = {model: el("cmp-model").value.trim(), batch: Number(el("cmp-batch").value || 1),
                  phase: el("cmp-phase").value, energy: el("cmp-energy").checked, rank_by: el("cmp-rank").value,
                  memory: el("cmp-memory").checked};
    if (el("cmp-prec").value) body.precision = el("cmp-prec").value;
    const devs = el("cmp-devices").value.split(/[ ,]+/).filter(Boolean);
    if (devs.length) body.devices = devs;
    if (body.rank_by === "energy" && !body.energy) { body.energy = true; el("cmp-energy").checked = true; }
    el("cmp-go").disabled = true; el("cmp-status").textContent = "ranking… (a model seen for the first time is exported first)";
    const t0 = performance.now();
    try {
      render(await api("/v1/compare", {method: "POST", headers: {"Content-Type": "application/json"},
                                       body: JSON.stringify(body)}));
      el("cmp-status").textContent = `done in ${((performance.now() - t0) / 1000).toFixed(2)} s`;
    } catch (e) {
      el("cmp-table").hidden = true; el("cmp-status").textContent = "";
      err.textContent = e.message; err.hidden = false;
    } finally { el("cmp-go").disabled = false; }
  }

  el("cmp-form").addEventListener("submit", submit);
  el("cmp-energy").addEventListener("change", () => { if (!el("cmp-energy").checked) el("cmp-rank").value = "time"; });
})();
