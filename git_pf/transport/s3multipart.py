"""Multipart uploads to S3 that survive a kill: find, resume and complete them.

An object over ``pf.s3.multipartThreshold`` goes up in parts. Before any part
is sent, the multipart uploads already open under the prefix are listed
(ListMultipartUploads, once per push); an object with one is resumed: its
parts are listed (ListParts), and a part whose size and ETag (the MD5 of its
bytes) match what would be sent now is kept, not sent again. Only then is a
new upload started (CreateMultipartUpload) for an object with none. Knows
the S3 calls of multipart uploads and nothing of the side store or of git.
"""
from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass, field

MAX_PARTS = 10000  # S3's limit on the parts of one upload


@dataclass
class Plan:
    """One object's multipart upload: its id and the parts it still needs."""

    key: str
    upload_id: str
    size: int
    part_size: int
    done: dict[int, str] = field(default_factory=dict)  # part number -> ETag, already on the server

    def spans(self) -> list[tuple[int, int, int]]:
        """``(part number, start, end)`` of every part of the object, in order."""
        out, n, start = [], 1, 0
        while start < self.size:
            end = min(start + self.part_size, self.size)
            out.append((n, start, end))
            n, start = n + 1, end
        return out


def part_size_for(size: int, wanted: int) -> int:
    """The part size for an object of ``size`` bytes: ``wanted``, raised as needed so that
    the object fits in S3's 10,000 parts."""
    return max(wanted, -(-size // MAX_PARTS))


def open_uploads(client, bucket: str, prefix: str) -> dict[str, list[dict]]:
    """The multipart uploads open under ``prefix``: key -> uploads, the newest first."""
    found: dict[str, list[dict]] = {}
    kwargs = {"Bucket": bucket, "Prefix": prefix}
    while True:
        page = client.list_multipart_uploads(**kwargs)
        for up in page.get("Uploads", []):
            found.setdefault(up["Key"], []).append(up)
        if not page.get("IsTruncated"):
            break
        kwargs.update(KeyMarker=page.get("NextKeyMarker", ""), UploadIdMarker=page.get("NextUploadIdMarker", ""))
    for ups in found.values():
        ups.sort(key=lambda u: u.get("Initiated") or 0, reverse=True)
    return found


def _parts(client, bucket: str, key: str, upload_id: str) -> dict[int, tuple[int, str]]:
    """The parts an upload holds: number -> (size, ETag without quotes)."""
    out: dict[int, tuple[int, str]] = {}
    kwargs = {"Bucket": bucket, "Key": key, "UploadId": upload_id}
    while True:
        page = client.list_parts(**kwargs)
        for p in page.get("Parts", []):
            out[p["PartNumber"]] = (p["Size"], p["ETag"].strip('"'))
        if not page.get("IsTruncated"):
            return out
        kwargs["PartNumberMarker"] = page["NextPartNumberMarker"]


def plan(client, bucket: str, key: str, frame, part_size: int, uploads: list[dict]) -> Plan:
    """Resume the newest open upload of ``key`` (keeping every part that matches ``frame``),
    else start one."""
    size = len(frame)
    size_each = part_size_for(size, part_size)
    if uploads:
        p = Plan(key, uploads[0]["UploadId"], size, size_each)
        held = _parts(client, bucket, key, p.upload_id)
        for n, start, end in p.spans():
            got = held.get(n)
            if got is not None and got[0] == end - start and got[1] == hashlib.md5(frame[start:end]).hexdigest():
                p.done[n] = got[1]
        return p
    created = client.create_multipart_upload(Bucket=bucket, Key=key)
    return Plan(key, created["UploadId"], size, size_each)


def send_part(client, bucket: str, p: Plan, n: int, data) -> str:
    """Upload part ``n``; its ETag. The MD5 goes along, so the server refuses a damaged part."""
    md5 = hashlib.md5(data).digest()
    got = client.upload_part(Bucket=bucket, Key=p.key, UploadId=p.upload_id, PartNumber=n, Body=bytes(data),
                             ContentMD5=base64.b64encode(md5).decode())
    return got["ETag"].strip('"')


def complete(client, bucket: str, p: Plan, others: list[dict]) -> None:
    """Join the parts into the object, then abort the other uploads left open for that key
    (older interrupted pushes)."""
    parts = [{"PartNumber": n, "ETag": f'"{p.done[n]}"'} for n, _, _ in p.spans()]
    client.complete_multipart_upload(Bucket=bucket, Key=p.key, UploadId=p.upload_id,
                                     MultipartUpload={"Parts": parts})
    for up in others:
        if up["UploadId"] != p.upload_id:
            try:
                client.abort_multipart_upload(Bucket=bucket, Key=p.key, UploadId=up["UploadId"])
            except Exception:  # noqa: BLE001 - tidying only; the object is complete
                pass
