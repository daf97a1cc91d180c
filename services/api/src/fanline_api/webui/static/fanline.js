// Progressive enhancement only: the pages work without JavaScript.
// Shows how many of the 280 characters (Unicode code points, after trimming,
// exactly as the server counts) are left while typing a tweet.
(function () {
  "use strict";
  document.querySelectorAll("textarea[data-max]").forEach(function (area) {
    var out = document.getElementById(area.dataset.counter);
    var max = parseInt(area.dataset.max, 10);
    if (!out || !max) { return; }
    function update() {
      var left = max - Array.from(area.value.trim()).length;
      var n = Math.abs(left);
      out.textContent = n + (n === 1 ? " character" : " characters") + (left < 0 ? " too many" : " left");
      out.classList.toggle("over", left < 0);
    }
    var help = document.getElementById(area.dataset.help);
    area.addEventListener("input", update);
    if (help) { help.hidden = true; }
    out.hidden = false;
    update();
  });
})();
