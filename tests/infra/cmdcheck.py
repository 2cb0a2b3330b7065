"""Syntax checks for the shell commands of a Markdown document (docs/cluster.md) and of manifests.

Each fenced ```bash block must pass `bash -n`; then every simple command in it
is checked by what it runs:

- `librarian CMD key=value ...`: CMD is registered and built, and the
  arguments go through the pipeline's real config loader (`load_config` with
  its config class, and its `check`); `ablate` also validates every cell.
- `ray ...`, `mlflow ...`: the subcommand and its options are parsed by the
  tool's own click CLI; `ray job submit -- librarian ...` checks the
  entrypoint too; config files and working dirs they name must exist.
- `kubectl`, `helm`, `docker`, `bash`: the repository files they name exist.

Anything else (export, curl, sed, ...) is checked by `bash -n` alone.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import click

from librarian.cli import COMMANDS
from librarian.config import ConfigError, load_config
from librarian.pipelines import plan_command
from librarian.pipelines.ablate import config as ablate_config
from librarian.pipelines.demo.demo import DemoConfig
from librarian.pipelines.registry import PIPELINES

ROOT = Path(__file__).resolve().parents[2]
# Where images and the cluster launcher put this checkout (infra/images, infra/ray/cluster.yaml).
CHECKOUT_ALIASES = ("/opt/librarian", "/home/ray/librarian")
SEPARATORS = {"&&", "||", "|", ";", "&"}
REDIRECTS = {">", ">>", "<", "2>", "2>&1", ">&"}
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
KUBECTL_FILE_VERBS = {"apply", "create", "delete", "replace", "diff", "get", "describe", "wait", "patch"}
REPO_PREFIXES = ("infra/", "configs/", "scripts/", "docs/", "constraints/", "librarian/", "tests/")


class CommandError(ValueError):
    """A command that would not run as written; the message quotes it."""


@dataclass
class Block:
    """A fenced ```bash block: its text and the line of the document where it starts."""

    text: str
    line: int


def bash_blocks(markdown: str) -> list[Block]:
    """Every ```bash (or ```sh) fenced block of a Markdown text."""
    blocks, lines = [], markdown.splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"^\s*```(bash|sh|shell)\s*$", lines[i])
        if fence:
            start, body = i + 1, []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith("```"):
                body.append(lines[i])
                i += 1
            blocks.append(Block("\n".join(body) + "\n", start + 1))
        i += 1
    return blocks


def bash_syntax(text: str) -> None:
    """`bash -n`: raise `CommandError` with bash's message on a syntax error."""
    proc = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        raise CommandError(f"bash -n: {proc.stderr.strip()}")


def simple_commands(text: str) -> Iterator[list[str]]:
    """The simple commands of a shell text: continuations joined, split at && || | ; &, redirects dropped."""
    joined = re.sub(r"\\\n", " ", text)
    for line in joined.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        lexer = shlex.shlex(line, posix=True, punctuation_chars="|&;<>")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        words: list[str] = []
        tokens = list(lexer)
        skip = False
        for tok in tokens:
            if skip:
                skip = False
                continue
            if tok in SEPARATORS:
                if words:
                    yield words
                words = []
            elif tok in REDIRECTS or tok in {">", "<"}:
                skip = True
            else:
                words.append(tok)
        if words:
            yield words


def _strip_prefix(words: list[str]) -> list[str]:
    i = 0
    while i < len(words) and (ASSIGNMENT.match(words[i]) or words[i] in ("sudo", "env", "exec", "time")):
        i += 1
    return words[i:]


class Checker:
    """Checks commands; `cwd` follows `cd` (None when it leaves the repository: path checks pause)."""

    def __init__(self, root: Path = ROOT) -> None:
        self.root = root
        self.cwd: Path | None = root
        self.seen: list[list[str]] = []

    # --- entry points ---------------------------------------------------------------------------------------
    def check_text(self, text: str) -> None:
        """`bash -n` on the text, then each simple command; the cwd starts at the repository root."""
        bash_syntax(text)
        self.cwd = self.root
        for words in simple_commands(text):
            self.check(words)

    def check(self, words: list[str]) -> None:
        words = _strip_prefix(words)
        if not words:
            return
        self.seen.append(words)
        name, args = Path(words[0]).name, words[1:]
        try:
            handler = getattr(self, f"_cmd_{name}", None)
            if handler is not None:
                handler(args)
        except CommandError as exc:
            raise CommandError(f"{shlex.join(words)}: {exc}") from None

    # --- helpers --------------------------------------------------------------------------------------------
    def path(self, value: str) -> Path | None:
        """A path as seen from the current directory (checkout aliases map to the repository)."""
        for alias in CHECKOUT_ALIASES:
            if value == alias or value.startswith(alias + "/"):
                return self.root / value[len(alias):].lstrip("/")
        if value.startswith("/") or self.cwd is None:
            return None
        return self.cwd / value

    def must_exist(self, value: str, what: str) -> None:
        if "$" in value or value in ("-", "") or "://" in value:
            return
        p = self.path(value)
        if p is not None and not p.exists():
            raise CommandError(f"{what} {value!r} does not exist in the repository")

    def repo_paths(self, args: list[str]) -> None:
        """Arguments that look like repository files must exist."""
        for a in args:
            value = a.split("=", 1)[1] if a.startswith("--") and "=" in a else a
            if value.startswith(REPO_PREFIXES) or re.search(r"\.(ya?ml|sh|Dockerfile)$", value):
                self.must_exist(value, "file")

    # --- commands -------------------------------------------------------------------------------------------
    def _cmd_cd(self, args: list[str]) -> None:
        target = args[0] if args else ""
        p = self.path(target) if target else None
        if p is not None and p.is_dir():
            self.cwd = p.resolve()
        elif p is not None and target and not target.startswith("/"):
            raise CommandError(f"directory {target!r} does not exist")
        else:
            self.cwd = None

    def _cmd_librarian(self, args: list[str]) -> None:
        check_librarian(args, self)

    def _cmd_ray(self, args: list[str]) -> None:
        from ray.scripts.scripts import cli

        ctx = parse_click(cli, "ray", args)
        params = ctx.params
        for key in ("cluster_config_file", "runtime_env"):
            if params.get(key):
                self.must_exist(str(params[key]), key.replace("_", " "))
        if params.get("working_dir"):
            self.must_exist(str(params["working_dir"]), "working dir")
        entry = list(params.get("entrypoint") or ())
        if entry:
            self.check(entry)

    def _cmd_mlflow(self, args: list[str]) -> None:
        from mlflow.cli import cli

        parse_click(cli, "mlflow", args)

    def _cmd_kubectl(self, args: list[str]) -> None:
        verb = next(_positionals(args, ("-n", "--namespace", "--context", "-l", "-o", "-c")), "")
        if verb in KUBECTL_FILE_VERBS:  # elsewhere -f is --follow (logs) or absent
            for flag, value in _flag_values(args, ("-f", "--filename")):
                self.must_exist(value, f"{flag} file")
        self.repo_paths(args)

    def _cmd_helm(self, args: list[str]) -> None:
        for flag, value in _flag_values(args, ("-f", "--values")):
            self.must_exist(value, f"{flag} file")
        self.repo_paths(args)

    def _cmd_docker(self, args: list[str]) -> None:
        for flag, value in _flag_values(args, ("-f", "--file")):
            self.must_exist(value, f"{flag} file")
        if args[:1] == ["build"]:
            rest = [a for a in _positionals(args[1:], ("-f", "--file", "-t", "--tag", "--build-arg",
                                                         "--platform", "--target"))]
            if not rest:
                raise CommandError("docker build needs a build context")
            self.must_exist(rest[-1], "build context")
        self.repo_paths(args)

    def _cmd_bash(self, args: list[str]) -> None:
        if args and not args[0].startswith("-"):
            self.must_exist(args[0], "script")


def _flag_values(args: list[str], flags: tuple[str, ...]) -> Iterator[tuple[str, str]]:
    for i, a in enumerate(args):
        if a in flags:
            if i + 1 >= len(args):
                raise CommandError(f"{a} needs a value")
            yield a, args[i + 1]
        for f in flags:
            if f.startswith("--") and a.startswith(f + "="):
                yield f, a.split("=", 1)[1]


def _positionals(args: list[str], valued: tuple[str, ...]) -> Iterator[str]:
    skip = False
    for a in args:
        if skip:
            skip = False
        elif a in valued:
            skip = True
        elif not a.startswith("-"):
            yield a


def parse_click(group, name: str, args: list[str]):
    """Parse `args` with a click command tree exactly as the CLI would, without running it."""
    try:
        ctx = group.make_context(name, list(args))
        cmd = group
        while isinstance(cmd, click.Group):
            rest = [*getattr(ctx, "_protected_args", []), *ctx.args]
            if not rest:
                raise click.UsageError(f"{ctx.command_path}: missing a subcommand")
            sub_name, sub, sub_args = cmd.resolve_command(ctx, rest)
            ctx = sub.make_context(sub_name, list(sub_args), parent=ctx)
            cmd = sub
        return ctx
    except click.exceptions.Exit:
        raise CommandError("the arguments ask for help or exit instead of running") from None
    except click.ClickException as exc:
        raise CommandError(exc.format_message()) from None


def config_loader(name: str):
    """(load(args) -> config, extra check or None) for a `librarian` command driven by a config class."""
    if name == "ablate":
        def load_ablate(args: list[str]):
            cfg = ablate_config.load(args)
            ablate_config.validate(cfg, ablate_config.sweep_cells(cfg), Path(cfg.out_dir))  # every cell's pipeline config, as the sweep would
            return cfg

        return load_ablate
    if name == "plan":
        return run_plan
    if name == "demo":
        return lambda args: load_config(DemoConfig, args)
    if name not in PIPELINES:
        raise CommandError(f"no config loader is known for `librarian {name}` (not a pipeline command)")
    schema, _, check = PIPELINES[name].load()

    def load_pipeline(args: list[str]):
        cfg = load_config(schema, args)
        if check is not None:
            check(cfg)
        return cfg

    return load_pipeline


def run_plan(args: list[str]) -> None:
    """`librarian plan` starts nothing, so it runs for real: the job must fit the cluster files it names."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = plan_command.main(args)
    if code != 0:
        raise CommandError(f"librarian plan exits {code}: " + " | ".join(
            line for line in out.getvalue().splitlines() if line.startswith(("problem:", "librarian plan:"))))


def check_librarian(args: list[str], checker: Checker) -> None:
    """The command exists and is built; its config files exist; every key=value is a valid config key."""
    if not args:
        raise CommandError("librarian needs a command")
    name, rest = args[0], list(args[1:])
    if name not in COMMANDS:
        raise CommandError(f"unknown librarian command {name!r}")
    resolved = []
    for i, a in enumerate(rest):
        value = a.split("=", 1)[1] if a.startswith(("config=", "--config=")) else None
        if value is None and i > 0 and rest[i - 1] in ("--config", "-c", "--cluster"):
            value = a
        if value is not None:
            p = checker.path(value)
            if p is None:
                raise CommandError(f"config file {value!r} is outside the repository")
            a = a[: len(a) - len(value)] + str(p)
        resolved.append(a)
    try:
        config_loader(name)(resolved)
    except ConfigError as exc:
        raise CommandError(f"librarian {name}: {exc}") from None
