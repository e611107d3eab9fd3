// Cheems pages' shared script: JSON calls that turn the services' {"error", "reason"} bodies into errors.
//   cheems.fetchJSON(url, {method, body, token}) -> Promise of the parsed body; rejects with an Error whose
//   .status and .reason are the response's (status 0 when the service could not be reached).
//   cheems.poll(fn, ms) calls fn now and every ms milliseconds; returns a function that stops it.
"use strict";
window.cheems = (function () {
  async function fetchJSON(url, options) {
    const opts = options || {};
    const headers = { "accept": "application/json" };
    if (opts.body !== undefined) headers["content-type"] = "application/json";
    if (opts.token) headers["authorization"] = "Bearer " + opts.token;
    let response;
    try {
      response = await fetch(url, {
        method: opts.method || (opts.body === undefined ? "GET" : "POST"),
        headers: headers,
        body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
      });
    } catch (err) {
      const error = new Error(String(err));
      error.status = 0;
      error.reason = "unreachable";
      throw error;
    }
    let data = null;
    try { data = await response.json(); } catch (err) { data = null; }
    if (!response.ok) {
      const error = new Error((data && data.error) || ("HTTP " + response.status));
      error.status = response.status;
      error.reason = (data && data.reason) || "http_error";
      throw error;
    }
    return data;
  }
  function poll(fn, ms) {
    fn();
    const id = setInterval(fn, ms);
    return function () { clearInterval(id); };
  }
  return { fetchJSON: fetchJSON, poll: poll };
})();
