"""Servers and identities: `login`, `config get-contexts|use-context|current-context|delete-context`,
and `completion` (the shell's completion script)."""

from __future__ import annotations

import sys

import click
from click.shell_completion import get_completion_class
from rich.text import Text

from gpupool_cli import config
from gpupool_cli.client import Client
from gpupool_cli.errors import UsageError
from gpupool_cli.options import current, global_options, no_headers_option
from gpupool_cli.output import table


def _token_from_stdin() -> str:
    token = sys.stdin.readline().strip()
    if not token:
        raise UsageError("--with-token reads the token from standard input, and it was empty", code="no_token")
    return token


@click.command("login")
@click.option("--url", "server_url", required=True, metavar="URL", help="server URL, e.g. http://localhost:8000")
@click.option("--with-token", is_flag=True,
              help="read the token from standard input (echo $TOKEN | gpupool login --url URL --with-token)")
@click.option("--token", "token_arg", metavar="TOKEN",
              help="the token on the command line (it stays in your shell history: prefer --with-token)")
@click.option("--context", "name", default=config.DEFAULT_CONTEXT, show_default=True, metavar="NAME",
              help="save it under this context name (and make it the current one)")
def cmd_login(server_url: str, with_token: bool, token_arg: str | None, name: str) -> int:
    """Check a server URL and token, then save them as a context for later commands.

    Without --with-token or --token, asks for the token (hidden) on a terminal."""
    if with_token and token_arg:
        raise UsageError("give the token one way: --with-token (stdin) or --token")
    config.check_name(name)
    if with_token:
        token = _token_from_stdin()
    elif token_arg:
        token = token_arg
    elif sys.stdin.isatty():
        token = click.prompt("API token (manage.py apitoken USER)", hide_input=True).strip()
    else:
        raise UsageError("no token: pipe it in with --with-token", code="no_token")
    cfg = config.Config(url=server_url.rstrip("/"), token=token)
    Client(cfg).get("pools/", limit=1)  # refuse to save a URL or token that does not work
    path = config.save(cfg, name=name)
    click.echo(f"logged in to {cfg.url} as context {name!r}; settings saved to {path}")
    return 0


@click.group("config")
def cmd_config() -> None:
    """Saved contexts: one server URL and token each (the file `gpupool login` writes)."""


@cmd_config.command("get-contexts")
@no_headers_option
@global_options
def get_contexts() -> int:
    """The saved contexts; * marks the current one. Tokens show their first 8 characters only."""
    ctx = current()
    saved = config.read_contexts()
    named = sorted(saved.contexts.items())
    rows = [[Text("*" if name == saved.current else ""), name, c.url, c.token[:8] + "…"] for name, c in named]
    data = [{"name": name, "url": c.url, "current": name == saved.current} for name, c in named]
    if not rows and not ctx.machine:
        ctx.note("No contexts: gpupool login --url URL --with-token")
        return 0
    ctx.emit(data, lambda: table(["CURRENT", "NAME", "URL", "TOKEN"], rows, headers=not ctx.no_headers))
    return 0


@cmd_config.command("use-context")
@click.argument("name")
def use_context(name: str) -> int:
    """Make NAME the current context."""
    config.use(name)
    click.echo(f"switched to context {name!r}")
    return 0


@cmd_config.command("current-context")
def current_context() -> int:
    """Print the current context's name."""
    saved = config.read_contexts()
    if saved.current is None:
        raise UsageError("no current context: gpupool login --url URL --with-token", code="no_context")
    click.echo(saved.current)
    return 0


@cmd_config.command("delete-context")
@click.argument("name")
def delete_context(name: str) -> int:
    """Forget context NAME (its token goes from the file)."""
    config.delete(name)
    click.echo(f"deleted context {name!r}")
    return 0


@click.command("completion")
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def cmd_completion(shell: str) -> int:
    """Print the shell's completion script: eval "$(gpupool completion bash)" in ~/.bashrc
    (zsh: ~/.zshrc; fish: gpupool completion fish > ~/.config/fish/completions/gpupool.fish).
    Commands, options, pools and lease ids complete (the last two asked of the server)."""
    root = click.get_current_context().find_root()
    completion = get_completion_class(shell)
    assert completion is not None  # the choices are Click's own shells
    script = completion(root.command, {}, "gpupool", "_GPUPOOL_COMPLETE").source()
    click.echo(script)
    return 0


COMMANDS = (cmd_login, cmd_config, cmd_completion)
