// The page's LLM section: a form -> POST /v1/llm -> a table of the answer.  No framework, no CDN.
"use strict";
(function () {
  const el = id => document.getElementById(id);
  const ms = v => (v === null || v === undefined) ? "-" : `${Number(v).toFixed(v >= 100 ? 0 : 2)} ms`;
  const gib = v => `${(v / 2 ** 30).toFixed(2)} GiB`;

  function table(rows) {
    const t = el("llm-table"), thead = t.querySelector("thead"), tbody = t.querySelector("tbody");
    thead.textContent = ""; tbody.textContent = "";
    const hr = document.createElement("tr");
    for (const c of ["quantity", "value"]) { const th = document.createElement("th"); th.textContent = c; hr.appendChild(th); }
    thead.appendChild(hr);
    for (const [k, v] of rows) {
      const tr = document.createElement("tr");
      for (const c of [k, v]) { const td = document.createElement("td"); td.textContent = c; tr.appendChild(td); }
      tbody.appendChild(tr);
    }
    t.hidden = false;
  }

  async function submit(ev) {
    ev.preventDefault();
    const err = el("llm-error"); err.hidden = true;
    const body = {
      model: el("llm-model").value.trim(), device: el("llm-device").value.trim(),
      gpus: Number(el("llm-gpus").value || 1), precision: el("llm-prec").value,
      prompt_len: el("llm-prompt").value.trim(), output_len: el("llm-output").value.trim(),
      batch: Number(el("llm-batch").value || 1),
    };
    const rate = el("llm-rate").value.trim();
    if (rate) body.rate = Number(rate);
    el("llm-status").textContent = "computing…";
    try {
      const r = await fetch("/v1/llm", {method: "POST", headers: {"content-type": "application/json"},
                                        body: JSON.stringify(body)});
      const d = await r.json();
      if (!r.ok) {
        const e = d && d.error ? d.error : {message: `HTTP ${r.status}`, fix: ""};
        throw new Error(e.message + (e.fix ? `\nFix: ${e.fix}` : ""));
      }
      if (d.kind === "serving") {
        table([["throughput", `${d.output_tokens_per_s.toFixed(0)} output tokens/s`],
               ["TTFT p50 / p90 / p99", `${ms(d.ttft_ms.p50)} / ${ms(d.ttft_ms.p90)} / ${ms(d.ttft_ms.p99)}`],
               ["TPOT p50 / p90 / p99", `${ms(d.tpot_ms.p50)} / ${ms(d.tpot_ms.p90)} / ${ms(d.tpot_ms.p99)}`],
               ["GPU busy", `${(100 * d.gpu_busy).toFixed(0)} %`],
               ["mean running batch", d.mean_running_batch.toFixed(1)],
               ["preemptions", String(d.preemptions)]]);
      } else {
        table([["time to first token", ms(d.ttft_ms)], ["time per output token (mean)", ms(d.tpot_ms)],
               ["time per output token (last)", ms(d.tpot_last_ms)], ["end to end", ms(d.e2e_ms)],
               ["output tokens/s (batch)", d.output_tokens_per_s.toFixed(0)],
               ["KV cache bytes per token", d.kv_bytes_per_token.toLocaleString()],
               ["KV cache capacity", `${d.kv_capacity_tokens.toLocaleString()} tokens`],
               ["max concurrent sequences", d.max_concurrent_sequences.toLocaleString()],
               ["peak memory per GPU", gib(d.peak_memory_bytes)]]);
      }
      el("llm-status").textContent = "";
    } catch (e) {
      err.textContent = e.message; err.hidden = false; el("llm-status").textContent = "";
      el("llm-table").hidden = true;
    }
  }

  const form = el("llm-form");
  if (form) form.addEventListener("submit", submit);
})();
