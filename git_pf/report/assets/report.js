/* git pf report: draws the report from the JSON in #pf-data (docs/report.md).
   Every string comes from a recorded run and is untrusted: elements are made with
   createElement and filled with textContent only: no HTML is ever parsed, no string run as code. */
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("pf-data").textContent);
  var steps = data.steps || [];
  var byStep = {};
  steps.forEach(function (s) { byStep[String(s.step)] = s; });
  var mismatchStep = data.replay && data.replay.mismatch ? data.replay.mismatch.step : null;

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) { node.className = cls; }
    if (text !== undefined && text !== null) { node.textContent = String(text); }
    return node;
  }
  function add(parent) {
    for (var i = 1; i < arguments.length; i++) {
      if (arguments[i]) { parent.appendChild(arguments[i]); }
    }
    return parent;
  }
  function put(parent, child) {
    parent.appendChild(child);
    return child;
  }
  function clear(node) {
    while (node.firstChild) { node.removeChild(node.firstChild); }
    return node;
  }
  function short(id) { return id ? String(id).slice(0, 12) : ""; }
  function oneLine(text, n) {
    var t = String(text || "").replace(/\s+/g, " ").trim();
    return t.length > n ? t.slice(0, n - 1) + "\u2026" : t;
  }
  function kv(dl, key, value) {
    if (value === null || value === undefined || value === "") { return; }
    add(dl, el("dt", null, key), el("dd", null, value));
  }

  /* summary line */
  (function () {
    var parts = [(data.branch || data.rev) + " @ " + short(data.tip), steps.length + " step images"];
    if (data.end) { parts.push("exit " + data.end.exit); }
    parts.push((data.ledger || []).length + " effects on the ledger");
    var tt = data.tape_tools || [], off = tt.filter(function (t) { return t.ledger === null; }).length;
    parts.push(tt.length + " tool calls in the tape" + (off ? " (" + off + " not on the ledger)" : ""));
    var mr = data.match || {}, nIgn = (mr.ignore || []).length, nMask = (mr.mask || []).length;
    if (nIgn || nMask) {
      parts.push("matched " + ((mr.profiles || []).length ? "with profile " + mr.profiles.join(", ") + ": " : "") +
        nIgn + " field" + (nIgn === 1 ? "" : "s") + " ignored, " + nMask + " mask" + (nMask === 1 ? "" : "s"));
    }
    document.getElementById("summary-line").textContent = parts.join(" \u00b7 ");
  })();

  /* timeline */
  var timeline = document.getElementById("timeline");
  var detail = document.getElementById("step-detail");
  var buttons = {};
  function stepLabel(s) {
    if (s.step === 0) { return "world before the run"; }
    var ex = s.exchange;
    if (!ex) { return s.subject; }
    var tools = (ex.tools || []).length ? "\u2192 " + ex.tools.join(", ") : "";
    return oneLine(ex.text || tools || (ex.api + " " + ex.status), 70);
  }
  function addStepButton(s, key, cls, title) {
    var b = el("button", cls);
    b.type = "button";
    b.setAttribute("data-step", key);
    add(b, el("span", "step-n", title), el("span", "step-text", s === data.end ? "run end: exit " + s.exit : stepLabel(s)));
    if (s.forked) { b.classList.add("forked"); }
    if (s.exchange && s.exchange.status !== 200) { b.classList.add("failed"); }
    if (mismatchStep !== null && s.step === mismatchStep && s !== data.end) { b.classList.add("diverged"); }
    b.addEventListener("click", function () { select(key); });
    buttons[key] = b;
    timeline.appendChild(b);
  }
  steps.forEach(function (s) { addStepButton(s, String(s.step), "step", "step " + s.step); });
  if (data.end) { addStepButton(data.end, "end", "run-end", "end"); }

  function select(key) {
    var item = key === "end" ? data.end : byStep[key];
    if (!item) { return; }
    var was = detail.getAttribute("data-step");
    if (was !== null && buttons[was]) { buttons[was].classList.remove("selected"); }
    buttons[key].classList.add("selected");
    detail.setAttribute("data-step", key);
    renderDetail(clear(detail), item, key);
  }
  timeline.addEventListener("keydown", function (e) {
    var keys = Object.keys(buttons), at = keys.indexOf(detail.getAttribute("data-step"));
    var next = e.key === "ArrowDown" || e.key === "j" ? at + 1 : e.key === "ArrowUp" || e.key === "k" ? at - 1 : null;
    if (next !== null && next >= 0 && next < keys.length) {
      e.preventDefault();
      select(keys[next]);
      buttons[keys[next]].focus();
    }
  });

  /* step detail, drawn when a step is selected */
  function renderDetail(box, item, key) {
    add(box, el("h2", null, key === "end" ? "Run end (exit " + item.exit + ")" : "Step " + item.step));
    var dl = put(box, el("dl", "meta"));
    kv(dl, "commit", item.commit);
    kv(dl, "subject", item.subject);
    if (item.forked) { kv(dl, "forked", "this step's response was changed by a fork"); }
    if (item.exchange) { renderExchange(box, item.exchange); }
    renderWorld(box, item.world, item.step === 0 && key !== "end");
    renderEffects(box, item, key);
  }
  function renderExchange(box, ex) {
    var sec = put(box, el("section", "exchange"));
    add(sec, el("h3", null, "Exchange: " + ex.method + " " + ex.path + " \u2192 " + ex.status +
      (ex.streamed ? " (event stream)" : "") + (typeof ex.ms === "number" ? ", " + Math.round(ex.ms) + " ms" : "")));
    var u = ex.usage || {};
    add(sec, el("p", "usage", [ex.api, u.model, (u.input_tokens || 0) + " in / " + (u.output_tokens || 0) + " out tokens",
      ex.draws + " draws", (ex.tools || []).length ? "tool calls: " + ex.tools.join(", ") : ""].filter(Boolean).join(" \u00b7 ")));
    if (ex.text) {
      add(sec, el("h4", null, ex.streamed ? "Reply (reassembled from the stream)" : "Reply"));
      add(sec, el("div", "exchange-text", ex.text));
    }
    add(sec, el("h4", null, "Request"), el("pre", "exchange-request json", ex.request));
    add(sec, el("h4", null, "Response"), el("pre", "exchange-response json", ex.response));
  }
  function renderWorld(box, w, base) {
    var sec = put(box, el("section", "world-diff"));
    add(sec, el("h3", null, base ? "World: the files before the run" : "World: changes since the step before"));
    var list = put(sec, el("ul", "world-files"));
    [["added", "A"], ["changed", "M"], ["removed", "D"], ["attrs", "T"]].forEach(function (p) {
      (w[p[0]] || []).forEach(function (path) {
        var li = put(list, el("li", "world-file " + p[0]));
        li.setAttribute("data-path", path);
        add(li, el("span", "sign", p[1]), el("span", "path", path));
      });
    });
    if (!list.firstChild) { add(sec, el("p", "none", "no file changed")); }
    if (w.files_cut) { add(sec, el("p", "cut", w.files_cut + " more files not listed")); }
    (w.patches || []).forEach(function (p) {
      var fig = put(sec, el("div", "patch-file"));
      add(fig, el("h4", null, p.path));
      if (p.binary) { add(fig, el("p", "binary", "a binary file, not shown")); return; }
      add(fig, patchPre(p.patch));
      if (p.cut) { add(fig, el("p", "cut", "patch cut at " + data.limits.patch_chars + " characters")); }
    });
    if (w.patches_cut) { add(sec, el("p", "cut", w.patches_cut + " more patches not shown")); }
  }
  function patchPre(text) {
    var pre = el("pre", "patch");
    String(text).split("\n").forEach(function (line, i) {
      var c = line.charAt(0);
      var cls = line.indexOf("@@") === 0 ? "hunk" : c === "+" && line.indexOf("+++") !== 0 ? "add" :
        c === "-" && line.indexOf("---") !== 0 ? "del" : null;
      if (i) { pre.appendChild(document.createTextNode("\n")); }
      pre.appendChild(cls ? el("span", cls, line) : document.createTextNode(line));
    });
    return pre;
  }
  /* a line diff whose lone changed line pairs have their differing middle marked */
  function linesPre(text) {
    var pre = el("pre", "patch line-diff"), lines = String(text).split("\n");
    lines.forEach(function (line, i) {
      var c = line.charAt(0), isDel = c === "-" && line.indexOf("---") !== 0, isAdd = c === "+" && line.indexOf("+++") !== 0;
      if (i) { pre.appendChild(document.createTextNode("\n")); }
      var cls = line.indexOf("@@") === 0 ? "hunk" : isAdd ? "add" : isDel ? "del" : null;
      var other = isDel && lines[i + 1] && lines[i + 1].charAt(0) === "+" && (lines[i + 2] || "").charAt(0) !== "+" &&
        (i === 0 || lines[i - 1].charAt(0) !== "-") ? lines[i + 1] :
        isAdd && i > 0 && lines[i - 1].charAt(0) === "-" && (i < 2 || lines[i - 2].charAt(0) !== "-") &&
        (lines[i + 1] || "").charAt(0) !== "+" ? lines[i - 1] : null;
      if (!cls) { pre.appendChild(document.createTextNode(line)); return; }
      var span = put(pre, el("span", cls));
      if (other === null) { span.textContent = line; return; }
      var a = line.slice(1), b = other.slice(1), p = 0, q = 0;
      while (p < a.length && p < b.length && a.charAt(p) === b.charAt(p)) { p++; }
      while (q < a.length - p && q < b.length - p && a.charAt(a.length - 1 - q) === b.charAt(b.length - 1 - q)) { q++; }
      add(span, document.createTextNode(c + a.slice(0, p)), el("mark", "change", a.slice(p, a.length - q)),
        document.createTextNode(a.slice(a.length - q)));
    });
    return pre;
  }
  function previousCount(key) {
    var keys = Object.keys(buttons), at = keys.indexOf(key);
    var prev = at > 0 ? (keys[at - 1] === "end" ? data.end : byStep[keys[at - 1]]) : null;
    return prev && typeof prev.effects === "number" ? prev.effects : 0;
  }
  function renderEffects(box, item, key) {
    var sec = put(box, el("section", "effects"));
    var count = typeof item.effects === "number" ? item.effects : 0, before = previousCount(key);
    add(sec, el("h3", null, "Effects: " + count + " on the ledger" + (count > before ? ", " + (count - before) + " new" : "")));
    /* the tool calls the replies asked for, up to this step: on the ledger or not */
    var last = key === "end" ? Infinity : item.step;
    var asked = (data.tape_tools || []).filter(function (t) { return t.step <= last; });
    var off = asked.filter(function (t) { return t.ledger === null; });
    if (asked.length) {
      add(sec, el("p", "tape-tools", asked.length + " tool call" + (asked.length === 1 ? "" : "s") +
        " in the tape up to here" + (off.length ? ", " + off.length + " not on the ledger: " +
        off.map(function (t) { return t.tool + " (step " + t.step + ")"; }).join(", ") : ", every one on the ledger")));
    }
    var rows = (data.ledger || []).slice(0, count);
    if (!rows.length) { add(sec, el("p", "none", "no tool call with a side effect on the ledger yet")); return; }
    add(sec, ledgerTable(rows, before));
  }
  function offLedgerTable(calls) {
    var table = el("table", "off-ledger");
    add(table, add(el("tr"), el("th", null, "step"), el("th", null, "tool"), el("th", null, "on the ledger")));
    calls.forEach(function (t) {
      var tr = put(table, el("tr", "tape-tool" + (t.ledger === null ? " not-on-ledger" : "")));
      tr.setAttribute("data-step", t.step);
      add(tr, el("td", null, t.step), el("td", null, t.tool), el("td", null, t.ledger === null ? "no" : "entry " + t.ledger));
    });
    return table;
  }
  function ledgerTable(rows, before) {
    var table = el("table", "ledger");
    var head = put(table, el("tr"));
    ["#", "tool", "class", "idempotency key", "args", "result"].forEach(function (h) { add(head, el("th", null, h)); });
    rows.forEach(function (e) {
      var tr = put(table, el("tr", "effect" + (e.n > before ? " new" : "") + (e["class"] === "irreversible" ? " irreversible" : "")));
      tr.setAttribute("data-n", e.n);
      add(tr, el("td", null, e.n), el("td", null, e.tool), el("td", null, e["class"]), el("td", null, e.key),
        add(el("td"), el("pre", null, e.args || "")), add(el("td"), el("pre", null, e.error ? "error: " + e.error : e.result || "")));
    });
    return table;
  }
  add(document.getElementById("ledger"), (data.ledger || []).length ? ledgerTable(data.ledger, Infinity) :
    el("p", "none", "no tool call with a side effect"));
  if ((data.tape_tools || []).length) {
    var offCount = data.tape_tools.filter(function (t) { return t.ledger === null; }).length;
    add(document.getElementById("ledger"), el("h3", null, "Tool calls in the tape: " + data.tape_tools.length +
      ", " + offCount + " not on the ledger"), offLedgerTable(data.tape_tools));
  }

  /* divergence of a replay report */
  (function () {
    var r = data.replay;
    if (!r) { return; }
    var sec = put(document.getElementById("divergence-slot"), el("section", r.bit_exact ? "bit-exact" : "diverged"));
    sec.id = "divergence";
    add(sec, el("h2", null, r.bit_exact ? "Replay: bit-exact" : "Replay: diverged"));
    var dl = put(sec, el("dl", "meta"));
    var ex = r.exchanges || {}, dr = r.draws || {}, ef = r.effects || {};
    kv(dl, "exchanges", ex.served + " of " + ex.of + " served");
    if (r.draws) { kv(dl, "draws", dr.consumed + " of " + dr.of + " consumed"); }
    if (r.effects) { kv(dl, "effects", ef.replayed + " of " + ef.of + " replayed"); }
    kv(dl, "exit", r.exit);
    kv(dl, "divergence", r.divergence);
    if (!r.mismatch) { return; }
    var m = r.mismatch;
    var jump = put(sec, el("button", "mismatch-step", "mismatch at step " + m.step));
    jump.type = "button";
    jump.setAttribute("data-step", m.step);
    jump.addEventListener("click", function () { if (buttons[String(m.step)]) { select(String(m.step)); buttons[String(m.step)].focus(); } });
    add(sec, el("p", "mismatch-line", m.line));
    var table = put(sec, el("table", "diff"));
    add(table, add(el("tr"), el("th", null, "path"), el("th", null, "recorded"), el("th", null, "live")));
    (m.diff || []).forEach(function (d) {
      var tr = put(table, el("tr", "diff-row"));
      tr.setAttribute("data-path", d.path);
      var where = el("td", "path", d.path + (d.missing ? " (missing " + d.missing + ")" : ""));
      if (typeof d.lines === "string") {  /* a long string: its line diff, the change marked, nothing cut from its middle */
        var cell = el("td");
        cell.colSpan = 2;
        add(tr, where, add(cell, linesPre(d.lines)));
      } else {
        add(tr, where, add(el("td"), el("pre", "recorded", d.recorded)), add(el("td"), el("pre", "live", d.live)));
      }
    });
  })();

  /* fork graph: nodes laid out by the report (lane, row), drawn as SVG. The trials of one blame run
     at a time are drawn (the blame selector below); lanes left empty close up. Labels sit in a
     column right of every lane, joined to their node by a dotted leader, so none covers a node. */
  var graph = (function () {
    var g = data.fork_graph || { nodes: [], edges: [] };
    var svg = document.getElementById("fork-svg"), ns = svg.namespaceURI;
    var info = document.getElementById("fork-detail");
    var DX = 26, DY = 22, X0 = 16, Y0 = 14;
    function svgEl(tag, cls) { var n = document.createElementNS(ns, tag); if (cls) { n.setAttribute("class", cls); } return n; }
    function show(n, node) {
      var prev = svg.querySelector(".fork-node.chosen");
      if (prev) { prev.classList.remove("chosen"); }
      node.classList.add("chosen");
      info.textContent = "";
      add(info, el("span", "fork-branch", n.branches.length ? n.branches.join(", ") : "(no branch tip)"),
        el("span", "fork-step", n.step !== null ? "step " + n.step + (n.final ? " (run end)" : "") : "no step"),
        el("code", "fork-commit", n.id), el("span", "fork-subject", n.subject));
      if (n.lane === 0 && n.step !== null) { select(n.final ? "end" : String(n.step)); }
    }
    function draw(blameRun) {
      while (svg.firstChild) { svg.removeChild(svg.firstChild); }
      var shown = g.nodes.filter(function (n) { return !n.blame || blameRun === "*" || n.blame === blameRun; });
      var lanes = {}, laneOf = {}, pos = {}, maxRow = 0;
      shown.forEach(function (n) { lanes[n.lane] = true; });
      Object.keys(lanes).map(Number).sort(function (a, b) { return a - b; }).forEach(function (l, i) { laneOf[l] = i; });
      var nLanes = Object.keys(lanes).length;
      shown.forEach(function (n) {
        pos[n.id] = [X0 + laneOf[n.lane] * DX, Y0 + n.row * DY];
        maxRow = Math.max(maxRow, n.row);
      });
      var labelX = X0 + Math.max(0, nLanes - 1) * DX + 22;
      svg.setAttribute("height", Y0 * 2 + maxRow * DY);
      g.edges.forEach(function (e) {
        var a = pos[e[0]], b = pos[e[1]];
        if (!a || !b) { return; }
        var p = svgEl("path", "fork-edge");
        p.setAttribute("d", a[0] === b[0] ? "M" + a[0] + " " + a[1] + " L" + b[0] + " " + b[1] :
          "M" + a[0] + " " + a[1] + " C" + a[0] + " " + (b[1] - DY / 2) + " " + b[0] + " " + (a[1] + DY / 2) + " " + b[0] + " " + b[1]);
        svg.appendChild(p);
      });
      var rowEnd = {}, widest = labelX;
      shown.forEach(function (n) {
        var node = svgEl("g", "fork-node" + (n.lane === 0 ? " main-line" : "") + (n.final ? " final" : "") +
          (n.outcome ? " outcome-" + n.outcome : ""));
        node.setAttribute("data-commit", n.id);
        if (n.step !== null && n.step !== undefined) { node.setAttribute("data-step", n.step); }
        if (n.branches.length) { node.setAttribute("data-branch", n.branches.join(" ")); }
        if (n.blame) { node.setAttribute("data-blame", n.blame); }
        node.setAttribute("tabindex", "0");
        var c = svgEl("circle");
        c.setAttribute("cx", pos[n.id][0]); c.setAttribute("cy", pos[n.id][1]); c.setAttribute("r", n.final ? 6 : 5);
        var title = svgEl("title");
        title.textContent = (n.branches.join(", ") || short(n.id)) + (n.step !== null ? " \u00b7 step " + n.step : "") +
          (n.outcome ? " \u00b7 " + n.outcome : "");
        add(node, c, title);
        var named = n.branches.filter(function (b) { return b.indexOf("blame:") !== 0; });
        if (named.length) {  /* blame trials are many: their names show on click and hover only */
          var y = pos[n.id][1], x = Math.max(labelX, rowEnd[y] || 0);
          var lead = svgEl("line", "fork-leader");
          lead.setAttribute("x1", pos[n.id][0] + 7); lead.setAttribute("y1", y);
          lead.setAttribute("x2", x - 3); lead.setAttribute("y2", y);
          var t = svgEl("text", "fork-label");
          t.setAttribute("x", x); t.setAttribute("y", y + 4);
          t.textContent = oneLine(named.join(", "), 48);
          add(node, lead, t);
          svg.appendChild(node);
          var w = t.getComputedTextLength ? t.getComputedTextLength() : t.textContent.length * 7;
          rowEnd[y] = x + w + 14;
          widest = Math.max(widest, rowEnd[y]);
        } else {
          svg.appendChild(node);
        }
        node.addEventListener("click", function () { show(n, node); });
        node.addEventListener("keydown", function (e) { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); show(n, node); } });
      });
      svg.setAttribute("width", Math.max(widest + 20, labelX + 40));
      var note = document.getElementById("fork-trials");
      var trials = g.nodes.filter(function (n) { return n.blame; }).length;
      note.textContent = !trials ? "" : blameRun === "*" ? "trials of every blame run shown" :
        blameRun === "-" ? "no blame trials shown" : "trials of blame run " + blameRun + " shown (choose another under Blame)";
    }
    /* the legend: what each colour says, drawn with the graph's own classes */
    (function () {
      var legend = document.getElementById("fork-legend");
      [["main-line", "the run's line"], ["", "a fork"], ["main-line final", "run end"],
       ["outcome-flip", "blame trial: flip"], ["outcome-no-flip", "blame trial: no flip"],
       ["outcome-undefined", "blame trial: undefined"]].forEach(function (item) {
        var li = put(legend, el("li", "legend-item"));
        var s = li.appendChild(svgEl("svg"));
        s.setAttribute("width", 16); s.setAttribute("height", 16);
        var gn = s.appendChild(svgEl("g", "fork-node " + item[0])), c = gn.appendChild(svgEl("circle"));
        c.setAttribute("cx", 8); c.setAttribute("cy", 8); c.setAttribute("r", 5);
        add(li, el("span", null, item[1]));
      });
    })();
    if (g.cut) { add(document.getElementById("fork-section"), el("p", "cut", "graph cut: too many commits")); }
    return { draw: draw };
  })();

  /* blame chart: one bar per step, its Wilson interval as whiskers; one blame run at a time */
  (function () {
    var runs = data.blame_runs || (data.blame ? [data.blame] : []);
    if (!runs.length) { graph.draw("*"); return; }
    var sec = put(document.getElementById("blame-slot"), el("section"));
    sec.id = "blame-section";
    var head = put(sec, el("h2", null, "Blame"));
    var pick = el("select");
    pick.id = "blame-select";
    runs.forEach(function (b) { var o = put(pick, el("option", null, b.run)); o.value = b.run; });
    [["*", "every blame run's trials"], ["-", "no blame trials"]].forEach(function (v) {
      var o = put(pick, el("option", null, v[1])); o.value = v[0];
    });
    add(head, document.createTextNode(" "), pick);
    var about = put(sec, el("p", "blame-about"));
    var chart = put(sec, el("div"));
    chart.id = "blame-chart";
    function drawChart(b) {
      sec.setAttribute("data-run", b.run);
      about.textContent = "run " + b.run + ": flip rate per step over " + b.k + " trials (perturbation: " + b.perturb +
        "); whiskers: Wilson interval; ? : too few gradable trials (insufficient)" +
        (b.decisive !== null ? "; decisive step: " + b.decisive : "; no decisive step");
      clear(chart);
      var plot = put(chart, el("div", "blame-plot"));
      if (typeof b.null_rate === "number") {
        var nl = put(plot, el("div", "blame-null"));
        nl.style.bottom = "calc((100% - var(--cap)) * " + b.null_rate + ")";
        nl.title = "null flip rate " + b.null_rate;
      }
      b.steps.forEach(function (s) {
        var bar = put(plot, el("div", "blame-bar " + s.label + (s.step === b.decisive ? " decisive" : "")));
        bar.setAttribute("data-step", s.step);
        bar.setAttribute("data-rate", s.rate === null ? "" : s.rate);
        bar.title = "step " + s.step + ": " + s.flips + " flips, " + s.no_flips + " no-flips, " + s.undefined +
          " undefined" + (s.q !== null ? "; q = " + s.q.toPrecision(3) : "") + " (" + s.label + ")";
        var fill = put(bar, el("div", "blame-fill"));
        fill.style.height = ((s.rate || 0) * 100) + "%";
        if (s.wilson) {
          var ci = put(bar, el("div", "blame-ci"));
          ci.style.bottom = (s.wilson[0] * 100) + "%";
          ci.style.height = ((s.wilson[1] - s.wilson[0]) * 100) + "%";
        }
        if (s.label === "insufficient") { add(bar, el("span", "blame-insufficient", "?")); }
        add(bar, el("span", "blame-step", s.step));
        bar.addEventListener("click", function () { if (buttons[String(s.step)]) { select(String(s.step)); } });
      });
    }
    function choose(value) {
      var b = runs.filter(function (r) { return r.run === value; })[0];
      if (b) { drawChart(b); }
      graph.draw(value);
    }
    pick.addEventListener("change", function () { choose(pick.value); });
    pick.value = runs[0].run;
    choose(runs[0].run);
  })();

  var first = mismatchStep !== null && buttons[String(mismatchStep)] ? String(mismatchStep) :
    buttons["1"] ? "1" : Object.keys(buttons)[0];
  if (first !== undefined) { select(first); }
})();
