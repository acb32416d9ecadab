"""The pages ``git pf serve`` adds to the report: the branch index and the fork / run controls.

``index_page`` lists branches (server-side HTML, every name escaped); ``with_controls`` adds to a
rendered report the server's data (branch, agent command; never a credential: the page's requests
carry the server's HttpOnly session cookie) as escaped JSON and a script that builds the buttons
with createElement / textContent only. Pure functions of their arguments: no repository, no I/O;
the JSON is escaped by git_pf.report.render's ``embed``.
"""
from __future__ import annotations

import html
from urllib.parse import quote

from .render import embed

STYLE = """
#pf-serve-bar{display:flex;gap:.6em;align-items:center;
padding:.4em .6em;margin-bottom:.6em;background:#eef3f8;border:1px solid #c9d6e3;border-radius:4px}
.run-output{max-height:12em;overflow:auto;background:#f6f6f6;padding:.4em}.pf-fork{margin-top:.8em}.pf-fork textarea{display:block;width:100%;min-height:5em;font:inherit}
"""

INDEX_STYLE = "body{font:14px/1.4 system-ui,sans-serif;margin:2em}li{margin:.2em 0}code{color:#666}"

SCRIPT = r"""
(function () {
  "use strict";
  var cfg = JSON.parse(document.getElementById("pf-serve").textContent);
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  var bar = el("div"), status = el("span"), run = el("button", "run-button", "Run on with the agent");
  bar.id = "pf-serve-bar";
  status.id = "serve-status";
  status.setAttribute("role", "status");
  run.type = "button";
  run.disabled = !cfg.agent;
  run.title = cfg.agent ? "git pf run " + cfg.branch + " -- " + cfg.agent : "start 'git pf serve -- AGENT_CMD' to run a fork on";
  bar.appendChild(el("a", null, "all branches")).href = "/";
  bar.appendChild(run);
  bar.appendChild(status);
  document.body.insertBefore(bar, document.body.firstChild);

  function say(state, text, href, label) {
    status.setAttribute("data-state", state);
    status.textContent = text;
    if (href) {
      var a = status.appendChild(el("a", "serve-link", label));
      a.href = href;
    }
  }
  function answer(r) {
    return r.json().then(function (d) {
      if (!r.ok) throw new Error(d.error || ("HTTP " + r.status));
      return d;
    });
  }
  function call(method, path, body) {
    var init = {method: method, credentials: "same-origin", headers: {}};
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    return fetch(path, init).then(answer);
  }
  function failed(e) { say("error", "error: " + e.message); run.disabled = !cfg.agent; }
  function reportLink(name) { return "/report/" + encodeURIComponent(name); }

  function poll(id) {
    call("GET", "/api/runs/" + id).then(function (job) {
      if (job.state === "running") {
        say("running", "running '" + job.branch + "'\u2026");
        setTimeout(poll, 700, id);
        return;
      }
      run.disabled = false;
      var out = document.getElementById("run-output") || bar.parentNode.insertBefore(el("pre", "run-output"), bar.nextSibling);
      out.id = "run-output";
      out.textContent = job.output || "";
      if (job.state === "done") say("done", "ran on: " + job.steps + " new steps, the agent exited " + job.exit + " ", reportLink(job.branch), "reload");
      else say("failed", job.error || "the run failed");
    }, failed);
  }
  run.addEventListener("click", function () {
    if (!window.confirm("Run '" + cfg.branch + "' on with the agent (" + cfg.agent + ")? It records new steps on the branch.")) {
      say("cancelled", "run cancelled");
      return;
    }
    run.disabled = true;
    call("POST", "/api/run", {branch: cfg.branch}).then(function (job) { poll(job.id); }, failed);
  });

  function addFork() {
    var detail = document.getElementById("step-detail");
    if (!detail) return;
    var n = parseInt(detail.getAttribute("data-step"), 10), have = detail.querySelector(".pf-fork");
    if (have && have.getAttribute("data-step") === String(n)) return;
    if (have) have.parentNode.removeChild(have);
    if (!(n >= 1)) return;
    var box = el("div", "pf-fork"), text = el("textarea", "fork-reply"), button = el("button", "fork-button", "Fork at step " + n);
    var shown = detail.querySelector(".exchange-text");
    box.setAttribute("data-step", String(n));
    text.value = shown ? shown.textContent : "";
    text.setAttribute("aria-label", "the new reply of step " + n);
    button.type = "button";
    button.addEventListener("click", function () {
      if (!window.confirm("Make a new branch from '" + cfg.branch + "' with this reply at step " + n + "?")) {
        say("cancelled", "fork cancelled");
        return;
      }
      call("POST", "/api/fork", {branch: cfg.branch, step: n, reply: text.value}).then(function (r) {
        say("forked", "forked: " + r.name + " ", reportLink(r.name), "open");
      }, failed);
    });
    box.appendChild(el("div", null, "A new reply for step " + n + ":"));
    box.appendChild(text);
    box.appendChild(button);
    detail.appendChild(box);
  }
  new MutationObserver(addFork).observe(document.body, {childList: true, subtree: true, attributes: true, attributeFilter: ["data-step"]});
  addFork();
})();
"""


def report_path(branch: str) -> str:
    return "/report/" + quote(branch, safe="")


def index_page(branches: dict[str, str]) -> str:
    """``{branch: tip}`` as a page of links ``a.branch-link`` to each branch's report."""
    rows = "".join(f'<li><a class="branch-link" href="{html.escape(report_path(name))}">{html.escape(name)}</a> '
                   f"<code>{html.escape(tip[:7])}</code></li>" for name, tip in branches.items())
    body = f'<ul id="branches">{rows}</ul>' if rows else '<p id="branches">no branch yet (git pf record makes one)</p>'
    return (f'<!doctype html><html><head><meta charset="utf-8"><title>git pf serve</title>'
            f"<style>{INDEX_STYLE}</style></head><body><h1>Branches</h1>{body}</body></html>")


def with_controls(page: str, *, branch: str, agent: list[str]) -> str:
    """The report ``page`` with the server's controls added before its ``</body>``."""
    import shlex

    data = {"branch": branch, "agent": shlex.join(agent) if agent else ""}
    extra = (f'<style>{STYLE}</style><script type="application/json" id="pf-serve">{embed(data)}</script>'
             f"<script>{SCRIPT}</script>")
    at = page.lower().rfind("</body>")
    return page[:at] + extra + page[at:] if at >= 0 else page + extra
