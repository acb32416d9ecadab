"""Reading a large HTTP response body of known size with few wake-ups.

A server that writes its body in small pieces (giftless streams a file line by
line: ~256-byte chunks of chunked encoding) wakes a plain reader for every
piece, and the reader then burns as much CPU as the server. Here the socket's
``SO_RCVLOWAT`` asks the kernel to wake the reader only once 256 KiB are
waiting, never more than the body still owes (and back to one byte when that
many do not come within two seconds, so a keep-alive connection never stalls
on bytes that will not come), and chunked framing is taken apart from large
reads. Only ``http.client`` responses whose socket the caller
holds; the body goes to a sink. Touches that socket only.
"""
from __future__ import annotations

import http.client
import select
import socket

LOWAT = 256 * 1024
_READ = 1 << 20
_MAX_TRAILERS = 100  # as http.client allows headers


def stream(sock: socket.socket | None, resp: http.client.HTTPResponse, expected: int, sink) -> None:
    """Feed the body of ``resp`` (read from ``sock``: the connection's socket as it was when
    the request went out, since ``http.client`` lets go of it when the server says it will
    close) to ``sink(bytes)``; ``expected`` is the size the body should have (reads never
    wait for more than it still owes). Raises ``http.client.IncompleteRead`` when the
    connection ends early; the response is closed afterwards."""
    reader = _Reader(sock, resp.fp)
    try:
        if resp.chunked:
            _chunked(reader, sink, expected)
            return
        owed, got = resp.length, 0  # None: the body ends when the server closes
        while owed is None or owed > 0:
            data = reader.read(_READ if owed is None else owed, expected - got if owed is None else owed)
            if not data:
                if owed is None:
                    return
                raise http.client.IncompleteRead(b"", owed)
            got += len(data)
            if owed is not None:
                owed -= len(data)
            sink(data)
    finally:
        reader.done()
        resp.close()


class _Reader:
    """Reads from a response's socket file, waking at most every ``LOWAT`` bytes.

    The first read takes what the file buffered with the headers (or does one plain read);
    after it the buffer is empty for good (``read1`` of more than its buffer reads past it),
    so each later read waits in ``poll`` for the wake-up mark first. When the mark is not
    reached within ``PATIENCE`` seconds (a slow or short body), it drops to one byte."""

    PATIENCE = 2.0

    def __init__(self, sock: socket.socket | None, fp):
        self.sock, self.fp, self.lowat, self.first = sock, fp, 1, True

    def read(self, most: int, owed: int) -> bytes:
        """Up to ``most`` bytes, the body still owing ``owed`` payload bytes."""
        if self.first:
            self.first = False
        elif self.sock is not None:
            self._wake_at(min(LOWAT, max(1, owed)))
            if self.lowat > 1 and not self._ready():
                self._wake_at(1)
        return self.fp.read1(min(most, _READ))

    def _ready(self) -> bool:
        pending = getattr(self.sock, "pending", None)  # TLS: bytes already decrypted
        if pending is not None and pending():
            return True
        poller = select.poll()
        poller.register(self.sock, select.POLLIN | select.POLLERR | select.POLLHUP)
        return bool(poller.poll(int(self.PATIENCE * 1000)))

    def _wake_at(self, n: int) -> None:
        if n != self.lowat and self.sock is not None:
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, n)
                self.lowat = n
            except OSError:
                self.sock = None  # not supported here: plain reads

    def done(self) -> None:
        self._wake_at(1)  # the connection may carry another request


def _chunked(reader: _Reader, sink, expected: int) -> None:
    """Chunked transfer coding: ``<hex size>[;ext]\r\n<bytes>\r\n`` ... ``0\r\n`` trailers ``\r\n``.
    Parsed by position in each large read (no copying per chunk); the chunks found in one read
    go to the sink together."""
    body = _Chunks(reader, sink, expected)
    while True:
        try:
            size = int(body.line().split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise http.client.IncompleteRead(b"", body.owed) from None  # not chunked framing
        if size == 0:
            break
        body.payload(size)
        if body.take(2) != b"\r\n":
            raise http.client.IncompleteRead(b"", body.owed)  # not chunked framing: a broken body
    for _ in range(_MAX_TRAILERS + 1):  # trailers, up to the empty line
        if not body.line():
            break
    else:
        raise http.client.IncompleteRead(b"", 0)  # trailers without end
    body.flush()


class _Chunks:
    def __init__(self, reader: _Reader, sink, expected: int):
        self.reader, self.sink = reader, sink
        self.buf, self.pos, self.owed = b"", 0, expected
        self.out: list[bytes] = []

    def _more(self) -> None:
        self.flush()
        data = self.reader.read(_READ, self.owed)
        if not data:
            raise http.client.IncompleteRead(b"", max(self.owed, 0))
        self.buf, self.pos = self.buf[self.pos:] + data, 0

    def flush(self) -> None:
        if self.out:
            self.sink(b"".join(self.out))
            self.out = []

    def line(self) -> bytes:
        while (nl := self.buf.find(b"\r\n", self.pos)) < 0:
            if len(self.buf) - self.pos > 4096:
                raise http.client.IncompleteRead(b"", max(self.owed, 0))  # no line is that long
            self._more()
        line, self.pos = self.buf[self.pos:nl], nl + 2
        return line

    def take(self, n: int) -> bytes:
        while len(self.buf) - self.pos < n:
            self._more()
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def payload(self, size: int) -> None:
        while size > 0:
            if self.pos >= len(self.buf):
                self._more()
            piece = self.buf[self.pos:self.pos + size]
            self.pos += len(piece)
            size -= len(piece)
            self.owed -= len(piece)
            self.out.append(piece)
