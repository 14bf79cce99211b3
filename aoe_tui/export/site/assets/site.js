"use strict";
/* aoe-tui cup site: the one script. No network; data comes from <script type="application/json"> blocks,
   text is written with textContent only. Each page kind has its init, chosen by <body data-page>. */

/* ---- heat page ---- */
/* The replay never reduces events: the page's view after event i is payload.initial with payload.frames[0..i]
   applied (aoe_tui/export/site/heat.py). Going backwards restarts from the nearest checkpoint. */
function initHeat() {
  var dataEl = document.getElementById("replay-data");
  if (!dataEl) return;
  var P = JSON.parse(dataEl.textContent);
  var events = P.events || [], frames = P.frames || [], N = events.length;
  var finalMs = Math.max(P.match.final_ms || 0, N ? events[N - 1].ms : 0);
  var LANE_KINDS = {competitor_state_changed: 1, milestone_passed: 1, milestone_failed: 1,
    durable_deployment_completed: 1, usage_charged: 1, agent_interrupted: 1, agent_terminated: 1};
  var CHECK_EVERY = 250, SILENCE_MS = 5000, TERM_LINES = 6, FEED_LINES = 8;
  var mids = (P.milestones || []).map(function (m) { return m.id; });
  var usage = {};
  (P.territories || []).forEach(function (t) { if (t.agent) usage[t.agent] = !!t.usage; });

  /* reach[i]: the latest ms among events 0..i, so "events with ms <= clock" is a prefix even if a log's
     elapsed_ms ever steps back */
  var reach = new Array(N), hi = 0;
  for (var i = 0; i < N; i++) { hi = Math.max(hi, events[i].ms || 0); reach[i] = hi; }
  function countAt(ms) { /* how many events have reach <= ms */
    var lo = 0, up = N;
    while (lo < up) { var mid = (lo + up) >> 1; if (reach[mid] <= ms) lo = mid + 1; else up = mid; }
    return lo;
  }

  var view = Object.assign({}, P.initial), applied = 0, clockMs = 0, speed = 20, playing = false;
  var checkpoints = [Object.assign({}, P.initial)]; /* checkpoints[k]: the view after k*CHECK_EVERY events */
  var changed = {};
  function applyTo(n) {
    if (n < applied) {
      var k = Math.min(Math.floor(n / CHECK_EVERY), checkpoints.length - 1);
      view = Object.assign({}, checkpoints[k]);
      applied = k * CHECK_EVERY;
      changed = null; /* everything */
    }
    while (applied < n) {
      var f = frames[applied];
      for (var key in f) {
        if (Object.prototype.hasOwnProperty.call(f, key)) { view[key] = f[key]; if (changed) changed[key] = 1; }
      }
      applied++;
      if (applied % CHECK_EVERY === 0 && checkpoints.length === applied / CHECK_EVERY) {
        checkpoints.push(Object.assign({}, view));
      }
    }
  }

  function pad(n, w) { var s = String(n); while (s.length < w) s = "0" + s; return s; }
  function fmtClock(ms) {
    ms = Math.max(0, Math.floor(ms || 0));
    return pad(Math.floor(ms / 60000), 2) + ":" + pad(Math.floor(ms / 1000) % 60, 2) + "." + (Math.floor(ms / 100) % 10);
  }
  function fmtValue(key, v) {
    var kind = key.split("/")[0];
    if (kind === "d") return v === null || v === undefined ? "–" : fmtClock(v);
    if (kind === "$") return "$" + ((v || 0) / 1e6).toFixed(4);
    if (kind === "i" || kind === "o") return (v || 0).toLocaleString("en-US");
    if (kind === "f") return v || "";
    if ((v === null || v === undefined) && kind === "m") return P.match.fog ? "unknown" : "pending";
    if (v === null || v === undefined) return "–";
    return String(v);
  }
  /* an event's detail (the verifier's or agent's own words, made visible by the site) when its
     one-line summary does not already show it whole (cut, or characters the summary drops) */
  function detailOf(ev) {
    var r = ev.raw, d = r && (typeof r.detail === "string" ? r.detail : typeof r.reason === "string" ? r.reason : "");
    return d && ev.text.indexOf(d) < 0 ? d : "";
  }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  /* ---- DOM ---- */
  var playBtn = document.getElementById("play"), stepBtn = document.getElementById("step"),
      backBtn = document.getElementById("step-back"), scrub = document.getElementById("scrub"),
      clockEl = document.getElementById("clock"), feed = document.getElementById("feed"),
      evPos = document.getElementById("ev-pos"), inspHead = document.getElementById("insp-head"),
      inspText = document.getElementById("insp-text"), inspRaw = document.getElementById("insp-raw");
  var speedBtns = Array.prototype.slice.call(document.querySelectorAll("#replay button[data-speed]"));
  var valueEls = Array.prototype.slice.call(document.querySelectorAll("[data-v]"));
  var byKey = {};
  valueEls.forEach(function (e) { var k = e.getAttribute("data-v"); (byKey[k] = byKey[k] || []).push(e); });
  var maps = Array.prototype.slice.call(document.querySelectorAll(".map[data-territory]")).map(function (m) {
    return {t: m.getAttribute("data-territory"), nodes: Array.prototype.slice.call(m.querySelectorAll("[data-node]"))};
  });
  var terms = Array.prototype.slice.call(document.querySelectorAll(".term[data-agent]")).map(function (t) {
    return {agent: t.getAttribute("data-agent"), lines: t.querySelector(".term-lines"), note: t.querySelector(".term-note"),
            shown: -2, silence: ""};
  });
  scrub.max = String(finalMs);

  /* lanes: one marker per lane-kind event, positioned with CSSOM (the CSP forbids style attributes) */
  var lanes = {}, fills = [];
  Array.prototype.slice.call(document.querySelectorAll(".lane[data-territory]")).forEach(function (l) {
    lanes[l.getAttribute("data-territory")] = l.querySelector(".lane-track");
    fills.push(l.querySelector(".lane-fill"));
  });
  events.forEach(function (ev, idx) {
    if (!LANE_KINDS[ev.kind] || !ev.t || !lanes[ev.t]) return;
    var m = el("button", "mk k-" + ev.kind);
    m.type = "button";
    m.title = fmtClock(ev.ms) + " " + ev.text;
    m.setAttribute("aria-label", m.title);
    m.style.left = (finalMs ? Math.min(100, 100 * ev.ms / finalMs) : 0) + "%";
    m.addEventListener("click", function () { pause(); seekEvent(idx + 1); });
    lanes[ev.t].appendChild(m);
  });

  function nodeState(t, milestone) {
    if (milestone) return view["m/" + t + "/" + milestone] || (P.match.fog ? "unknown" : "pending");
    if (view["d/" + t] !== null && view["d/" + t] !== undefined) return "durable";
    if (view["t/" + t] === "eliminated") return "failed";
    var states = mids.map(function (m) { return view["m/" + t + "/" + m]; });
    if (states.some(function (s) { return s === "healthy" || s === "durable"; })) return "healthy";
    if (states.length && states.every(function (s) { return s === undefined || s === null || s === "unknown"; })) return "unknown";
    return "pending";
  }

  function renderValues() {
    var keys = changed ? Object.keys(changed) : Object.keys(byKey);
    keys.forEach(function (k) {
      (byKey[k] || []).forEach(function (e) {
        var v = view[k];
        if (e.hasAttribute("data-na")) { e.textContent = "n/a"; return; }
        if (v === undefined && (k.charAt(0) === "i" || k.charAt(0) === "o" || k.charAt(0) === "$")) {
          e.textContent = "–"; return;
        }
        var text = fmtValue(k, v);
        e.textContent = text;
        e.setAttribute("data-state", v === null || v === undefined ? (k.charAt(0) === "m" ? text : "") : String(v));
      });
    });
    maps.forEach(function (m) {
      m.nodes.forEach(function (n) {
        var s = nodeState(m.t, n.getAttribute("data-milestone"));
        if (n.getAttribute("data-state") !== s) n.setAttribute("data-state", s);
      });
    });
    changed = {};
  }

  function lastAt(lines, ms) { /* index of the last [ms, line] with ms <= clock, or -1 */
    var lo = 0, up = lines.length;
    while (lo < up) { var mid = (lo + up) >> 1; if (lines[mid][0] <= ms) lo = mid + 1; else up = mid; }
    return lo - 1;
  }
  function renderTerms() {
    terms.forEach(function (t) {
      var lines = (P.activity || {})[t.agent] || [];
      var k = lastAt(lines, clockMs);
      if (k !== t.shown) {
        t.shown = k;
        while (t.lines.firstChild) t.lines.removeChild(t.lines.firstChild);
        for (var j = Math.max(0, k - TERM_LINES + 1); j <= k; j++) {
          var row = el("div", "tl");
          row.appendChild(el("span", "tms", fmtClock(lines[j][0])));
          row.appendChild(document.createTextNode(" " + lines[j][1]));
          t.lines.appendChild(row);
        }
      }
      var note = "";
      if (!lines.length) note = "no agent activity recorded";
      else if (k < 0) note = clockMs > 0 ? "… waiting for the first tool activity" : "";
      else {
        var quiet = clockMs - lines[k][0];
        var running = view["a/" + t.agent] === "running";
        if (quiet >= SILENCE_MS && running) note = "… no observable tool activity for " + Math.floor(quiet / 1000) + "s";
      }
      if (note !== t.silence) { t.silence = note; t.note.textContent = note; }
    });
  }

  function describe(idx) { /* "#seq · mm:ss.d · kind · territory" */
    var ev = events[idx];
    return "#" + ev.seq + " · " + fmtClock(ev.ms) + " · " + ev.kind + (ev.t ? " · " + ev.t : "");
  }
  function showInspector() {
    if (!applied) {
      inspHead.textContent = "before the first event"; inspText.textContent = ""; inspRaw.textContent = ""; return;
    }
    var ev = events[applied - 1];
    inspHead.textContent = describe(applied - 1);
    inspText.textContent = ev.text;
    inspText.className = "tone-" + (ev.tone || "dim");
    inspRaw.textContent = ev.raw === null || ev.raw === undefined ? "see events.jsonl (this event's raw JSON is not carried in the page)"
      : JSON.stringify(ev.raw, null, 2);
  }
  var feedShown = -1;
  function renderFeed() {
    if (feedShown === applied) return;
    feedShown = applied;
    evPos.textContent = applied + " / " + N;
    while (feed.firstChild) feed.removeChild(feed.firstChild);
    for (var j = applied - 1; j >= Math.max(0, applied - FEED_LINES); j--) {
      var ev = events[j];
      var li = el("li", "tone-" + (ev.tone || "dim") + (j === applied - 1 ? " current" : ""));
      var b = el("button", "", "");
      b.type = "button";
      b.appendChild(el("span", "mono tms", fmtClock(ev.ms) + " "));
      if (ev.t && ev.text.indexOf(ev.t) !== 0) b.appendChild(el("span", "mono tt", ev.t));
      b.appendChild(document.createTextNode(ev.text));
      var det = detailOf(ev);
      if (det) b.appendChild(el("span", "detail mono", det));
      b.addEventListener("click", (function (n) { return function () { pause(); seekEvent(n); }; })(j + 1));
      li.appendChild(b);
      feed.appendChild(li);
    }
    if (!applied) feed.appendChild(el("li", "muted", "press ▶ or → to start"));
    showInspector();
  }

  function render() {
    clockEl.textContent = fmtClock(clockMs);
    scrub.value = String(Math.min(clockMs, finalMs));
    var pct = finalMs ? Math.min(100, 100 * clockMs / finalMs) : 100;
    fills.forEach(function (f) { f.style.width = pct + "%"; });
    renderValues();
    renderTerms();
    renderFeed();
    var atEnd = applied >= N && clockMs >= finalMs;
    if (atEnd && playing) { playing = false; }
    document.body.dataset.replayState = atEnd ? "final" : playing ? "playing" : "paused";
    playBtn.textContent = playing ? "⏸" : "▶";
    playBtn.setAttribute("aria-label", playing ? "pause" : "play");
    playBtn.setAttribute("aria-pressed", playing ? "true" : "false");
  }

  function seekClock(ms) { clockMs = Math.max(0, Math.min(ms, finalMs)); applyTo(countAt(clockMs)); render(); }
  function seekEvent(n) { /* show the race right after event n-1 (n events applied) */
    n = Math.max(0, Math.min(n, N));
    applyTo(n);
    clockMs = n >= N ? finalMs : n ? Math.min(events[n - 1].ms, finalMs) : 0;
    render();
  }

  var lastTs = null;
  /* the next frame: requestAnimationFrame, or a timer when frames are not drawn (a hidden tab, headless) */
  function schedule() {
    var done = false;
    function go() { if (!done) { done = true; tick(performance.now()); } }
    requestAnimationFrame(go);
    setTimeout(go, 150);
  }
  function tick(ts) {
    if (!playing) return;
    if (lastTs !== null) {
      clockMs = Math.min(finalMs, clockMs + (ts - lastTs) * speed);
      applyTo(Math.max(applied, countAt(clockMs)));
    }
    lastTs = ts;
    if (clockMs >= finalMs && applied >= N) playing = false;
    render();
    if (playing) schedule();
  }
  function play() {
    if (playing) return;
    if (applied >= N && clockMs >= finalMs) { applyTo(0); clockMs = 0; }
    playing = true; lastTs = null;
    render();
    schedule();
  }
  function pause() { if (playing) { playing = false; render(); } }

  playBtn.addEventListener("click", function () { if (playing) pause(); else play(); });
  stepBtn.addEventListener("click", function () { pause(); seekEvent(applied + 1); });
  backBtn.addEventListener("click", function () { pause(); seekEvent(applied - 1); });
  speedBtns.forEach(function (b) {
    b.addEventListener("click", function () {
      speed = Number(b.getAttribute("data-speed")) || 20;
      speedBtns.forEach(function (o) { o.setAttribute("aria-pressed", o === b ? "true" : "false"); });
    });
  });
  scrub.addEventListener("input", function () {
    pause();
    var v = Number(scrub.value), stepTop = Math.floor(finalMs / 100) * 100;
    seekClock(v >= stepTop ? finalMs : v); /* the range snaps to 100 ms; its last step means the end */
  });
  /* keys: space always plays / pauses (even with a replay button focused: it does not re-click it),
     except in a form field or on a <summary> (space opens it); ←/→ step, except on the scrub (it moves
     itself); End goes to the last event */
  document.addEventListener("keydown", function (e) {
    if (e.altKey || e.ctrlKey || e.metaKey || e.defaultPrevented) return;
    var t = e.target, tag = (t && t.tagName) || "";
    if (tag === "TEXTAREA" || tag === "SELECT" || (t && t.isContentEditable)) return;
    if (e.key === " " || e.key === "Spacebar") {
      if (tag === "INPUT" || tag === "SUMMARY") return;
      e.preventDefault();
      if (!e.repeat) { if (playing) pause(); else play(); }
    } else if (e.key === "ArrowRight" || e.key === "ArrowLeft") {
      if (tag === "INPUT") return; /* the scrub (or another field) moves by itself */
      e.preventDefault(); pause(); seekEvent(applied + (e.key === "ArrowRight" ? 1 : -1));
    } else if (e.key === "End") {
      if (tag === "INPUT") return;
      e.preventDefault(); pause(); seekEvent(N);
    }
  });
  /* a button's own space activation fires on keyup: keep it from re-clicking the focused control */
  document.addEventListener("keyup", function (e) {
    if ((e.key === " " || e.key === "Spacebar") && e.target && e.target.tagName === "BUTTON") e.preventDefault();
  });

  /* the full timeline and the activity logs are built when first opened */
  var timeline = document.getElementById("timeline");
  if (timeline) {
    timeline.addEventListener("toggle", function () {
      var ol = timeline.querySelector("ol");
      if (!timeline.open || ol.firstChild) return;
      var frag = document.createDocumentFragment();
      events.forEach(function (ev, idx) {
        var li = el("li", "tone-" + (ev.tone || "dim"));
        var d = el("details"), s = el("summary");
        s.appendChild(el("span", "mono tms", fmtClock(ev.ms)));
        s.appendChild(el("span", "mono kind", ev.kind));
        s.appendChild(el("span", "txt", ev.text));
        var det = detailOf(ev);
        if (det) s.appendChild(el("span", "detail mono", det));
        d.appendChild(s);
        d.addEventListener("toggle", function () {
          if (!d.open || d.querySelector("pre")) return;
          var go = el("button", "go", "replay to here");
          go.type = "button";
          go.addEventListener("click", function () {
            pause(); seekEvent(idx + 1); document.getElementById("replay").scrollIntoView();
          });
          d.appendChild(go);
          d.appendChild(el("pre", "raw", ev.raw === null || ev.raw === undefined ? "see events.jsonl" : JSON.stringify(ev.raw, null, 2)));
        });
        li.appendChild(d);
        frag.appendChild(li);
      });
      ol.appendChild(frag);
    });
  }
  Array.prototype.slice.call(document.querySelectorAll("details.activity-log")).forEach(function (d) {
    d.addEventListener("toggle", function () {
      var pre = d.querySelector("pre");
      if (!d.open || pre.textContent) return;
      var lines = (P.activity || {})[d.getAttribute("data-agent")] || [];
      pre.textContent = lines.map(function (l) { return fmtClock(l[0]) + "  " + l[1]; }).join("\n");
    });
  });

  changed = null;
  render();
  /* #t=MS (or #e=N: after N events) opens the replay there, paused */
  var h = /^#([te])=(\d+)$/.exec(window.location.hash || "");
  if (h) { if (h[1] === "t") seekClock(Number(h[2])); else seekEvent(Number(h[2])); }
}

/* ---- home ---- */
function initHome() {
  /* The page works without script (folding tables open with <details>); nothing to wire yet beyond
     closing other rows' "more" toggles so one is open at a time per table. */
  document.querySelectorAll("table.fold").forEach(function (table) {
    table.addEventListener("toggle", function (ev) {
      var d = ev.target;
      if (!d.open) return;
      table.querySelectorAll("details.more[open]").forEach(function (o) { if (o !== d) o.open = false; });
    }, true);
  });
}

/* ---- leaderboard ---- */
function initLeaderboard() {
  initHome();
  var select = document.getElementById("treemap-measure");
  if (!select) return;
  var panels = document.querySelectorAll("#treemap .treemap-panel");
  function show() {
    panels.forEach(function (p) { p.hidden = p.dataset.measure !== select.value; });
  }
  select.addEventListener("change", show);
  show();
}

/* ---- dispatch: one init per page kind (<body data-page>) ---- */
(function () {
  var inits = { heat: initHeat, home: initHome, leaderboard: initLeaderboard };
  var init = inits[document.body.dataset.page];
  if (init) init();
})();
