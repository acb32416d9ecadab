"""Forwarding a request to the live LLM API and passing its answer on as it arrives.

``Upstreams`` says where a request goes: the upstream of the API family whose
base path it came on (``$ANTHROPIC_BASE_URL`` or ``$OPENAI_BASE_URL``), never
a guess: ``--upstream [openai=|anthropic=]URL`` (repeatable; a bare URL is for
both), else git config ``pf.upstream.openai`` / ``pf.upstream.anthropic``,
else the vendors' public APIs. The target is the
upstream's origin + its path prefix (a trailing ``/v1`` dropped when the
request path starts with ``/v1/``) + the request path and query.

``forward`` sends with ``http.client`` over a per-thread keep-alive
connection, copies the response to the agent (streamed responses piece by
piece, with the delay before each piece measured) and returns the response
part of a v2 tape entry (``git_pf.layers.trace.exchange``). The agent's
credentials go upstream and nowhere else. The agent gets only the
allow-listed response headers, the ones the tape keeps: what it sees live
is what a replay can serve (a ``Set-Cookie`` seen live and not on replay
would make its HTTP client draw the clock once more). Writes no git
objects and no files.
"""
from __future__ import annotations

import http.client
import ssl
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from ..core.errors import UsageError
from ..layers.trace import exchange
from .proxy import HOP_BY_HOP, Reply, Request

DEFAULTS = {"openai": "https://api.openai.com", "anthropic": "https://api.anthropic.com"}
TIMEOUT_S = 600.0
READ = 65536
_NOT_FORWARDED = HOP_BY_HOP | {"accept-encoding"}  # identity bodies: what is stored is what the agent read


class UpstreamDown(Exception):
    """The upstream could not be reached or broke off before answering."""

    def __init__(self, url: str, reason: str):
        super().__init__(f"upstream {url} is unreachable: {reason}")
        self.url = url


@dataclass(frozen=True)
class Upstream:
    scheme: str
    host: str
    port: int
    prefix: str

    @property
    def origin(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"

    def path_for(self, request: Request) -> str:
        prefix = self.prefix
        if prefix.endswith("/v1") and request.path.startswith("/v1/"):
            prefix = prefix[:-3]
        return prefix + request.path + ("?" + request.query if request.query else "")


def parse_url(url: str, what: str = "--upstream") -> Upstream:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        parts, port = None, None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise UsageError(f"{what}: '{url}' is not an http:// or https:// URL")
    return Upstream(parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80),
                    parts.path.rstrip("/"))


class Upstreams:
    """Which upstream each API family goes to."""

    def __init__(self, specs: list[str] = (), config: dict[str, str | None] | None = None):
        chosen: dict[str, Upstream] = {}
        for family in DEFAULTS:
            url = (config or {}).get(family)
            if url:
                chosen[family] = parse_url(url, f"pf.upstream.{family}")
        for spec in specs:
            family, sep, url = spec.partition("=")
            if sep and family in DEFAULTS:
                chosen[family] = parse_url(url)
            elif sep and "://" not in family:
                raise UsageError(f"--upstream: '{family}' is not openai or anthropic (give [openai=|anthropic=]URL)")
            else:
                for f in DEFAULTS:
                    chosen[f] = parse_url(spec)
        self.by_family = {f: chosen.get(f) or parse_url(DEFAULTS[f]) for f in DEFAULTS}

    @classmethod
    def from_repo(cls, git, specs: list[str]) -> "Upstreams":
        from ..core.config import get_str

        return cls(specs, {f: get_str(git, f"pf.upstream.{f}") for f in DEFAULTS})

    def for_request(self, api: str, request: Request) -> Upstream:
        """The upstream of the request's family; a request of a tape recorded before families were
        kept (no ``family``) goes where its API or Anthropic headers say."""
        if request.family in self.by_family:
            return self.by_family[request.family]
        anthropic = api.startswith("anthropic") or request.header("anthropic-version") is not None \
            or request.header("x-api-key") is not None
        return self.by_family["anthropic" if anthropic else "openai"]


_local = threading.local()


def _connection(up: Upstream, fresh: bool) -> tuple[http.client.HTTPConnection, bool]:
    """This thread's connection to ``up``, and whether it was used before."""
    pool = _local.__dict__.setdefault("pool", {})
    conn = pool.get(up)
    if conn is not None and not fresh:
        return conn, True
    if conn is not None:
        conn.close()
    if up.scheme == "https":
        conn = http.client.HTTPSConnection(up.host, up.port, timeout=TIMEOUT_S, context=ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(up.host, up.port, timeout=TIMEOUT_S)
    pool[up] = conn
    return conn, False


def _send(up: Upstream, request: Request) -> http.client.HTTPResponse:
    headers = {k: v for k, v in request.headers if k.lower() not in _NOT_FORWARDED}
    headers["Host"] = up.host if up.port in (80, 443) else f"{up.host}:{up.port}"
    headers["Accept-Encoding"] = "identity"
    for attempt in (0, 1):
        conn, reused = _connection(up, fresh=attempt == 1)
        try:
            conn.request(request.method, up.path_for(request), body=request.body, headers=headers)
            return conn.getresponse()
        except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
            conn.close()
            if not reused or attempt:  # a stale keep-alive connection is retried once, nothing else
                raise UpstreamDown(up.origin, str(e) or type(e).__name__) from None
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise UpstreamDown(up.origin, getattr(e, "strerror", None) or str(e) or type(e).__name__) from None
    raise AssertionError("unreachable")


def streamed(headers: list[tuple[str, str]]) -> bool:
    """An event stream, or a body of unknown length: kept as timed chunks."""
    h = {k.lower(): v for k, v in headers}
    return h.get("content-type", "").startswith("text/event-stream") or "content-length" not in h


def forward(up: Upstream, request: Request, reply: Reply) -> dict:
    """Send ``request`` upstream, copy the answer to ``reply``; the response part of its tape entry."""
    resp = _send(up, request)
    is_streamed = streamed(resp.getheaders())
    kept = exchange.keep_headers(resp.getheaders())
    try:
        if not is_streamed or request.method == "HEAD":
            data = resp.read()
            reply.whole(resp.status, kept.items(), data)
            return {"status": resp.status, "headers": kept, "body": exchange.body(data), "chunks": None}
        chunks = []
        reply.start(resp.status, kept.items())
        last = time.perf_counter()
        while True:
            data = resp.read1(READ)
            if not data:
                break
            now = time.perf_counter()
            reply.chunk(data)
            chunks.append({"ms": round((now - last) * 1000, 3), "data": exchange.body(data)})
            last = now
        reply.end()
    except (http.client.HTTPException, OSError) as e:
        if isinstance(e, (BrokenPipeError, ConnectionResetError)) and reply.started:
            resp.close()
            raise  # the agent went away
        raise UpstreamDown(up.origin, f"broke off mid-response: {e or type(e).__name__}") from None
    return {"status": resp.status, "headers": kept, "body": None, "chunks": chunks}
