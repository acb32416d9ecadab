"""Tape entry v2 (git_pf.layers.trace.exchange) and request matching (matching): what the
recorder writes, what replay compares, and how a hostile v2 entry read from an image is refused.
Real images in real repositories; the CLI where a user meets the behaviour."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from git_pf.core.errors import DataError, UsageError
from git_pf.layers.trace import exchange, matching, tape
from git_pf.ops.snapshot_inputs import TraceInput

KEY = "sk-proj-" + "A1b2C3d4" * 6  # an OpenAI project key's shape


def chat_body(content: str, **extra) -> bytes:
    return json.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": content}], **extra}).encode()


def entry(step: int = 1, **changes) -> dict:
    e = {"v": 2, "kind": "exchange", "step": step, "arrival": step, "batch": step, "api": "openai.chat",
         "request": {"method": "POST", "path": "/v1/chat/completions", "query": "",
                     "headers": {"content-type": "application/json"}, "body": exchange.body(chat_body("hi"))},
         "response": {"status": 200, "headers": {"content-type": "text/event-stream"}, "body": None,
                      "chunks": [{"ms": 0.5, "data": {"text": "data: {}\n\n"}},
                                 {"ms": 3, "data": {"text": "data: [DONE]\n\n"}}]},
         "draws": [{"fn": "time.time", "v": 1700000000.25}], "ms": 4.5}
    e.update(changes)
    return e


def test_headers_keep_only_the_allow_list_and_never_credentials():
    kept = exchange.keep_headers([("Content-Type", "application/json"), ("Authorization", f"Bearer {KEY}"),
                                  ("X-Api-Key", KEY), ("api-key", KEY), ("Cookie", "s=1"), ("Set-Cookie", "s=1"),
                                  ("Proxy-Authorization", "Basic eDp5"), ("OpenAI-Organization", "org-1"),
                                  ("x-ratelimit-remaining-requests", "99"), ("anthropic-ratelimit-tokens-limit", "5"),
                                  ("Retry-After-Ms", "0"), ("x-request-id", "req_1"), ("X-Request-Id", "req_2")])
    assert kept == {"content-type": "application/json", "x-ratelimit-remaining-requests": "99",
                    "anthropic-ratelimit-tokens-limit": "5", "retry-after-ms": "0", "x-request-id": "req_1, req_2"}


@pytest.mark.parametrize("data", [b"", b'{"a": 1}\n', "h\u00e9llo \u2603".encode(), b"\xff\xfe\x00bin", bytes(range(256))])
def test_body_keeps_the_exact_bytes(data):
    b = exchange.body(data)
    assert exchange.body_bytes(b) == data
    assert ("text" in b) == (data != b"\xff\xfe\x00bin" and data != bytes(range(256)))


def test_response_bytes_joins_the_chunks_or_reads_the_body():
    assert exchange.response_bytes(entry()["response"]) == b"data: {}\n\ndata: [DONE]\n\n"
    assert exchange.response_bytes({"status": 200, "body": {"b64": "AAE="}, "chunks": None}) == b"\x00\x01"


def test_exchanges_are_in_step_order_and_end_is_found():
    entries = [entry(2), {"model": "v1 entry"}, entry(1), {"v": 2, "kind": "end", "step": 2, "draws": [], "exit": 0}]
    assert [e["step"] for e in exchange.exchanges(entries)] == [1, 2]
    assert exchange.end(entries)["exit"] == 0 and exchange.end(entries[:3]) is None
    with pytest.raises(DataError, match="step 1 is recorded twice"):
        exchange.exchanges([entry(1), entry(1)])


def test_a_well_formed_v2_entry_and_a_v1_entry_read_back_from_an_image(repo, tmp_path):
    sb = tmp_path / "sb"
    sb.mkdir()
    end = {"v": 2, "kind": "end", "step": 1, "draws": [{"fn": "uuid.uuid4", "v": "0" * 32}], "exit": 3}
    image = repo.snapshot(sb, name="run", trace=TraceInput(tape=[{"request": "v1"}, entry(), end])).image
    got = tape.read(repo.git, image.tree)
    assert got[1] == entry() and got[2] == end and got[0] == {"request": "v1"}


HOSTILE = [
    ({"v": 2, "kind": "begin"}, "kind must be"),
    (entry(step=0), "step must be an integer >= 1"),
    (entry(step=True), "step must be an integer >= 1"),
    (entry(arrival="1"), "arrival must be"),
    (entry(batch=5), "batch must not be after its arrival"),
    (entry(api="gemini"), "api must be one of"),
    (entry(ms=-1), "ms must be a number >= 0"),
    (entry(draws={"fn": "time.time"}), "draws must be a list"),
    (entry(draws=[{"fn": "time.time"}]), "draws[0] must be"),
    (entry(request={"method": "POST\r\nX: y", "path": "/v1"}), "request.method is not well-formed"),
    (entry(request={"method": "POST", "path": "v1"}), "request.path must start with /"),
    (entry(request={"method": "POST", "path": "/v1", "headers": {"authorization": "Bearer x"}}),
     "request.headers holds a header that is not on the allow-list"),
    (entry(request={"method": "POST", "path": "/v1", "body": {"b64": "!!"}}), "request.body.b64 is not valid base64"),
    (entry(request={"method": "POST", "path": "/v1", "body": {"text": 5}}), "request.body.text must be a string"),
    (entry(response={"status": 700, "body": None, "chunks": None}), "response.status must be an integer 100-599"),
    (entry(response={"status": 200, "headers": {"set-cookie": "a=b"}}), "not on the allow-list"),
    (entry(response={"status": 200, "headers": {"content-type": "text/html\r\nset-cookie: a=b"}}),
     "response.headers.content-type must be a string without control characters"),
    (entry(response={"status": 200, "body": {"text": "x"}, "chunks": []}), "response.body must be null when"),
    (entry(response={"status": 200, "chunks": [{"ms": "1", "data": {"text": ""}}]}),
     "response.chunks[0].ms must be a number >= 0"),
    (entry(response={"status": 200, "chunks": [{"ms": 1, "data": "raw"}]}), "response.chunks[0].data must be"),
    ({"v": 2, "kind": "end", "step": -1, "draws": [], "exit": 0}, "step must be an integer >= 0"),
    ({"v": 2, "kind": "end", "step": 1, "draws": [], "exit": "0"}, "exit must be an integer exit code"),
]


@pytest.mark.parametrize("obj,says", HOSTILE, ids=[s for _, s in HOSTILE])
def test_a_malformed_v2_entry_is_a_data_error_naming_it(obj, says):
    with pytest.raises(DataError) as e:
        exchange.parse_entry(obj, "trace/tape/00000000-0123456789abcdef.json")
    assert e.value.message.startswith("trace/tape/00000000-0123456789abcdef.json: ") and says in e.value.message


def test_checkout_of_an_image_with_a_malformed_v2_entry_exits_3_naming_the_entry(repo, tmp_path, run_pf):
    sb = tmp_path / "sb"
    sb.mkdir()
    bad = entry(response={"status": 200, "headers": {"x-api-key": "k"}, "body": None, "chunks": None})
    repo.snapshot(sb, name="run", trace=TraceInput(tape=[entry(), bad]))
    proc = run_pf("checkout", "run", "--layers", "trace", "--into", tmp_path / "co", cwd=tmp_path / "repo", check=False)
    assert proc.returncode == 3 and "Traceback" not in proc.stderr
    [line] = proc.stderr.splitlines()
    assert "trace/tape/00000001-" in line and "response.headers holds a header that is not on the allow-list" in line
    assert not (tmp_path / "co").exists()


# -- matching ---------------------------------------------------------------------------------

def test_a_live_request_with_its_real_key_matches_its_redacted_recording(repo, tmp_path):
    live = json.dumps({"api_key": KEY, "model": "m", "messages": [{"role": "user", "content": f"use {KEY} now"}]},
                      indent=2).encode()
    sb = tmp_path / "sb"
    sb.mkdir()
    rec = entry(request={"method": "POST", "path": "/v1/chat/completions", "body": exchange.body(live)})
    image = repo.snapshot(sb, name="run", trace=TraceInput(tape=[rec])).image
    stored = tape.read(repo.git, image.tree)[0]
    recorded = exchange.body_bytes(stored["request"]["body"])
    assert KEY.encode() not in recorded  # the image holds no secret ...
    key = matching.request_key("POST", "/v1/chat/completions", recorded)
    assert matching.request_key("POST", "/v1/chat/completions", live) == key  # ... and still matches
    assert matching.request_key("post", "/v1/chat/completions", live) == key
    assert matching.diff_requests(stored["request"], {"method": "POST", "path": "/v1/chat/completions",
                                                      "body": live}) == []


def test_one_byte_changes_the_key_and_the_diff_names_where():
    a, b = chat_body("hello"), chat_body("hellp")
    assert matching.request_key("POST", "/v1/x", a) != matching.request_key("POST", "/v1/x", b)
    assert matching.request_key("POST", "/v1/x", a) != matching.request_key("POST", "/v1/y", a)
    assert matching.request_key("POST", "/v1/x", b'{"n": 1}') != matching.request_key("POST", "/v1/x", b'{"n": true}')
    assert matching.request_key("POST", "/v1/x", b"\xff\x00") != matching.request_key("POST", "/v1/x", b"\xff\x01")
    diff = matching.diff_requests({"method": "POST", "path": "/v1/x", "body": exchange.body(a)},
                                  {"method": "POST", "path": "/v1/x", "body": b})
    assert diff == [{"path": "$.messages[0].content", "recorded": "hello", "live": "hellp"}]


def test_key_order_and_spacing_do_not_count_but_ignored_fields_only_count_when_not_ignored():
    a = chat_body("hi", metadata={"run": 1}, user="u1")
    b = json.dumps({"user": "u2", "metadata": {"run": 2}, "messages": [{"content": "hi", "role": "user"}],
                    "model": "gpt-4o-mini"}, indent=1).encode()
    assert matching.request_key("POST", "/p", a) != matching.request_key("POST", "/p", b)
    ignore = ("$.metadata", "$.user")
    assert matching.request_key("POST", "/p", a, ignore) == matching.request_key("POST", "/p", b, ignore)
    ids = ('{"messages": [{"id": "a", "c": 1}, {"id": "b", "c": 2}]}', '{"messages": [{"id": "x", "c": 1}, {"id": "y", "c": 2}]}')
    k = [matching.request_key("POST", "/p", s.encode(), ("$.messages[*].id",)) for s in ids]
    assert k[0] == k[1]
    assert matching.request_key("POST", "/p", ids[0].encode(), ("$.messages[0].id",)) != \
        matching.request_key("POST", "/p", ids[1].encode(), ("$.messages[0].id",))
    diff = matching.diff_requests({"method": "POST", "path": "/p", "body": a}, {"method": "POST", "path": "/p", "body": b},
                                  ignore=("$.metadata",))
    assert diff == [{"path": "$.user", "recorded": "u1", "live": "u2"}]


def test_the_diff_names_missing_items_and_stops_at_twenty():
    a = json.dumps({"messages": [1, 2], "n": list(range(30))}).encode()
    b = json.dumps({"messages": [1], "n": list(range(100, 130)), "extra": True}).encode()
    diff = matching.diff_requests({"method": "POST", "path": "/p", "body": a}, {"method": "GET", "path": "/p", "body": b})
    assert len(diff) == matching.MAX_DIFFS
    assert diff[0] == {"path": "method", "recorded": "POST", "live": "GET"}
    assert diff[1] == {"path": "$.extra", "recorded": None, "live": True, "missing": "recorded"}
    assert diff[2] == {"path": "$.messages[1]", "recorded": 2, "live": None, "missing": "live"}
    assert diff[3] == {"path": "$.n[0]", "recorded": 0, "live": 100}


@pytest.mark.parametrize("spec", ["messages", "$", "$.", "$..a", "$[x]", "$.a[", "$.a[-1]", "$.a\n"])
def test_a_malformed_ignore_field_is_a_usage_error(spec):
    with pytest.raises(UsageError, match="--ignore-field"):
        matching.parse_ignore(spec)


def test_docs_name_the_v2_fields_and_the_matching_rules():
    text = (Path(__file__).resolve().parents[1] / "docs" / "record.md").read_text()
    section = text[text.index("## Tape format v2"):]
    for word in ('"arrival"', '"batch"', '"chunks"', '"draws"', "retry-after-ms", "x-ratelimit-*", "## Matching",
                 "--ignore-field"):
        assert word in section, word
