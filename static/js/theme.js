/* Light / dark theme toggle, remembered in localStorage.
 *
 * The page must know its theme before the first paint, or dark-theme admins get a white flash.
 * So base.html inlines this in <head>, before the stylesheet (keep the key in step with THEME_KEY):
 *
 *   <script>
 *     (function () {
 *       var t = null;
 *       try { t = localStorage.getItem("panel-theme"); } catch (e) {}
 *       if (t !== "light" && t !== "dark") {
 *         t = window.matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";
 *       }
 *       document.documentElement.setAttribute("data-theme", t);
 *     })();
 *   </script>
 *
 * and loads this file with `defer` (or as type="module", which defers too). With no stored choice the page follows the system setting, live.
 * Any element with [data-theme-toggle] (normally <button class="btn btn-small theme-toggle">) flips
 * the theme; aria-pressed says whether dark is on. After a change, document receives a
 * "panel:themechange" event (detail.theme) so canvases (sparklines, uPlot) can redraw in the new
 * colours. Written as a classic script so it works however it is loaded.
 */
(function () {
  "use strict";

  var THEME_KEY = "panel-theme";
  var systemDark = window.matchMedia("(prefers-color-scheme: dark)");

  // Storage can throw (private mode, disabled cookies); the theme then simply is not remembered.
  function storedTheme() {
    try {
      var value = window.localStorage.getItem(THEME_KEY);
      return value === "light" || value === "dark" ? value : null;
    } catch (e) {
      return null;
    }
  }

  function storeTheme(theme) {
    try {
      window.localStorage.setItem(THEME_KEY, theme);
    } catch (e) {
      /* not remembered; still applied for this page */
    }
  }

  function currentTheme() {
    return document.documentElement.getAttribute("data-theme") === "dark" ? "dark" : "light";
  }

  function syncToggles(theme) {
    var toggles = document.querySelectorAll("[data-theme-toggle]");
    for (var i = 0; i < toggles.length; i++) {
      toggles[i].setAttribute("aria-pressed", theme === "dark" ? "true" : "false");
    }
  }

  function applyTheme(theme) {
    var changed = currentTheme() !== theme;
    document.documentElement.setAttribute("data-theme", theme);
    syncToggles(theme);
    if (changed) {
      document.dispatchEvent(new CustomEvent("panel:themechange", { detail: { theme: theme } }));
    }
  }

  // Harmless if the <head> snippet already ran; essential if it was left out.
  applyTheme(storedTheme() || (systemDark.matches ? "dark" : "light"));

  document.addEventListener("click", function (event) {
    var toggle = event.target.closest && event.target.closest("[data-theme-toggle]");
    if (!toggle) return;
    var next = currentTheme() === "dark" ? "light" : "dark";
    storeTheme(next);
    applyTheme(next);
  });

  // Follow the operating system only until the admin has made a choice here.
  systemDark.addEventListener("change", function (event) {
    if (!storedTheme()) applyTheme(event.matches ? "dark" : "light");
  });

  // Toggles that arrive later (htmx swaps, late parsing) get the right aria-pressed.
  document.addEventListener("DOMContentLoaded", function () {
    syncToggles(currentTheme());
  });
  document.addEventListener("htmx:afterSwap", function () {
    syncToggles(currentTheme());
  });
})();
