// Live refresh without reloading: every data-refresh-ms, fetch this page's live fragment
// (the X-Live header) and swap it into <main id="live">. Paused while the tab is hidden
// or while the user types in a form inside it or has tasks selected; says when it last updated or failed.
(function () {
  "use strict";
  var main = document.getElementById("live");
  var status = document.getElementById("live-status");
  // a page without data-refresh-ms (a form's answer) is not refreshed
  if (!main || !window.fetch || !main.hasAttribute("data-refresh-ms")) { return; }
  var every = parseInt(main.getAttribute("data-refresh-ms"), 10) || 2000;
  var busy = false;

  function say(text) { if (status) { status.textContent = text; } }

  function typing() {
    var active = document.activeElement;
    if (main.querySelector("input[type=checkbox]:checked")) { return true; }  // a selection
    return active && main.contains(active) && /^(INPUT|SELECT|TEXTAREA)$/.test(active.tagName);
  }

  function refresh() {
    if (busy || document.hidden || typing()) { return; }
    busy = true;
    fetch(window.location.href, { headers: { "X-Live": "1" }, credentials: "same-origin" })
      .then(function (response) {
        if (!response.ok && response.status !== 404 && response.status !== 503) {
          throw new Error("HTTP " + response.status);
        }
        return response.text();
      })
      .then(function (html) {
        // a live output streaming in (output.js) is kept as it is: the fresh copy would
        // lose what arrived since it was rendered
        var kept = main.querySelector("[data-streaming][data-stream]");
        main.innerHTML = html;  // the server's own escaped markup
        var fresh = kept ? main.querySelector("#" + kept.id + "[data-stream]") : null;
        if (fresh) { fresh.replaceWith(kept); }
        document.dispatchEvent(new Event("live:swapped"));
        say("live · " + new Date().toLocaleTimeString());
      })
      .catch(function () { say("offline · retrying"); })
      .then(function () { busy = false; });
  }

  // a copy button beside a shortened id: the whole id to the clipboard (delegated: the
  // refresh replaces the buttons)
  document.addEventListener("click", function (event) {
    var button = event.target && event.target.closest ? event.target.closest("button.copy") : null;
    if (!button || !navigator.clipboard) { return; }
    navigator.clipboard.writeText(button.getAttribute("data-copy") || "").then(function () {
      button.classList.add("copied");
      button.textContent = "copied";
    });
  });

  say("live");
  window.setInterval(refresh, every);
  document.addEventListener("visibilitychange", refresh);
})();
