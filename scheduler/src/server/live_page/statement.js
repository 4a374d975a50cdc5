// The statement page's refresh (served by icemerge-scheduler at
// /assets/statement.js): while the statement is queued or running, polls
// its JSON (the script tag's data-poll URL) every second and redraws the
// state, the per-stage table and the stage graph; stops once it has drawn
// the statement's final figures. The body's data-refreshed attribute counts
// the redraws.
(function () {
  "use strict";
  var script = document.currentScript;
  var url = script.getAttribute("data-poll");
  if (script.getAttribute("data-live") !== "true") {
    return;
  }
  function text(id, value) {
    var node = document.getElementById(id);
    if (node) {
      node.textContent = value === null || value === undefined ? "" : String(value);
    }
  }
  var redraws = 0;
  function draw(view) {
    redraws += 1;
    document.body.setAttribute("data-refreshed", String(redraws));
    var state = document.getElementById("state");
    state.textContent = view.state;
    state.className = view.state;
    text("elapsed", view.elapsed);
    text("error", view.error || "");
    var body = document.querySelector("#stages tbody");
    while (body.firstChild) {
      body.removeChild(body.firstChild);
    }
    view.stages.forEach(function (stage) {
      var row = document.createElement("tr");
      row.className = "stage";
      row.setAttribute("data-stage", String(stage.id));
      stage.cells.forEach(function (cell) {
        var td = document.createElement("td");
        td.textContent = cell;
        row.appendChild(td);
      });
      body.appendChild(row);
    });
    var parts = [];
    if (view.merge) {
      parts.push(Object.keys(view.merge).map(function (k) { return k + "=" + view.merge[k]; }).join(", "));
    }
    if (view.timing) {
      parts.push("time: total=" + view.timing.total_ms.toFixed(1) + "ms");
    }
    text("summary", parts.join("; "));
    if (view.svg) {
      // The SVG is icemerge's own rendering of the stage graph (every
      // text in it escaped by the renderer).
      document.getElementById("graph").innerHTML = view.svg;
    }
  }
  function poll() {
    fetch(url, { cache: "no-store" })
      .then(function (response) {
        if (!response.ok) {
          throw new Error(response.status + " " + response.statusText);
        }
        return response.json();
      })
      .then(function (view) {
        draw(view);
        if (view.state === "queued" || view.state === "running") {
          setTimeout(poll, 1000);
        }
      })
      .catch(function (error) {
        text("error", "refresh failed: " + error.message + " (retrying)");
        setTimeout(poll, 3000);
      });
  }
  setTimeout(poll, 1000);
})();
