"""Large response bodies read with few wake-ups (git_pf.transport.httpbody) from a real HTTP
server on 127.0.0.1 that writes in small pieces: chunked and sized bodies arrive whole, a
kept-alive connection carries the next request, a short body does not stall, a body that
breaks off is an error; and how many downloads run at once (git_pf.transport.pacing)."""
from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from git_pf.transport import httpbody, pacing

BODY = bytes(range(256)) * 4096 + b"tail"  # 1 MiB and a bit


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive

    def log_message(self, *args):
        pass

    def do_GET(self):
        kind = self.path.strip("/")
        body = BODY[:1000] if kind == "short" else BODY
        if kind == "sized":
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            for i in range(0, len(body), 300):
                self.wfile.write(body[i:i + 300])
            return
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        cut = len(body) // 2 if kind == "broken" else len(body)
        for i in range(0, cut, 257):
            piece = body[i:min(i + 257, cut)]
            self.wfile.write(b"%x;ext=1\r\n%s\r\n" % (len(piece), piece))
        if kind == "broken":
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(b"0\r\nX-Trailer: yes\r\n\r\n")


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


def _get(conn: http.client.HTTPConnection, path: str, expected: int) -> bytes:
    conn.request("GET", path)
    sock = conn.sock
    resp = conn.getresponse()
    got = []
    httpbody.stream(sock, resp, expected, got.append)
    return b"".join(got)


@pytest.mark.parametrize("kind", ["chunked", "sized"])
def test_a_body_written_in_small_pieces_arrives_whole_and_the_connection_carries_the_next_request(server, kind):
    conn = http.client.HTTPConnection("127.0.0.1", server, timeout=30)
    first_socket = None
    for _ in range(3):
        assert _get(conn, f"/{kind}", len(BODY)) == BODY
        first_socket = first_socket or conn.sock
        assert conn.sock is first_socket  # kept alive: no new connection
    conn.close()


def test_a_body_shorter_than_expected_ends_without_waiting_for_bytes_that_never_come(server, monkeypatch):
    monkeypatch.setattr(httpbody._Reader, "PATIENCE", 0.2)
    conn = http.client.HTTPConnection("127.0.0.1", server, timeout=30)
    assert _get(conn, "/short", len(BODY)) == BODY[:1000]  # the caller then sees the size is wrong
    assert _get(conn, "/chunked", len(BODY)) == BODY
    conn.close()


def test_a_body_that_breaks_off_is_an_incomplete_read(server):
    conn = http.client.HTTPConnection("127.0.0.1", server, timeout=30)
    with pytest.raises(http.client.IncompleteRead):
        _get(conn, "/broken", len(BODY))


def _pace_through(monkeypatch, rates: dict[int, float], most: int) -> list[int]:
    """Drive a Pace on a made-up clock where n transfers at once move rates[n] bytes a second;
    the numbers of transfers it ran, in order."""
    clock = [0.0]
    monkeypatch.setattr(pacing.time, "monotonic", lambda: clock[0])
    pace = pacing.Pace(most)
    seen = []
    for _ in range(40):
        seen.append(pace.limit)
        clock[0] += 1_000_000 / rates[pace.limit]  # one 1 MB item finishes
        pace.finished(1_000_000)
    return seen


def test_transfers_double_while_the_rate_grows_and_stay_where_a_step_stops_paying(monkeypatch):
    # a server that caps each connection: more transfers pay up to 8
    seen = _pace_through(monkeypatch, {1: 10e6, 2: 20e6, 4: 40e6, 8: 80e6}, most=8)
    assert seen[0] == 1 and seen[-1] == 8 and sorted(set(seen)) == [1, 2, 4, 8]
    # a server that shares one CPU among connections: two are slower than one, so one it is
    seen = _pace_through(monkeypatch, {1: 12e6, 2: 9e6, 4: 7e6, 8: 6e6}, most=8)
    assert seen[-1] == 1 and max(seen) == 2
    # a rate that grows too little to pay for the step is not followed
    seen = _pace_through(monkeypatch, {1: 10e6, 2: 11e6, 4: 40e6, 8: 80e6}, most=8)
    assert seen[-1] == 1
    assert _pace_through(monkeypatch, {1: 10e6}, most=1) == [1] * 40
