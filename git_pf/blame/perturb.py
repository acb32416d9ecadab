"""Perturbations of a step's response (docs/blame.md, "Method"): what a blame trial changes.

``text``: a seeded, deterministic word-level change of the reply text (a word
replaced, dropped, or two words swapped; the trial's own random generator, so
the K trials of a step differ); ``drop``: an empty reply; ``none``: the reply
unchanged (the negative control); ``module:function``: a plug-in
``fn(text: str, rng: random.Random) -> str``. ``resample`` (the recorded
request sent again) needs the upstream and is done by ``trials``. Pure
functions on text; imports a plug-in's module only when asked to.
"""
from __future__ import annotations

import importlib
import random
import re
from typing import Callable

from ..core.errors import UsageError

BUILTIN = ("text", "drop", "resample", "none")
# Words a replaced word becomes: ordinary ones, so the change reads like a model's slip.
VOCAB = ("maybe", "not", "instead", "wrong", "later", "never", "other", "again", "perhaps", "only",
         "first", "second", "all", "none", "file", "skip", "retry", "stop", "yes", "no")
_WORD = re.compile(r"\S+")

Perturb = Callable[[str, random.Random], str]


def text(original: str, rng: random.Random) -> str:
    """``original`` with one word-level change (never the same text)."""
    words = [m.span() for m in _WORD.finditer(original)]
    if not words:
        return rng.choice(VOCAB)
    ops = ["replace", "drop"] + (["swap"] if len(words) > 1 else [])
    op = rng.choice(ops)
    i = rng.randrange(len(words))
    start, end = words[i]
    if op == "swap":
        j = i + 1 if i + 1 < len(words) else i - 1
        a, b = sorted((i, j))
        (s1, e1), (s2, e2) = words[a], words[b]
        out = original[:s1] + original[s2:e2] + original[e1:s2] + original[s1:e1] + original[e2:]
    elif op == "drop":
        out = (original[:start] + original[end:]).strip() if len(words) > 1 else ""
    else:
        out = original[:start] + rng.choice([w for w in VOCAB if w != original[start:end]]) + original[end:]
    if out == original:  # a swap of two equal words
        out = original[:start] + rng.choice([w for w in VOCAB if w != original[start:end]]) + original[end:]
    return out


def drop(original: str, rng: random.Random) -> str:
    return ""


def none(original: str, rng: random.Random) -> str:
    return original


def load(spec: str) -> Perturb | None:
    """The perturbation ``spec`` names (None for ``resample``); UsageError for an unknown one or
    a plug-in that cannot be imported or is not callable."""
    if spec in ("text", "drop", "none"):
        return {"text": text, "drop": drop, "none": none}[spec]
    if spec == "resample":
        return None
    module, sep, name = spec.partition(":")
    if not sep or not module or not name.isidentifier():
        raise UsageError(f"--perturb: '{spec}' is not text, drop, resample, none or module:function")
    try:
        fn = getattr(importlib.import_module(module), name)
    except ImportError as e:
        raise UsageError(f"--perturb: cannot import '{module}': {e}") from None
    except AttributeError:
        raise UsageError(f"--perturb: module '{module}' has no '{name}'") from None
    except Exception as e:  # a plug-in's own import failing is bad input, not our crash
        raise UsageError(f"--perturb: importing '{module}' failed: {type(e).__name__}: {e}") from None
    if not callable(fn):
        raise UsageError(f"--perturb: '{spec}' is not a function")
    return fn


def apply(fn: Perturb, original: str, rng: random.Random, spec: str) -> str:
    """``fn(original, rng)``, checked: a plug-in that raises or returns no text is bad input."""
    try:
        out = fn(original, rng)
    except Exception as e:
        raise UsageError(f"--perturb: '{spec}' failed: {type(e).__name__}: {e}") from None
    if not isinstance(out, str):
        raise UsageError(f"--perturb: '{spec}' returned {type(out).__name__}, not str")
    return out


def rng_for(seed: int, step: int, trial: int) -> random.Random:
    """The random generator of one trial: the same seed, step and trial always give the same draws."""
    return random.Random(f"pf-blame:{seed}:{step}:{trial}")
