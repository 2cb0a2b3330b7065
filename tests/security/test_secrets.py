"""No credential is written or shown: config dumps, results.json, MLflow params and artifacts, error messages.

Each run plants secrets (a `--backend-arg api_key=...`, a password in a URL's userinfo, a token in a query
string) and then scans every byte the run wrote, and every message it raised, for them.
"""

from __future__ import annotations

import dataclasses
import socket
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from librarian.app.ask import main as ask_main
from librarian.app.build import main as build_main
from librarian.config import to_plain
from librarian.models import make_backend
from librarian.models.openai_server import serve
from librarian.pipelines.entry import write_resolved_config
from librarian.redact import MASK, is_secret_key, redact, redact_text
from librarian.search.errors import BackendConnectionError, SearchError
from librarian.search.es_index import ElasticsearchIndex
from librarian.search.es_settings import ElasticsearchSettings
from librarian.tracking.tracker import Tracker, TrackingError

PLANTED = ("PLANTED-key-7f3a9", "PLANTED-pw-c41d2", "PLANTED-tok-99e0b")


def leaks(folder: Path) -> list[str]:
    """Files under `folder` whose bytes contain a planted secret (Parquet, SQLite and YAML included)."""
    found = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        data = path.read_bytes()
        found += [f"{path.relative_to(folder)}: {s}" for s in PLANTED if s.encode() in data]
    return found


def assert_clean(text: str) -> None:
    assert not [s for s in PLANTED if s in text], text


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ----- the helper ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "secret"), [
    ("api_key", True), ("apiKey", True), ("OPENAI_API_KEY", True), ("hf_token", True), ("password", True),
    ("LIBRARIAN_ES_PASSWORD", True), ("client_secret", True), ("key", True), ("auth", True), ("token", True),
    ("max_new_tokens", False), ("tokenizer", False), ("keys", False), ("model", False), ("tokens_generated", False),
    ("monkey", False), ("base_url", False),
])
def test_secret_names(name: str, secret: bool) -> None:
    assert is_secret_key(name) is secret


@dataclass
class _Cfg:
    model: str = "smollm2"
    api_key: str | None = None
    backend_args: dict = field(default_factory=dict)
    max_new_tokens: int = 128


def test_redact_masks_values_under_secret_names_and_in_urls() -> None:
    cfg = _Cfg(api_key=PLANTED[0], backend_args={"hf_token": PLANTED[2], "n": 3, "opts": [{"password": 5}],
                                                 "base_url": f"https://bob:{PLANTED[1]}@host:8000/v1?token={PLANTED[2]}"})
    out = redact(cfg)
    assert out["api_key"] == MASK and out["model"] == "smollm2" and out["max_new_tokens"] == 128
    assert out["backend_args"]["hf_token"] == MASK and out["backend_args"]["n"] == 3
    assert out["backend_args"]["opts"] == [{"password": MASK}]  # numbers under a secret name too
    assert out["backend_args"]["base_url"] == f"https://{MASK}@host:8000/v1?token={MASK}"
    assert redact({"api_key": None, "token": ""}) == {"api_key": None, "token": ""}  # "none given" stays visible
    assert cfg.api_key == PLANTED[0]  # the config itself is untouched


def test_redact_text_masks_credentials_in_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOME_SERVICE_TOKEN", PLANTED[2])
    message = (f"cannot reach http://elastic:{PLANTED[1]}@es:9200 (api_key={PLANTED[0]}, "
               f"'password': '{PLANTED[1]}', Authorization: Bearer {PLANTED[0]}); env {PLANTED[2]}")
    shown = redact_text(message)
    assert_clean(shown)
    assert "http://***@es:9200" in shown and "api_key=***" in shown
    prose = "unknown key: temperature; max_new_tokens=128; see http://example.org/a?q=1"
    assert redact_text(prose) == prose


# ----- whole runs: every byte they write --------------------------------------------------------------------------

@pytest.fixture()
def corpus(tmp_path: Path) -> Path:
    root = tmp_path / "notes"
    root.mkdir()
    (root / "people.md").write_text("Ada Moss works with Ben Hale at Harbor Labs.\n", encoding="utf-8")
    (root / "lisbon.md").write_text("In May, Ada Moss flew to Lisbon for Harbor Labs.\n", encoding="utf-8")
    return root


def test_build_and_ask_runs_write_no_planted_secret(corpus: Path, tmp_path: Path, capsys) -> None:
    ws = tmp_path / "ws"
    assert build_main([str(corpus), "--out", str(ws), "--embedder", "none", "--backend-arg", f"api_key={PLANTED[0]}",
                       "--backend-arg", f"base_url=http://u:{PLANTED[1]}@127.0.0.1:1/v1"]) == 0
    with serve(make_backend("scripted", policy="kbgym_reader"), model_name="kb") as running:
        host = running.url.split("://", 1)[1]
        out = tmp_path / "ask"
        code = ask_main([str(ws), "Where did Ada Moss fly in May?", "--backend", "openai", "--trace",
                         "--backend-arg", f"base_url=http://reader:{PLANTED[1]}@{host}",
                         "--backend-arg", "model=kb", "--backend-arg", f"api_key={PLANTED[0]}",
                         "--backend-arg", f"extra_body={{\"auth_token\": \"{PLANTED[2]}\"}}",
                         "--out", str(out), "--jsonl", str(tmp_path / "answers.jsonl")])
    assert code == 0 and (out / "results.json").is_file() and (ws / "results.json").is_file()
    assert leaks(tmp_path) == []  # the build folder, the ask folder, the JSON lines
    captured = capsys.readouterr()
    assert_clean(captured.out + captured.err)
    assert MASK in (ws / "results.json").read_text() and MASK in (out / "results.json").read_text()


def test_mlflow_params_artifacts_and_errors_hold_no_planted_secret(tmp_path: Path) -> None:
    config = {"rollout": {"backend": "openai", "options": {"api_key": PLANTED[0], "model": "m",
                                                          "base_url": f"http://svc:{PLANTED[1]}@10.0.0.1/v1"}},
              "hf_token": PLANTED[2], "steps": 3}
    with Tracker("secrets", out_dir=tmp_path / "run") as tracker:
        params = tracker.log_params(config)
        tracker.log_config(config)
        run_id = tracker.run_id
        logged = tracker.client.get_run(run_id).data.params
    assert params["rollout.options.model"] == "m" and params["steps"] == "3"
    assert logged["rollout.options.api_key"] == MASK and logged["hf_token"] == MASK
    assert leaks(tmp_path / "run") == []
    uri = f"http://admin:{PLANTED[1]}@127.0.0.1:{_closed_port()}"
    with pytest.raises(TrackingError) as caught:
        Tracker("secrets", out_dir=tmp_path / "other", tracking_uri=uri)
    assert_clean("".join(traceback.format_exception(caught.value)))
    assert "http://***@127.0.0.1" in str(caught.value)


def test_elasticsearch_settings_and_connection_errors_hide_the_password() -> None:
    url = f"http://elastic:{PLANTED[1]}@127.0.0.1:{_closed_port()}"
    settings = ElasticsearchSettings(url=url, max_retries=0, request_timeout=1.0)
    assert_clean(repr(settings))
    assert "http://***@127.0.0.1" in repr(settings) and settings.url == url  # the client still gets the real URL
    with pytest.raises(BackendConnectionError) as caught:
        ElasticsearchIndex("probe", settings=settings)
    assert_clean("".join(traceback.format_exception(caught.value)))
    with pytest.raises(SearchError) as bad:
        ElasticsearchSettings(url=f"ftp://elastic:{PLANTED[1]}@host")
    assert_clean(str(bad.value))
    with pytest.raises(SearchError) as env:
        ElasticsearchSettings.from_env({"LIBRARIAN_ES_URL": f"es.internal:9200?api_key={PLANTED[0]}"})
    assert_clean(str(env.value))


@dataclasses.dataclass
class _PlantedBackend:
    api_key: str = "sk-planted-secret-123"
    base_url: str = "http://user:hunter2pw@llm.local/v1"


@dataclasses.dataclass
class _PlantedRun:
    out_dir: str = "x"
    backend: _PlantedBackend = dataclasses.field(default_factory=_PlantedBackend)


def test_a_pipelines_resolved_config_and_results_config_mask_credentials(tmp_path):
    text = write_resolved_config(_PlantedRun(), tmp_path).read_text(encoding="utf-8")
    dumped = str(redact(to_plain(_PlantedRun())))
    for shown in (text, dumped):
        assert "sk-planted-secret-123" not in shown and "hunter2pw" not in shown
        assert "llm.local/v1" in shown and "out_dir" in shown  # only the credentials go
