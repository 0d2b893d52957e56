// The approvals page and a call's page, light: what a phone runs instead of
// the console's wasm (issue 42 item 5). The server renders these pages
// whole; this script, inline in their <head>, chooses before anything else
// loads:
// - a device that hovers with a fine pointer (a desktop) gets the whole
//   console: the hydration scripts the server left in
//   <template id="console-scripts"> are added, as on every other page;
// - any other keeps the server's page and makes it live here: each change
//   on the page's own event stream reads the page again and swaps its
//   <main> in, keeping what the person typed, ticked or opened. Decisions
//   are the page's plain forms (the server redirects back; approving
//   several goes through the confirmation the server draws).
// Without JavaScript the forms still work; only the page is not live.
(function () {
  "use strict";
  var nonce = document.currentScript.nonce;
  if (matchMedia("(hover: hover) and (pointer: fine)").matches) {
    var kept = document.getElementById("console-scripts");
    if (!kept) return;
    var scripts = [];
    Array.prototype.forEach.call(kept.content.children, function (node) {
      if (node.tagName !== "SCRIPT") {
        // The preloads start the downloads now.
        document.head.appendChild(document.importNode(node, true));
        return;
      }
      // A script made from a template's is inert: make a new one.
      var script = document.createElement("script");
      script.type = node.type;
      script.nonce = nonce;
      script.textContent = node.textContent;
      scripts.push(script);
    });
    // Run once the page is parsed, as the module script in <head> would:
    // hydration needs the whole body.
    var run = function () {
      scripts.forEach(function (script) {
        document.head.appendChild(script);
      });
    };
    if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", run);
    else run();
    return;
  }
  document.documentElement.setAttribute("data-light", "");

  var call = /^\/resume\/([^/]+)$/.exec(location.pathname);
  var stream = call ? "/api/executions/" + call[1] + "/events" : "/api/approvals/events";
  var state = "connecting";
  var words = { connecting: "Connecting to live updates…", live: "Live", reconnecting: "Reconnecting…" };
  var pending = null; // the count of waiting calls the stream told last
  var title = null; // the page's own title, read once it is parsed

  // Runs `fn` once the page is parsed (the stream may speak before).
  function parsed(fn) {
    if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", fn);
    else fn();
  }

  function said() {
    if (document.readyState === "loading") return;
    var line = document.querySelector(".live-status");
    if (line) {
      line.setAttribute("data-state", state);
      line.textContent = words[state];
    }
    if (title === null) title = document.title;
    if (pending === null) return; // the stream has not told it yet
    document.title = pending > 0 ? "(" + pending + ") " + title : title;
    // The header's count, as the console draws it.
    var link = document.querySelector('header nav a[href="/approvals"]');
    var count = link && link.querySelector('[data-testid="pending-count"]');
    if (link && pending > 0 && !count) {
      count = document.createElement("span");
      count.className = "count";
      count.setAttribute("data-testid", "pending-count");
      link.appendChild(count);
    }
    if (count && !(pending > 0)) count.remove();
    else if (count) {
      count.textContent = pending;
      count.setAttribute("aria-label", pending + " waiting");
    }
  }

  // A control's name across two reads of the page: its id, else its form,
  // name and (for a box) value.
  function key(el) {
    if (el.id) return "#" + el.id;
    // (Not form.id: a form's field named "id" would answer.)
    var form = el.getAttribute("form") || (el.form && Element.prototype.getAttribute.call(el.form, "id")) || "";
    var box = el.type === "checkbox" || el.type === "radio";
    return el.name ? form + "|" + el.name + (box ? "=" + el.value : "") : "";
  }

  // A <details>' name across two reads: its id, else its call's and its class.
  function opened(el) {
    var card = el.closest("[data-execution-id]");
    return el.id || (card ? card.getAttribute("data-execution-id") : "") + "|" + el.className;
  }

  // When the person last touched the page: a swap waits, so that a tap
  // on its way never lands on a card that moved under it.
  var touched = 0;
  var SETTLE_MS = 800;
  ["pointerdown", "touchstart", "keydown"].forEach(function (type) {
    document.addEventListener(type, function () {
      touched = Date.now();
    }, { capture: true, passive: true });
  });

  // `at`: when the server's page arrived, for its clocks.
  function swap(doc, at) {
    var wait = touched + SETTLE_MS - Date.now();
    if (wait > 0) {
      setTimeout(function () {
        swap(doc, at);
      }, wait);
      return;
    }
    var now = document.querySelector("main");
    var next = doc.querySelector("main");
    if (!now || !next) return;
    var typed = {};
    now.querySelectorAll("textarea, select, input:not([type=hidden])").forEach(function (el) {
      var box = el.type === "checkbox" || el.type === "radio";
      typed[key(el)] = box ? el.checked : el.value;
    });
    var open = {};
    now.querySelectorAll("details[open]").forEach(function (el) {
      open[opened(el)] = true;
    });
    var focus = document.activeElement && now.contains(document.activeElement) ? key(document.activeElement) : "";
    next = document.importNode(next, true);
    next.querySelectorAll("textarea, select, input:not([type=hidden])").forEach(function (el) {
      var k = key(el);
      if (!(k in typed)) return;
      if (el.type === "checkbox" || el.type === "radio") el.checked = typed[k];
      else el.value = typed[k];
    });
    next.querySelectorAll("details").forEach(function (el) {
      if (open[opened(el)]) el.open = true;
    });
    now.replaceWith(next);
    drawn = at;
    tick();
    title = doc.title;
    said();
    if (focus) {
      var again = Array.prototype.find.call(next.querySelectorAll("textarea, select, input, button"), function (el) {
        return key(el) === focus;
      });
      if (again) again.focus();
    }
  }

  var reading = false;
  var stale = false;
  function reread() {
    if (reading) {
      stale = true;
      return;
    }
    reading = true;
    fetch(location.href, { headers: { accept: "text/html" }, credentials: "same-origin" })
      .then(function (r) {
        // Signed out, or the call is gone: the browser shows what the server says.
        if (r.redirected || !r.ok) {
          location.reload();
          throw new Error("reloading");
        }
        return r.text();
      })
      .then(function (html) {
        swap(new DOMParser().parseFromString(html, "text/html"), Date.now());
      })
      .catch(function () {})
      .then(function () {
        reading = false;
        if (stale) {
          stale = false;
          reread();
        }
      });
  }

  // What the page shows now, to tell whether the stream says anything new.
  function shownIds() {
    return Array.prototype.map
      .call(document.querySelectorAll("main [data-execution-id]"), function (el) {
        return el.getAttribute("data-execution-id");
      })
      .sort()
      .join(",");
  }
  function shownState() {
    var el = document.querySelector("main .state[data-state]");
    return el ? el.getAttribute("data-state") : "";
  }

  var last = null;
  var dropped = false;
  function start() {
    var source = new EventSource(stream);
    source.onopen = function () {
      state = "live";
      said();
      // Back after a drop: what changed meanwhile was not heard.
      if (dropped) reread();
      dropped = false;
    };
    source.onerror = function () {
      state = "reconnecting";
      dropped = true;
      said();
    };
    source.addEventListener("signed_out", function () {
      location.reload();
    });
    source.addEventListener("inbox", function (ev) {
      var inbox = JSON.parse(ev.data);
      var total = inbox.total;
      var changed = pending !== null && pending !== total;
      pending = total;
      said();
      if (call) return;
      var ids = inbox.pending
        .map(function (e) {
          return e.executionId;
        })
        .sort()
        .join(",");
      parsed(function () {
        if (changed || ids !== shownIds()) reread();
      });
    });
    // A call's page: its view, on each change.
    source.onmessage = function (ev) {
      var view = JSON.parse(ev.data);
      var first = last === null;
      var news = ev.data !== last;
      last = ev.data;
      parsed(function () {
        if (first ? view.state !== shownState() : news) reread();
      });
    };
  }

  // The clocks tick as the console's do. Each carries its distance from the
  // server's now when the page was drawn (data-left-ms), so a phone's own
  // clock being off does not matter. The words mirror countdown()
  // (components/clock.rs), relative() and duration() (time_fmt.rs).
  function plural(n, noun) {
    return n + " " + noun + (n === 1 ? "" : "s");
  }
  var clocks = {
    countdown: function (left) {
      if (left <= 0) return "expired";
      var s = Math.floor(left / 1000), two = function (n) { return (n < 10 ? "0" : "") + n; };
      return s >= 3600
        ? Math.floor(s / 3600) + ":" + two(Math.floor((s % 3600) / 60)) + ":" + two(s % 60)
        : Math.floor(s / 60) + ":" + two(s % 60);
    },
    relative: function (left) {
      var delta = Math.trunc(left / 1000), secs = Math.abs(delta), amount;
      if (secs <= 4) return "just now";
      if (secs <= 59) amount = secs + " s";
      else if (secs <= 3599) amount = Math.floor(secs / 60) + " min";
      else if (secs <= 86399) amount = Math.floor(secs / 3600) + " h";
      else amount = Math.floor(secs / 86400) + " d";
      return delta < 0 ? amount + " ago" : "in " + amount;
    },
    duration: function (left) {
      var secs = Math.floor(Math.max(0, -left) / 1000);
      if (secs <= 119) return plural(secs, "second");
      if (secs <= 7199) return plural(Math.ceil(secs / 60), "minute");
      return plural(Math.ceil(secs / 3600), "hour");
    },
  };
  var drawn = Date.now(); // when the shown <main> came from the server
  function tick() {
    var gone = Date.now() - drawn;
    document.querySelectorAll("main [data-clock]").forEach(function (el) {
      var words = clocks[el.getAttribute("data-clock")];
      var left = Number(el.getAttribute("data-left-ms"));
      if (!words || !isFinite(left)) return;
      var text = words(left - gone);
      if (el.textContent !== text) el.textContent = text;
    });
  }
  setInterval(tick, 1000);

  // The stream opens while the rest of the page loads; the status line
  // says so once it is parsed.
  start();
  document.addEventListener("DOMContentLoaded", said);
})();
