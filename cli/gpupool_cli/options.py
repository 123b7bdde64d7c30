"""Options shared by the commands, and the `Ctx` a command runs with.

`-o`, `--url`, `--token` and `--context` are accepted before or after the command (`gpupool -o json
ls` = `gpupool ls -o json`): each is stored on the root Click context when given, the command's
own use winning over the group's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from gpupool_cli import config
from gpupool_cli.client import Client
from gpupool_cli.context import FORMATS, Ctx
from gpupool_cli.errors import UsageError

F = TypeVar("F", bound=Callable[..., Any])
_PREFIX = "gpupool."


def _store(click_ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    if value not in (None, False, ()):
        click_ctx.find_root().meta[_PREFIX + str(param.name)] = value
    return value


def _setting(name: str, default: Any = None) -> Any:
    return click.get_current_context().find_root().meta.get(_PREFIX + name, default)


def global_options(fn: F) -> F:
    """The options every command takes, wherever they stand."""
    for option in reversed([
        click.option("-o", "--output", type=click.Choice(FORMATS), expose_value=False, callback=_store,
                     help="table for people (default), wide for more columns, json or yaml for scripts"),
        click.option("--url", expose_value=False, callback=_store, metavar="URL",
                     help="server URL (else the context's, or GPUPOOL_URL)"),
        click.option("--token", expose_value=False, callback=_store, metavar="TOKEN",
                     help="API token (else the context's, or GPUPOOL_TOKEN); prefer `login --with-token`"),
        click.option("--context", expose_value=False, callback=_store, metavar="NAME",
                     help="use this saved context for this command (gpupool config get-contexts)"),
    ]):
        fn = option(fn)
    return fn


def no_headers_option(fn: F) -> F:
    return click.option("--no-headers", is_flag=True, expose_value=False, callback=_store,
                        help="rows only, without the header line")(fn)


def current() -> Ctx:
    """The Ctx of the running command (made once, from the options given)."""
    root = click.get_current_context().find_root()
    made = root.meta.get(_PREFIX + "ctx")
    if isinstance(made, Ctx):
        return made

    def client() -> Client:
        return Client(config.load(_setting("url"), _setting("token"), _setting("context")))

    ctx = Ctx(client_factory=client, output=_setting("output", "table"), no_headers=bool(_setting("no_headers")),
              sleep=root.meta.get(_PREFIX + "sleep"))
    root.meta[_PREFIX + "ctx"] = ctx
    return ctx


def lease_request_options(fn: F) -> F:
    """What a lease asks for (request and run)."""
    for option in reversed([
        click.option("--gpus", type=click.IntRange(min=1), required=True, help="how many GPUs"),
        click.option("--pool", help="pool name (default: the only pool, if there is one)",
                     shell_complete=complete_pools),
        click.option("--model", help="model substring, e.g. H100 or 'A100|H100'"),
        click.option("--ttl", help="lease lifetime without renewal: 90s, 30m, 2h, 1d"),
        click.option("--same-host/--spread", "same_host", default=True,
                     help="all GPUs on one host (default), or spread over hosts"),
        click.option("--priority", help="priority class (default: default)"),
        click.option("--team", help="team to charge (needed when you are in several)"),
        click.option("--min-memory", type=int, metavar="MB", help="minimum memory per GPU, MB"),
        click.option("--source", multiple=True, metavar="NAME", help="only hosts of this source (repeatable: any)"),
        click.option("--host", help="only this host"),
        click.option("--label", multiple=True, metavar="KEY=VALUE", help="only hosts with this label (all)"),
        click.option("--topology", metavar="LEVEL[:MODE]",
                     help="keep the GPUs within one nvlink island, host, or configured level (rack, block, "
                          "zone…); MODE required (wait rather than split) or preferred (default)"),
        click.option("--timeout", help="give up waiting (and cancel the lease) after this long, e.g. 10m; exit 124"),
        click.option("--poll", type=float, default=1.0, hidden=True),
    ]):
        fn = option(fn)
    return fn


def key_values(items: tuple[str, ...], flag: str) -> dict[str, str]:
    """`KEY=VALUE` arguments of a repeatable flag as a dict; anything else is a usage error."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"{flag} takes KEY=VALUE, got {item!r}")
        out[key] = value
    return out


# --- shell completion: values from the server, quietly nothing when it cannot be asked -------------
def _quietly(fetch: Callable[[Client], list[str]]) -> list[str]:
    try:
        return fetch(Client(config.load()))
    except Exception:  # completion must never print an error into the user's prompt
        return []


def complete_pools(click_ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    return [name for name in _quietly(lambda c: [p["name"] for p in c.all("pools/")]) if name.startswith(incomplete)]


def complete_leases(click_ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    """Ids of the caller's active leases that start with what was typed (asked of the server)."""
    def fetch(client: Client) -> list[str]:
        params: dict[str, Any] = {"active": "true"}
        if incomplete:
            params["id_prefix"] = incomplete
        return [lease["id"] for lease in client.page("leases/", max_rows=50, **params).rows]

    return _quietly(fetch) if all(c in "0123456789abcdefABCDEF-" for c in incomplete) else []
