"""The report page: one self-contained HTML file (docs/report.md).

The page is a fixed skeleton, the stylesheet and script of ``assets/`` inlined, and the
report's data (``model.report_data``) as JSON in ``<script type="application/json"
id="pf-data">`` with ``<``, ``>``, ``&``, U+2028 and U+2029 written as ``\\uXXXX``, so no
string from a tape can end the script element or open a tag. The script builds every element
with ``createElement`` and ``textContent`` only. The Content-Security-Policy forbids any
request: the page loads nothing and sends nothing (a server that serves it may allow its own
origin for ``connect-src``). Reads the assets; writes nothing.
"""
from __future__ import annotations

import html
import json
from pathlib import Path

from .model import report_data

ASSETS = Path(__file__).resolve().parent / "assets"
_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_TABLE = str.maketrans(_ESCAPES)

SKELETON = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline'; \
style-src 'unsafe-inline'; connect-src {connect}; form-action 'none'; base-uri 'none'">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>
{css}
</style>
</head>
<body>
<main id="pf-report" data-rev="{rev}">
<header id="summary"><h1>{title}</h1><p id="summary-line"></p></header>
<section id="divergence-slot"></section>
<div id="run">
<nav id="timeline" aria-label="steps"></nav>
<section id="step-detail"><p class="hint">Select a step.</p></section>
</div>
<section id="ledger-section"><h2>Effects ledger</h2><div id="ledger"></div></section>
<section id="fork-section"><h2>Fork graph</h2>
<ul id="fork-legend" aria-label="what the colours say"></ul>
<div id="fork-graph"><svg id="fork-svg" role="img" aria-label="fork graph"></svg></div>
<p id="fork-trials"></p>
<p id="fork-detail"></p></section>
<section id="blame-slot"></section>
<noscript><p>This report needs JavaScript to draw its data.</p></noscript>
</main>
<script type="application/json" id="pf-data">{data}</script>
<script>
{js}
</script>
</body>
</html>
"""


def embed(data: dict) -> str:
    """``data`` as JSON safe to place inside a ``<script>`` element."""
    return json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":")).translate(_TABLE)


def _asset(name: str) -> str:
    return (ASSETS / name).read_text(encoding="utf-8")


def page(data: dict, *, connect: str = "'none'") -> str:
    """The HTML page of a report's data. ``connect``: the CSP ``connect-src`` (a server may pass ``'self'``)."""
    title = f"git pf report: {data.get('branch') or data.get('rev')}"
    return SKELETON.format(title=html.escape(title), rev=html.escape(str(data.get("rev")), quote=True),
                           css=_asset("report.css"), js=_asset("report.js"), data=embed(data),
                           connect=html.escape(connect, quote=True))


def render_report(repo, rev: str, *, blame=None, replay: dict | None = None, connect: str = "'none'") -> str:
    """The report of REV's recorded run as one self-contained HTML page."""
    return page(report_data(repo, rev, blame=blame, replay=replay), connect=connect)
