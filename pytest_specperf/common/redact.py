"""Secrets never leave the process: scrub them by name and by the shape of their value.

Every string the plugin writes (baselines, JSON/Markdown/BMF reports, terminal summary, server
log tails in error messages, launch commands, URLs) passes through these helpers. Names alone
are not enough: `SGLANG_HF_AUTH=hf_...` has no "TOKEN" in its name, yet its value is a Hugging
Face token. So values are matched too:

* known credential shapes anywhere in text: Hugging Face `hf_...` (with a digit, and not inside a
  path: `utils/hf_transformers/config.py` is a file, not a token), OpenAI-style `sk-...`, GitHub
  `ghp_...`/`github_pat_...`, Slack `xox?-...`, AWS access key ids (`AKIA...`/`ASIA...`),
  `Bearer <token>` / `Basic <token>` (an Authorization header pasted in a log), `--api-key X`,
  a quoted value under a secret-like key (`'api_key': 'X'`, `api_key='X'`: how SGLang logs its
  arguments at every start), URL userinfo and token-like query parameters;
* in variables: every value whose name says credential (TOKEN, KEY, SECRET, PASSW, CREDENTIAL,
  AUTH, COOKIE, SESSION, PRIVATE), and any long high-entropy value (a random-looking string of
  24+ characters without path separators or spaces), whatever the name.

Hashes the plugin makes itself (git commits, workload hashes) are hex and not redacted in free
text: the entropy rule applies to variable values only, and hex alone never trips it.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

REDACTED = "<redacted>"

# Flags whose value is a secret; the value after them is never kept.
SECRET_FLAGS: frozenset[str] = frozenset({"--api-key", "--admin-api-key"})
# Names that hold secrets. "TOKENS"/"TOKENIZER" are counts and paths, "AUTHOR" a person, not credentials.
_SECRET_NAME = re.compile(
    r"TOKEN(?!S|IZER)|KEY|SECRET|PASSW|CREDENTIAL|AUTH(?!OR)|COOKIE|SESSION|PRIVATE", re.IGNORECASE
)
_SECRET_QUERY_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSW|CREDENTIAL|^SIG$|SIGNATURE|^AUTH|^CODE$", re.IGNORECASE)
# Well-known credential shapes, caught wherever they appear (values, args, free text).
_SECRET_VALUE = re.compile(
    r"\bsk-[A-Za-z0-9_\-]{8,}"
    r"|(?<![\w/.\-])hf_(?=[A-Za-z]*\d)[A-Za-z0-9]{8,}(?![\w/])"
    r"|\bgh[pousr]_[A-Za-z0-9]{20,}"
    r"|\bgithub_pat_[A-Za-z0-9_]{20,}"
    r"|\bxox[abprs]-[A-Za-z0-9\-]{10,}"
    r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"
)
_AUTH_SCHEME = re.compile(r"\b(Bearer|Basic|Token)(\s+)[A-Za-z0-9._~+/=\-]{8,}", re.IGNORECASE)
_URL_USERINFO = re.compile(r"\b([A-Za-z][A-Za-z0-9+.\-]*)://([^/\s@:]*)(:[^/\s@]*)?@")
_URL_SECRET_PARAM = re.compile(
    r"([?&](?:[A-Za-z0-9_\-]*(?:token|key|secret|passw|credential)[A-Za-z0-9_\-]*|sig|signature|auth)=)"
    r"[^&#\s\"']+",
    re.IGNORECASE,
)
_SECRET_FLAG_IN_TEXT = re.compile(r"(--(?:admin-)?api-key(?:=|\s+))(\"[^\"]*\"|'[^']*'|\S+)")
_HEX = re.compile(r"[0-9a-fA-F]+")
# `'api_key': 'X'`, `"api_key": "X"`, `api_key='X'`: a quoted value under a key named like a secret
_QUOTED_UNDER_KEY = re.compile(r"""\b([A-Za-z_][A-Za-z0-9_]*)(['"]?\s*[:=]\s*)(['"])([^'"\n]+)\3""")
#: bits per character above which a long value looks random (English words and names stay below)
ENTROPY_BITS = 3.5
MIN_RANDOM_LENGTH = 24


def is_secret_name(name: str) -> bool:
    """True for names like HF_TOKEN, OPENAI_API_KEY, AWS_SECRET_ACCESS_KEY, DB_PASSWORD, SGLANG_HF_AUTH."""
    return bool(_SECRET_NAME.search(name))


def looks_random(value: str) -> bool:
    """A long, high-entropy value with letters and digits: likely a credential, whatever its name."""
    if len(value) < MIN_RANDOM_LENGTH or any(c in value for c in "/\\ ,:") or _HEX.fullmatch(value):
        return False
    if not (any(c.isdigit() for c in value) and any(c.isalpha() for c in value)):
        return False
    counts = Counter(value)
    entropy = -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())
    return entropy >= ENTROPY_BITS


def redact_text(text: str) -> str:
    """Scrub secrets out of free text: URL credentials, `--api-key X`, auth headers, known token shapes.

    Used on every string that is stored, as the last line of defence: a secret can hide in a
    warning, an error message or a launch command as well as in a named variable.
    """
    text = _URL_USERINFO.sub(_without_credentials, text)
    text = _URL_SECRET_PARAM.sub(rf"\1{REDACTED}", text)
    text = _SECRET_FLAG_IN_TEXT.sub(rf"\1{REDACTED}", text)
    text = _AUTH_SCHEME.sub(rf"\1\2{REDACTED}", text)
    text = _QUOTED_UNDER_KEY.sub(_hide_quoted_secret, text)
    return _SECRET_VALUE.sub(REDACTED, text)


def _hide_quoted_secret(match: re.Match[str]) -> str:
    key, sep, quote, value = match.groups()
    if not is_secret_name(key) or value == REDACTED:
        return match.group(0)
    return f"{key}{sep}{quote}{REDACTED}{quote}"


def redact_value(name: str, value: str) -> str:
    """One variable's value as it may be written: hidden if its name or its shape says secret."""
    value = str(value)
    if is_secret_name(name) or looks_random(value):
        return REDACTED
    return redact_text(value)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """Copy of `env` with secret values (by name or by shape) replaced by "<redacted>", the rest scrubbed."""
    return {name: redact_value(name, value) for name, value in env.items()}


_SSH_SCHEMES = ("ssh", "git+ssh", "ssh+git")


def _without_credentials(found: re.Match[str]) -> str:
    """A URL's userinfo gone, but an SSH account name (`ssh://git@host`), which is no secret."""
    scheme, user = found.group(1), found.group(2)
    return f"{scheme}://{user}@" if scheme.lower() in _SSH_SCHEMES and user else f"{scheme}://"


def redact_url(url: str) -> str:
    """`url` without userinfo credentials and with token-like query parameters hidden, otherwise as
    written. A wrapped URL (a store setting `git:https://...#branch`) is redacted inside its prefix;
    an SSH user name without a password (`ssh://git@host/...`) is an account, not a secret, and stays."""
    scheme, colon, rest = url.partition(":")
    if colon and scheme.isalpha() and not rest.startswith("//") and ("://" in rest or rest.startswith("/")):
        return f"{scheme}:{redact_url(rest)}" if "://" in rest else redact_text(url)
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact_text(url)
    host = parts.netloc.rpartition("@")[2]
    if parts.scheme.lower() in _SSH_SCHEMES and parts.username:
        host = f"{parts.username}@{host}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(k, REDACTED if _SECRET_QUERY_NAME.search(k) else v) for k, v in pairs], safe="<>")
    return redact_text(urlunsplit((parts.scheme, host, parts.path, query, parts.fragment)))


def redact_args(args: Iterable[str]) -> list[str]:
    """Copy of a command line with the values of `--api-key`/`--admin-api-key` hidden.

    Both `--api-key X` and `--api-key=X` forms; other tokens get the free-text scrub.
    """
    out: list[str] = []
    hide_next = False
    for arg in map(str, args):
        flag, eq, _ = arg.partition("=")
        if hide_next:
            out.append(REDACTED)
        elif eq and flag in SECRET_FLAGS:
            out.append(f"{flag}={REDACTED}")
        else:
            out.append(redact_text(arg))
        hide_next = not eq and arg in SECRET_FLAGS
    return out
