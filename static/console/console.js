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
  // A refused bid answers 400 with the panel naming the input at fault: show it, as a 200 would be.
  document.addEventListener("htmx:beforeSwap", function (e) {
    var elt = e.detail.requestConfig && e.detail.requestConfig.elt;
    if (e.detail.xhr.status === 400 && elt && elt.closest && elt.closest("[data-swap-400]")) {
      e.detail.shouldSwap = true;
      e.detail.isError = false;
    }
  });
  window.addEventListener("load", function () { draw(document); });
})();
