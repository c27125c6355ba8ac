// netcl playground: turns runnable code blocks into editors with Run, Stop, Reset and Share, runs them on the
// server (POST run-api/stream, server-sent events), and shows the output, tensors, images, a live progress
// curve, the autotune decisions, kernel launches, timings and the device. Without this script a block shows its
// code and recorded output.
(function () {
  "use strict";
  var root = document.documentElement;
  var api = root.getAttribute("data-run-api");
  var playgroundUrl = root.getAttribute("data-playground-url");
  if (root.getAttribute("data-playground") !== "on" || !api) { return; }
  var SVG = "http://www.w3.org/2000/svg";

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    return e;
  }
  function fmt(ms) { return typeof ms === "number" ? (ms < 10 ? ms.toFixed(3) : ms.toFixed(1)) + " ms" : "–"; }
  function num(v) { return typeof v === "number" ? (Math.abs(v) >= 1e4 || (v !== 0 && Math.abs(v) < 1e-3) ? v.toExponential(3) : String(Math.round(v * 1e4) / 1e4)) : "–"; }

  // Share links carry the code as URL-safe base64 of its UTF-8 bytes.
  function encode(text) {
    var bytes = new TextEncoder().encode(text), bin = "";
    for (var i = 0; i < bytes.length; i++) { bin += String.fromCharCode(bytes[i]); }
    return btoa(bin).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }
  function decode(text) {
    var b64 = text.replace(/-/g, "+").replace(/_/g, "/");
    while (b64.length % 4) { b64 += "="; }
    var bin = atob(b64), bytes = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) { bytes[i] = bin.charCodeAt(i); }
    return new TextDecoder().decode(bytes);
  }

  function table(headers, cls) {
    var t = el("table", cls);
    var tr = el("tr");
    headers.forEach(function (h) { tr.appendChild(el("th", null, h)); });
    var head = el("thead");
    head.appendChild(tr);
    t.appendChild(head);
    var body = el("tbody");
    t.appendChild(body);
    return { table: t, body: body };
  }
  function row(body, cells) {
    var tr = el("tr");
    cells.forEach(function (c) {
      var td = el("td");
      if (c instanceof Node) { td.appendChild(c); } else { td.textContent = c; }
      tr.appendChild(td);
    });
    body.appendChild(tr);
    return tr;
  }

  // The live curve: one polyline per numeric field of the progress values (x is `step` when present).
  function Curve(container) {
    this.points = [];
    this.box = el("div", "run-curve");
    this.svg = document.createElementNS(SVG, "svg");
    this.svg.setAttribute("viewBox", "0 0 400 120");
    this.svg.setAttribute("preserveAspectRatio", "none");
    this.svg.setAttribute("role", "img");
    this.svg.setAttribute("aria-label", "progress curve");
    this.legend = el("p", "run-curve-legend");
    this.box.appendChild(this.svg);
    this.box.appendChild(this.legend);
    container.appendChild(this.box);
  }
  Curve.prototype.add = function (value) {
    if (!value || typeof value !== "object") { return; }
    this.points.push(value);
    var keys = Object.keys(value).filter(function (k) { return k !== "step" && typeof value[k] === "number"; });
    var self = this;
    while (this.svg.firstChild) { this.svg.removeChild(this.svg.firstChild); }
    var legend = [];
    keys.slice(0, 4).forEach(function (key, series) {
      var pts = self.points.filter(function (p) { return typeof p[key] === "number" && isFinite(p[key]); });
      if (!pts.length) { return; }
      var xs = pts.map(function (p, i) { return typeof p.step === "number" ? p.step : i; });
      var ys = pts.map(function (p) { return p[key]; });
      var x0 = Math.min.apply(null, xs), x1 = Math.max.apply(null, xs);
      var y0 = Math.min.apply(null, ys), y1 = Math.max.apply(null, ys);
      var line = document.createElementNS(SVG, "polyline");
      line.setAttribute("points", pts.map(function (p, i) {
        var x = 4 + (x1 > x0 ? (xs[i] - x0) / (x1 - x0) : 0) * 392;
        var y = 116 - (y1 > y0 ? (ys[i] - y0) / (y1 - y0) : 0.5) * 112;
        return x.toFixed(1) + "," + y.toFixed(1);
      }).join(" "));
      line.setAttribute("class", "series-" + series);
      self.svg.appendChild(line);
      legend.push(key + " " + num(ys[ys.length - 1]) + " (" + num(y0) + " … " + num(y1) + ")");
    });
    this.legend.textContent = legend.join(" · ") + " · " + this.points.length + " points";
  };

  function renderTensor(o) {
    var box = el("div", "run-tensor");
    box.appendChild(el("p", "run-tensor-title", (o.title || "tensor") + "  [" + o.shape.join(", ") + "] " + o.dtype + " · " + o.numel + " elements"));
    var t = table(["min", "max", "mean", "non-finite", "preview"], "run-table");
    row(t.body, [num(o.min), num(o.max), num(o.mean), String(o.non_finite), o.preview.map(num).join(", ") + (o.numel > o.preview.length ? ", …" : "")]);
    box.appendChild(t.table);
    return box;
  }

  function renderDecisions(decisions) {
    var box = el("details", "run-decisions");
    box.open = true;
    box.appendChild(el("summary", null, "Autotune decisions (" + decisions.length + ")"));
    var t = table(["kernel", "shape key", "candidate", "time", "", "source"], "run-table decisions-table");
    // A loop takes the same decision many times; each distinct one is shown once, with its count.
    var seen = {}, distinct = [];
    decisions.forEach(function (d) {
      var key = d.kernel + "|" + d.shape_key + "|" + d.source + "|" + d.winner_label;
      if (seen[key]) { seen[key].count++; return; }
      seen[key] = { d: d, count: 1 };
      distinct.push(seen[key]);
    });
    distinct.forEach(function (entry) {
      var d = entry.d;
      var slowest = 0;
      d.candidates.forEach(function (c) { if (typeof c.ms === "number" && c.ms > slowest) { slowest = c.ms; } });
      var cands = d.candidates.length ? d.candidates : [{ label: d.winner_label, ms: null }];
      cands.forEach(function (c, i) {
        var bar = el("meter");
        bar.min = 0; bar.max = slowest || 1; bar.value = typeof c.ms === "number" ? c.ms : 0;
        var winner = c.label === d.winner_label;
        var tr = row(t.body, [i === 0 ? d.kernel : "", i === 0 ? d.shape_key : "", c.label + (winner ? " ✓" : ""),
          c.error ? "failed: " + c.error : fmt(c.ms), bar, i === 0 ? d.source + (d.source === "measured" ? " in " + fmt(d.tune_ms) : "") + (entry.count > 1 ? " ×" + entry.count : "") : ""]);
        if (winner) { tr.className = "winner"; }
      });
    });
    box.appendChild(t.table);
    return box;
  }

  function renderLaunches(launches) {
    var box = el("details", "run-launches");
    box.appendChild(el("summary", null, "Kernel launches (" + launches.length + ")"));
    var t = table(["kernel", "global", "local", "device time"], "run-table");
    launches.slice(0, 100).forEach(function (l) {
      row(t.body, [l.kernel, (l.global || []).join(" × "), l.local ? l.local.join(" × ") : "auto", fmt(l.ms)]);
    });
    box.appendChild(t.table);
    if (launches.length > 100) { box.appendChild(el("p", "muted", "… " + (launches.length - 100) + " more")); }
    return box;
  }

  function renderResult(area, r, editor) {
    var out = el("div", "run-output");
    (r.outputs || []).forEach(function (o) {
      if (o.kind === "text") { out.appendChild(el("pre", "run-text", o.text)); }
      else if (o.kind === "tensor") { out.appendChild(renderTensor(o)); }
      else if (o.kind === "image") {
        var fig = el("figure", "run-image");
        var img = el("img");
        img.src = o.png; img.alt = o.title || "tensor image"; img.width = Math.max(o.width, 1) * Math.max(1, Math.floor(256 / Math.max(o.width, o.height, 1)));
        fig.appendChild(img);
        if (o.title) { fig.appendChild(el("figcaption", null, o.title)); }
        out.appendChild(fig);
      }
    });
    if (r.value !== null && r.value !== undefined) { out.appendChild(el("pre", "run-value", "→ " + r.value)); }
    if (r.truncated) { out.appendChild(el("p", "notice", "Output was cut at the server's output limit.")); }
    area.appendChild(out);
    if (r.error) {
      var e = r.error;
      var where = e.line ? " at line " + e.line + (e.column ? ", column " + e.column : "") : "";
      var box = el("div", "run-error notice error");
      box.setAttribute("role", "alert");
      box.appendChild(el("strong", "run-error-kind", e.kind));
      box.appendChild(document.createTextNode(where + ": " + e.message));
      area.appendChild(box);
      if (e.line) { editor.markLine(e.line, e.column); }
    }
    if (r.decisions && r.decisions.length) { area.appendChild(renderDecisions(r.decisions)); }
    if (r.launches && r.launches.length) { area.appendChild(renderLaunches(r.launches)); }
    var t = r.timings || {};
    var meta = el("p", "run-meta");
    meta.textContent = [
      r.device ? "device " + r.device.name + " (" + r.device.kind + ", " + r.device.platform + ")" : "no device",
      "queue " + fmt(t.queue_ms), "parse " + fmt(t.parse_ms), "build " + fmt(t.build_ms), "tune " + fmt(t.tune_ms),
      "run " + fmt(t.run_ms), "device " + fmt(t.device_ms), "total " + fmt(t.total_ms)
    ].join(" · ");
    area.appendChild(meta);
    area.setAttribute("data-state", r.ok ? "ok" : "error");
  }

  // The editor: the block's <pre> gives way to a textarea with a line-number gutter.
  function Editor(block) {
    var pre = block.querySelector("pre");
    this.original = block.querySelector("pre code").textContent.replace(/\n$/, "");
    this.wrap = el("div", "editor");
    this.gutter = el("div", "editor-gutter");
    this.gutter.setAttribute("aria-hidden", "true");
    this.area = el("textarea", "editor-text");
    this.area.spellcheck = false;
    this.area.setAttribute("aria-label", "Code (Ctrl+Enter runs)");
    this.area.value = this.original;
    this.wrap.appendChild(this.gutter);
    this.wrap.appendChild(this.area);
    pre.hidden = true;
    pre.parentNode.insertBefore(this.wrap, pre);
    var self = this;
    this.area.addEventListener("input", function () { self.refresh(); });
    this.area.addEventListener("scroll", function () { self.gutter.scrollTop = self.area.scrollTop; });
    this.refresh();
  }
  Editor.prototype.refresh = function () {
    var lines = this.area.value.split("\n").length;
    this.area.rows = Math.min(Math.max(lines, 3), 30);
    while (this.gutter.children.length < lines) { this.gutter.appendChild(el("span", null, String(this.gutter.children.length + 1))); }
    while (this.gutter.children.length > lines) { this.gutter.removeChild(this.gutter.lastChild); }
  };
  Editor.prototype.clearMark = function () {
    Array.prototype.forEach.call(this.gutter.children, function (s) { s.classList.remove("error-line"); });
    this.wrap.removeAttribute("data-error-line");
  };
  Editor.prototype.markLine = function (line, column) {
    var span = this.gutter.children[line - 1];
    if (span) { span.classList.add("error-line"); }
    this.wrap.setAttribute("data-error-line", String(line));
    var lines = this.area.value.split("\n");
    var start = 0;
    for (var i = 0; i < line - 1 && i < lines.length; i++) { start += lines[i].length + 1; }
    var end = start + (lines[line - 1] || "").length;
    try { this.area.setSelectionRange(start + Math.max((column || 1) - 1, 0), end); } catch (e) { /* not focusable now */ }
  };

  // Reads a server-sent event stream from a fetch response, calling onEvent(name, data) per event.
  function readEvents(response, onEvent) {
    var reader = response.body.getReader();
    var decoder = new TextDecoder();
    var buffer = "";
    function pump() {
      return reader.read().then(function (chunk) {
        if (chunk.done) { return; }
        buffer += decoder.decode(chunk.value, { stream: true });
        var at;
        while ((at = buffer.indexOf("\n\n")) >= 0) {
          var block = buffer.slice(0, at);
          buffer = buffer.slice(at + 2);
          var name = "message", data = "";
          block.split("\n").forEach(function (line) {
            if (line.indexOf("event: ") === 0) { name = line.slice(7); }
            else if (line.indexOf("data: ") === 0) { data += line.slice(6); }
          });
          try { onEvent(name, JSON.parse(data)); } catch (e) { /* a malformed event is skipped */ }
        }
        return pump();
      });
    }
    return pump();
  }

  function setup(block) {
    var head = block.querySelector(".code-head");
    var area = block.querySelector("[data-run-result]");
    if (!head || !area) { return; }
    var editor = new Editor(block);
    var bar = el("span", "run-buttons");
    var run = el("button", "run-btn", "Run");
    var stop = el("button", "stop-btn", "Stop");
    var reset = el("button", "reset-btn", "Reset");
    var share = el("button", "share-btn", "Share");
    [run, stop, reset, share].forEach(function (b) { b.type = "button"; bar.appendChild(b); });
    stop.hidden = true;
    head.insertBefore(bar, head.querySelector(".copy-btn"));
    var status = el("span", "run-status");
    status.setAttribute("aria-live", "polite");
    head.insertBefore(status, bar);
    var current = null;

    function finish() {
      run.disabled = false;
      stop.hidden = true;
      current = null;
    }
    function start() {
      if (current) { return; }
      editor.clearMark();
      area.hidden = false;
      area.textContent = "";
      area.setAttribute("data-state", "running");
      var curve = null;
      var job = { controller: new AbortController(), id: null, done: false, started: performance.now() };
      current = job;
      run.disabled = true;
      stop.hidden = false;
      status.textContent = "queued…";
      fetch(api + "/stream", {
        method: "POST",
        headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
        body: JSON.stringify({ code: editor.area.value }),
        signal: job.controller.signal
      }).then(function (response) {
        var type = response.headers.get("content-type") || "";
        if (type.indexOf("text/event-stream") < 0) {
          return response.json().then(function (body) {
            var retry = response.headers.get("retry-after");
            var message = (body.error && body.error.message) || ("HTTP " + response.status);
            renderResult(area, { ok: false, error: { kind: (body.error && body.error.kind) || "http", message: message + (retry ? " (retry in " + retry + " s)" : "") } }, editor);
            status.textContent = "";
          });
        }
        return readEvents(response, function (name, data) {
          if (name === "queued") { job.id = data.id; }
          else if (name === "started") { status.textContent = "running…"; }
          else if (name === "progress") {
            if (!curve) { curve = new Curve(area); }
            curve.add(data);
          } else if (name === "result") {
            job.done = true;
            var chart = curve && curve.box;
            area.textContent = "";
            if (chart) { area.appendChild(chart); }
            renderResult(area, data, editor);
            if (area.getBoundingClientRect().top > window.innerHeight) { area.scrollIntoView({ block: "nearest" }); }
            var ms = performance.now() - job.started;
            status.textContent = (data.ok ? "done" : "failed") + " in " + Math.round(ms) + " ms";
            area.setAttribute("data-roundtrip-ms", ms.toFixed(1));
          }
        });
      }).catch(function (e) {
        if (!job.done) {
          renderResult(area, { ok: false, error: { kind: job.controller.signal.aborted ? "cancelled" : "network", message: job.controller.signal.aborted ? "the run was stopped" : String(e) } }, editor);
          status.textContent = job.controller.signal.aborted ? "stopped" : "failed";
        }
      }).then(finish);
    }
    run.addEventListener("click", start);
    stop.addEventListener("click", function () {
      var job = current;
      if (!job) { return; }
      if (job.id) { fetch(api + "/" + job.id + "/cancel", { method: "POST" }).catch(function () { /* the abort below stops it too */ }); }
      job.controller.abort();
    });
    reset.addEventListener("click", function () {
      editor.area.value = editor.original;
      editor.refresh();
      editor.clearMark();
      area.hidden = true;
      area.textContent = "";
      status.textContent = "";
    });
    share.addEventListener("click", function () {
      var url = new URL(playgroundUrl || window.location.pathname, window.location.href);
      url.hash = "code=" + encode(editor.area.value);
      var link = url.toString();
      status.textContent = "";
      var a = el("a", "share-link", "link");
      a.href = link;
      status.appendChild(document.createTextNode("share: "));
      status.appendChild(a);
      if (navigator.clipboard && navigator.clipboard.writeText) { navigator.clipboard.writeText(link).then(function () { status.firstChild.textContent = "copied: "; }, function () { /* the link is shown */ }); }
    });
    editor.area.addEventListener("keydown", function (e) {
      if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); start(); }
    });
    return editor;
  }

  var editors = [];
  document.querySelectorAll(".code-block[data-runnable='true']").forEach(function (block) {
    var editor = setup(block);
    if (editor) { editors.push({ block: block, editor: editor }); }
  });

  // The playground page: a shared link's code opens in the editor; examples load into it.
  var main = document.querySelector(".playground-editor");
  var mainEditor = null;
  editors.forEach(function (e) { if (e.block === main) { mainEditor = e.editor; } });
  if (mainEditor) {
    var match = /(?:^#|&)code=([A-Za-z0-9_-]*)/.exec(window.location.hash);
    if (match) {
      try { mainEditor.area.value = decode(match[1]); mainEditor.refresh(); } catch (e) { /* a broken link keeps the default */ }
    }
    document.querySelectorAll(".example-load").forEach(function (button) {
      button.hidden = false;
      button.addEventListener("click", function () {
        var code = document.getElementById(button.getAttribute("data-example"));
        if (!code) { return; }
        mainEditor.area.value = code.textContent.replace(/\n$/, "");
        mainEditor.refresh();
        mainEditor.area.focus();
        main.scrollIntoView({ block: "start" });
      });
    });
  }
})();
