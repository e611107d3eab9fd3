// The annotator's page: sign in with a token, rank the three responses of a task (mouse or keyboard), submit,
// and the next task loads at once. Talks only to this service's JSON API (services/annotation/http_app.py).
// Response texts arrive as HTML rendered safe on the server; every other text is set with textContent.
// The token is kept for this tab only (sessionStorage): gone when the tab closes, never shared with other tabs or
// left on a shared machine, and sent only as a bearer header (no cookie, so no cross-site request carries it).
"use strict";
(function () {
  const TOKEN_KEY = "cheems.annotator.token";
  const words = JSON.parse(document.getElementById("words").textContent);
  const $ = (id) => document.getElementById(id);
  const state = { task: null, places: {}, discarded: new Set(), selected: 0, annotationId: "", busy: false, done: 0 };

  function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }
  function show(id, visible) { $(id).classList.toggle("hidden", !visible); }
  function notify(text, kind) {
    const box = $("notice");
    box.textContent = text;
    box.className = "notice" + (kind ? " " + kind : "");
    show("notice", Boolean(text));
  }
  function errorText(err) { return words["reason_" + err.reason] || err.message; }
  function newAnnotationId() {
    const bytes = crypto.getRandomValues(new Uint8Array(16));
    return "web-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  }
  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  async function signIn(value) {
    sessionStorage.setItem(TOKEN_KEY, value);
    try {
      const me = await cheems.fetchJSON("/api/me", { token: value });
      $("who").textContent = me.name;
      show("signin", false);
      show("work", true);
      notify("");
      await loadNext();
    } catch (err) {
      signOut(errorText(err));
    }
  }

  function signOut(message) {
    sessionStorage.removeItem(TOKEN_KEY);
    state.task = null;
    show("work", false);
    show("signin", true);
    $("token").value = "";
    $("token").focus();
    notify(message, "error");
  }

  async function loadNext() {
    try {
      const data = await cheems.fetchJSON("/api/tasks/next", { token: token() });
      render(data.task);
      // no task, yet free ones remain: all of prompts this annotator did (a prompt's triples go to different people)
      $("withheld").textContent = data.withheld ? words.withheld.replace("{}", data.withheld) : "";
      show("withheld", !data.task && data.withheld > 0);
    } catch (err) {
      if (err.status === 401) return signOut(errorText(err));
      notify(errorText(err), "error");
    }
  }

  function render(task) {
    state.task = task;
    state.places = {};
    state.discarded = new Set();
    state.selected = 0;
    state.annotationId = newAnnotationId();
    show("task", Boolean(task));
    show("empty", !task);
    if (!task) return;
    const cats = $("category");
    cats.replaceChildren(...task.category.map((c) => el("span", "badge", c)));
    show("system", Boolean(task.system_prompt));
    $("system-text").textContent = task.system_prompt;
    show("history", task.history.length > 0);
    $("turns").replaceChildren(...task.history.map((turn) => {
      const box = el("div", "turn");
      box.append(el("div", "role", words["role_" + turn.role] || turn.role));
      const body = el("div", "md");
      body.innerHTML = turn.html;  // rendered safe by the server
      box.append(body);
      return box;
    }));
    $("prompt").innerHTML = task.prompt_html;  // rendered safe by the server
    $("responses").replaceChildren(...task.responses.map(responseCard));
    update();
    window.scrollTo(0, 0);
  }

  function responseCard(response, index) {
    const card = el("section", "card response");
    card.dataset.key = response.id;
    card.dataset.label = response.label;
    const head = el("header");
    head.append(el("h3", "", words.response + " " + response.label), el("span", "place-label"));
    const controls = el("div", "controls");
    controls.append(el("span", "muted", words.place));
    for (const place of [1, 2, 3]) {
      const button = el("button", "place", String(place));
      button.type = "button";
      button.dataset.place = String(place);
      button.addEventListener("click", (event) => { event.stopPropagation(); select(index); setPlace(place); });
      controls.append(button);
    }
    const discard = el("button", "discard", words.discard);
    discard.type = "button";
    discard.addEventListener("click", (event) => { event.stopPropagation(); select(index); toggleDiscard(); });
    controls.append(discard);
    const body = el("div", "md scroll");
    body.innerHTML = response.html;  // rendered safe by the server
    card.append(head, controls, body);
    card.addEventListener("click", () => { select(index); });
    return card;
  }

  function cards() { return Array.from($("responses").children); }
  function select(index) { state.selected = index; update(); }
  function selectedKey() { return state.task.responses[state.selected].id; }

  function advance() {  // keyboard flow: 1, 2, 3 (or X) handle A, B, C in turn
    const next = state.task.responses.findIndex((r) => !state.places[r.id] && !state.discarded.has(r.id));
    if (next >= 0) state.selected = next;
  }

  function setPlace(place) {
    const key = selectedKey();
    state.discarded.delete(key);
    state.places[key] = place;
    advance();
    update();
  }

  function toggleDiscard() {
    const key = selectedKey();
    if (state.discarded.has(key)) state.discarded.delete(key);
    else { state.discarded.add(key); delete state.places[key]; advance(); }
    update();
  }

  function clearPlace() { delete state.places[selectedKey()]; update(); }
  function reset() { state.places = {}; state.discarded = new Set(); state.selected = 0; update(); }

  function groups() {
    const byPlace = {};
    for (const r of state.task.responses) {
      const place = state.places[r.id];
      if (place && !state.discarded.has(r.id)) (byPlace[place] = byPlace[place] || []).push(r);
    }
    return Object.keys(byPlace).map(Number).sort((a, b) => a - b).map((p) => byPlace[p]);
  }

  function complete() {
    return state.task.responses.every((r) => state.places[r.id] || state.discarded.has(r.id));
  }

  function update() {
    if (!state.task) return;
    cards().forEach((card, i) => {
      const key = card.dataset.key;
      const place = state.places[key];
      const gone = state.discarded.has(key);
      card.classList.toggle("selected", i === state.selected);
      card.classList.toggle("discarded", gone);
      const label = card.querySelector(".place-label");
      label.textContent = gone ? words.discarded : place ? "#" + place : "";
      label.className = "place-label" + (place && !gone ? " place-" + place : "");
      card.querySelectorAll("button.place").forEach((b) => b.classList.toggle("on", Number(b.dataset.place) === place && !gone));
      card.querySelector("button.discard").classList.toggle("on", gone);
    });
    const ordered = groups().map((g) => g.map((r) => r.label).join(" = ")).join(" > ");
    const missing = state.task.responses.filter((r) => !state.places[r.id] && !state.discarded.has(r.id));
    const unusable = state.task.responses.filter((r) => state.discarded.has(r.id)).map((r) => r.label);
    let summary = ordered ? words.ranking + ordered : unusable.length === 3 ? words.all_discarded : "";
    if (unusable.length && unusable.length < 3) summary += words.unusable_list.replace("{}", unusable.join(", "));
    if (missing.length) summary += (summary ? "　" : "") + words.unranked + missing.map((r) => r.label).join(", ");
    $("summary").textContent = summary;
    $("submit").disabled = state.busy || !complete();
  }

  async function submit() {
    if (!state.task || state.busy || !complete()) return;
    state.busy = true;
    update();
    const body = {
      annotation_id: state.annotationId,
      order: groups().map((g) => g.map((r) => r.id)),
      discarded: Array.from(state.discarded),
    };
    try {
      const url = "/api/tasks/" + state.task.task_id + "/annotation";
      const reply = await cheems.fetchJSON(url, { body: body, token: token() });
      if (reply.created) { state.done += 1; $("count").textContent = String(state.done); }
      notify(reply.created ? words.submitted : words.already, reply.created ? "ok" : "");
      await loadNext();
    } catch (err) {
      if (err.status === 401) return signOut(errorText(err));
      notify(errorText(err), "error");
      if (err.status === 409) await loadNext();
    } finally {
      state.busy = false;
      update();
    }
  }

  const KEYS = {
    "a": () => select(0), "b": () => select(1), "c": () => select(2),
    "ArrowLeft": () => select((state.selected + 2) % 3), "ArrowRight": () => select((state.selected + 1) % 3),
    "1": () => setPlace(1), "2": () => setPlace(2), "3": () => setPlace(3),
    "0": clearPlace, "Backspace": clearPlace, "x": toggleDiscard, "r": reset, "Enter": submit,
  };

  document.addEventListener("keydown", (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    if (event.target instanceof HTMLInputElement || $("work").classList.contains("hidden")) return;
    const key = event.key.length === 1 ? event.key.toLowerCase() : event.key;
    if (key === "?") { show("help", $("help").classList.contains("hidden")); event.preventDefault(); return; }
    if (key === "n") { loadNext(); event.preventDefault(); return; }
    const action = state.task && KEYS[key];
    if (action) { event.preventDefault(); action(); }
  });

  $("signin-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const value = $("token").value.trim();
    if (value) signIn(value);
  });
  $("signout").addEventListener("click", () => signOut(""));
  $("submit").addEventListener("click", submit);
  $("reset").addEventListener("click", reset);
  $("reload").addEventListener("click", loadNext);
  $("help-toggle").addEventListener("click", () => show("help", $("help").classList.contains("hidden")));

  if (token()) signIn(token());
  else signOut("");
})();
