// Before the first paint (a plain, blocking script in <head>, not a module): the saved or the system's
// theme, so a dark page never flashes light. A file, not inline, so the Content-Security-Policy can refuse
// every inline script.
(function () {
  var t = null;
  try { t = localStorage.getItem("panel-theme"); } catch (e) {}
  if (t !== "light" && t !== "dark") {
    t = window.matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";
  }
  document.documentElement.setAttribute("data-theme", t);
})();
