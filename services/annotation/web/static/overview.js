// The admin overview: per annotator, tasks held (past the lease, the oldest) and done, agreement with the resolved rankings and the share of
// annotations on cycles; flags the ones to look at; the agreement of double annotation (overall and per pair of
// annotators) against the paper's target; the responses the rule filter kept out of annotation, with the rule each
// broke. Data from GET /api/overview (admins only). The token is kept for this tab only (sessionStorage).
"use strict";
(function () {
  const TOKEN_KEY = "cheems.annotator.token";
  const LOW_AGREEMENT = 0.7;
  const HIGH_CYCLES = 0.3;
  const words = JSON.parse(document.getElementById("words").textContent);
  const $ = (id) => document.getElementById(id);

  function show(id, visible) { $(id).classList.toggle("hidden", !visible); }
  function notify(text) {
    $("notice").textContent = text;
    $("notice").className = "notice error";
    show("notice", Boolean(text));
  }
  function cell(text, cls) {
    const td = document.createElement("td");
    td.textContent = text;
    if (cls) td.className = cls;
    return td;
  }
  function percent(value) { return value === null ? "–" : (100 * value).toFixed(1) + "%"; }
  function account(row) {
    if (!row.account) return words.account_none;
    if (!row.active) return words.account_disabled;
    return row.admin ? words.account_admin : words.account_active;
  }

  function render(data) {
    const head = document.createElement("tr");
    for (const [key, cls] of [["col_name"], ["col_account"], ["col_open", "num"], ["col_idle", "num"],
      ["col_oldest", "num"], ["col_done", "num"], ["col_agreement", "num"], ["col_cycles", "num"], ["col_note"]]) {
      const th = document.createElement("th");
      th.textContent = words[key];
      if (cls) th.className = cls;
      head.append(th);
    }
    $("annotators").querySelector("thead").replaceChildren(head);
    const rows = data.annotators.map((row) => {
      const tr = document.createElement("tr");
      tr.dataset.name = row.name;
      const flagged = (row.agreement !== null && row.agreement < LOW_AGREEMENT) ||
        (row.cycle_share !== null && row.cycle_share > HIGH_CYCLES);
      tr.classList.toggle("flagged", flagged);
      const note = cell("");
      if (flagged) {
        const badge = document.createElement("span");
        badge.className = "badge flag";
        badge.textContent = words.flag;
        note.append(badge);
      }
      const oldest = row.oldest_seconds === null ? "–" : String(Math.floor(row.oldest_seconds / 60));
      tr.append(cell(row.name), cell(account(row)), cell(String(row.open), "num held"),
        cell(String(row.idle), "num idle"), cell(oldest, "num oldest"), cell(String(row.done), "num"),
        cell(percent(row.agreement), "num agreement"), cell(percent(row.cycle_share), "num cycles"), note);
      return tr;
    });
    $("annotators").querySelector("tbody").replaceChildren(...rows);
    $("queue").textContent = words.queue + data.open_tasks + "　" + words.queue_free + data.free_tasks;
    const short = data.unfinishable;
    const figures = { prompts: short.prompts, needed: short.needed, accounts: short.accounts,
      rule: short.people_per_prompt };
    $("unfinishable").textContent = words.unfinishable.replace(/\{(\w+)\}/g, (_, key) => figures[key]);
    show("unfinishable", short.prompts > 0);
    renderDoubles(data.doubles);
    renderFiltered(data.rule_filtered);
  }

  function renderFiltered(filtered) {
    const counts = Object.entries(filtered.counts).map(([reason, n]) => reason + " × " + n).join("，");
    $("filtered-summary").textContent = counts ? words.filtered_summary + counts : words.filtered_none;
    const head = document.createElement("tr");
    for (const key of ["col_prompt", "col_response", "col_reason", "col_excerpt"]) {
      const th = document.createElement("th");
      th.textContent = words[key];
      head.append(th);
    }
    $("filtered").querySelector("thead").replaceChildren(head);
    $("filtered").querySelector("tbody").replaceChildren(...filtered.newest.map((row) => {
      const tr = document.createElement("tr");
      tr.dataset.reason = row.reason;
      tr.append(cell(row.prompt_id.slice(0, 12)), cell(row.response), cell(row.reason), cell(row.excerpt));
      return tr;
    }));
    show("filtered", filtered.newest.length > 0);
  }

  function renderDoubles(doubles) {
    const below = (value) => value !== null && value < doubles.target;
    const figures = { triples: doubles.triples, compared: doubles.compared, agreement: percent(doubles.agreement),
      target: percent(doubles.target) };
    const summary = doubles.triples ? words.doubles_summary.replace(/\{(\w+)\}/g, (_, key) => figures[key])
      : words.doubles_none;
    $("doubles-summary").textContent = summary + (below(doubles.agreement) ? "　" + words.below_target : "");
    $("doubles-summary").classList.toggle("flagged", below(doubles.agreement));
    const head = document.createElement("tr");
    for (const [key, cls] of [["col_pair"], ["col_triples", "num"], ["col_compared", "num"],
      ["col_pair_agreement", "num"]]) {
      const th = document.createElement("th");
      th.textContent = words[key];
      if (cls) th.className = cls;
      head.append(th);
    }
    $("pairs").querySelector("thead").replaceChildren(head);
    $("pairs").querySelector("tbody").replaceChildren(...doubles.pairs.map((pair) => {
      const tr = document.createElement("tr");
      tr.dataset.pair = pair.annotators.join("+");
      tr.classList.toggle("flagged", below(pair.agreement));
      tr.append(cell(pair.annotators.join(" / ")), cell(String(pair.triples), "num"),
        cell(String(pair.compared), "num"), cell(percent(pair.agreement), "num agreement"));
      return tr;
    }));
    show("pairs", doubles.pairs.length > 0);
  }

  async function load(value) {
    try {
      const me = await cheems.fetchJSON("/api/me", { token: value });
      sessionStorage.setItem(TOKEN_KEY, value);
      $("who").textContent = me.name;
      show("signin", false);
      show("work", true);
      render(await cheems.fetchJSON("/api/overview", { token: value }));
      notify("");
    } catch (err) {
      if (err.status === 401) {
        sessionStorage.removeItem(TOKEN_KEY);
        show("signin", true);
        show("work", false);
      }
      notify(words["reason_" + err.reason] || err.message);
    }
  }

  $("signin-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const value = $("token").value.trim();
    if (value) load(value);
  });
  $("signout").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    show("work", false);
    show("signin", true);
  });
  const saved = sessionStorage.getItem(TOKEN_KEY);
  if (saved) load(saved);
  else show("signin", true);
})();
