// OpenDLC console: draw Plotly charts found in the page or in content HTMX swapped in.
(function () {
  function draw(root) {
    if (!window.Plotly || !root.querySelectorAll) return;
    root.querySelectorAll("[data-figure]").forEach(function (el) {
      var source = document.getElementById(el.dataset.figure);
      if (!source || el.dataset.drawn === source.id) return;
      var fig = JSON.parse(source.textContent);
      el.dataset.drawn = source.id;
      Plotly.newPlot(el, fig.data, fig.layout, { displaylogo: false, responsive: true });
    });
  }
  document.addEventListener("htmx:load", function (e) { draw(e.detail.elt); });
  window.addEventListener("load", function () { draw(document); });
})();
