/* The widget html-manager (ipywidgets 8) typesets descriptions and labels with the MathJax 2 API,
   `MathJax.Hub.Queue(["Typeset", MathJax.Hub, element])`, on text written with `$...$`; the book
   loads MathJax 3, which has no `Hub` and (as configured by MyST) only reads `\(...\)`. This maps
   the call onto MathJax 3: `$...$` / `$$...$$` spans become `tex2chtml` output, anything else goes
   to `typesetPromise`. Added by book/_ext/offline_assets.py on pages with stored widgets, deferred
   after MathJax; the widgets render on window "load". */
(function () {
  var DOLLARS = /(\$\$[^$]+\$\$|\$[^$]+\$)/;
  function typeset(mj, el) {
    if (!el) return mj.typesetPromise();
    var text = el.textContent || "";
    if (el.children.length || !DOLLARS.test(text)) return mj.typesetPromise([el]);
    el.textContent = "";
    text.split(DOLLARS).forEach(function (part) {
      var display = /^\$\$[^$]+\$\$$/.test(part);
      if (display || /^\$[^$]+\$$/.test(part)) {
        el.appendChild(mj.tex2chtml(part.slice(display ? 2 : 1, display ? -2 : -1), {display: display}));
      } else if (part) {
        el.appendChild(document.createTextNode(part));
      }
    });
    mj.startup.document.clear();
    mj.startup.document.updateDocument();
    return Promise.resolve();
  }
  function install() {
    var mj = window.MathJax;
    if (!mj || mj.Hub || mj.version === undefined || String(mj.version).charAt(0) === "2") return;
    mj.Hub = {
      Queue: function () {
        Array.prototype.forEach.call(arguments, function (job) {
          var ready = (mj.startup && mj.startup.promise) || Promise.resolve();
          if (Array.isArray(job) && job[0] === "Typeset") {
            ready.then(function () { return typeset(mj, job[2]); })
                 .catch(function (err) { console.warn("MathJax typeset failed", err); });
          } else if (typeof job === "function") {
            ready.then(job);
          }
        });
      }
    };
  }
  install();
  document.addEventListener("DOMContentLoaded", install);
})();
