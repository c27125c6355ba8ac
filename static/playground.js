// netcl playground: turns runnable code blocks into editors with Run, Stop, Reset and Share, runs them on the
// server (POST run-api/stream, server-sent events), and shows the output, tensors, images, a live progress
// curve, the autotune decisions, kernel launches, timings and the device. A device picker runs a block on any of
// the server's devices (GET run-api/devices), and "Run on all" runs it on each in turn and shows the results side
// by side. Without this script a block shows its code and recorded output.
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

  // The live curve: the fields the snippet names (`progress(#{loss: …})`, or `loss`/`train_loss` from `fit`),
  // against one x axis that runs across epochs (a `step` that restarts each epoch is continued), with axes, ticks
  // and a legend.
  var SKIP = { step: 1, epoch: 1, batch: 1, lr: 1, samples_per_second: 1, seconds: 1, elapsed_ms: 1, kind: 1 };
  function Curve(container) {
    this.points = [];
    this.lastStep = null; this.offset = 0; this.x = 0;
    this.box = el("div", "run-curve");
    this.svg = document.createElementNS(SVG, "svg");
    this.svg.setAttribute("viewBox", "0 0 440 160");
    this.svg.setAttribute("role", "img");
    this.svg.setAttribute("aria-label", "progress curve");
    this.legend = el("p", "run-curve-legend");
    this.box.appendChild(this.svg);
    this.box.appendChild(this.legend);
    container.appendChild(this.box);
  }
  function svgEl(tag, attrs, text) {
    var e = document.createElementNS(SVG, tag);
    Object.keys(attrs).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (text !== undefined) { e.textContent = text; }
    return e;
  }
  function flatten(value) {
    // `fit` streams {kind: "step", loss, …} or {step: {...}}: numeric fields at the top level or one level down.
    var out = {};
    Object.keys(value).forEach(function (k) {
      var v = value[k];
      if (typeof v === "number") { out[k] = v; }
      else if (v && typeof v === "object") { Object.keys(v).forEach(function (j) { if (typeof v[j] === "number" && out[j] === undefined) { out[j] = v[j]; } }); }
    });
    return out;
  }
  Curve.prototype.fields = function () {
    var seen = {};
    this.points.forEach(function (p) { Object.keys(p.v).forEach(function (k) { seen[k] = 1; }); });
    if (seen.loss) { return ["loss"]; }
    if (seen.train_loss) { return ["train_loss"]; }
    return Object.keys(seen).filter(function (k) { return !SKIP[k]; }).slice(0, 3);
  };
  Curve.prototype.add = function (value) {
    if (!value || typeof value !== "object") { return; }
    var v = flatten(value);
    var x;
    if (typeof v.step === "number") {
      if (this.lastStep !== null && v.step <= this.lastStep) { this.offset = this.x + 1; }
      this.lastStep = v.step;
      x = this.offset + v.step;
    } else { x = this.points.length; }
    this.x = x;
    this.points.push({ x: x, v: v });
    this.draw();
  };
  Curve.prototype.draw = function () {
    var self = this, keys = this.fields();
    while (this.svg.firstChild) { this.svg.removeChild(this.svg.firstChild); }
    var L = 48, R = 432, T = 8, B = 136;
    var pts = this.points, xs = pts.map(function (p) { return p.x; });
    var ys = [];
    keys.forEach(function (k) { pts.forEach(function (p) { if (typeof p.v[k] === "number" && isFinite(p.v[k])) { ys.push(p.v[k]); } }); });
    if (!ys.length) { this.legend.textContent = pts.length + " progress values"; return; }
    var x0 = Math.min.apply(null, xs), x1 = Math.max.apply(null, xs);
    var y0 = Math.min.apply(null, ys), y1 = Math.max.apply(null, ys);
    if (y1 === y0) { y1 = y0 + 1; }
    if (x1 === x0) { x1 = x0 + 1; }
    function px(x) { return L + (x - x0) / (x1 - x0) * (R - L); }
    function py(y) { return B - (y - y0) / (y1 - y0) * (B - T); }
    var axes = svgEl("g", { "class": "run-curve-axes" });
    axes.appendChild(svgEl("line", { x1: L, y1: B, x2: R, y2: B }));
    axes.appendChild(svgEl("line", { x1: L, y1: T, x2: L, y2: B }));
    for (var i = 0; i <= 4; i++) {
      var yv = y0 + (y1 - y0) * i / 4, xv = x0 + (x1 - x0) * i / 4;
      axes.appendChild(svgEl("line", { "class": "tick", x1: L - 3, y1: py(yv), x2: L, y2: py(yv) }));
      axes.appendChild(svgEl("text", { x: L - 5, y: py(yv) + 3, "text-anchor": "end" }, num(yv)));
      axes.appendChild(svgEl("line", { "class": "tick", x1: px(xv), y1: B, x2: px(xv), y2: B + 3 }));
      axes.appendChild(svgEl("text", { x: px(xv), y: B + 13, "text-anchor": "middle" }, String(Math.round(xv))));
    }
    axes.appendChild(svgEl("text", { x: (L + R) / 2, y: 158, "text-anchor": "middle", "class": "axis-label" }, "step"));
    this.svg.appendChild(axes);
    var legend = [];
    keys.forEach(function (key, series) {
      var s = pts.filter(function (p) { return typeof p.v[key] === "number" && isFinite(p.v[key]); });
      if (!s.length) { return; }
      self.svg.appendChild(svgEl("polyline", {
        "class": "series-" + series, "data-field": key,
        points: s.map(function (p) { return px(p.x).toFixed(1) + "," + py(p.v[key]).toFixed(1); }).join(" ")
      }));
      legend.push(key + " " + num(s[s.length - 1].v[key]));
    });
    this.legend.textContent = "";
    legend.forEach(function (text, i) {
      var item = el("span", "legend-item series-" + i, text);
      self.legend.appendChild(item);
    });
    this.legend.appendChild(document.createTextNode(" · " + pts.length + " points"));
  };

  function renderTensor(o) {
    var box = el("div", "run-tensor");
    box.appendChild(el("p", "run-tensor-title", (o.title || "tensor") + "  [" + o.shape.join(", ") + "] " + o.dtype + " · " + o.numel + " elements"));
    var t = table(["min", "max", "mean", "non-finite", "preview"], "run-table");
    row(t.body, [num(o.min), num(o.max), num(o.mean), String(o.non_finite), o.preview.map(num).join(", ") + (o.numel > o.preview.length ? ", …" : "")]);
    box.appendChild(t.table);
    return box;
  }

  // Decisions: one line each ("conv2d_fwd_algo · N≤8 C=32 … → im2col, 4.2× faster than winograd, measured now")
  // with the source as a badge; the shape key's named fields and the candidates as labelled bars fold under it.
  function label(raw) {
    try { var v = JSON.parse(raw); return Array.isArray(v) ? v.join(" ") : (typeof v === "string" ? v : raw); } catch (e) { return raw; }
  }
  function renderDecisions(decisions, explained) {
    var box = el("section", "run-decisions");
    var seen = {}, distinct = [];
    decisions.forEach(function (d, i) {
      var key = d.kernel + "|" + d.shape_key + "|" + d.source + "|" + d.winner_label;
      if (seen[key]) { seen[key].count++; return; }
      seen[key] = { d: d, x: (explained || [])[i], count: 1 };
      distinct.push(seen[key]);
    });
    box.appendChild(el("h4", null, "Autotune decisions (" + distinct.length + (distinct.length < decisions.length ? " distinct of " + decisions.length : "") + ")"));
    distinct.forEach(function (entry) {
      var d = entry.d, x = entry.x || {};
      var item = el("details", "decision");
      item.setAttribute("data-kernel", d.kernel);
      var sum = el("summary");
      var badge = el("span", "badge source-" + d.source, d.source);
      sum.appendChild(badge);
      var text = x.line ? x.line.replace(d.winner_label, label(d.winner_label)) : d.kernel + " → " + label(d.winner_label);
      if (x.runner_up) { text = text.replace(x.runner_up, label(x.runner_up)); }
      sum.appendChild(el("span", "decision-line", text + (entry.count > 1 ? " (×" + entry.count + ")" : "")));
      item.appendChild(sum);
      var body = el("div", "decision-body");
      body.appendChild(el("p", "decision-key", "shape key " + d.shape_key + (x.fields ? " = " + x.fields : "") + " (≤: rounded up to a power of two, so one answer serves a class of shapes)"));
      if (d.note) { body.appendChild(el("p", "muted", d.note)); }
      var slowest = 0;
      d.candidates.forEach(function (c) { if (typeof c.ms === "number" && c.ms > slowest) { slowest = c.ms; } });
      var list = el("ul", "candidate-bars");
      (d.candidates.length ? d.candidates : [{ label: d.winner_label, ms: null }]).forEach(function (c) {
        var li = el("li", c.label === d.winner_label ? "winner" : null);
        li.appendChild(el("span", "cand-label", label(c.label) + (c.label === d.winner_label ? " ✓" : "")));
        var bar = el("span", "cand-bar");
        var fill = el("span", "cand-fill");
        fill.style.width = (typeof c.ms === "number" && slowest ? Math.max(2, 100 * c.ms / slowest) : 0) + "%";
        bar.appendChild(fill);
        li.appendChild(bar);
        li.appendChild(el("span", "cand-time", c.error ? "failed: " + c.error : fmt(c.ms)));
        list.appendChild(li);
      });
      body.appendChild(list);
      if (d.source === "measured") { body.appendChild(el("p", "muted", "measuring took " + fmt(d.tune_ms))); }
      item.appendChild(body);
      box.appendChild(item);
    });
    return box;
  }

  // Launches grouped by kernel; the launches made while the autotuner timed candidates are kept apart.
  function renderLaunches(launches) {
    var box = el("details", "run-launches");
    var real = launches.filter(function (l) { return !l.tuning; }), tuning = launches.filter(function (l) { return l.tuning; });
    box.appendChild(el("summary", null, "Kernel launches (" + real.length + (tuning.length ? ", and " + tuning.length + " while tuning" : "") + ")"));
    function group(list, title) {
      var by = {}, order = [];
      list.forEach(function (l) {
        if (!by[l.kernel]) { by[l.kernel] = { n: 0, ms: 0, global: l.global, local: l.local }; order.push(l.kernel); }
        by[l.kernel].n++; by[l.kernel].ms += l.ms || 0;
      });
      var t = table(["kernel", "launches", "device time", "global", "local"], "run-table launches-table");
      t.table.setAttribute("data-group", title);
      order.sort(function (a, b) { return by[b].ms - by[a].ms; }).forEach(function (k) {
        var g = by[k];
        row(t.body, [k, String(g.n), fmt(g.ms), (g.global || []).join(" × "), g.local ? g.local.join(" × ") : "auto"]);
      });
      box.appendChild(el("h5", null, title));
      box.appendChild(t.table);
    }
    group(real, "Launches that computed the result");
    if (tuning.length) { group(tuning, "Launches that timed candidates"); }
    return box;
  }

  // Where the time went: one bar split into parse, build, tune and run.
  function renderTimeBar(t) {
    var parts = [["parse", t.parse_ms], ["build", t.build_ms], ["tune", t.tune_ms], ["run", t.run_ms]];
    var total = parts.reduce(function (a, p) { return a + (p[1] || 0); }, 0);
    var box = el("div", "run-timebar");
    box.appendChild(el("p", "run-timebar-title", "Where the time went: " + fmt(t.total_ms)));
    var bar = el("div", "timebar");
    bar.setAttribute("role", "img");
    bar.setAttribute("aria-label", parts.map(function (p) { return p[0] + " " + fmt(p[1]); }).join(", "));
    parts.forEach(function (p) {
      if (!total || !p[1]) { return; }
      var seg = el("span", "seg seg-" + p[0]);
      seg.style.width = (100 * p[1] / total).toFixed(2) + "%";
      seg.title = p[0] + " " + fmt(p[1]);
      bar.appendChild(seg);
    });
    box.appendChild(bar);
    var legend = el("p", "timebar-legend");
    parts.forEach(function (p) { legend.appendChild(el("span", "key seg-" + p[0], p[0] + " " + fmt(p[1]))); });
    legend.appendChild(el("span", "key", "device " + fmt(t.device_ms)));
    box.appendChild(legend);
    return box;
  }

  // A file the run saved: a download link for the bytes the result carries under the same name.
  function renderFile(o, files) {
    var box = el("p", "run-file");
    var f = null;
    files.forEach(function (x) { if (x.name === o.name) { f = x; } });
    if (!f) {
      box.appendChild(el("span", "muted", o.name + " (" + o.bytes + " bytes) was replaced by a later save of the same name"));
      return box;
    }
    var a = el("a", "download-btn", "Download " + f.name);
    a.href = "data:application/octet-stream;base64," + f.data;
    a.setAttribute("download", f.name);
    box.appendChild(a);
    box.appendChild(el("span", "muted", " " + f.bytes + " bytes; load it again with the Upload button and load_model(\"" + f.name + "\")"));
    return box;
  }

  // A name the server accepts for an upload: letters, digits, `.`, `-`, `_`, not starting with a dot.
  function uploadName(name) {
    var n = String(name).replace(/[^A-Za-z0-9._-]/g, "_").replace(/\.\.+/g, ".").replace(/^\.+/, "");
    return (n || "upload").slice(-64);
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
        img.className = "pixelated";
        var cap = el("figcaption", null, o.title || "");
        if (typeof o.lo === "number" && typeof o.hi === "number") {
          var scale = el("span", "color-scale");
          scale.appendChild(el("span", "scale-lo", num(o.lo)));
          scale.appendChild(el("span", "scale-ramp"));
          scale.appendChild(el("span", "scale-hi", num(o.hi)));
          scale.title = "black = " + num(o.lo) + ", white = " + num(o.hi) + (o.width > 0 && o.png ? "; a grid scales each map to its own range" : "");
          cap.appendChild(scale);
        }
        fig.appendChild(cap);
        out.appendChild(fig);
      }
      else if (o.kind === "file") { out.appendChild(renderFile(o, r.files || [])); }
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
    if (r.decisions && r.decisions.length) { area.appendChild(renderDecisions(r.decisions, r.explained)); }
    if (r.launches && r.launches.length) { area.appendChild(renderLaunches(r.launches)); }
    var t = r.timings || {};
    if (r.timings) { area.appendChild(renderTimeBar(t)); }
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

  // The server's devices, fetched once for the page: {default, devices: [{index, name, kind, platform}]}, or
  // null when the server does not say (the picker then stays hidden and runs go to the server's device).
  var devicesOnce = null;
  function loadDevices() {
    if (!devicesOnce) {
      devicesOnce = fetch(api + "/devices", { headers: { Accept: "application/json" } })
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (d) { return d && Array.isArray(d.devices) && d.devices.length ? d : null; })
        .catch(function () { return null; });
    }
    return devicesOnce;
  }
  function deviceLabel(d) {
    return d.index + " · " + d.name + " (" + (d.kind === "builtin" ? "built-in reference" : d.kind) + ")";
  }

  // One run over the event stream. `job` holds the AbortController and receives the run id; `hooks.started` and
  // The engine's own work during a first run (progress values with a `netcl` field): kernels being built,
  // candidates being measured. Shown in the status line, not drawn; true when `data` was such a value.
  function engineStatus(data, line) {
    if (!data || typeof data.netcl !== "string") { return false; }
    if (data.netcl === "building") {
      line.textContent = "building kernels " + data.built + (data.batch > 1 ? " (" + data.batch + " at once)" : "") +
        ": " + data.kernel + "…";
    } else if (data.netcl === "preparing") {
      line.textContent = "compiling " + data.kernel + " for its work size…";
    } else if (data.netcl === "measuring") {
      line.textContent = "measuring candidates " + data.index + "/" + data.of + " for " + data.op + "…";
    }
    return true;
  }

  // `hooks.progress` are called as the events arrive. Resolves with the result, or with an error result in the
  // same shape for a refusal, a network failure or a stopped run.
  function streamRun(body, job, hooks) {
    var result = null;
    return fetch(api + "/stream", {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
      body: JSON.stringify(body),
      signal: job.controller.signal
    }).then(function (response) {
      var type = response.headers.get("content-type") || "";
      if (type.indexOf("text/event-stream") < 0) {
        return response.json().then(function (b) {
          var retry = response.headers.get("retry-after");
          var message = (b.error && b.error.message) || ("HTTP " + response.status);
          result = { ok: false, error: { kind: (b.error && b.error.kind) || "http", message: message + (retry ? " (retry in " + retry + " s)" : "") } };
        });
      }
      return readEvents(response, function (name, data) {
        if (name === "queued") { job.id = data.id; }
        else if (name === "started") { if (hooks.started) { hooks.started(); } }
        else if (name === "progress") { if (hooks.progress) { hooks.progress(data); } }
        else if (name === "result") { result = data; }
      });
    }).catch(function (e) {
      if (!result) {
        var stopped = job.controller.signal.aborted;
        result = { ok: false, error: { kind: stopped ? "cancelled" : "network", message: stopped ? "the run was stopped" : String(e) } };
      }
    }).then(function () {
      return result || { ok: false, error: { kind: "network", message: "the run ended without an answer" } };
    });
  }

  // "Run on all": one column per device (result, time, decisions), filled one device after another so the
  // timings do not compete, with a summary table above them. Columns stack on a narrow screen.
  function renderCompare(area, devices) {
    var box = el("section", "run-compare");
    box.setAttribute("aria-label", "results on each device");
    var t = table(["device", "result", "total", "run", "device time", "decisions"], "run-table compare-summary");
    box.appendChild(t.table);
    var cols = el("div", "compare-columns");
    box.appendChild(cols);
    area.appendChild(box);
    return devices.map(function (d) {
      var col = el("div", "compare-col");
      col.setAttribute("data-device-index", String(d.index));
      col.appendChild(el("h4", "compare-device", deviceLabel(d)));
      var colArea = el("div", "compare-result");
      colArea.setAttribute("data-state", "waiting");
      colArea.appendChild(el("p", "muted", "waiting…"));
      col.appendChild(colArea);
      cols.appendChild(col);
      var tr = row(t.body, [d.name, "waiting", "–", "–", "–", "–"]);
      return { device: d, col: col, area: colArea, row: tr, box: box };
    });
  }
  function fillSummary(entry, r) {
    var t = r.timings || {}, cells = entry.row.children;
    var distinct = {};
    (r.decisions || []).forEach(function (d) { distinct[d.kernel + "|" + d.shape_key + "|" + d.winner_label] = 1; });
    cells[1].textContent = r.ok ? (r.value !== null && r.value !== undefined ? "ok → " + r.value : "ok") : "error: " + ((r.error && r.error.kind) || "?");
    cells[2].textContent = fmt(t.total_ms);
    cells[3].textContent = fmt(t.run_ms);
    cells[4].textContent = fmt(t.device_ms);
    cells[5].textContent = String(Object.keys(distinct).length);
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
    var picker = el("select", "device-picker");
    picker.setAttribute("aria-label", "Device to run on");
    picker.hidden = true;
    // Files sent with every run of this block (`load_model(name)` finds them by name; `uploads()` lists them).
    var uploads = [];
    var upload = el("label", "upload-btn", "Upload");
    upload.title = "Files sent with the run: load_model(name) reads them";
    var picked = el("input");
    picked.type = "file";
    picked.multiple = true;
    picked.className = "upload-input";
    picked.setAttribute("aria-label", "Files to send with the run");
    upload.appendChild(picked);
    var uploadList = el("span", "upload-list muted");
    picked.addEventListener("change", function () {
      var chosen = Array.prototype.slice.call(picked.files || [], 0, 8);
      Promise.all(chosen.map(function (file) {
        return new Promise(function (resolve) {
          var reader = new FileReader();
          reader.onload = function () {
            var url = String(reader.result || "");
            resolve({ name: uploadName(file.name), data: url.slice(url.indexOf(",") + 1) });
          };
          reader.onerror = function () { resolve(null); };
          reader.readAsDataURL(file);
        });
      })).then(function (files) {
        uploads = files.filter(function (f) { return f; });
        uploadList.textContent = uploads.length ? uploads.map(function (f) { return f.name; }).join(", ") : "";
      });
    });
    var runAll = el("button", "run-all-btn", "Run on all");
    runAll.title = "Run this code on every device of the server and compare";
    runAll.hidden = true;
    bar.appendChild(picker);
    [run, runAll, stop, reset, share].forEach(function (b) { b.type = "button"; bar.appendChild(b); });
    bar.insertBefore(upload, runAll);
    bar.insertBefore(uploadList, runAll);
    stop.hidden = true;
    var devices = null;
    loadDevices().then(function (list) {
      if (!list) { return; }
      devices = list;
      list.devices.forEach(function (d) {
        var o = el("option", null, deviceLabel(d) + (d["default"] ? " · default" : ""));
        o.value = String(d.index);
        if (d["default"]) { o.selected = true; }
        picker.appendChild(o);
      });
      picker.hidden = list.devices.length < 2;
      runAll.hidden = list.devices.length < 2;
    });
    function request(device) {
      var body = { code: editor.area.value };
      if (uploads.length) { body.files = uploads; }
      if (device !== null && device !== undefined && device !== "") { body.device = Number(device); }
      return body;
    }
    head.insertBefore(bar, head.querySelector(".copy-btn"));
    var status = el("span", "run-status");
    status.setAttribute("aria-live", "polite");
    head.insertBefore(status, bar);
    var current = null;

    function finish() {
      run.disabled = false;
      runAll.disabled = false;
      stop.hidden = true;
      current = null;
    }
    function newJob() {
      var job = { controller: new AbortController(), id: null, done: false, started: performance.now() };
      current = job;
      run.disabled = true;
      runAll.disabled = true;
      stop.hidden = false;
      editor.clearMark();
      area.hidden = false;
      area.textContent = "";
      area.setAttribute("data-state", "running");
      return job;
    }
    function start() {
      if (current) { return; }
      var job = newJob();
      var curve = null;
      status.textContent = "queued…";
      streamRun(request(devices ? picker.value : null), job, {
        started: function () { status.textContent = "running…"; },
        progress: function (data) {
          if (engineStatus(data, status)) { return; }
          if (!curve) { curve = new Curve(area); }
          curve.add(data);
        }
      }).then(function (data) {
        job.done = true;
        var chart = curve && curve.box;
        area.textContent = "";
        if (chart) { area.appendChild(chart); }
        renderResult(area, data, editor);
        if (area.getBoundingClientRect().top > window.innerHeight) { area.scrollIntoView({ block: "nearest" }); }
        var ms = performance.now() - job.started;
        var stopped = data.error && data.error.kind === "cancelled";
        status.textContent = stopped ? "stopped" : (data.ok ? "done" : "failed") + " in " + Math.round(ms) + " ms";
        area.setAttribute("data-roundtrip-ms", ms.toFixed(1));
      }).then(finish);
    }
    function startAll() {
      if (current || !devices) { return; }
      var job = newJob();
      var entries = renderCompare(area, devices.devices);
      var best = null;
      function next(i) {
        if (i >= entries.length || job.controller.signal.aborted) { return Promise.resolve(); }
        var entry = entries[i], curve = null;
        entry.area.textContent = "";
        entry.area.setAttribute("data-state", "running");
        entry.row.children[1].textContent = "running…";
        status.textContent = "running on " + entry.device.name + " (" + (i + 1) + " of " + entries.length + ")…";
        job.id = null;
        return streamRun(request(entry.device.index), job, {
          progress: function (data) {
            if (engineStatus(data, entry.row.children[1])) { return; }
            if (!curve) { curve = new Curve(entry.area); }
            curve.add(data);
          }
        }).then(function (r) {
          var chart = curve && curve.box;
          entry.area.textContent = "";
          if (chart) { entry.area.appendChild(chart); }
          renderResult(entry.area, r, editor);
          fillSummary(entry, r);
          var ms = r.ok && r.timings ? r.timings.run_ms : null;
          if (typeof ms === "number" && (!best || ms < best.ms)) { best = { ms: ms, entry: entry }; }
          return next(i + 1);
        });
      }
      next(0).then(function () {
        job.done = true;
        entries.forEach(function (e) {
          if (e.area.getAttribute("data-state") !== "ok" && e.area.getAttribute("data-state") !== "error") {
            e.area.textContent = "";
            e.area.setAttribute("data-state", "error");
            e.area.appendChild(el("p", "muted", "not run: stopped"));
            e.row.children[1].textContent = "not run";
          }
        });
        if (best && entries.length > 1) {
          best.entry.col.classList.add("fastest");
          best.entry.col.querySelector(".compare-device").appendChild(el("span", "badge fastest-badge", "fastest run"));
        }
        var failed = entries.filter(function (e) { return e.area.getAttribute("data-state") !== "ok"; }).length;
        area.setAttribute("data-state", failed ? "error" : "ok");
        entries[0].box.setAttribute("data-state", "done");
        var ms = performance.now() - job.started;
        status.textContent = (job.controller.signal.aborted ? "stopped" : "compared " + entries.length + " devices") + " in " + Math.round(ms) + " ms";
      }).then(finish);
    }
    run.addEventListener("click", start);
    runAll.addEventListener("click", startAll);
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
