"""Agent profiles: the request fields an agent changes from run to run, left out of matching.

A profile is a small TOML or JSON file (docs/record.md, "Profiles and masks"): ``name``,
``user_agents`` (substrings of the ``User-Agent`` header that pick it when a run is recorded),
``ignore`` (JSONPaths deleted before matching) and ``mask`` (``JSONPATH=REGEX``: the regex's
matches in the strings under the path read ``<masked>``). Built-in profiles ship in
``agent_profiles/``: ``claude-code``, ``openai-agents``, ``langgraph``. ``load`` reads one by name
or path, ``detect`` picks a built-in one from a User-Agent, ``from_flags`` turns ``--ignore-field``,
``--mask`` and ``--profile`` into the ``matching.Rules`` a command uses. Reads files; writes none.
"""
from __future__ import annotations

import functools
import json
import tomllib
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import UsageError
from ..layers.trace.matching import Rules

BUILTIN_DIR = Path(__file__).resolve().parent / "agent_profiles"
KEYS = {"name", "user_agents", "ignore", "mask"}


@dataclass(frozen=True)
class Profile:
    name: str
    user_agents: tuple[str, ...]
    rules: Rules

    def match_json(self) -> dict:
        """What an exchange recorded under this profile stores as its ``match``."""
        return {"profile": self.name, **self.rules.to_json()}


def builtin_names() -> list[str]:
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.toml"))


def _strings(value, key: str, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise UsageError(f"profile {where}: '{key}' must be a list of strings")
    return tuple(value)


def parse(data: dict, where: str) -> Profile:
    """A profile from its parsed file; a UsageError naming ``where`` and the field when malformed."""
    if not isinstance(data, dict):
        raise UsageError(f"profile {where}: must be a table (TOML) or an object (JSON)")
    unknown = sorted(set(data) - KEYS)
    if unknown:
        raise UsageError(f"profile {where}: unknown key '{unknown[0]}' (known: {', '.join(sorted(KEYS))})")
    name = data.get("name", Path(where).stem)
    if not isinstance(name, str) or not name:
        raise UsageError(f"profile {where}: 'name' must be a string")
    try:
        rules = Rules(_strings(data.get("ignore", []), "ignore", where), _strings(data.get("mask", []), "mask", where))
    except UsageError as e:
        raise UsageError(f"profile {where}: {e}") from None
    return Profile(name, _strings(data.get("user_agents", []), "user_agents", where), rules)


def _read(path: Path) -> Profile:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"--profile: cannot read '{path}': {getattr(e, 'strerror', None) or e}") from None
    try:
        data = json.loads(text) if path.suffix.lower() == ".json" else tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as e:
        kind = "JSON" if path.suffix.lower() == ".json" else "TOML"
        raise UsageError(f"--profile: '{path}' is not valid {kind}: {e}") from None
    return parse(data, str(path))


@functools.lru_cache(maxsize=None)
def builtin(name: str) -> Profile:
    return _read(BUILTIN_DIR / f"{name}.toml")


def load(spec: str) -> Profile:
    """A built-in profile by name, or a user's profile file (``.json``: JSON, else TOML)."""
    if spec in builtin_names():
        return builtin(spec)
    path = Path(spec)
    if not path.is_file():
        raise UsageError(f"--profile: no profile '{spec}' (built-in: {', '.join(builtin_names())}; or a file path)")
    return _read(path)


def detect(user_agent: str | None) -> Profile | None:
    """The built-in profile whose ``user_agents`` a request's User-Agent holds, if any."""
    if not user_agent:
        return None
    for name in builtin_names():
        p = builtin(name)
        if any(ua in user_agent for ua in p.user_agents):
            return p
    return None


def from_flags(ignore=(), masks=(), profile: str | None = None) -> tuple[Rules, Profile | None]:
    """The rules of ``--ignore-field``, ``--mask`` and ``--profile`` (malformed: a UsageError), and the profile."""
    chosen = load(profile) if profile else None
    rules = Rules(tuple(ignore), tuple(masks))
    return (chosen.rules | rules if chosen else rules), chosen
