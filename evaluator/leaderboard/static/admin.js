// The admin card of the leaderboard pages (#admin, data-action "promote" with data-model, or "rollback"):
// posts to the admin API with the token typed in the card, shows the answer or the refusal the API gives,
// and reloads the page after a change. The token is kept for this tab only (sessionStorage).
// Needs page.js (window.cheems.fetchJSON).
"use strict";
(function () {
  const card = document.getElementById("admin");
  if (!card) return;
  const KEY = "cheems.admin.token";
  const token = document.getElementById("admin-token");
  const reason = document.getElementById("admin-reason");
  const force = document.getElementById("admin-force");
  const button = document.getElementById("admin-go");
  const message = document.getElementById("admin-message");
  token.value = sessionStorage.getItem(KEY) || "";

  function say(text, bad) {
    message.textContent = text;
    message.className = bad ? "error" : "ok";
  }

  button.addEventListener("click", async function () {
    const secret = token.value.trim();
    const body = { reason: reason.value };
    if (force) body.force = force.checked;
    const url = card.dataset.action === "promote"
      ? "/api/models/" + encodeURIComponent(card.dataset.model) + "/promote"
      : "/api/rollback";
    button.disabled = true;
    say("", false);
    try {
      const reply = await window.cheems.fetchJSON(url, { method: "POST", body: body, token: secret });
      sessionStorage.setItem(KEY, secret);
      const steps = reply.changes.map((c) => c.model_id + ": " + c.from_state + " → " + c.to_state);
      say(steps.join("; ") + " · production: " + (reply.production || "–"), false);
      setTimeout(function () { location.reload(); }, 1200);
    } catch (err) {
      if (err.status === 401) sessionStorage.removeItem(KEY);
      say(err.message, true);
      button.disabled = false;
    }
  });
})();
