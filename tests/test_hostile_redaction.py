"""Secrets never reach the repository: every way a credential shows up in a recorded LLM
exchange (header lists, JSON-in-string bodies, URLs, keys inside message text, webhooks)
is redacted on the way in by the real ``git pf snapshot --tape``, and the secret's bytes
are then nowhere in the repository. Credentials in shell commands (``export X_PASSWORD=``,
``TOKEN=… cmd``, ``curl -u``, ``mysql -p…``, ``-H 'Authorization: …'``, ``user:pass@``) are
redacted, the command kept readable, in the trace messages, the effects ledger and the tape,
through the real Claude Code hook and ``git pf snapshot --tape``. The detector finds each
vendor key shape, drawn by hypothesis from the vendor's alphabet and length (one character
short is no key), and leaves look-alikes (hashes, uuids, base64, prose, code) alone. A stored
tape is untrusted data: a malformed entry is refused with one line and exit 3."""
from __future__ import annotations

import base64
import hashlib
import json
import os
import string
import subprocess
import sys
import uuid
from pathlib import Path

import pygit2
import pytest
from hypothesis import given, settings, strategies as st

from git_pf import Repo
from git_pf.layers.trace import tape
from git_pf.core.errors import DataError
from git_pf.image.tree import MODE_FILE, MODE_TREE, encode_tree
from git_pf.core.secrets import REDACTED, looks_secret, redact_json, redact_text

# Key shapes with the lengths their vendors document.
KEYS = {
    "anthropic": "sk-ant-api03-" + "Xq7_bN2-kLp9" * 7 + "r5tWAA",
    "openai": "sk-" + "a9Zx4Qm2T3BlbkFJ" * 3,
    "openai-project": "sk-proj-" + "aB3dE5_gH7-jK9mN" * 9,
    "github-classic": "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
    "github-oauth": "gho_" + "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4J3i2",
    "github-server": "ghs_" + "Q1w2E3r4T5y6U7i8O9p0A1s2D3f4G5h6J7k8",
    "github-fine-grained": "github_pat_" + "11ABCDEFG0123456789abc" + "_" + "Zx9" * 19 + "Q7",
    "aws-long-term": "AKIAIOSFODNN7EXAMPLE",
    "aws-temporary": "ASIAY34FZKBOKMUTVV7A",
    "slack-bot": "xoxb-2234567890-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "slack-user": "xoxp-2234567890-1234567890123-1234567890123-0123456789abcdef0123456789abcdef",
    "google": "AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
    "hugging-face": "hf_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZaBcDeFgH",
    "jwt": "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvZSJ9."
           "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
}

# Look-alikes that are not secrets and must come through unchanged.
PNG = base64.b64encode(bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000") * 40).decode()
NOT_SECRETS = {
    "sha256-hex": "sha256 " + hashlib.sha256(b"x").hexdigest(),
    "git-oid": "commit " + hashlib.sha1(b"y").hexdigest() + " is the fix",
    "uuid": str(uuid.UUID(int=0x1234567890ABCDEF1234567890ABCDEF)),
    "base64-image": "data:image/png;base64," + PNG,
    "sk-words": "The skeptic skipped sk-learn and the sky-blue sketch; sklearn is fine; sk-1 too.",
    "prose-bearer-token": "The bearer of bad news said: Token counting and basic understanding matter.",
    "code": "def auth(token: str, key=None):\n    headers = {'Authorization': f'Bearer {token}'}\n"
            "    return requests.get(url, params={'key': key}, headers=headers)\n",
    "plain-url": "see https://example.com/search?q=python&page=2#top",
    "assignment": "key=value",
    "tokenizer": '{"eos_token": "</s>", "max_tokens": 64}',
    "docker-user-group": "docker run -u 1000:1000 -p 8080:80 img",
    "mysql-prompts": "mysql -h db -u root -p shop",
    "env-reference": 'echo "$GITHUB_TOKEN" && GITHUB_TOKEN=$(cat ~/.tok) gh pr list',
    "count-named-like-a-token": "MAX_TOKENS=64 PWD=/srv ./bench --num-tokens 8",
    "password-from-stdin": "docker login --password-stdin -u bot < token.txt",
    "sort-unique": "sort -u names.txt | curl -s https://example.com/x -d @-",
}

# Vendor key shapes: prefix, the alphabet of the rest, and the lengths of the rest (the least
# one that is a key, as docs/security.md documents it, and the longest drawn).
ALNUM = string.ascii_letters + string.digits
URLSAFE = ALNUM + "_-"
SHAPES = {
    "anthropic": (st.sampled_from(["sk-ant-api03-", "sk-ant-admin01-"]), URLSAFE, 32, 95),
    "openai-user": (st.just("sk-"), ALNUM, 32, 48),
    "openai-project": (st.sampled_from(["sk-proj-", "sk-svcacct-", "sk-admin-"]), URLSAFE, 32, 164),
    "stripe": (st.sampled_from(["sk_live_", "sk_test_", "rk_live_", "rk_test_"]), ALNUM, 24, 99),
    "github-classic": (st.sampled_from(["ghp_", "gho_", "ghu_", "ghs_", "ghr_"]), ALNUM, 36, 36),
    "github-fine-grained": (st.just("github_pat_"), ALNUM + "_", 50, 82),
    "gitlab": (st.just("glpat-"), URLSAFE, 20, 20),
    "aws": (st.sampled_from(["AKIA", "ASIA"]), string.ascii_uppercase + string.digits, 16, 16),
    "slack": (st.sampled_from(["xoxb-", "xoxp-", "xoxa-", "xoxr-", "xapp-1-"]), ALNUM + "-", 10, 80),
    "google": (st.just("AIza"), URLSAFE, 35, 35),
    "hugging-face": (st.just("hf_"), string.ascii_letters, 30, 34),
    "jwt": (st.builds(lambda h, p: f"eyJ{h}.eyJ{p}.", st.text(URLSAFE, min_size=10, max_size=40),
                      st.text(URLSAFE, min_size=10, max_size=60)), URLSAFE, 0, 43),
}


@pytest.mark.parametrize("vendor", list(SHAPES))
@settings(max_examples=40, deadline=None, database=None)
@given(data=st.data())
def test_each_vendor_key_shape_drawn_from_its_alphabet_is_replaced_where_it_stands(vendor, data):
    prefix, alphabet, least, most = SHAPES[vendor]
    key = data.draw(prefix) + data.draw(st.text(alphabet, min_size=least, max_size=most))
    assert redact_text(f"use {key}, then stop") == f"use {REDACTED}, then stop", key
    assert redact_text(key) == REDACTED and looks_secret("NOTE", f"k={key}")


@pytest.mark.parametrize("vendor", [v for v in SHAPES if SHAPES[v][2] > 0])
@settings(max_examples=40, deadline=None, database=None)
@given(data=st.data())
def test_a_vendor_key_one_character_short_is_not_a_key(vendor, data):
    prefix, alphabet, least, _ = SHAPES[vendor]
    short = data.draw(prefix) + data.draw(st.text(alphabet, min_size=least - 1, max_size=least - 1))
    assert redact_text(f"use {short}, then stop") == f"use {short}, then stop"


@settings(max_examples=40, deadline=None, database=None)
@given(header=st.text(URLSAFE, min_size=9, max_size=9), payload=st.text(URLSAFE, min_size=10, max_size=60))
def test_a_jwt_one_character_short_is_not_a_key(header, payload):
    short = f"eyJ{header}.eyJ{payload}.sig"
    assert redact_text(short) == short


def test_look_alikes_of_keys_are_not_redacted():
    for name, text in NOT_SECRETS.items():
        assert redact_text(text) == text, name
        assert not looks_secret("NOTE", text), name


def test_a_key_shape_inside_a_longer_word_is_not_a_key():
    assert redact_text("AKIAIOSFODNN7EXAMPLEXYZ") == "AKIAIOSFODNN7EXAMPLEXYZ"
    assert redact_text("x" + KEYS["google"] + "x") == "x" + KEYS["google"] + "x"


def test_bearer_and_basic_credentials_in_text_keep_their_scheme():
    assert redact_text("curl -H 'Authorization: Bearer 9f8e7d6c5b4a3f2e' x") == \
        f"curl -H 'Authorization: Bearer {REDACTED}' x"
    basic = base64.b64encode(b"agent:hunter2").decode()
    assert redact_text(f"Authorization: Basic {basic}") == f"Authorization: Basic {REDACTED}"
    assert redact_text("Bearer abcdefghijklmnop") == REDACTED  # a whole Authorization value


def test_url_passwords_secret_query_values_and_webhooks_are_redacted():
    assert redact_text("db at postgres://agent:pg-pass-77@db.internal:5432/x now") == \
        f"db at postgres://agent:{REDACTED}@db.internal:5432/x now"
    assert redact_text("GET https://api.example.com/v1?api_key=q1&model=m&token=q2&key=q3 ok") == \
        f"GET https://api.example.com/v1?api_key={REDACTED}&model=m&token={REDACTED}&key={REDACTED} ok"
    assert redact_text("https://hooks.slack.com/services/T0AAAA/B0BBBB/XXXXsecret") == \
        f"https://hooks.slack.com/services/{REDACTED}"
    assert redact_text("https://discord.com/api/webhooks/123456/tok-EN_x") == \
        f"https://discord.com/api/webhooks/{REDACTED}"
    assert looks_secret("HOOK", "https://hooks.slack.com/services/T0AAAA/B0BBBB/XXXXsecret")


def test_json_in_a_string_is_redacted_and_rewritten_canonically_only_when_needed():
    assert redact_text('{"model": "m", "api_key": "abc"}') == f'{{"api_key":"{REDACTED}","model":"m"}}'
    assert redact_text('[{"password": "p"}]') == f'[{{"password":"{REDACTED}"}}]'
    untouched = '{"model": "m",  "n": 1}'
    assert redact_text(untouched) == untouched
    double = json.dumps(json.dumps({"api_key": "abc"}))  # a body encoded twice
    assert "abc" not in redact_text(double)
    # a duplicate key cannot hide a secret behind the value the parser keeps
    assert KEYS["anthropic"] not in redact_text('{"a": "%s", "a": "x"}' % KEYS["anthropic"])
    sse = 'data: {"api_key": "abc", "x": 1}\n\n'
    assert redact_text(sse) == f'data: {{"api_key": "{REDACTED}", "x": 1}}\n\n'


def test_header_lists_are_judged_by_header_name():
    headers = [["x-api-key", "k3y"], ("Authorization", "opaque"), ["Accept", "application/json"]]
    assert redact_json({"headers": headers}) == \
        {"headers": [["x-api-key", REDACTED], ["Authorization", REDACTED], ["Accept", "application/json"]]}
    assert redact_json([["role", "user"], ["content", "hi"]]) == [["role", "user"], ["content", "hi"]]


def test_redaction_is_deterministic_and_idempotent():
    one = {"headers": [["x-api-key", "first-key"]], "body": '{"api_key": "a1"}', "text": f"k {KEYS['openai']}"}
    two = {"headers": [["x-api-key", "second-key"]], "body": '{"api_key": "b2"}', "text": f"k {KEYS['anthropic']}"}
    [(name_one, data_one)], [(name_two, data_two)] = tape.encode([one]), tape.encode([two])
    assert (name_one, data_one) == (name_two, data_two)  # same request, other secrets: equal once redacted
    again = tape.encode([json.loads(data_one)])
    assert again == [(name_one, data_one)]
    for exchange, _, _ in LEAKS.values():
        once = redact_json(exchange)
        assert redact_json(once) == once


# --- through the real CLI: the secret's bytes are nowhere in the repository -------------

LEAKS = {  # case -> (one exchange, the secrets it leaks, a neighbouring value that must be kept)
    "header-list-x-api-key": ({"request": {"headers": [["x-api-key", "S3CRET-hl"], ["accept", "KEPT-hl"]]}},
                              ["S3CRET-hl"], "KEPT-hl"),
    "header-list-bearer": ({"request": {"headers": [["Authorization", "Bearer S3CRET-hb-123"], ["A", "KEPT-hb"]]}},
                           ["S3CRET-hb-123"], "KEPT-hb"),
    "json-string-body": ({"request": {"body": '{"api_key": "S3CRET-jb", "prompt": "KEPT-jb"}'}},
                         ["S3CRET-jb"], "KEPT-jb"),
    "url-query-api-key": ({"request": {"url": "https://api.x.com/v1?api_key=S3CRET-qa&model=KEPT-qa"}},
                          ["S3CRET-qa"], "KEPT-qa"),
    "url-query-token": ({"request": {"url": "https://api.x.com/v1?token=S3CRET-qt&model=KEPT-qt"}},
                        ["S3CRET-qt"], "KEPT-qt"),
    "url-query-key": ({"request": {"url": "https://gl.x.com/v1/models?key=S3CRET-qk&alt=KEPT-qk"}},
                      ["S3CRET-qk"], "KEPT-qk"),
    "anthropic-key-in-text": ({"request": {"messages": [{"role": "user", "content": f"KEPT-at {KEYS['anthropic']}"}]}},
                              [KEYS["anthropic"]], "KEPT-at"),
    "openai-key-in-text": ({"response": {"content": f"your key {KEYS['openai-project']} KEPT-ot"}},
                           [KEYS["openai-project"]], "KEPT-ot"),
    "url-password-in-text": ({"response": {"content": "postgres://agent:S3CRET-up@db.internal/KEPT-up"}},
                             ["S3CRET-up"], "KEPT-up"),
    "slack-webhook": ({"request": {"tool": "https://hooks.slack.com/services/T0A/B0B/S3CRET-sw", "k": "KEPT-sw"}},
                      ["S3CRET-sw"], "KEPT-sw"),
    "form-body": ({"request": {"body": "client_id=KEPT-fb&client_secret=S3CRET-fb&grant_type=x"}},
                  ["S3CRET-fb"], "KEPT-fb"),
    "sse-stream": ({"response": {"body": 'data: {"access_token": "S3CRET-ss", "kind": "KEPT-ss"}\n\n'}},
                   ["S3CRET-ss"], "KEPT-ss"),
}


def _pf(*args, cwd) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    return subprocess.run(["git-pf", *map(str, args)], cwd=cwd, capture_output=True, text=True, env=env)


def _image_with_tape(root: Path, exchanges: list[dict], *extra) -> Path:
    """``git pf init`` + ``git pf snapshot --tape`` in ``root``; the repository's path."""
    (root / "sb").mkdir()
    (root / "sb" / "f.txt").write_text("x")
    (root / "tape.jsonl").write_text("".join(json.dumps(x) + "\n" for x in exchanges))
    assert _pf("init", "repo", cwd=root).returncode == 0
    done = _pf("snapshot", "--fs-root", root / "sb", "--tape", root / "tape.jsonl", *extra, cwd=root / "repo")
    assert done.returncode == 0, done.stderr
    return root / "repo"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """One image whose tape holds every leak: the bytes of all its repository's objects,
    every file under .git as stored, and the stored exchange of each case."""
    repo_dir = _image_with_tape(tmp_path_factory.mktemp("leaks"), [x for x, _, _ in LEAKS.values()])
    objects = subprocess.run(["git", "cat-file", "--batch-all-objects", "--batch"], cwd=repo_dir,
                             capture_output=True, check=True).stdout
    raw = b"".join(p.read_bytes() for p in (repo_dir / ".git").rglob("*") if p.is_file())
    repo = Repo.open(repo_dir)
    return objects, raw, dict(zip(LEAKS, tape.read(repo.git, repo.resolve("main").tree)))


@pytest.mark.parametrize("case", list(LEAKS))
def test_a_leaked_secret_is_nowhere_in_the_repository(recorded, case):
    objects, raw, stored = recorded
    _, secrets, kept = LEAKS[case]
    for secret in secrets:
        assert secret.encode() not in objects and secret.encode() not in raw, secret
    text = json.dumps(stored[case])
    assert REDACTED in text and kept in text  # only the secret is replaced


def test_no_redact_keeps_a_named_key_in_header_lists_bodies_and_urls(tmp_path):
    exchange = {"request": {"headers": [["x-api-key", "kept-1"], ["Authorization", "Bearer gone-123456789"]],
                            "body": '{"api_key": "kept-2", "password": "gone-2"}',
                            "url": "https://x.com/?api_key=kept-3&token=gone-3"}}
    repo = Repo.open(_image_with_tape(tmp_path, [exchange], "--no-redact", "x-api-key", "--no-redact", "api_key"))
    [stored] = tape.read(repo.git, repo.resolve("main").tree)
    text = json.dumps(stored)
    assert all(k in text for k in ("kept-1", "kept-2", "kept-3"))
    assert not any(g in text for g in ("gone-123456789", "gone-2", "gone-3"))


# --- credentials in shell commands ------------------------------------------------------

SHELL = {  # case -> (a command an agent runs, its secret, the command as stored)
    "export": ("export DB_PASSWORD=S3cret-export && ./migrate", "S3cret-export",
               f"export DB_PASSWORD={REDACTED} && ./migrate"),
    "inline-assignment": ("TOKEN=S3cret-inline ./deploy.sh --prod", "S3cret-inline", f"TOKEN={REDACTED} ./deploy.sh --prod"),
    "quoted-assignment": ("export X_API_KEY='S3cret quoted'; make", "S3cret quoted", f"export X_API_KEY='{REDACTED}'; make"),
    "curl-user": ("curl -u admin:S3cretPass https://api.example.com/v1", "S3cretPass",
                  f"curl -u admin:{REDACTED} https://api.example.com/v1"),
    "mysql-password": ("mysql -h db -uroot -pS3cret-mysql shop < dump.sql", "S3cret-mysql",
                       f"mysql -h db -uroot -p{REDACTED} shop < dump.sql"),
    "mysqldump-password": ("mysqldump -uroot -p'S3cret dump' shop | gzip", "S3cret dump",
                           f"mysqldump -uroot -p'{REDACTED}' shop | gzip"),
    "curl-authorization": ("curl -sS -H 'Authorization: token S3cret-hdr' https://api.example.com", "S3cret-hdr",
                           f"curl -sS -H 'Authorization: token {REDACTED}' https://api.example.com"),
    "curl-api-key-header": ('curl -H "X-Api-Key: S3cret-xak" https://api.example.com', "S3cret-xak",
                            f'curl -H "X-Api-Key: {REDACTED}" https://api.example.com'),
    "long-option": ("wget --user=bot --password=S3cret-wget https://files.example.com/a", "S3cret-wget",
                    f"wget --user=bot --password={REDACTED} https://files.example.com/a"),
    "url-userinfo": ("git clone https://deploy:S3cret-u@rl@git.example.com/app.git", "S3cret-u@rl",
                     f"git clone https://deploy:{REDACTED}@git.example.com/app.git"),
}


def test_each_shell_credential_form_is_redacted_and_the_command_stays_readable():
    for case, (command, secret, stored) in SHELL.items():
        assert redact_text(command) == stored, case
        assert redact_text(stored) == stored, case  # idempotent
        assert redact_json({"command": command}) == {"command": stored}, case


def _all_objects(repo_dir: Path) -> bytes:
    return subprocess.run(["git", "cat-file", "--batch-all-objects", "--batch"], cwd=repo_dir,
                          capture_output=True, check=True).stdout


def test_shell_credentials_are_redacted_in_the_tape_as_stored(tmp_path):
    exchange = {"request": {"url": "https://api.anthropic.com/v1/messages", "body": json.dumps({"messages": [
        {"role": "assistant", "content": [{"type": "tool_use", "id": f"toolu_{n}", "name": "Bash",
                                           "input": {"command": command}}]}
        for n, (command, _, _) in enumerate(SHELL.values())]})}}
    repo_dir = _image_with_tape(tmp_path, [exchange])
    repo = Repo.open(repo_dir)
    [stored] = tape.read(repo.git, repo.resolve("main").tree)
    body = json.loads(stored["request"]["body"])
    commands = [m["content"][0]["input"]["command"] for m in body["messages"]]
    assert commands == [stored for _, _, stored in SHELL.values()]
    objects = _all_objects(repo_dir)
    assert not [secret for _, secret, _ in SHELL.values() if secret.encode() in objects]


def test_shell_credentials_are_redacted_in_messages_and_ledger_through_the_claude_code_hook(tmp_path):
    from test_integrations_claude_code import SID, Claude

    project = tmp_path / "project"
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
               CLAUDE_PROJECT_DIR=str(project), HOME=str(tmp_path / "home"))
    env.pop("GIT_PF_REPO", None)
    subprocess.run(["git", "pf", "init"], cwd=project, env=env, check=True, capture_output=True)
    subprocess.run(["git", "config", "pf.claudeCode.server", "false"], cwd=project, check=True)
    claude = Claude(project, tmp_path / "transcript.jsonl", env)
    claude.line(type="user", message={"role": "user", "content": "deploy it"})
    claude.hook("SessionStart", source="startup")
    for command, _, _ in SHELL.values():
        claude.tool("Bash", {"command": command}, {"stdout": "ok", "stderr": "", "interrupted": False})

    repo = Repo.open(project)
    branch = f"cc/{SID}"
    ledger_entries = [json.loads(l) for l in repo.read_layer(branch, "effects/ledger.jsonl").splitlines()]
    assert [e["args"]["command"] for e in ledger_entries] == [stored for _, _, stored in SHELL.values()]
    messages = [json.loads(l) for l in repo.read_layer(branch, "trace/messages.jsonl").splitlines()]
    used = [b["input"]["command"] for m in messages if isinstance(m["content"], list)
            for b in m["content"] if b.get("type") == "tool_use"]
    assert used == [stored for _, _, stored in SHELL.values()]
    objects = _all_objects(project)
    assert not [secret for _, secret, _ in SHELL.values() if secret.encode() in objects]


def test_env_capture_redacts_by_the_same_rules_as_the_tape(run_pf, tmp_path):
    (tmp_path / "sb").mkdir()
    env = {"HOOK": "https://hooks.slack.com/services/T0A/B0B/hooksecret", "NOTE": f"key {KEYS['anthropic']}",
           "DB_URL": "postgres://u:hunter2@db/x", "GREETING": "hello sk-learn", "SUM": hashlib.sha256(b"").hexdigest()}
    (tmp_path / "env.json").write_text(json.dumps(env))
    run_pf("init", "repo")
    run_pf("snapshot", "--fs-root", tmp_path / "sb", "--env", tmp_path / "env.json", cwd=tmp_path / "repo")
    stored = json.loads(Repo.open(tmp_path / "repo").read_layer("main", "world/env.json"))
    assert stored["redacted"] == ["DB_URL", "HOOK", "NOTE"]
    assert stored["env"]["GREETING"] == "hello sk-learn" and stored["env"]["SUM"] == env["SUM"]


# --- a stored tape is untrusted --------------------------------------------------------

EMPTY_TREE = bytes.fromhex("4b825dc642cb6eb9a060e54bf8d69288fbee4904")


def _with_tape_tree(repo_dir: Path, entries) -> Repo:
    """A new image on main (not checked by fsck: it is hostile on purpose): its parent's tree
    with trace/tape replaced by a tree of ``entries(git)``."""
    git = pygit2.Repository(str(repo_dir))
    head = git.revparse_single("refs/pf/heads/main")
    git.odb.write(pygit2.enums.ObjectType.TREE, b"")  # the empty tree a subtree entry may name
    tape_tree = git.odb.write(pygit2.enums.ObjectType.TREE, encode_tree(entries(git)))
    trace = git.TreeBuilder(head.tree["trace"])
    trace.insert("tape", tape_tree, pygit2.GIT_FILEMODE_TREE)
    top = git.TreeBuilder(head.tree)
    top.insert("trace", trace.write(), pygit2.GIT_FILEMODE_TREE)
    new = git.create_commit(None, head.author, head.committer, head.message, top.write(), [head.id])
    git.references.create("refs/pf/heads/main", new, force=True)
    return Repo.open(repo_dir)


BAD_NAMES = {
    "not-numbered": (b"notes.json", MODE_FILE),
    "dot-dot": (b"..", MODE_FILE),
    "slash": (b"../00000000-0123456789abcdef.json", MODE_FILE),
    "newline": (b"00000000-0123456789abcdef.json\nexit 0", MODE_FILE),
    "upper-hex": (b"00000000-0123456789ABCDEF.json", MODE_FILE),
    "subtree": (b"00000000-0123456789abcdef.json", MODE_TREE),
}


@pytest.mark.parametrize("case", list(BAD_NAMES))
def test_a_tape_entry_with_a_malformed_name_is_refused_with_exit_3(tmp_path, case):
    name, mode = BAD_NAMES[case]
    repo_dir = _image_with_tape(tmp_path, [{"n": 1}])
    repo = _with_tape_tree(repo_dir, lambda git: [(name, mode, EMPTY_TREE if mode == MODE_TREE
                                                   else git.create_blob(b'{"n":1}\n').raw)])
    with pytest.raises(DataError, match="not a tape entry"):
        tape.read(repo.git, repo.resolve("main").tree)
    done = _pf("diff", "main~1", "main", cwd=repo_dir)
    assert done.returncode == 3, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert "trace/tape/" in line and "not a tape entry" in line


BAD_CONTENT = {  # case -> (blob, the name's hash is the blob's, what the error says)
    "array": (b"[1, 2]\n", True, "must hold one JSON object"),
    "string": (b'"text"\n', True, "must hold one JSON object"),
    "not-json": (b"{nope\n", True, "not valid JSON"),
    "nan": (b'{"a":NaN}\n', True, "not valid JSON"),
    "not-utf8": (b'{"a":"\xff"}\n', True, "not valid JSON"),
    "deeply-nested": (b"[" * 100000 + b"]" * 100000, True, "not valid JSON"),
    "hash-mismatch": (b'{"a":1}\n', False, "does not match its content"),
}


@pytest.mark.parametrize("case", list(BAD_CONTENT))
def test_a_malformed_stored_exchange_is_a_data_error_naming_it(tmp_path, case):
    data, honest, says = BAD_CONTENT[case]
    name = tape.entry_name(0, data if honest else b"other")
    repo = _with_tape_tree(_image_with_tape(tmp_path, [{"n": 1}]),
                           lambda git: [(name, MODE_FILE, git.create_blob(data).raw)])
    with pytest.raises(DataError, match=says) as err:
        tape.read(repo.git, repo.resolve("main").tree)
    assert f"trace/tape/{name.decode()}" in err.value.message


def test_a_stored_exchange_over_the_json_limit_is_refused_before_it_is_read(tmp_path):
    repo_dir = _image_with_tape(tmp_path, [{"n": 1}])
    subprocess.run(["git", "config", "pf.maxJsonLine", "64"], cwd=repo_dir, check=True)
    data = b'{"a":"' + b"x" * 100 + b'"}\n'
    repo = _with_tape_tree(repo_dir, lambda git: [(tape.entry_name(0, data), MODE_FILE, git.create_blob(data).raw)])
    with pytest.raises(DataError, match="over pf.maxJsonLine"):
        tape.read(repo.git, repo.resolve("main").tree)
