"""A lean LLM client for the record benchmark, run as a child process (not imported):

    python benchmarks/record_client.py N WORLD

N OpenAI chat.completions exchanges over one keep-alive ``http.client`` connection to ``$OPENAI_BASE_URL``
(the fake server, or git pf's proxy in front of it), each after three draws (clock, uuid, random) that go
into the prompt, so a replay that does not feed them back mismatches; every 10th exchange writes a file
of the world (``$GIT_PF_WORLD`` when git pf sets it, else WORLD). Then 3,000 draws on their own. Prints
one line, ``client: {JSON}``: per-exchange latency as the client sees it (request sent to response read)
and per-draw cost. No SDK, so the numbers are the proxy's and the hook's, not a client library's.

Benchmark helper only: it touches its world directory and its LLM endpoint, nothing else.
"""
from __future__ import annotations

import http.client
import json
import os
import random
import statistics
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

SYSTEM = ("You are a careful file agent. Keep notes of every step, read files before you change them, "
          "and say what you did in one line.")


def main(n: int, world: Path) -> None:
    url = urlsplit(os.environ["OPENAI_BASE_URL"])
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    headers = {"content-type": "application/json", "authorization": "Bearer sk-test-bench-0123456789abcdef"}
    (world / "out").mkdir(parents=True, exist_ok=True)
    latency = []
    for i in range(n):
        stamp, uid, r = time.time(), uuid.uuid4(), random.random()
        body = json.dumps({"model": "gpt-4o-mini", "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"exchange {i}: id {uid} r {r:.6f} at {int(stamp)}"}]})
        t0 = time.perf_counter()
        conn.request("POST", url.path.rstrip("/") + "/chat/completions", body, headers)
        resp = conn.getresponse()
        data = resp.read()
        latency.append(time.perf_counter() - t0)
        if resp.status != 200:
            print(f"record_client: exchange {i} answered {resp.status}: {data[:200]!r}", file=sys.stderr)
            sys.exit(3)
        if i % 10 == 0:
            (world / "out" / f"{i:05d}.txt").write_text(json.loads(data)["choices"][0]["message"]["content"])
    t0 = time.perf_counter()
    for _ in range(1000):
        time.time(), uuid.uuid4(), random.random()
    draws = time.perf_counter() - t0
    steady = latency[1:] or latency  # the first one opens the connection
    print("client: " + json.dumps({"exchanges": n, "mean_ms": statistics.fmean(steady) * 1000,
                      "p50_ms": statistics.median(steady) * 1000, "draw_us": draws / 3000 * 1e6}))


if __name__ == "__main__":
    main(int(sys.argv[1]), Path(os.environ.get("GIT_PF_WORLD") or sys.argv[2]))
