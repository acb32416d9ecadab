"""``git pf -h`` lists the commands in groups a user can read, as ``git help`` does."""
from __future__ import annotations

GROUPS = ["images", "branches and tags", "remotes", "mounts", "runs", "integrations", "maintenance"]


def _sections(text: str) -> dict[str, list[str]]:
    """Heading -> the commands listed under it (the usage, description and options left out)."""
    out: dict[str, list[str]] = {}
    heading = None
    for line in text.split("Options:")[1].splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            heading = line[:-1]
            out[heading] = []
        elif heading and line.startswith("  ") and line.strip():
            out[heading].append(line.split()[0])
    return out


def test_help_groups_the_commands(run_pf):
    sections = _sections(run_pf("-h").stdout)
    assert [h for h in sections if h in GROUPS] == GROUPS
    assert sections["images"][:7] == ["snapshot", "show", "log", "diff", "checkout", "fork", "merge"]
    assert sections["branches and tags"] == ["ls", "branch", "tag", "switch"]
    assert {"push", "fetch", "clone", "remote-store", "install"} <= set(sections["remotes"])
    assert {"record", "replay", "run", "blame", "report", "serve"} <= set(sections["runs"])
    assert {"hook", "rewind"} <= set(sections["integrations"]) and {"fsck", "gc"} <= set(sections["maintenance"])
    listed = [c for names in sections.values() for c in names]
    assert len(listed) == len(set(listed)) and "other commands" not in sections  # each command once, in a group
