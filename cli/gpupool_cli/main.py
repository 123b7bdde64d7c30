"""`gpupool`: the command-line client of the gpupool REST API.

    echo $TOKEN | gpupool login --url http://pool:8000 --with-token [--context NAME]
    gpupool config get-contexts | use-context NAME
    gpupool pools | gpus [--pool P --state S --host H --model M] | hosts      (each with --watch)
    gpupool request --gpus 2 [--pool P --model H100 --ttl 2h --spread --priority high --wait --timeout 10m]
                    [--source S --host H --label k=v]
    gpupool run --gpus 1 -- python train.py
    gpupool ls [--all] [-w] | show ID | renew ID [--ttl 2h] | release ID | cancel ID | top
    gpupool reservations [list | create --pool P --team T --gpus 4 --start ISO --for 2h | cancel ID]
    gpupool completion bash|zsh|fish

Built on Click (parsing, help, completion) and Rich (tables, colour, live displays)."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from types import FrameType

import click

from gpupool_cli import __version__, contexts, fleet, leases, pod_exec, requesting, reservations, shells, top
from gpupool_cli.errors import EXIT_CODES, EXIT_INTERRUPTED, CliError, Terminated
from gpupool_cli.options import global_options

EPILOG = "\n".join(["\b", "Exit codes:", *(f"  {code:>3}  {text}" for code, text in EXIT_CODES),
                    "", "\b", "Environment: GPUPOOL_URL, GPUPOOL_TOKEN, GPUPOOL_CONTEXT, GPUPOOL_CONFIG, "
                    "NO_COLOR (plain output; so is a pipe)."])


@click.group("gpupool", epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"],
                                                          "max_content_width": 110})
@click.version_option(__version__, prog_name="gpupool")
@global_options
def cli() -> None:
    """Ask for GPUs from a gpupool server, run on them, and see the pool."""


for _module in (contexts, fleet, requesting, leases, shells, pod_exec, top, reservations):
    for _command in _module.COMMANDS:
        cli.add_command(_command)


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """SIGTERM raises Terminated in the main thread while a command runs, so a waiting command
    cancels its lease on the way out as it does for Ctrl-C (the default action would kill the
    process with the lease left behind). Elsewhere (a thread) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit code (the console script exits with it)."""
    args = list(argv) if argv is not None else sys.argv[1:]
    with sigterm_raises():
        try:
            result = cli.main(args=args, prog_name="gpupool", standalone_mode=False)
            return result if isinstance(result, int) else 0
        except click.exceptions.Exit as done:  # --help, --version
            return done.exit_code
        except click.ClickException as exc:  # usage errors: 2
            exc.show()
            return exc.exit_code
        except CliError as exc:
            sys.stdout.flush()
            print(exc.line(), file=sys.stderr)
            return exc.exit_code
        except click.exceptions.Abort:  # Click's form of KeyboardInterrupt
            print("interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
        except KeyboardInterrupt:
            print("\ninterrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
        except Terminated as stop:
            print("\nterminated", file=sys.stderr)
            return stop.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
