// netcl wiki: theme toggle, copy buttons, heading links, search (server API or the exported offline index),
// and the autotune filter. Every page works without this script; it only adds to them.
(function () {
  "use strict";
  var root = document.documentElement;

  // Theme: the toggle flips between light and dark and remembers the choice.
  var toggle = document.getElementById("theme-toggle");
  if (toggle) {
    toggle.hidden = false;
    toggle.addEventListener("click", function () {
      var current = root.getAttribute("data-theme");
      if (!current) {
        current = window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";
      }
      var next = current === "dark" ? "light" : "dark";
      root.setAttribute("data-theme", next);
      try { localStorage.setItem("netcl-theme", next); } catch (e) { /* not persisted */ }
    });
  }

  // Navigation drawer (narrow screens): the menu button opens it, the close link, the backdrop, Escape and a
  // followed link close it. Without this script the same links work through the #nav fragment.
  var navToggle = document.getElementById("nav-toggle");
  var nav = document.getElementById("nav");
  function setNav(open) {
    root.classList.toggle("nav-open", open);
    if (navToggle) { navToggle.setAttribute("aria-expanded", open ? "true" : "false"); }
    if (open && nav) {
      var current = nav.querySelector("a.current") || nav.querySelector("a[href]:not(.nav-close)");
      if (current) { current.focus({ preventScroll: true }); }
      if (nav.querySelector("a.current")) { nav.querySelector("a.current").scrollIntoView({ block: "center" }); }
    }
  }
  if (navToggle && nav) {
    navToggle.addEventListener("click", function (e) {
      e.preventDefault();
      setNav(!root.classList.contains("nav-open"));
    });
    ["nav-close", "nav-backdrop"].forEach(function (id) {
      var el = document.getElementById(id);
      if (el) { el.addEventListener("click", function (e) { e.preventDefault(); setNav(false); navToggle.focus(); }); }
    });
    nav.addEventListener("click", function (e) {
      if (e.target.closest && e.target.closest("a:not(.nav-close)")) { setNav(false); }
    });
    document.addEventListener("keydown", function (e) {
      if (e.key === "Escape" && root.classList.contains("nav-open")) { setNav(false); navToggle.focus(); }
    });
  }
  // The folded table of contents closes after a jump, so the section is not hidden behind it.
  document.querySelectorAll(".toc-fold a").forEach(function (a) {
    a.addEventListener("click", function () { var d = a.closest("details"); if (d) { d.open = false; } });
  });

  function copyText(text, done) {
    if (navigator.clipboard && navigator.clipboard.writeText) {
      navigator.clipboard.writeText(text).then(done, function () { fallbackCopy(text, done); });
    } else {
      fallbackCopy(text, done);
    }
  }
  function fallbackCopy(text, done) {
    var area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.className = "skip-link";
    document.body.appendChild(area);
    area.select();
    try { document.execCommand("copy"); done(); } catch (e) { /* copying unsupported */ }
    document.body.removeChild(area);
  }

  // Code copy buttons.
  document.querySelectorAll(".code-block").forEach(function (block) {
    var button = block.querySelector(".copy-btn");
    var code = block.querySelector("pre code");
    if (!button || !code) { return; }
    button.hidden = false;
    // Shell examples copy without their `$ ` prompts, so they paste as commands.
    var shell = block.getAttribute("data-lang") === "sh";
    button.addEventListener("click", function () {
      var text = shell ? code.textContent.replace(/^\$ /gm, "") : code.textContent;
      copyText(text, function () {
        button.textContent = "Copied";
        setTimeout(function () { button.textContent = "Copy"; }, 1500);
      });
    });
  });

  // Heading anchors copy their link as well as jumping to it.
  document.querySelectorAll("a.anchor").forEach(function (a) {
    a.addEventListener("click", function () {
      copyText(a.href, function () { a.setAttribute("data-copied", "true"); });
    });
  });

  // On-this-page: mark the heading in view.
  var tocLinks = document.querySelectorAll(".toc a");
  if (tocLinks.length && "IntersectionObserver" in window) {
    var byId = {};
    tocLinks.forEach(function (a) { byId[decodeURIComponent(a.hash.slice(1))] = a; });
    var observer = new IntersectionObserver(function (entries) {
      entries.forEach(function (entry) {
        if (entry.isIntersecting && byId[entry.target.id]) {
          tocLinks.forEach(function (a) { a.classList.remove("active"); });
          byId[entry.target.id].classList.add("active");
        }
      });
    }, { rootMargin: "0px 0px -70% 0px" });
    Object.keys(byId).forEach(function (id) {
      var heading = document.getElementById(id);
      if (heading) { observer.observe(heading); }
    });
  }

  // Search.
  var input = document.getElementById("search-input");
  var popup = document.getElementById("search-results");
  var api = root.getAttribute("data-search-api");
  var indexUrl = root.getAttribute("data-search-index");
  var siteRoot = indexUrl ? indexUrl.replace(/search-index\.js$/, "") : "";
  var offlineDocs = null;
  var selected = -1;
  var timer = null;

  function loadOffline(then) {
    if (offlineDocs) { then(); return; }
    var ready = function () {
      offlineDocs = (window.netclSearchIndex || []).map(function (d) {
        return { d: d, title: words(d.title), heading: words(d.heading), text: words(d.text) };
      });
      then();
    };
    if (window.netclSearchIndex) { ready(); return; }
    var script = document.createElement("script");
    script.src = indexUrl;
    script.onload = ready;
    document.head.appendChild(script);
  }
  function words(text) { return (text || "").toLowerCase().split(/[^\p{L}\p{N}_]+/u).filter(Boolean); }
  function countPrefix(list, term) {
    var n = 0;
    for (var i = 0; i < list.length; i++) { if (list[i].lastIndexOf(term, 0) === 0) { n++; } }
    return n;
  }
  function searchOffline(query) {
    var terms = words(query).slice(0, 8);
    if (!terms.length) { return []; }
    var hits = [];
    offlineDocs.forEach(function (doc) {
      var score = 0;
      for (var i = 0; i < terms.length; i++) {
        var s = 5 * countPrefix(doc.title, terms[i]) + 3 * countPrefix(doc.heading, terms[i]) + countPrefix(doc.text, terms[i]);
        if (!s) { return; }
        score += s;
      }
      hits.push({ doc: doc.d, score: score / Math.sqrt(10 + doc.text.length) });
    });
    hits.sort(function (a, b) { return b.score - a.score; });
    return hits.slice(0, 20).map(function (h) {
      return { url: siteRoot + h.doc.url, title: h.doc.title, heading: h.doc.heading, snippet: snippetNodes(h.doc.text, terms) };
    });
  }
  function snippetNodes(text, terms) {
    var lower = text.toLowerCase();
    var at = -1;
    terms.forEach(function (t) { var i = lower.indexOf(t); if (i >= 0 && (at < 0 || i < at)) { at = i; } });
    var start = Math.max(0, at - 60);
    var part = text.slice(start, start + 180);
    var frag = document.createDocumentFragment();
    if (start > 0) { frag.appendChild(document.createTextNode("…")); }
    var pattern = new RegExp("(" + terms.map(function (t) { return t.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"); }).join("|") + ")[\\p{L}\\p{N}_]*", "giu");
    var last = 0, m;
    while ((m = pattern.exec(part)) !== null) {
      frag.appendChild(document.createTextNode(part.slice(last, m.index)));
      var mark = document.createElement("mark");
      mark.textContent = m[0];
      frag.appendChild(mark);
      last = m.index + m[0].length;
    }
    frag.appendChild(document.createTextNode(part.slice(last)));
    return frag;
  }
  function hitLink(hit) {
    var a = document.createElement("a");
    a.href = hit.url;
    a.setAttribute("role", "option");
    var title = document.createElement("span");
    title.className = "hit-title";
    title.textContent = hit.title + (hit.heading ? " › " + hit.heading : "");
    a.appendChild(title);
    var p = document.createElement("p");
    p.className = "hit-snippet";
    if (hit.snippet) { p.appendChild(hit.snippet); } else { p.innerHTML = hit.snippet_html; }
    a.appendChild(p);
    return a;
  }
  function showHits(hits) {
    popup.textContent = "";
    selected = -1;
    if (!hits.length) {
      var empty = document.createElement("div");
      empty.className = "empty";
      empty.textContent = "No results";
      popup.appendChild(empty);
    }
    hits.forEach(function (hit) { popup.appendChild(hitLink(hit)); });
    popup.hidden = false;
  }
  function runQuery(query, show) {
    if (!query.trim()) { popup.hidden = true; return; }
    if (api) {
      fetch(api + "?q=" + encodeURIComponent(query), { headers: { Accept: "application/json" } })
        .then(function (r) { return r.ok ? r.json() : { results: [] }; })
        .then(function (body) { if (input.value === query) { show(body.results || []); } })
        .catch(function () { /* the form still submits to the results page */ });
    } else if (indexUrl) {
      loadOffline(function () { show(searchOffline(query)); });
    }
  }
  function select(i) {
    var links = popup.querySelectorAll("a");
    if (!links.length) { return; }
    selected = (i + links.length) % links.length;
    links.forEach(function (a, k) { a.classList.toggle("selected", k === selected); a.setAttribute("aria-selected", k === selected ? "true" : "false"); });
    links[selected].scrollIntoView({ block: "nearest" });
  }
  if (input && popup) {
    input.addEventListener("input", function () {
      clearTimeout(timer);
      var query = input.value;
      timer = setTimeout(function () { runQuery(query, showHits); }, 120);
    });
    input.addEventListener("keydown", function (e) {
      if (e.key === "ArrowDown") { e.preventDefault(); select(selected + 1); }
      else if (e.key === "ArrowUp") { e.preventDefault(); select(selected - 1); }
      else if (e.key === "Escape") { popup.hidden = true; input.blur(); }
      else if (e.key === "Enter") {
        var links = popup.querySelectorAll("a");
        if (!popup.hidden && links.length) {
          e.preventDefault();
          window.location.href = links[selected >= 0 ? selected : 0].href;
        } else if (indexUrl) {
          e.preventDefault();
          window.location.href = root.getAttribute("data-search-page") + "?q=" + encodeURIComponent(input.value);
        }
      }
    });
    document.addEventListener("click", function (e) {
      if (!popup.contains(e.target) && e.target !== input) { popup.hidden = true; }
    });
    document.addEventListener("keydown", function (e) {
      var t = e.target;
      var typing = t && (t.tagName === "INPUT" || t.tagName === "TEXTAREA" || t.isContentEditable);
      if (e.key === "/" && !typing && !e.ctrlKey && !e.metaKey && !e.altKey) {
        e.preventDefault();
        input.focus();
        input.select();
      }
    });
  }

  // The exported search page searches the offline index for ?q=.
  var hitsList = document.getElementById("search-hits");
  var status = document.getElementById("search-status");
  if (hitsList && indexUrl) {
    var q = new URLSearchParams(window.location.search).get("q") || "";
    if (input) { input.value = q; }
    if (q) {
      loadOffline(function () {
        var hits = searchOffline(q);
        hits.forEach(function (hit) {
          var li = document.createElement("li");
          li.appendChild(hitLink(hit));
          hitsList.appendChild(li);
        });
        if (status) { status.textContent = hits.length + (hits.length === 1 ? " result" : " results") + " for “" + q + "”"; }
      });
    }
  }

  // Client-side filter of server-rendered lists (the autotune cache).
  document.querySelectorAll("input[data-filter-target]").forEach(function (filter) {
    var target = document.getElementById(filter.getAttribute("data-filter-target"));
    if (!target) { return; }
    var count = document.getElementById(filter.getAttribute("data-filter-count") || "");
    filter.addEventListener("input", function () {
      var needle = filter.value.toLowerCase().trim();
      var items = target.querySelectorAll("[data-filter-text]");
      var shown = 0;
      items.forEach(function (item) {
        item.hidden = needle !== "" && item.getAttribute("data-filter-text").indexOf(needle) < 0;
        if (!item.hidden) { shown++; }
      });
      if (count) { count.textContent = shown + " of " + items.length + " entries shown."; }
    });
  });
})();
