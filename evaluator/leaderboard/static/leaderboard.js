// The leaderboard keeps itself current: it polls the JSON it was rendered from (every 2 s while a run is
// going, every 10 s otherwise), moves the progress bars of running evaluations, and reloads the page when
// a run ends, a new run starts or a new model appears (the server renders the new figures).
// Needs page.js (window.cheems.fetchJSON). Rows carry data-model, data-state and data-evaluated.
"use strict";
(function () {
  const FAST = 2000, SLOW = 10000;

  function setProgress(container, run) {
    if (!container) return;
    const bar = container.querySelector("progress");
    const label = container.querySelector(".progress-text");
    if (bar) { bar.max = Math.max(run.items_total, 1); bar.value = run.items_scored; }
    if (label) label.textContent = run.items_scored + "/" + run.items_total;
  }

  function boardChanged(data) {
    const rows = Array.from(document.querySelectorAll("#leaderboard tbody tr"));
    if (rows.length !== data.models.length) return true;
    const shown = new Map(rows.map((row) => [row.dataset.model, row]));
    return data.models.some((model) => {
      const row = shown.get(model.model_id);
      const state = model.latest_run ? model.latest_run.state : "none";
      return !row || row.dataset.state !== state || (row.dataset.evaluated || "") !== (model.evaluated_run || "");
    });
  }

  async function board() {
    const data = await window.cheems.fetchJSON("/api/leaderboard");
    if (boardChanged(data)) { location.reload(); return false; }
    let running = false;
    for (const model of data.models) {
      if (!model.latest_run || model.latest_run.state !== "running") continue;
      running = true;
      const row = document.querySelector('#leaderboard tr[data-model="' + CSS.escape(model.model_id) + '"]');
      setProgress(row && row.querySelector("td.status"), model.latest_run);
    }
    return running;
  }

  async function model(card) {
    const data = await window.cheems.fetchJSON("/api/models/" + encodeURIComponent(card.dataset.model));
    const latest = data.latest_run;
    const state = latest ? latest.state : "none";
    if (state !== card.dataset.state || (card.dataset.evaluated || "") !== (data.evaluated_run || "")) {
      location.reload();
      return false;
    }
    if (state !== "running") return false;
    setProgress(document.querySelector('#runs tr[data-run="' + CSS.escape(latest.run_id) + '"]'), latest);
    return true;
  }

  function start(check) {
    async function tick() {
      let running = false;
      try { running = await check(); } catch (err) { running = false; }  // the service restarting: try later
      setTimeout(tick, running ? FAST : SLOW);
    }
    const anyRunning = document.querySelector('[data-state="running"]') !== null;
    setTimeout(tick, anyRunning ? FAST : SLOW);
  }

  const card = document.getElementById("model");
  if (document.getElementById("leaderboard") || document.getElementById("empty")) start(board);
  else if (card) start(() => model(card));
})();
