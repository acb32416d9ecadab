"""The ``s3`` adapter: side-store objects in an S3-compatible bucket (``s3://bucket/prefix``).

Each object is the key ``<prefix>/<2 hex>/<62 hex>`` holding its zstd frame
exactly as the local store keeps it (no re-compression either way, and the
frame's own checksum travels with it). Presence is asked per object (HEAD),
or by listing the prefix for a large batch; a frame over
``pf.s3.multipartThreshold`` goes up as a resumable multipart upload
(``s3multipart``); transfers run on ``pf.s3.jobs`` threads. A download is
streamed into the store (``SideStore.receive_frame``), verified (decoded and hashed
with sha256) and only then renamed into place. Region and endpoint come from
git config, credentials from boto3's usual chain (environment, ~/.aws),
never from the repository. boto3 is imported only when this adapter is used.
Touches nothing but the bucket and the local store.
"""
from __future__ import annotations

import os
import signal
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from urllib.parse import urlparse

from ...core import config
from ...core.errors import CorruptObject, TransferFailed, UsageError
from ...core.limits import active as active_limits
from ...store.sidestore import SideStore
from .. import s3multipart as mp
from ..objectstore import ObjectStore
from ..progress import Progress
from ..remotes import Remote, check_http

MULTIPART_THRESHOLD = 64 << 20
PART_SIZE = 16 << 20
JOBS = 4
_LIST_OVER = 200  # a batch larger than this is answered by listing the prefix, not by HEADs
_PIECE = 1 << 20
KILL_AFTER_ENV = "GIT_PF_S3_KILL_AFTER"  # tests: SIGKILL this process after N pieces are sent


def parse_url(url: str) -> tuple[str, str]:
    """``(bucket, prefix)`` of ``s3://bucket[/prefix]``; one clear UsageError otherwise."""
    parsed = urlparse(url)
    if parsed.scheme != "s3" or not parsed.netloc or parsed.query or parsed.fragment:
        raise UsageError(f"'{url}' is not an s3 store (use s3://<bucket>[/<prefix>])")
    return parsed.netloc, parsed.path.strip("/")


class _Killer:
    """The test hook of ``GIT_PF_S3_KILL_AFTER``: counts pieces sent, then kills the process
    as ``kill -9`` would, so tests can interrupt a push at a known point."""

    def __init__(self):
        value = os.environ.get(KILL_AFTER_ENV, "")
        self.left = int(value) if value.isdigit() else None
        self.lock = threading.Lock()

    def sent(self) -> None:
        if self.left is None:
            return
        with self.lock:
            self.left -= 1
            if self.left <= 0:
                os.kill(os.getpid(), signal.SIGKILL)


def _settings(repo, remote: Remote) -> dict:
    git = repo.git
    endpoint = (config.get_str(git, f"pf.remote.{remote.name}.s3Endpoint") if remote.name else None) \
        or config.get_str(git, "pf.s3.endpoint")
    if endpoint:
        check_http(repo, remote, endpoint, "the s3 endpoint")
    jobs = config.get_size(git, "pf.s3.jobs", JOBS)
    return {"endpoint": endpoint or None, "region": config.get_str(git, "pf.s3.region") or None,
            "threshold": config.get_size(git, "pf.s3.multipartThreshold", MULTIPART_THRESHOLD),
            "part_size": config.get_size(git, "pf.s3.partSize", PART_SIZE), "jobs": min(jobs, 64)}


class S3Adapter(ObjectStore):
    def __init__(self, repo, remote: Remote, url: str):
        self.url = url
        self.bucket, self.prefix = parse_url(url)
        self.settings = _settings(repo, remote)
        self.killer = _Killer()
        self._client = None

    # -- the client and its errors ---------------------------------------
    @property
    def client(self):
        if self._client is None:
            try:
                import boto3
                from botocore.config import Config
            except ImportError:
                raise UsageError("the s3 adapter needs boto3 (pip install 'git-pf[s3]')") from None
            s = self.settings
            cfg = Config(max_pool_connections=s["jobs"] + 4, retries={"mode": "standard", "max_attempts": 4},
                         s3={"addressing_style": "path"} if s["endpoint"] else None)
            session = boto3.session.Session()
            region = s["region"] or session.region_name or "us-east-1"
            self._client = session.client("s3", region_name=region, endpoint_url=s["endpoint"], config=cfg)
        return self._client

    def _failed(self, e: Exception, what: str) -> TransferFailed:
        """One line for a failed S3 call (the ClientError's code and message, or the cause)."""
        from botocore.exceptions import ClientError, NoCredentialsError, PartialCredentialsError

        where = f"s3://{self.bucket}"
        if isinstance(e, (NoCredentialsError, PartialCredentialsError)):
            return TransferFailed(f"{where}: no AWS credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
                                  "or AWS_PROFILE, or ~/.aws/credentials)")
        if isinstance(e, ClientError):
            err = e.response.get("Error", {})
            code, msg = err.get("Code", "?"), err.get("Message", "")
            if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "403",
                        "ExpiredToken", "InvalidToken"):
                if code == "403":  # a HEAD's refusal has no body to name the reason
                    code, msg = "HTTP 403", "check the credentials and what the bucket allows them"
                return TransferFailed(f"{where}: access refused while {what} ({code}: {msg})")
            if code == "NoSuchBucket":
                return TransferFailed(f"{where}: no such bucket")
            return TransferFailed(f"{where}: {what} failed ({code}: {msg})")
        text = " ".join(str(e).split())
        return TransferFailed(f"{where}: {what} failed ({text})")

    def _call(self, what: str, fn, *args, **kwargs):
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return fn(*args, **kwargs)
        except (BotoCoreError, ClientError) as e:
            raise self._failed(e, what) from None

    def key(self, oid: str) -> str:
        name = f"{oid[:2]}/{oid[2:]}"
        return f"{self.prefix}/{name}" if self.prefix else name

    def _pool(self) -> ThreadPoolExecutor:
        return ThreadPoolExecutor(self.settings["jobs"], thread_name_prefix="pf-s3")

    # -- what the bucket holds --------------------------------------------
    def refresh(self) -> None:
        """Nothing to learn ahead: presence is asked per batch."""

    load_local = refresh

    def _head(self, oid: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client.head_object(Bucket=self.bucket, Key=self.key(oid))
            return True
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise self._failed(e, "asking for an object") from None

    def _listed(self) -> set[str]:
        base = f"{self.prefix}/" if self.prefix else ""
        found, kwargs = set(), {"Bucket": self.bucket, "Prefix": base}
        while True:
            page = self._call("listing the objects", self.client.list_objects_v2, **kwargs)
            for item in page.get("Contents", []):
                rest = item["Key"][len(base):]
                if len(rest) == 65 and rest[2] == "/":
                    found.add(rest[:2] + rest[3:])
            if not page.get("IsTruncated"):
                return found
            kwargs["ContinuationToken"] = page["NextContinuationToken"]

    def has(self, oids) -> set[str]:
        oids = list(dict.fromkeys(oids))
        if len(oids) > _LIST_OVER:
            listed = self._listed()
            return {o for o in oids if o in listed}
        with self._pool() as pool:
            return {o for o, here in zip(oids, pool.map(self._call_head, oids)) if here}

    def _call_head(self, oid: str) -> bool:
        from botocore.exceptions import BotoCoreError

        try:
            return self._head(oid)
        except BotoCoreError as e:
            raise self._failed(e, "asking for an object") from None

    # -- upload -----------------------------------------------------------
    def upload(self, store: SideStore, oids: list[str], progress: Progress) -> int:
        """Send the frames of ``oids`` (those the bucket lacks); the bytes actually sent."""
        store.ensure(oids)
        large = [o for o in oids if (store.frame_size(o) or 0) > self.settings["threshold"]]
        open_ = self._call("listing open multipart uploads", mp.open_uploads, self.client, self.bucket,
                           f"{self.prefix}/" if self.prefix else "") if large else {}
        with self._pool() as pool:
            plans = dict(zip(large, pool.map(lambda o: self._call(
                "starting a multipart upload", mp.plan, self.client, self.bucket, self.key(o), store.frame(o),
                self.settings["part_size"], open_.get(self.key(o), [])), large)))
            pieces = [(o, None) for o in oids if o not in plans]
            for o, p in plans.items():
                pieces.extend((o, (n, start, end)) for n, start, end in p.spans() if n not in p.done)
            sent = 0
            with progress.task("uploading objects to s3", len(oids)) as advance:
                futures = {pool.submit(self._send, store, o, plans.get(o), span): (o, span)
                           for o, span in pieces}
                try:
                    for f in as_completed(futures):
                        sent += f.result()
                        if futures[f][1] is None:
                            advance(1)
                except BaseException:
                    for f in futures:
                        f.cancel()  # what has not started stays unsent; a re-run sends it
                    raise
                for o, p in plans.items():
                    self._complete(p, open_.get(p.key, []))
                    advance(1)
        return sent

    def _send(self, store: SideStore, oid: str, p: mp.Plan | None, span) -> int:
        """Send one object, or one part of one; the bytes sent. Frames are read here, by the
        thread that sends them (a large one is mapped, not read)."""
        frame = store.frame(oid)
        if p is None:
            self._call("uploading an object", self.client.put_object, Bucket=self.bucket, Key=self.key(oid),
                       Body=bytes(frame))
            self.killer.sent()
            return len(frame)
        n, start, end = span
        p.done[n] = self._call("uploading a part", mp.send_part, self.client, self.bucket, p, n, frame[start:end])
        self.killer.sent()
        return end - start

    def _complete(self, p: mp.Plan, others: list[dict]) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            mp.complete(self.client, self.bucket, p, others)
        except (BotoCoreError, ClientError) as e:
            oid = p.key[-65:].replace("/", "")
            if not self._head(oid):  # another push may have completed it meanwhile
                raise self._failed(e, "completing a multipart upload") from None

    # -- download ---------------------------------------------------------
    def download(self, store: SideStore, oids: list[str], progress: Progress) -> None:
        todo = [o for o in dict.fromkeys(oids) if not store.has(o)]
        with progress.task("fetching objects from s3", len(todo)) as advance, self._pool() as pool:
            for f in as_completed([pool.submit(self._fetch_one, store, o) for o in todo]):
                f.result()
                advance(1)

    def _fetch_one(self, store: SideStore, oid: str) -> None:
        """Stream the frame into the store, which verifies it before it takes it
        (``SideStore.receive_frame``). An object the bucket lacks is left missing (the caller
        says so)."""
        from botocore.exceptions import BotoCoreError, ClientError

        key = self.key(oid)
        try:
            got = self.client.get_object(Bucket=self.bucket, Key=key)
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return
            raise self._failed(e, "fetching an object") from None
        except BotoCoreError as e:
            raise self._failed(e, "fetching an object") from None
        bound = active_limits().max_frame + (active_limits().max_frame >> 7) + (1 << 16)
        if got.get("ContentLength", 0) > bound:
            raise CorruptObject(f"s3://{self.bucket}/{key} is refused: {got['ContentLength']} bytes, "
                                "over what a frame may be (pf.maxFrameSize)")
        try:
            store.receive_frame(oid, self._pieces(got["Body"], key))
        except CorruptObject as e:
            raise CorruptObject(f"{e}, from s3://{self.bucket}/{key}; not stored") from None

    def _pieces(self, body, key: str):
        """The body's bytes a piece at a time; a broken download is one TransferFailed line."""
        from botocore.exceptions import BotoCoreError

        try:
            while piece := body.read(_PIECE):
                yield piece
        except (BotoCoreError, OSError) as e:
            raise self._failed(e, f"fetching {key}") from None
