"""The summary of the other branch that a trace merge appends as one message.

``git config pf.summarizer "<command>"`` names a shell command that gets the
other branch's new messages as canonical JSONL on stdin and prints the
summary on stdout. Without it the summary is deterministic: the branch's last
assistant message, cut to ``MAX_BYTES`` at a UTF-8 character boundary
(undecodable bytes, kept as surrogate escapes, count one byte each). Runs the
configured command; touches no repository data.
"""
from __future__ import annotations

import os
import subprocess

from ...core import canonjson, config
from ...core.errors import PfError

MAX_BYTES = 4096
ROLE = "user"


def text_of(message: dict) -> str:
    """The text of a message: a string ``content``, or the text parts of a content list."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def cut(text: str, limit: int = MAX_BYTES) -> str:
    """The longest prefix of ``text`` whose UTF-8 (surrogate-escaped) form fits in ``limit`` bytes."""
    used = 0
    for i, ch in enumerate(text):
        used += len(ch.encode("utf-8", "surrogateescape")) if not 0xD800 <= ord(ch) <= 0xDFFF else 1
        if used > limit:
            return text[:i]
    return text


def default(messages: list[dict]) -> str:
    last = next((m for m in reversed(messages) if m.get("role") == "assistant"), None)
    return cut(text_of(last)) if last is not None else "(no assistant message on that branch)"


def summarize(git, messages: list[dict], branch: str, dry_run: bool) -> tuple[str, str]:
    """(summary text, how it was made: 'default', the command, or 'skipped (dry run)')."""
    command = config.get_str(git, "pf.summarizer")
    if not command:
        return default(messages), "default"
    if dry_run:
        return default(messages), "skipped (dry run)"
    env = dict(os.environ, GIT_PF_MERGE_BRANCH=branch)
    try:
        proc = subprocess.run(command, shell=True, input=canonjson.encode_lines(messages), capture_output=True,
                              env=env, cwd=git.workdir or git.path)
    except OSError as e:
        raise PfError(f"pf.summarizer: cannot run '{command}': {e.strerror or e}") from None
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise PfError(f"pf.summarizer '{command}' failed (exit {proc.returncode})" + (f": {err[-1]}" if err else ""))
    text = proc.stdout.decode("utf-8", "surrogateescape").strip()
    if not text:
        raise PfError(f"pf.summarizer '{command}' printed nothing")
    return text, command


def merge_message(summary: str, branch: str, image_id: str, count: int) -> dict:
    return {"role": ROLE, "content": f"[git pf merge] Branch '{branch}' (image {image_id[:12]}) worked in parallel "
                                     f"and added {count} message{'s' if count != 1 else ''}. Its outcome:\n{summary}"}
