/* session-index: draws each <figure class="si-chart"> of the page with
   Observable Plot (static/vendor/, loaded before this file) from the rows of
   its data-src (a canned query's Datasette JSON, ?_shape=array), as its
   data-spec says (datasette-plugins/charts.py). Labels come from the rows and
   reach the page as SVG text, never as markup. When it is done the figure has
   data-rows (rows fetched) and data-drawn ("1", "0": no rows, "error"). */
(function () {
  "use strict";

  function inOrder(rows, key) {
    return Array.from(new Set(rows.map(function (r) { return r[key]; })));
  }

  function colour(spec, rows) {
    var domain = inOrder(rows, spec.fill);
    if (!spec.colours) { return {legend: true, domain: domain}; }
    if (Array.isArray(spec.colours)) {
      return {legend: true, domain: domain,
              range: domain.map(function (_, i) { return spec.colours[i % spec.colours.length]; })};
    }
    return {legend: true, domain: domain,
            range: domain.map(function (v) { return spec.colours[v] || "#78909c"; })};
  }

  function plot(spec, rows, width) {
    var title = function (d) {
      return [d[spec.x] instanceof Date ? d[spec.x].toISOString().slice(0, 10) : d[spec.x],
              d[spec.fill], spec.y_label + ": " + d[spec.y]].join("\n");
    };
    var x = {label: spec.x_label};
    var mark;
    if (spec.mark === "rectY") {
      rows = rows.map(function (r) {
        var copy = Object.assign({}, r);
        copy[spec.x] = new Date(r[spec.x] + "T00:00:00Z");
        return copy;
      });
      mark = Plot.rectY(rows, {x: spec.x, interval: "day", y: spec.y, fill: spec.fill,
                               title: title, insetLeft: 0.5, insetRight: 0.5});
      x.type = "utc";
    } else {
      x.domain = inOrder(rows, spec.x);
      mark = Plot.barY(rows, {x: spec.x, y: spec.y, fill: spec.fill, title: title});
    }
    return Plot.plot({width: width, height: 280, marginLeft: 60, marginBottom: 40,
                      x: x, y: {label: spec.y_label, grid: true},
                      color: colour(spec, rows), marks: [mark, Plot.ruleY([0])]});
  }

  function draw(figure) {
    var holder = figure.querySelector(".si-chart-plot");
    var spec = JSON.parse(figure.getAttribute("data-spec"));
    fetch(figure.getAttribute("data-src"), {headers: {Accept: "application/json"}})
      .then(function (response) {
        if (!response.ok) { throw new Error("HTTP " + response.status); }
        return response.json();
      })
      .then(function (rows) {
        figure.setAttribute("data-rows", String(rows.length));
        if (!rows.length) {
          holder.textContent = "No rows yet.";
          figure.setAttribute("data-drawn", "0");
          return;
        }
        holder.replaceChildren(plot(spec, rows, Math.max(320, holder.clientWidth || 640)));
        figure.setAttribute("data-drawn", "1");
      })
      .catch(function (error) {
        holder.textContent = "Could not draw the chart: " + error.message;
        figure.setAttribute("data-drawn", "error");
      });
  }

  function drawAll() {
    document.querySelectorAll("figure.si-chart").forEach(draw);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", drawAll);
  } else {
    drawAll();
  }
})();
