"""The s3 adapter against moto's S3 server on 127.0.0.1: push, clone, lazy checkout, gc; a push
killed half way and run again; a corrupt object in the bucket; wrong credentials."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("boto3")
pytest.importorskip("moto")

from s3_helpers import BUCKET, config, env, moto_s3  # noqa: E402
from mount_helpers import requires_fuse  # noqa: E402
from transport_helpers import mounted_files, objects_bytes, pf, rand_bytes, sh, source_repo, tree_files  # noqa: E402

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    with moto_s3(tmp_path_factory.mktemp("moto")) as server:
        yield server


def _home(tmp: Path, s3) -> dict:
    """A HOME whose git config names the endpoint, as a user of a non-AWS store sets it once."""
    home = tmp / "home"
    home.mkdir(exist_ok=True)
    text = f"[pf \"s3\"]\n\tendpoint = {s3.endpoint}\n[user]\n\tname = t\n\temail = t@localhost\n"
    (home / ".gitconfig").write_text(text)
    return env(HOME=str(home))


def _setup(tmp: Path, s3, prefix: str, big: int = 3 * MiB, per_remote: bool = False):
    """Repo ``a`` with one image, remote ``origin`` (a bare repo) whose objects go to the bucket
    under ``prefix`` in small multipart uploads; returns (repo, sandbox, environment)."""
    e = _home(tmp, s3)
    repo, sb = source_repo(tmp, big=big)
    sh("git", "init", "-q", "--bare", tmp / "r.git")
    sh("git", "remote", "add", "origin", tmp / "r.git", cwd=repo)
    config(repo, s3, prefix, per_remote=per_remote)
    sh("git", "config", "pf.s3.multipartThreshold", "256k", cwd=repo)
    sh("git", "config", "pf.s3.partSize", "100k", cwd=repo)
    return repo, sb, e


def _local_frames(repo: Path) -> dict[str, bytes]:
    root = repo / ".git" / "pf" / "objects"
    return {p.parent.name + p.name: p.read_bytes() for p in root.glob("??/*")}


def _bucket(s3, prefix: str) -> dict[str, bytes]:
    c = s3.client()
    out = {}
    for page in c.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix + "/"):
        for item in page.get("Contents", []):
            oid = item["Key"][len(prefix) + 1:].replace("/", "")
            out[oid] = c.get_object(Bucket=BUCKET, Key=item["Key"])["Body"].read()
    return out


def _uploads(s3, prefix: str):
    """The requests that carried object data under ``prefix`` (PutObject and UploadPart)."""
    return [r for r in s3.requests() if r.method == "PUT" and r.key.startswith(prefix + "/")]


def test_push_clone_lazy_checkout_and_gc(tmp_path, s3):
    repo, sb, e = _setup(tmp_path, s3, "main")
    pushed = json.loads(pf("push", "--json", cwd=repo, env=e).stdout)
    frames = _local_frames(repo)
    assert pushed["sent_objects"] == pushed["objects"] == len(frames) > 1
    # the bucket holds each frame exactly as the local store does, under <prefix>/<2 hex>/<62 hex>
    assert _bucket(s3, "main") == frames
    assert any(r.query.get("partNumber") for r in _uploads(s3, "main"))  # multipart was used
    # no second copy: the objects went to the bucket, not into git's packs
    assert objects_bytes(repo / ".git") < MiB and objects_bytes(tmp_path / "r.git") < MiB

    before = len(_uploads(s3, "main"))
    again = json.loads(pf("push", "--json", cwd=repo, env=e).stdout)
    assert again["sent_objects"] == 0 and len(_uploads(s3, "main")) == before

    # a clone finds the adapter the remote recorded; checkout fetches lazily from the bucket
    pf("clone", tmp_path / "r.git", tmp_path / "b", cwd=tmp_path, env=e)
    assert _local_frames(tmp_path / "b") == {}
    # gc in a clone holding nothing yet: what the images reach is read through s3, nothing removed
    gc = json.loads(pf("gc", "--prune=now", "--json", cwd=tmp_path / "b", env=e).stdout)
    assert gc["removed"] == []
    pf("checkout", "main", "--into", tmp_path / "c", cwd=tmp_path / "b", env=e)
    assert tree_files(tmp_path / "c") == tree_files(sb)
    assert _local_frames(tmp_path / "b") == frames
    gc = json.loads(pf("gc", "--prune=now", "--json", cwd=tmp_path / "b", env=e).stdout)
    assert gc["removed"] == [] and _local_frames(tmp_path / "b") == frames
    pf("checkout", "main", "--into", tmp_path / "d", cwd=tmp_path / "b", env=dict(e, GIT_PF_NO_LAZY_FETCH="1"))
    assert tree_files(tmp_path / "d") == tree_files(sb)


@requires_fuse
def test_a_clone_mounts_an_image_whose_objects_come_lazily_from_the_bucket(tmp_path, s3):
    repo, sb, e = _setup(tmp_path, s3, "mounted")
    pf("push", cwd=repo, env=e)
    pf("clone", tmp_path / "r.git", tmp_path / "b", cwd=tmp_path, env=e)
    assert _local_frames(tmp_path / "b") == {}
    assert mounted_files(tmp_path / "b", "main", tmp_path / "mnt", env=e) == tree_files(sb)
    assert _local_frames(tmp_path / "b") == _local_frames(repo)  # fetched from the bucket, verified, kept


def test_killed_push_resumes_and_sends_nothing_twice(tmp_path, s3):
    repo, sb, e = _setup(tmp_path, s3, "killed", per_remote=True)
    sh("git", "config", "pf.s3.endpoint", "http://127.0.0.1:9", cwd=repo)  # the remote's own one wins
    killed = pf("push", cwd=repo, env=dict(e, GIT_PF_S3_KILL_AFTER="8"), check=False)
    assert killed.returncode == -9
    first = _uploads(s3, "killed")
    assert len(first) >= 8
    assert sh("git", "for-each-ref", "refs/pf/heads", cwd=tmp_path / "r.git").stdout == ""  # no image ref yet

    done = json.loads(pf("push", "--json", cwd=repo, env=e).stdout)
    frames = _local_frames(repo)
    assert 0 < done["sent_objects"] <= done["objects"] == len(frames)
    assert _bucket(s3, "killed") == frames
    every = [r for r in s3.requests() if r.key.startswith("killed/")]
    puts = _uploads(s3, "killed")
    # nothing was uploaded twice: each object, and each part of an upload, went up once
    sent = Counter((r.key, r.query.get("partNumber")) for r in puts)
    assert max(sent.values()) == 1
    assert sum(r.body_bytes for r in puts) < sum(len(f) for f in frames.values()) * 1.05
    # an interrupted multipart upload was completed from its listed parts, not started again
    started = Counter(r.key for r in every if r.method == "POST" and "uploads" in r.query)
    assert started and max(started.values()) == 1
    resumed = {r.key for r in first if "partNumber" in r.query}
    assert resumed and any(r.method == "GET" and "uploadId" in r.query and r.key in resumed for r in every)
    pf("clone", tmp_path / "r.git", tmp_path / "b", cwd=tmp_path, env=e)
    pf("checkout", "main", "--into", tmp_path / "c", cwd=tmp_path / "b", env=e)
    assert tree_files(tmp_path / "c") == tree_files(sb)


def test_corrupt_object_in_bucket_is_refused_on_fetch(tmp_path, s3):
    import zstandard

    repo, sb, e = _setup(tmp_path, s3, "corrupt", big=3 * MiB // 2)
    pf("push", cwd=repo, env=e)
    frames = _local_frames(repo)
    victim = max(frames, key=lambda o: len(frames[o]))
    # a well-formed frame with its own valid checksum, of other bytes: only the sha256 can tell
    forged = zstandard.ZstdCompressor(write_checksum=True).compress(b"not the object" * 1000)
    s3.client().put_object(Bucket=BUCKET, Key=f"corrupt/{victim[:2]}/{victim[2:]}", Body=forged)
    pf("clone", tmp_path / "r.git", tmp_path / "b", cwd=tmp_path, env=e)
    out = pf("checkout", "main", "--into", tmp_path / "c", cwd=tmp_path / "b", env=e, check=False)
    assert out.returncode == 3
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "corrupt" in lines[0] and victim[:12] in lines[0], out.stderr
    assert not (tmp_path / "c").exists()
    assert victim not in _local_frames(tmp_path / "b")
    assert not list((tmp_path / "b" / ".git" / "pf" / "objects" / "tmp").glob("s3-*"))


def test_wrong_or_missing_credentials_give_one_line(tmp_path, s3):
    repo, _, e = _setup(tmp_path, s3, "creds", big=3 * MiB // 2)
    s3.check_credentials(True)
    try:
        out = pf("push", cwd=repo, env=dict(e, AWS_ACCESS_KEY_ID="AKIAWRONGWRONGWRONG0",
                                              AWS_SECRET_ACCESS_KEY="wrong"), check=False)
    finally:
        s3.check_credentials(False)
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "access refused" in lines[0] and "403" in lines[0], out.stderr
    assert "Traceback" not in out.stderr

    bare = {k: v for k, v in e.items() if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    out = pf("push", cwd=repo, env=dict(bare, AWS_ACCESS_KEY_ID="", AWS_SECRET_ACCESS_KEY=""), check=False)
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "no AWS credentials" in lines[0], out.stderr
    assert sh("git", "for-each-ref", "refs/pf/heads", cwd=tmp_path / "r.git").stdout == ""

    # a clone whose lazy fetch is refused says why the object is missing, in one line
    pf("push", cwd=repo, env=e)
    pf("clone", tmp_path / "r.git", tmp_path / "b", cwd=tmp_path, env=e)
    s3.check_credentials(True)
    try:
        out = pf("checkout", "main", "--into", tmp_path / "c", cwd=tmp_path / "b",
                 env=dict(e, AWS_ACCESS_KEY_ID="AKIAWRONGWRONGWRONG0", AWS_SECRET_ACCESS_KEY="wrong"), check=False)
    finally:
        s3.check_credentials(False)
    lines = out.stderr.strip().splitlines()
    assert out.returncode != 0 and len(lines) == 1, out.stderr
    assert "is missing" in lines[0] and "fetching it failed: remote 'origin'" in lines[0] and "InvalidAccessKeyId" in lines[0]


def test_many_objects_are_found_by_listing_the_prefix(tmp_path, s3):
    """A batch of more than 200 objects asks the bucket with a listing, not one HEAD each."""
    e = _home(tmp_path, s3)
    sb = tmp_path / "sb"
    sb.mkdir()
    for i in range(230):
        (sb / f"f{i:03}.bin").write_bytes(rand_bytes(2048, i))
    pf("init", tmp_path / "a", cwd=tmp_path)
    repo = tmp_path / "a"
    sh("git", "config", "pf.largeFileThreshold", "1k", cwd=repo)
    pf("snapshot", "--fs-root", sb, "-m", "many", cwd=repo)
    sh("git", "init", "-q", "--bare", tmp_path / "r.git")
    sh("git", "remote", "add", "origin", tmp_path / "r.git", cwd=repo)
    config(repo, s3, "many")
    first = json.loads(pf("push", "--json", cwd=repo, env=e).stdout)
    assert first["sent_objects"] == first["objects"] >= 230
    seen = len(s3.requests())
    again = json.loads(pf("push", "--json", cwd=repo, env=e).stdout)
    assert again["sent_objects"] == 0
    later = [r for r in s3.requests()[seen:] if r.key.startswith("many/") or "list-type" in r.query]
    assert [r.method for r in later] == ["GET"] and later[0].query.get("prefix") == "many/"
    pf("clone", tmp_path / "r.git", tmp_path / "b", cwd=tmp_path, env=e)
    pf("checkout", "main", "--into", tmp_path / "c", cwd=tmp_path / "b", env=e)
    assert tree_files(tmp_path / "c") == tree_files(sb)
