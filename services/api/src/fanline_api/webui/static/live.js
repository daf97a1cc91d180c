// Progressive enhancement only: without JavaScript, Home and Public are
// ordinary pages (reload for news). With it, the first page of a timeline
// listens to its server-sent event stream (api.md "Live updates"): new tweets
// are counted in a "N new tweets" button and shown, newest first, when it is
// clicked; deleted or unfollowed tweets disappear at once.
(function () {
  "use strict";
  var live = document.querySelector("[data-stream]");
  if (!live || !window.EventSource) { return; }
  var button = live.querySelector(".new-tweets");
  var viewer = (live.dataset.viewer || "").toLowerCase();
  var pending = [];  // tweets not shown yet, oldest first
  var MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

  function list() {
    var ol = live.querySelector("ol.tweets");
    if (!ol) {
      ol = document.createElement("ol");
      ol.className = "tweets";
      var empty = live.querySelector(".empty");
      if (empty) { empty.replaceWith(ol); } else { live.appendChild(ol); }
    }
    return ol;
  }

  function when(iso) {  // the server's format: 22 Nov 2026, 10:15 UTC
    var d = new Date(iso);
    if (isNaN(d.getTime())) { return iso; }
    var two = function (n) { return (n < 10 ? "0" : "") + n; };
    return d.getUTCDate() + " " + MONTHS[d.getUTCMonth()] + " " + d.getUTCFullYear() + ", " +
      two(d.getUTCHours()) + ":" + two(d.getUTCMinutes()) + " UTC";
  }

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) { node.className = cls; }
    if (text !== undefined) { node.textContent = text; }
    return node;
  }

  function render(tweet) {  // the same markup as _macros.html tweet_list, built without innerHTML
    var li = el("li", "tweet");
    li.id = "t-" + tweet.id;
    var meta = el("div", "meta");
    var who = el("a", "who", tweet.username);
    who.href = "/u/" + encodeURIComponent(tweet.username);
    var time = el("time", "", when(tweet.created_at));
    time.setAttribute("datetime", tweet.created_at);
    meta.append(who, " ", time);
    var csrf = document.querySelector("input[name='csrf']");
    if (viewer && tweet.username.toLowerCase() === viewer && csrf) {
      var form = el("form", "delete");
      form.method = "post";
      form.action = "/tweets/" + encodeURIComponent(tweet.id) + "/delete";
      var token = el("input");
      token.type = "hidden"; token.name = "csrf"; token.value = csrf.value;
      var next = el("input");
      next.type = "hidden"; next.name = "next"; next.value = location.pathname + location.search;
      var del = el("button", "link danger", "Delete");
      del.type = "submit";
      form.append(token, next, del);
      meta.append(" ", form);
    }
    li.append(meta, el("p", "body", tweet.body));
    return li;
  }

  function refresh() {
    var n = pending.length;
    button.textContent = n === 1 ? "Show 1 new tweet" : "Show " + n + " new tweets";
    button.hidden = n === 0;
  }

  button.addEventListener("click", function () {
    var ol = list();
    pending.forEach(function (tweet) {
      if (!document.getElementById("t-" + tweet.id)) { ol.prepend(render(tweet)); }
    });
    pending = [];
    refresh();
  });

  // Resume from the newest tweet on the page, so nothing posted between the
  // page and the stream is missed; the browser's own reconnects send
  // Last-Event-ID, which takes precedence.
  var url = live.dataset.stream;
  var newest = live.querySelector("ol.tweets > li.tweet");
  if (newest) { url += "?last_event_id=" + encodeURIComponent(newest.id.slice(2)); }
  var source = new EventSource(url);
  source.addEventListener("update", function (e) {
    var tweet = JSON.parse(e.data);
    if (document.getElementById("t-" + tweet.id) || pending.some(function (t) { return t.id === tweet.id; })) {
      return;
    }
    pending.push(tweet);
    refresh();
  });
  source.addEventListener("delete", function (e) {
    var id = JSON.parse(e.data).id;
    var shown = document.getElementById("t-" + id);
    if (shown) { shown.remove(); }
    pending = pending.filter(function (t) { return t.id !== id; });
    refresh();
  });
})();
