// OpenDLC console. The Content-Security-Policy allows no inline script or style, so the page's
// small behaviours are declared with data- attributes and wired here.
(function () {
  // The figures are drawn for a white page; under the system's dark setting they take the page's colours.
  function themed(layout) {
    if (!(window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches)) return layout;
    var css = getComputedStyle(document.documentElement);
    var fg = css.getPropertyValue("--fg").trim(), line = css.getPropertyValue("--line").trim();
    var out = Object.assign({}, layout, { paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
                                          font: Object.assign({}, layout.font, { color: fg }) });
    Object.keys(out).forEach(function (key) {
      if (/^[xy]axis\d*$/.test(key)) out[key] = Object.assign({}, out[key], { gridcolor: line, zerolinecolor: line });
    });
    if (!out.xaxis) out.xaxis = { gridcolor: line, zerolinecolor: line };
    if (!out.yaxis) out.yaxis = { gridcolor: line, zerolinecolor: line };
    return out;
  }
  function draw(root) {
    if (!window.Plotly || !root.querySelectorAll) return;
    root.querySelectorAll("[data-figure]").forEach(function (el) {
      var source = document.getElementById(el.dataset.figure);
      if (!source || el.dataset.drawn === source.id) return;
      var fig = JSON.parse(source.textContent);
      el.dataset.drawn = source.id;
      Plotly.newPlot(el, fig.data, themed(fig.layout || {}), { displaylogo: false, responsive: true });
    });
  }
  // Bar widths and tree indents: set through the CSS object model, which the policy permits.
  function size(root) {
    if (!root.querySelectorAll) return;
    root.querySelectorAll("[data-width]").forEach(function (el) { el.style.width = el.dataset.width + "%"; });
    root.querySelectorAll("[data-indent]").forEach(function (el) { el.style.paddingLeft = el.dataset.indent + "em"; });
  }
  function settle(root) { size(root); draw(root); }
  document.addEventListener("htmx:load", function (e) { settle(e.detail.elt); });
  // A refused bid answers 400 with the panel naming the input at fault: show it, as a 200 would be.
  document.addEventListener("htmx:beforeSwap", function (e) {
    var elt = e.detail.requestConfig && e.detail.requestConfig.elt;
    if (e.detail.xhr.status === 400 && elt && elt.closest && elt.closest("[data-swap-400]")) {
      e.detail.shouldSwap = true;
      e.detail.isError = false;
    }
  });
  document.addEventListener("htmx:beforeRequest", function (e) {
    // Live parts poll only while the tab is seen (the policy forbids htmx's evaluated trigger filters).
    if (document.visibilityState !== "visible" && e.detail.elt.hasAttribute("data-poll-visible")) {
      e.preventDefault();
      return;
    }
    var opener = e.detail.elt && e.detail.elt.closest && e.detail.elt.closest("[data-open-dialog]");
    if (opener) document.getElementById(opener.dataset.openDialog).showModal();
  });
  document.addEventListener("change", function (e) {
    if (e.target.matches && e.target.matches("select[data-autosubmit]")) e.target.form.requestSubmit();
  });
  document.addEventListener("submit", function (e) {
    var form = e.target;
    if (form.dataset && form.dataset.confirm && !window.confirm(form.dataset.confirm)) e.preventDefault();
  });
  document.addEventListener("click", function (e) {
    var closer = e.target.closest && e.target.closest("[data-close-dialog]");
    if (closer) closer.closest("dialog").close();
  });
  document.addEventListener("DOMContentLoaded", function () { size(document); });
  window.addEventListener("load", function () { draw(document); });
})();
