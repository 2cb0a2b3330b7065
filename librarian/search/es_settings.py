"""Connection settings for the Elasticsearch backend, read from `LIBRARIAN_ES_*` environment variables.

Errors name the index and the variable to fix: an unreachable server points
at `LIBRARIAN_ES_URL`, refused credentials at `LIBRARIAN_ES_API_KEY` or
`LIBRARIAN_ES_USERNAME`/`LIBRARIAN_ES_PASSWORD`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace

import elastic_transport
import elasticsearch

from librarian.redact import redact_text
from librarian.search.errors import BackendAuthError, BackendConnectionError, SearchError

ENV_PREFIX = "LIBRARIAN_ES_"
# setting name -> (environment variable, parser)
_ENV: dict[str, str] = {
    "url": "LIBRARIAN_ES_URL",
    "api_key": "LIBRARIAN_ES_API_KEY",
    "username": "LIBRARIAN_ES_USERNAME",
    "password": "LIBRARIAN_ES_PASSWORD",
    "ca_certs": "LIBRARIAN_ES_CA_CERTS",
    "verify_certs": "LIBRARIAN_ES_VERIFY_CERTS",
    "request_timeout": "LIBRARIAN_ES_TIMEOUT",
    "max_retries": "LIBRARIAN_ES_MAX_RETRIES",
    "retry_backoff_s": "LIBRARIAN_ES_RETRY_BACKOFF",
    "index_prefix": "LIBRARIAN_ES_INDEX_PREFIX",
    "number_of_replicas": "LIBRARIAN_ES_REPLICAS",
}
_NAMESPACE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,199}$")


@dataclass(frozen=True, repr=False)
class ElasticsearchSettings:
    """Where and how to connect. Secrets (the key, the password, a URL's userinfo) never appear in `repr` or errors."""

    url: str = "http://127.0.0.1:9200"
    api_key: str | None = field(default=None, repr=False)
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_certs: str | None = None
    verify_certs: bool = True
    request_timeout: float = 10.0
    max_retries: int = 3
    retry_backoff_s: float = 0.5
    retry_backoff_cap_s: float = 10.0
    index_prefix: str = "librarian-"
    number_of_shards: int = 1
    number_of_replicas: int = 0
    bulk_chunk_size: int = 500

    def __repr__(self) -> str:
        shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self)
                          if f.name not in ("api_key", "password", "url"))
        return f"ElasticsearchSettings(url={self.safe_url!r}, {shown})"

    @property
    def safe_url(self) -> str:
        """The URL as messages show it: userinfo and secret query values masked."""
        return redact_text(self.url) if isinstance(self.url, str) else repr(self.url)

    def __post_init__(self) -> None:
        if not re.match(r"^https?://", self.url or ""):
            raise SearchError(f"Elasticsearch URL must start with http:// or https://, got {self.safe_url!r} "
                              f"(set {_ENV['url']})")
        if self.api_key and (self.username or self.password):
            raise SearchError(f"give either {_ENV['api_key']} or {_ENV['username']}/{_ENV['password']}, not both")
        if bool(self.username) != bool(self.password):
            raise SearchError(f"basic auth needs both {_ENV['username']} and {_ENV['password']}")
        if self.ca_certs and not os.path.isfile(self.ca_certs):
            raise SearchError(f"CA certificate file {self.ca_certs!r} does not exist (set {_ENV['ca_certs']})")
        if self.request_timeout <= 0 or self.max_retries < 0 or self.retry_backoff_s < 0:
            raise SearchError("request_timeout must be > 0, max_retries and retry_backoff_s >= 0 "
                              f"(set {_ENV['request_timeout']}, {_ENV['max_retries']}, {_ENV['retry_backoff_s']})")
        if not re.match(r"^[a-z0-9_.-]*$", self.index_prefix):
            raise SearchError(f"index prefix {self.index_prefix!r} may hold only lowercase letters, digits, "
                              f"'-', '_' and '.' (set {_ENV['index_prefix']})")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: object) -> ElasticsearchSettings:
        """Settings from `LIBRARIAN_ES_*` variables; keyword overrides win."""
        env = os.environ if env is None else env
        types = {f.name: f.type for f in fields(cls)}
        values: dict[str, object] = {}
        for name, var in _ENV.items():
            raw = env.get(var)
            if raw is None or raw == "":
                continue
            kind = types[name]
            try:
                if "bool" in str(kind):
                    if raw.lower() not in ("1", "0", "true", "false", "yes", "no"):
                        raise ValueError(raw)
                    values[name] = raw.lower() in ("1", "true", "yes")
                elif "float" in str(kind):
                    values[name] = float(raw)
                elif "int" in str(kind):
                    values[name] = int(raw)
                else:
                    values[name] = raw
            except ValueError:
                raise SearchError(redact_text(f"{var}={raw!r} is not a valid {kind}")) from None
        values.update(overrides)
        return cls(**values)  # type: ignore[arg-type]

    def with_(self, **changes: object) -> ElasticsearchSettings:
        return replace(self, **changes)  # type: ignore[arg-type]

    def index_name(self, namespace: str) -> str:
        """The index that holds a workspace namespace."""
        if not isinstance(namespace, str) or not _NAMESPACE.match(namespace):
            raise SearchError(f"workspace namespace {namespace!r} is not usable as an index name: use 1-200 "
                              "lowercase letters, digits, '-', '_' or '.', starting with a letter or digit")
        return self.index_prefix + namespace

    def client(self) -> elasticsearch.Elasticsearch:
        """A client with these settings (retries with full-jitter exponential backoff)."""
        kwargs: dict[str, object] = {
            "request_timeout": self.request_timeout,
            "max_retries": self.max_retries,
            "retry_on_timeout": True,
            "retry_on_status": (429, 502, 503, 504),
            "retry_backoff_base": self.retry_backoff_s,
            "retry_backoff_cap": self.retry_backoff_cap_s,
        }
        if self.api_key:
            kwargs["api_key"] = self.api_key
        if self.username:
            kwargs["basic_auth"] = (self.username, self.password)
        if self.url.startswith("https://"):
            kwargs["verify_certs"] = self.verify_certs
            if self.ca_certs:
                kwargs["ca_certs"] = self.ca_certs
        return elasticsearch.Elasticsearch(self.url, **kwargs)


@contextmanager
def translated_errors(settings: ElasticsearchSettings, index: str, action: str) -> Iterator[None]:
    """Turn client exceptions into search errors that name the index and the setting to fix.

    Messages are redacted (`librarian.redact`); the client's exception is not
    chained, since its text and arguments may carry the credentials.
    """
    where = f"{action} on index {index!r} at {settings.safe_url}"
    try:
        yield
    except elasticsearch.AuthenticationException:
        raise BackendAuthError(
            f"Elasticsearch refused the credentials ({where}): HTTP 401. Set {_ENV['api_key']}, or "
            f"{_ENV['username']} and {_ENV['password']}, to valid credentials"
        ) from None
    except elasticsearch.AuthorizationException:
        raise BackendAuthError(
            f"Elasticsearch denied the request ({where}): HTTP 403; the user of {_ENV['api_key']} or "
            f"{_ENV['username']} needs read, write and create_index privileges on {index!r}"
        ) from None
    except (elastic_transport.ConnectionError, elastic_transport.ConnectionTimeout) as exc:
        raise BackendConnectionError(redact_text(
            f"cannot reach Elasticsearch ({where}) after {settings.max_retries} retries: {exc}. "
            f"Check {_ENV['url']} (and {_ENV['ca_certs']} for TLS, {_ENV['request_timeout']} for slow servers)"
        )) from None
    except elasticsearch.ApiError as exc:
        raise SearchError(redact_text(
            f"Elasticsearch error ({where}): HTTP {exc.meta.status} {exc.message}: {exc.body}")) from None
