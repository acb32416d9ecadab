"""``git pf serve``: the reports of a repository's runs in a browser, with fork and run buttons.

Prints the URL to open, carrying the server's secret, on stdout (one JSON line with ``--json``) and
serves until Ctrl-C or SIGTERM, which stop it cleanly (exit 0); docs/report.md, "Serve".
"""
from __future__ import annotations

import json
from typing import List, Optional

import typer

from .app import app, open_repo
from .cmd_runs import RUN, UpstreamOpt


@app.command(context_settings=RUN)
def serve(
    port: int = typer.Option(0, "--port", min=0, max=65535, help="The port on 127.0.0.1 (0: a free one)."),
    upstream: List[str] = UpstreamOpt,
    as_json: bool = typer.Option(False, "--json", help="Print the URL as one JSON line instead of text."),
    cmd: Optional[List[str]] = typer.Argument(None, metavar="-- AGENT_CMD [ARGS]",
                                              help="The agent the page's run button runs a fork on with."),
) -> None:
    """Serve every branch's report on 127.0.0.1; the pages can fork a run at a step and run a fork on."""
    from ..report.serve import ReportServer

    server = ReportServer(open_repo(), port, list(cmd or []), list(upstream))
    try:
        line = json.dumps({"url": server.url, "port": server.port, "agent": bool(cmd)}, sort_keys=True) \
            if as_json else server.url
        typer.echo(line)
        server.serve_forever(poll_interval=0.1)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the normal way to stop a server
        pass
    finally:
        server.close()
