// A running task's output, live: an EventSource on the URL of <div data-stream>, each
// chunk appended as text (never as markup) to its <pre>, a mark where another attempt
// begins. The browser reconnects by itself and resumes after the last chunk
// (Last-Event-ID); the "end" event closes it for good. live.js keeps this <div> across
// its refreshes while it streams, then sends "live:swapped": a new one is looked for.
(function () {
  "use strict";
  if (!window.EventSource) { return; }
  var source = null;
  var attempt = null;

  function say(text) {
    var status = document.getElementById("output-status");
    if (status) { status.textContent = text; }
  }

  function append(pre, data) {
    if (attempt !== null && data.attempt !== attempt) {
      var mark = document.createElement("span");
      mark.className = "attempt-mark";
      mark.textContent = "attempt " + data.attempt;
      pre.appendChild(mark);
    }
    attempt = data.attempt;
    pre.appendChild(document.createTextNode(data.text));
    pre.scrollTop = pre.scrollHeight;
  }

  function attach() {
    var box = document.querySelector("div[data-stream]");
    if (!box || box.hasAttribute("data-streaming")) { return; }
    var pre = box.querySelector("pre");
    if (source) { source.close(); }
    box.setAttribute("data-streaming", "1");
    attempt = null;
    var chunks = 0;
    source = new EventSource(box.getAttribute("data-stream"));
    source.addEventListener("chunk", function (event) {
      chunks += 1;
      append(pre, JSON.parse(event.data));
      say("live · " + chunks + " chunks");
    });
    source.addEventListener("end", function (event) {
      source.close();
      source = null;
      box.removeAttribute("data-stream");
      say("The task ended " + JSON.parse(event.data).state + ": " + chunks + " chunks.");
    });
    source.onerror = function () {
      if (source && source.readyState === EventSource.CONNECTING) { say("reconnecting…"); }
      else if (source) { say("the live output is unavailable (too many open, or the task is gone)"); }
    };
  }

  document.addEventListener("DOMContentLoaded", attach);
  document.addEventListener("live:swapped", attach);
})();
