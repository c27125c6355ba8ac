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
      // Rust blocks copy the whole program (hidden `# ` lines included, in `fn main`) from data-copy.
      var text = block.getAttribute("data-copy") || (shell ? code.textContent.replace(/^\$ /gm, "") : code.textContent);
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
      offlineDocs = window.netclSearchIndex || { docs: [], terms: {}, lengths: [], avg_len: 1 };
      offlineDocs.vocabulary = Object.keys(offlineDocs.terms).sort();
      then();
    };
    if (window.netclSearchIndex) { ready(); return; }
    var script = document.createElement("script");
    script.src = indexUrl;
    script.onload = ready;
    document.head.appendChild(script);
  }
  function words(text) { return (text || "").toLowerCase().split(/[^\p{L}\p{N}_]+/u).filter(Boolean); }
  // The query words as the index's tokenizer makes them: snake_case parts, then the whole word.
  function queryTerms(query, index) {
    var out = [];
    words(query).forEach(function (w) {
      var parts = w.indexOf("_") >= 0 ? w.split("_").filter(function (p) { return p && p.length < w.length; }) : [];
      parts.concat([w.replace(/^_+|_+$/g, "")]).forEach(function (t) {
        t = Array.from(t).slice(0, index.max_term_chars || 40).join("");
        if (t && out.indexOf(t) < 0) { out.push(t); }
      });
    });
    return out.slice(0, index.max_terms || 8);
  }
  function withinOneEdit(a, b) {
    a = Array.from(a); b = Array.from(b);
    var s = a.length <= b.length ? a : b, l = a.length <= b.length ? b : a;
    if (l.length - s.length > 1) { return false; }
    var p = 0;
    while (p < s.length && s[p] === l[p]) { p++; }
    if (s.length === l.length) {
      var substituted = s.slice(p + 1).join("\u0000") === l.slice(p + 1).join("\u0000");
      var transposed = p + 1 < s.length && s[p] === l[p + 1] && s[p + 1] === l[p] &&
        s.slice(p + 2).join("\u0000") === l.slice(p + 2).join("\u0000");
      return substituted || transposed;
    }
    return s.slice(p).join("\u0000") === l.slice(p + 1).join("\u0000");
  }
  // Vocabulary words a query word matches, with the server's factors (search.rs: expand).
  function expand(index, word) {
    var f = index.factors, out = [], vocab = index.vocabulary, n = Array.from(word).length;
    if (index.terms.hasOwnProperty(word)) { out.push([word, f.exact]); }
    if (n >= 2) {
      var lo = 0, hi = vocab.length;
      while (lo < hi) { var mid = (lo + hi) >> 1; if (vocab[mid] < word) { lo = mid + 1; } else { hi = mid; } }
      for (var i = lo; i < vocab.length && out.length < 64; i++) {
        if (vocab[i] === word) { continue; }
        if (vocab[i].lastIndexOf(word, 0) !== 0) { break; }
        out.push([vocab[i], f.prefix]);
      }
    }
    if (n >= 5) {
      vocab.forEach(function (w) {
        if (w !== word && w.lastIndexOf(word, 0) !== 0 && withinOneEdit(w, word)) { out.push([w, f.typo]); }
      });
    }
    return out;
  }
  // BM25 over the index the server built, exactly as the server ranks (search.rs: SearchIndex::search).
  function searchOffline(query) {
    var index = offlineDocs;
    var terms = queryTerms(query, index);
    if (!terms.length) { return []; }
    var n = index.docs.length, totals = {}, matched = [];
    terms.forEach(function (word) {
      var scores = {};
      var idfOf = function (t) { var df = index.terms.hasOwnProperty(t) ? index.terms[t].length : 0; return Math.log((n - df + 0.5) / (df + 0.5) + 1); };
      var cap = index.terms.hasOwnProperty(word) ? idfOf(word) : null;
      expand(index, word).forEach(function (m) {
        matched.push(m[0]);
        var postings = index.terms[m[0]];
        var idf = cap === null ? idfOf(m[0]) : Math.min(idfOf(m[0]), cap);
        postings.forEach(function (p) {
          var len = Math.max(index.lengths[p[0]], index.avg_len), tf = p[1];
          var s = m[1] * idf * tf * (index.k1 + 1) / (tf + index.k1 * (1 - index.b + index.b * len / index.avg_len));
          scores[p[0]] = Math.max(scores[p[0]] || 0, s);
        });
      });
      Object.keys(scores).forEach(function (d) {
        var t = totals[d] || (totals[d] = [0, 0]);
        t[0] += scores[d]; t[1] += 1;
      });
    });
    var exact = query.trim().split(/\s+/).join(" "), exactLower = exact.toLowerCase();
    var ids = Object.keys(totals);
    ids.forEach(function (d) {
      var heading = index.docs[d].heading;
      if (heading === exact) { totals[d][0] += 2 * index.exact_heading_bonus; }
      else if (heading.toLowerCase() === exactLower) { totals[d][0] += index.exact_heading_bonus; }
      else if (exactLower.indexOf(" ") >= 0 && heading.toLowerCase().indexOf(exactLower) >= 0) { totals[d][0] += index.heading_phrase_bonus; }
    });
    var all = ids.some(function (d) { return totals[d][1] === terms.length; });
    var ranked = ids.filter(function (d) { return !all || totals[d][1] === terms.length; })
      .map(function (d) { return [Number(d), totals[d][0]]; });
    ranked.sort(function (a, b) { return b[1] - a[1] || a[0] - b[0]; });
    return ranked.slice(0, 20).map(function (r) {
      var doc = index.docs[r[0]];
      return { url: siteRoot + doc.url, title: doc.title, heading: doc.heading, score: r[1], snippet: snippetNodes(doc.text || doc.heading, matched) };
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
