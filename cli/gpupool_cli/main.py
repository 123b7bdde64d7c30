"""`gpupool`: the command-line client of the gpupool REST API.

    gpupool login --url http://pool:8000 --token KEY
    gpupool pools | gpus [--pool P --state S --host H --model M] | hosts
    gpupool request --gpus 2 [--pool P --model H100 --ttl 2h --spread --priority high --wait]
                    [--source S --host H --label k=v]
    gpupool run --gpus 1 -- python train.py
    gpupool ls [--all] | show ID | renew ID [--ttl 2h] | release ID | top [--once]
    gpupool reservations [list | create --pool P --team T --gpus 4 --start ISO --for 2h | cancel ID]

Exit codes: 0 ok, 1 API error, 2 usage, 3 not found or not allowed, 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from gpupool_cli import __version__, config, reservations
from gpupool_cli.client import Client
from gpupool_cli.context import Ctx
from gpupool_cli.errors import EXIT_INTERRUPTED, EXIT_USAGE, CliError
from gpupool_cli.fleet import cmd_gpus, cmd_hosts, cmd_pools, cmd_top
from gpupool_cli.leases import cmd_ls, cmd_release, cmd_renew, cmd_request, cmd_run, cmd_show


def _common() -> argparse.ArgumentParser:
    """Options accepted before or after the command (`gpupool -o json ls` = `gpupool ls -o json`).
    SUPPRESS keeps a subcommand's unset option from overwriting the top-level value."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-o", "--output", choices=["table", "json"], default=argparse.SUPPRESS,
                        help="table for people (default), json for scripts")
    common.add_argument("--url", default=argparse.SUPPRESS, help="server URL (else GPUPOOL_URL, else login)")
    common.add_argument("--token", default=argparse.SUPPRESS, help="API token (else GPUPOOL_TOKEN, else login)")
    return common


def _lease_request_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--gpus", type=int, required=True, help="how many GPUs")
    parser.add_argument("--pool", help="pool name (default: the only pool, if there is one)")
    parser.add_argument("--model", help="model substring, e.g. H100 or 'A100|H100'")
    parser.add_argument("--ttl", help="lease lifetime without renewal: 90s, 30m, 2h, 1d")
    place = parser.add_mutually_exclusive_group()
    place.add_argument("--same-host", dest="spread", action="store_false", help="all GPUs on one host (default)")
    place.add_argument("--spread", dest="spread", action="store_true", help="GPUs may be spread over hosts")
    parser.set_defaults(spread=False)
    parser.add_argument("--priority", help="priority class (default: default)")
    parser.add_argument("--team", help="team to charge (needed when you are in several)")
    parser.add_argument("--min-memory", type=int, metavar="MB", help="minimum memory per GPU, MB")
    parser.add_argument("--source", action="append", metavar="NAME",
                        help="only hosts of this source (repeatable: any of them)")
    parser.add_argument("--host", help="only this host")
    parser.add_argument("--label", action="append", metavar="KEY=VALUE",
                        help="only hosts with this label (repeatable: all of them)")
    parser.add_argument("--timeout", help="give up waiting (and cancel) after this long, e.g. 10m")
    parser.add_argument("--poll", type=float, default=1.0, help=argparse.SUPPRESS)


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    parser = argparse.ArgumentParser(prog="gpupool", parents=[common],
                                     description="Ask for GPUs from a gpupool server, and see the pool.",
                                     epilog="exit codes: 0 ok, 1 API error, 2 usage, 3 not found or not allowed, "
                                            "130 interrupted")
    parser.add_argument("--version", action="version", version=f"gpupool {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[common], help=help_text, description=help_text)

    login_help = "save the server URL and token (checked first) for later commands"
    login = sub.add_parser("login", help=login_help, description=login_help)
    login.add_argument("--url", required=True, help="server URL, e.g. http://localhost:8000")
    login.add_argument("--token", required=True, help="API token (manage.py apitoken USER)")

    add("pools", "pools with capacity, allocation and queue")
    gpus = add("gpus", "GPUs with state and telemetry")
    for flag, text in (("--pool", "pool name"), ("--host", "host name"), ("--model", "model substring")):
        gpus.add_argument(flag, help=text)
    gpus.add_argument("--state", choices=["free", "leased", "cordoned", "offline", "unhealthy", "foreign"])
    hosts = add("hosts", "hosts and nodes with their state")
    hosts.add_argument("--pool")
    hosts.add_argument("--source")
    hosts.add_argument("--state", choices=["ready", "cordoned", "draining", "offline"])

    request = add("request", "request GPUs; --wait until granted (Ctrl-C cancels)")
    _lease_request_options(request)
    request.add_argument("--wait", action="store_true", help="wait until granted, showing the queue position")

    run = add("run", "request GPUs and run a command on them: gpupool run --gpus 1 -- python train.py")
    _lease_request_options(run)
    run.add_argument("--env", action="append", metavar="KEY=VALUE", help="environment variable (repeatable)")
    run.add_argument("workload", nargs=argparse.REMAINDER, metavar="-- COMMAND", help="what to run, after --")

    ls = add("ls", "your teams' leases (active ones unless --all)")
    ls.add_argument("--all", action="store_true", help="ended leases too")
    ls.add_argument("--state", choices=["pending", "granted", "bound", "released", "expired", "preempted",
                                        "failed", "lost"])
    ls.add_argument("--limit", type=int, default=500, help="at most this many rows (default 500)")
    show = add("show", "one lease with its audit trail")
    show.add_argument("id", help="lease id, or a unique prefix as `ls` prints it")
    renew = add("renew", "push a lease's expiry to now + TTL")
    renew.add_argument("id")
    renew.add_argument("--ttl", help="new TTL: 90s, 30m, 2h, 1d")
    renew.add_argument("--keep", action="store_true",
                       help="also exempt it from idle reclaim for good (pool admins only)")
    release = add("release", "end a lease (or cancel a pending one)")
    release.add_argument("id")
    release.add_argument("--reason", help="why, for the audit trail")

    reservations.add_parser(add)

    top = add("top", "live view of pools, quotas and the queue (refreshes every 2 s)")
    top.add_argument("--once", action="store_true", help="print one frame and exit")
    top.add_argument("--interval", type=float, default=2.0, help="seconds between frames")
    return parser


COMMANDS = {"pools": cmd_pools, "gpus": cmd_gpus, "hosts": cmd_hosts, "top": cmd_top, "request": cmd_request,
            "run": cmd_run, "ls": cmd_ls, "show": cmd_show, "renew": cmd_renew, "release": cmd_release,
            "reservations": reservations.cmd_reservations}


def cmd_login(args: argparse.Namespace, ctx_output: str) -> int:
    cfg = config.Config(url=args.url.rstrip("/"), token=args.token)
    client = Client(cfg)
    client.get("pools/", limit=1)  # refuse to save a URL or token that does not work
    path = config.save(cfg)
    print(f"logged in to {cfg.url}; settings saved to {path}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit code (the console script exits with it)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: 2 for usage errors, 0 for --help
        return int(exc.code or 0) if isinstance(exc.code, int) else EXIT_USAGE
    output = getattr(args, "output", "table")
    try:
        if args.command == "login":
            return cmd_login(args, output)
        cfg = config.load(getattr(args, "url", None), getattr(args, "token", None))
        ctx = Ctx(client=Client(cfg), output=output)
        return COMMANDS[args.command](ctx, args)
    except CliError as exc:
        sys.stdout.flush()
        print(exc.line(), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    raise SystemExit(main())
