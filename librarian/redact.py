"""Redaction: credentials never reach a config dump, a log line, an error message or an MLflow param.

One helper for every writer. A value is a credential when its key names one
(`is_secret_key`: a key with a part such as `key`, `token`, `password`,
`secret`, `apikey`, `credential`, `auth`), when it is the userinfo of a URL
(`http://user:pw@host`), a secret-named query parameter (`?api_key=...`), a
bearer token, or the value of a secret-named environment variable (such as
`LIBRARIAN_ES_PASSWORD` or `LIBRARIAN_SERVE_TOKEN`). Each becomes `MASK`.

    redact(config)        # a copy of a config (dict, dataclass, OmegaConf) safe to write
    redact_text(message)  # an error message or log line safe to show
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from typing import Any

from omegaconf import OmegaConf

MASK = "***"
_STRONG = ("password", "passwd", "secret", "apikey", "api_key", "credential", "privatekey", "private_key")
_PARTS = frozenset({"key", "token", "pwd", "pass", "auth", "authorization", "bearer", "cookie"})
_ENV_LAST = frozenset({"key", "token", "password", "passwd", "pwd", "secret", "apikey", "credentials"})
_SPLIT = re.compile(r"[^a-z0-9]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_USERINFO = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>[^/\s@?#'\"<>]+)@")
_PAIR = re.compile(r"(?P<q>[\"']?)(?P<name>[A-Za-z_][A-Za-z0-9_.-]*)(?P=q)(?P<sep>\s*=\s*|\s*:(?!//)\s*)(?P<quote>[\"']?)"
                   r"(?P<value>[^\s\"'&,;)}\]]+)")
_QUERY = re.compile(r"(?P<lead>[?&;])(?P<name>[^=&#\s]+)=(?P<value>[^&#\s'\"]*)")
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{6,}")
_MIN_ENV_SECRET = 6


def is_secret_key(name: object) -> bool:
    """True when a key or variable name says its value is a credential (`api_key`, `hfToken`, `ES_PASSWORD`)."""
    text = _CAMEL.sub("_", str(name)).lower()
    if any(word in text for word in _STRONG):
        return True
    return any(part in _PARTS for part in _SPLIT.split(text))


def _environ_items() -> list[tuple[str, str]]:
    """A snapshot of the environment, retried when another thread unsets a variable while it is read
    (os.environ lists its keys, then reads each value: a key removed in between raises KeyError)."""
    for _ in range(10):
        try:
            return list(os.environ.items())
        except KeyError:
            continue
    return list(os.environ.copy().items())


def _env_secrets() -> list[str]:
    """Values of environment variables named as credentials (`*_KEY`, `*_TOKEN`, `*_PASSWORD`...), longest first."""
    values = {v for k, v in _environ_items()
              if _SPLIT.split(k.lower())[-1] in _ENV_LAST and len(v) >= _MIN_ENV_SECRET}
    return sorted(values, key=len, reverse=True)


def redact_url(url: str) -> str:
    """`url` with its userinfo and secret-named query values masked (`http://***@host/?token=***`)."""
    return redact_text(url)


def redact_text(text: str) -> str:
    """`text` (a message, a log line, a URL) with every credential-like value masked."""
    if not isinstance(text, str):
        text = str(text)
    for secret in _env_secrets():
        if secret in text:
            text = text.replace(secret, MASK)
    text = _USERINFO.sub(lambda m: f"{m['scheme']}{MASK}@", text)
    text = _QUERY.sub(lambda m: f"{m['lead']}{m['name']}={MASK}" if is_secret_key(m["name"]) else m.group(), text)
    text = _BEARER.sub(lambda m: f"{m.group(1)} {MASK}", text)

    def pair(m: re.Match[str]) -> str:
        name = m["name"]
        if m["value"] == MASK or not is_secret_key(name):
            return m.group()
        if ":" in m["sep"] and not m["q"] and not any(w in name.lower() for w in _STRONG):
            return m.group()  # "key: value" in prose is not a credential; "api_key: x" and '"token": x' are
        return f"{m['q']}{name}{m['q']}{m['sep']}{m['quote']}{MASK}"

    return _PAIR.sub(pair, text)


def _plain(config: Any) -> Any:
    """Dataclasses and OmegaConf objects as plain dicts and lists; anything else unchanged."""
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return dataclasses.asdict(config)
    module = type(config).__module__
    if module.startswith("omegaconf"):
        return OmegaConf.to_container(config, resolve=True)
    return config


def redact(config: Any) -> Any:
    """A copy of `config` safe to write: secret-named values are `MASK`, strings go through `redact_text`.

    Dicts, lists, tuples, dataclasses and OmegaConf objects are walked;
    numbers, booleans and None are kept (None and empty values under a secret
    name too: they say no credential was given).
    """
    config = _plain(config)
    if isinstance(config, Mapping):
        out = {}
        for key, value in config.items():
            if is_secret_key(key) and value not in (None, "", [], {}) and not isinstance(value, bool):
                out[key] = MASK
            else:
                out[key] = redact(value)
        return out
    if isinstance(config, list):
        return [redact(v) for v in config]
    if isinstance(config, tuple):
        return tuple(redact(v) for v in config)
    if isinstance(config, str):
        return redact_text(config)
    return config
