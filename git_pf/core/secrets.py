"""Secret detection and redaction: which names, values and pieces of text are credentials.

One rule set for everything git-pf stores from an agent: the environment
(``world/env.json``), the recorded LLM exchanges (``trace/tape/``), and the
trace messages and effects ledger that runs and integrations write. Four
kinds of rule (docs/security.md, "Secrets"):

- names: an environment variable, JSON key, header name or query / form
  parameter whose name says it holds a credential has its whole value
  replaced;
- whole values: an ``Authorization``-style value (``Bearer``/``Basic``/
  ``Token`` and one token) is replaced whole;
- text: a credential found anywhere inside a string is replaced where it
  stands, the rest of the text kept: vendor key shapes (OpenAI, Anthropic,
  GitHub, GitLab, AWS, Slack, Google, Hugging Face, Stripe), JWTs, PEM
  private keys, ``Bearer <token>``, the password of a ``scheme://user:pass@``
  URL, secret-named URL query parameters, Slack / Discord webhook paths, and
  ``"api_key": "..."`` pairs of JSON embedded in text. A string that is
  itself a JSON document is parsed, redacted the same way, and written back
  as canonical JSON (only when something was redacted);
- shell syntax, as a coding agent's commands carry credentials: assignments
  to secret-named variables (``export DB_PASSWORD=…``, ``TOKEN=… cmd``),
  secret-named long options (``--password=…``, ``--api-key …``), curl's
  ``-u user:pass``, the attached ``-p<password>`` of the MySQL / MariaDB
  clients (``sshpass -p``, ``redis-cli -a``), and secret headers given with
  ``-H`` / ``--header`` (``Authorization: Bearer …``); the command stays
  readable (``curl -u admin:<redacted> …``).

Every replacement is the fixed marker ``REDACTED``, so the same input always
gives the same output (two recordings of one request still compare equal)
and redacting twice changes nothing. Pure functions on strings and JSON
values: no I/O; imports only ``canonjson``.
"""
from __future__ import annotations

import base64
import binascii
import re
from urllib.parse import unquote

from . import canonjson

REDACTED = "<redacted>"

# Environment variable names: few and explicit, so any of these words marks one.
_ENV_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS", re.IGNORECASE)

# JSON keys, header names, query and form parameter names.
_FIELD_NAME = re.compile(
    r"^(authorization|proxy-authorization|cookie|set-cookie)$|api[-_]?key|private[-_]?key|secret|passw(or)?d"
    r"|credential|(^|[-_])(access|auth|bearer|id|refresh|session)?[-_]?token$", re.IGNORECASE)
# Tokenizer vocabulary, not credentials: ``"eos_token": "</s>"``.
_VOCAB_TOKEN = re.compile(r"^(bos|eos|pad|unk|sep|cls|mask|stop|start|end)[-_]token$", re.IGNORECASE)
# Secret as URL query / form parameters only (too common as JSON keys): Google ``key=``,
# Azure SAS ``sig=``, ``auth=``, ``pwd=``.
_QUERY_NAME = frozenset({"key", "sig", "signature", "auth", "pass", "pwd"})

_TOKEN_CHARS = r"A-Za-z0-9_\-"
_START, _END = rf"(?<![{_TOKEN_CHARS}])", rf"(?![{_TOKEN_CHARS}])"
# Vendor key shapes, each with the length its vendor documents (a floor where the
# length varies), bounded by non-token characters so a longer word never matches.
_KEY_SHAPES = [
    r"sk-ant-[a-z]+[0-9]*-[A-Za-z0-9_\-]{32,}",  # Anthropic: sk-ant-api03-…, sk-ant-admin01-…
    r"sk-(?:proj|svcacct|admin|None)-[A-Za-z0-9_\-]{32,}",  # OpenAI project / service / admin keys
    r"sk-[A-Za-z0-9]{32,}",  # OpenAI user keys (48), and the many APIs that copy the shape
    r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{24,}",  # Stripe
    r"gh[pousr]_[A-Za-z0-9]{36,}",  # GitHub classic / OAuth / user-to-server / server / refresh
    r"github_pat_[A-Za-z0-9_]{50,}",  # GitHub fine-grained (22 + "_" + 59)
    r"glpat-[A-Za-z0-9_\-]{20,}",  # GitLab
    r"(?:AKIA|ASIA)[A-Z0-9]{16}",  # AWS access key ids (long-term / temporary)
    r"xox[abposr]-[A-Za-z0-9\-]{10,}",  # Slack bot / user / app tokens
    r"xapp-[0-9]-[A-Za-z0-9\-]{10,}",  # Slack app-level tokens
    r"AIza[A-Za-z0-9_\-]{35}",  # Google API keys
    r"hf_[A-Za-z0-9]{30,}",  # Hugging Face (34 letters)
    r"eyJ[A-Za-z0-9_\-]{10,}\.eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]*",  # JWT: {"…} . {"…} . signature
]
_KEY_PREFIXES = ("sk-", "sk_", "rk_", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-", "AKIA",
                 "ASIA", "xox", "xapp-", "AIza", "hf_", "eyJ")  # a cheap test before the full pattern
_KEYS = re.compile(_START + "(?:" + "|".join(_KEY_SHAPES) + ")" + _END)
_PEM = re.compile(r"(-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----).*?(-----END [A-Z0-9 ]*PRIVATE KEY-----)", re.DOTALL)
_BEARER = re.compile(r"\b(bearer\s+)([A-Za-z0-9\-._~+/]+=*)", re.IGNORECASE)
_BASIC = re.compile(r"\b(basic\s+)([A-Za-z0-9+/]{8,}={0,2})(?![A-Za-z0-9+/=])", re.IGNORECASE)
_AUTH_VALUE = re.compile(r"^\s*(bearer|basic|token)\s+[A-Za-z0-9\-._~+/]{8,}=*\s*$", re.IGNORECASE)
_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s\"'<>`\\]+")
_USERINFO = re.compile(r"^([^:/]+://[^/?#:@]*):([^/?#]+)@")  # up to the last @: a password may hold one
_WEBHOOK = re.compile(r"^(https?://(?:hooks\.slack\.com/(?:services|workflows|triggers)/"
                      r"|(?:[a-z]+\.)?discord(?:app)?\.com/api/webhooks/))[A-Za-z0-9/_\-]+", re.IGNORECASE)
_PARAM = re.compile(r"([?&;])([^=&;#?]+)=([^&;#]*)")
_FORM_PAIR = r"[A-Za-z0-9_.\-%\[\]]+=[^&\s]*"
_FORM = re.compile(rf"^{_FORM_PAIR}(?:&{_FORM_PAIR})*$")  # a whole form body: a=1&b=2
_JSON_PAIR = re.compile(r'"((?:[^"\\]|\\.){1,100})"(\s*:\s*)"((?:[^"\\]|\\.)*)"')

# Shell syntax. A word's value: quoted ("…" or '…') or bare up to a shell metacharacter.
_SH_VALUE = r"""("(?:[^"\\\n]|\\.)*"|'[^'\n]*'|[^\s;&|<>()`'"]+)"""
# NAME=value (bare names only when upper case: ``key=value`` in prose is not a credential).
_ASSIGN = re.compile(r"(?<![\w$./:-])(export\s+|declare\s+-x\s+)?([A-Za-z_][A-Za-z0-9_]*)=" + _SH_VALUE)
_SHELL_NAME = re.compile(r"SECRET|PASSWORD|PASSWD|CREDENTIAL|KEY$|(?:^|_)TOKEN$|_(?:PASS|PWD|AUTH)$", re.IGNORECASE)
_LONG_OPTION = re.compile(r"(?<!\S)--([A-Za-z][A-Za-z0-9_-]*)(=|\s+)(?!-)" + _SH_VALUE)
_NOT_A_VALUE_OPTION = re.compile(r"[-_](stdin|file|path|env|id|cmd|command|name|length|prompt|type|url)$", re.IGNORECASE)
_HEADER_ARG = re.compile(r"""(?<!\S)(-H|--header)(\s+|=)(?:(['"])([A-Za-z0-9_-]+)(\s*:\s*)([^'"\n]*)\3"""
                         r"|([A-Za-z0-9_-]+)(:)(\S+))")
_SECRET_WORD = re.compile(r"key|token|secret|passw|pass\b|_pwd|credential|auth|cookie", re.IGNORECASE)
_AUTH_SCHEME = re.compile(r"^((?:bearer|basic|token|digest|bot|apikey|key|sso-key)\s+)\S", re.IGNORECASE)
# A command whose arguments hold a password in a short option, and the rest of its command
# (up to ``;``, ``|``, ``&&``, ``||`` or the end of the line).
_MYSQL = r"mysql|mysqladmin|mysqldump|mysqlimport|mysqlshow|mysqlcheck|mysqlpump|mysqlsh|mariadb(?:-[a-z]+)?"
_COMMAND = re.compile(rf"(?<![\w./-])(curl|{_MYSQL}|sshpass|redis-cli)(?![\w-])((?:(?!&&|\|\|)[^\n;|])*)")
_COMMAND_WORDS = ("curl", "mysql", "mariadb", "sshpass", "redis-cli")
_SHORT_SECRET = {  # command -> its option that carries a password (``-pS3cret``: attached only for mysql)
    "curl": re.compile(r"""(\s(?:-u|--user|-U|--proxy-user)(?:\s+|=)?)(['"]?)([^\s:'"]*):([^\s'"]+)\2"""),
    "mysql": re.compile(r"(\s-p)" + _SH_VALUE),
    "sshpass": re.compile(r"(\s-p\s*)" + _SH_VALUE),
    "redis-cli": re.compile(r"(\s-a\s+)" + _SH_VALUE),
}


def env_name_is_secret(name: str) -> bool:
    """An environment variable whose name marks a credential (``*_KEY``, ``*TOKEN*``, ...)."""
    return bool(_ENV_NAME.search(name))


def field_is_secret(name: str) -> bool:
    """A JSON key or header name whose value is a credential (``Authorization``, ``api_key``, ...)."""
    return bool(_FIELD_NAME.search(name)) and not _VOCAB_TOKEN.match(name)


def _param_is_secret(name: str) -> bool:
    name = unquote(name)
    return name.lower() in _QUERY_NAME or field_is_secret(name)


def looks_secret(name: str, value: str) -> bool:
    """Whether an environment variable must be redacted: by its name, or because its value
    holds a credential anywhere (the variable's whole value is then replaced)."""
    return env_name_is_secret(name) or redact_text(value) != value


def redact_text(text: str, keep: frozenset[str] = frozenset()) -> str:
    """``text`` with every credential in it replaced by ``REDACTED`` (the whole string when it
    is an ``Authorization``-style value); names in ``keep`` are never judged secret."""
    if text == REDACTED:
        return text
    if _AUTH_VALUE.match(text):
        return REDACTED
    parsed = _json_document(text)
    if parsed is not None:
        redacted = redact_json(parsed, keep)
        return text if redacted == parsed else canonjson.dumps(redacted)
    if _FORM.match(text):
        text = _redact_params(text, keep, form=True)
    text = redact_shell(text, keep)
    # Each pass runs only where a cheap substring test says it can match (text can be megabytes).
    if "PRIVATE KEY" in text:
        text = _PEM.sub(lambda m: m.group(1) + REDACTED + m.group(2), text)
    if "://" in text:
        text = _URL.sub(lambda m: _redact_url(m.group(0), keep), text)
    if any(p in text for p in _KEY_PREFIXES):
        text = _KEYS.sub(REDACTED, text)
    lower = text.lower()
    if "bearer" in lower:
        text = _BEARER.sub(_bearer, text)
    if "basic" in lower:
        text = _BASIC.sub(_basic, text)
    if '"' in text:
        text = _JSON_PAIR.sub(lambda m: _json_pair(m, keep), text)
    return text


def redact_shell(text: str, keep: frozenset[str] = frozenset()) -> str:
    """``text`` with the credentials of shell syntax in it replaced, the command kept readable:
    ``export DB_PASSWORD=<redacted>``, ``curl -u admin:<redacted> -H 'Authorization: Bearer
    <redacted>'``, ``mysql -uroot -p<redacted>``; names in ``keep`` are never judged secret."""
    if _SECRET_WORD.search(text):  # each of these needs a secret-looking name
        if "=" in text:
            text = _ASSIGN.sub(lambda m: _assignment(m, keep), text)
        if "--" in text:
            text = _LONG_OPTION.sub(lambda m: _long_option(m, keep), text)
        if "-H" in text or "--header" in text:
            text = _HEADER_ARG.sub(lambda m: _header_arg(m, keep), text)
    if any(word in text for word in _COMMAND_WORDS):
        text = _COMMAND.sub(_command, text)
    return text


def _secret_value(value: str) -> str | None:
    """A shell word's value redacted (its quotes kept); None for one that holds no secret: empty,
    a ``$`` reference, or redacted already."""
    quote = value[0] if value[:1] in ("'", '"') and len(value) >= 2 and value[-1] == value[0] else ""
    inner = value[len(quote):len(value) - len(quote)]
    if not inner or inner.startswith("$") or inner == REDACTED:
        return None
    return f"{quote}{REDACTED}{quote}"


def _assignment(m: re.Match, keep: frozenset[str]) -> str:
    export, name, value = m.group(1), m.group(2), m.group(3)
    if name in keep or not _SHELL_NAME.search(name) or (not export and not name.isupper()):
        return m.group(0)
    new = _secret_value(value)
    return m.group(0) if new is None else f"{export or ''}{name}={new}"


def _long_option(m: re.Match, keep: frozenset[str]) -> str:
    name, sep, value = m.group(1), m.group(2), m.group(3)
    if name in keep or not field_is_secret(name) or _NOT_A_VALUE_OPTION.search(name):
        return m.group(0)
    new = _secret_value(value)
    return m.group(0) if new is None else f"--{name}{sep}{new}"


def _header_arg(m: re.Match, keep: frozenset[str]) -> str:
    quoted = m.group(3) is not None
    name, colon, value = (m.group(4), m.group(5), m.group(6)) if quoted else (m.group(7), m.group(8), m.group(9))
    if name in keep or not field_is_secret(name) or not value.strip() or value.endswith(REDACTED):
        return m.group(0)
    scheme = _AUTH_SCHEME.match(value)
    value = (scheme.group(1) if scheme else "") + REDACTED
    quote = m.group(3) or ""
    return f"{m.group(1)}{m.group(2)}{quote}{name}{colon}{value}{quote}"


def _command(m: re.Match) -> str:
    command, args = m.group(1), m.group(2)
    rule = _SHORT_SECRET["mysql" if command.startswith(("mysql", "mariadb")) else command]
    if command == "curl":
        args = rule.sub(lambda a: a.group(0) if a.group(4) == REDACTED else
                        f"{a.group(1)}{a.group(2)}{a.group(3)}:{REDACTED}{a.group(2)}", args)
    else:
        args = rule.sub(lambda a: a.group(1) + (_secret_value(a.group(2)) or a.group(2)), args)
    return command + args


def redact_json(value, keep: frozenset[str] = frozenset(), key: str | None = None):
    """A JSON value with its credentials redacted: string values under secret names (and
    everything under them), header lists judged by header name, and credentials in any
    string (``redact_text``). The value under a key named in ``keep`` is kept whole."""
    if key is not None and key in keep:
        return value
    if key is not None and field_is_secret(key):
        return _redact_all(value)
    if isinstance(value, dict):
        return {k: redact_json(v, keep, k) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if _is_header_list(value):
            return [[name, redact_json(v, keep, name)] for name, v in value]
        return [redact_json(v, keep) for v in value]
    if isinstance(value, str):
        return redact_text(value, keep)
    return value


_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z\-]+$")


def _is_header_list(value) -> bool:
    """``[["x-api-key", "…"], ("Accept", "…")]``: every item a pair whose first item is a header name."""
    return bool(value) and all(isinstance(p, (list, tuple)) and len(p) == 2 and isinstance(p[0], str)
                               and _HEADER_NAME.match(p[0]) for p in value)


def _redact_all(value):
    if isinstance(value, str):
        return REDACTED
    if isinstance(value, dict):
        return {k: _redact_all(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_redact_all(v) for v in value]
    return value


def _json_document(text: str):
    """The JSON object, array or string ``text`` holds, else None (numbers and words are text).
    A document with a duplicate key or NaN is text: a parser keeps one value of a duplicate
    key, and the value it drops must not escape redaction."""
    head = text.lstrip()[:1]
    if head not in ("{", "[", '"'):
        return None
    try:
        value = canonjson.strict_loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, (dict, list, str)) else None



def _redact_url(url: str, keep: frozenset[str]) -> str:
    hook = _WEBHOOK.match(url)
    if hook:
        return hook.group(1) + REDACTED
    url = _USERINFO.sub(lambda m: f"{m.group(1)}:{REDACTED}@", url, count=1)
    return _redact_params(url, keep)


def _redact_params(text: str, keep: frozenset[str], form: bool = False) -> str:
    """Values of secret-named ``name=value`` parameters of a URL query, or of a whole form
    body (where only field names count: ``key=value`` alone is too common to be a secret)."""
    def one(m: re.Match) -> str:
        name, value = m.group(2), m.group(3)
        secret = field_is_secret(unquote(name)) if form else _param_is_secret(name)
        if value and name not in keep and secret:
            value = REDACTED
        return f"{m.group(1)}{name}={value}"
    if form:
        return _PARAM.sub(one, "&" + text)[1:]
    return _PARAM.sub(one, text)


def _bearer(m: re.Match) -> str:
    token = m.group(2)
    random_looking = len(token) >= 8 and (any(c.isdigit() for c in token) or len(token) >= 20)
    return m.group(1) + REDACTED if random_looking else m.group(0)


def _basic(m: re.Match) -> str:
    """``Basic <base64 of user:password>``: replaced only when it decodes to such a pair."""
    try:
        decoded = base64.b64decode(m.group(2), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return m.group(0)
    return m.group(1) + REDACTED if ":" in decoded and decoded.isprintable() else m.group(0)


def _json_pair(m: re.Match, keep: frozenset[str]) -> str:
    name, value = m.group(1), m.group(3)
    if value == REDACTED or name in keep or not field_is_secret(name):
        return m.group(0)
    return f'"{name}"{m.group(2)}"{REDACTED}"'
