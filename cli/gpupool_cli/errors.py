"""CLI errors and their exit codes (the table `gpupool --help` prints). Each error prints as one
line on stderr: `error: <message> (<code>)`."""

from __future__ import annotations

EXIT_OK = 0
EXIT_API = 1  # the server refused or failed (or could not be reached)
EXIT_USAGE = 2  # bad flags or arguments, an ambiguous id prefix
EXIT_NOT_FOUND = 3  # no such lease, pool, team…, or not yours / not allowed (401, 403, 404)
EXIT_TIMEOUT = 124  # --timeout passed before the lease was granted (it was cancelled), as timeout(1)
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)
EXIT_TERMINATED = 143  # SIGTERM (128 + SIGTERM)
EXIT_DENIED = EXIT_NOT_FOUND  # the older name

EXIT_CODES = (
    (EXIT_OK, "ok (run: the workload's own exit code)"),
    (EXIT_API, "the server refused the request, failed, or could not be reached"),
    (EXIT_USAGE, "usage: bad flags or arguments, an id prefix that matches several leases"),
    (EXIT_NOT_FOUND, "not found or not allowed: unknown lease, pool, team or priority class, bad token"),
    (EXIT_TIMEOUT, "--timeout passed while waiting (the lease was cancelled)"),
    (EXIT_INTERRUPTED, "interrupted by Ctrl-C (a waiting lease was cancelled)"),
    (EXIT_TERMINATED, "terminated by SIGTERM (a waiting lease was cancelled)"),
)

# HTTP statuses that say "try again": a proxy in front of a restarting server, an overloaded one.
TRANSIENT_STATUS = (502, 503, 504)


class CliError(Exception):
    exit_code = EXIT_API

    def __init__(self, message: str, *, code: str = "error", status: int | None = None,
                 transient: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status
        # True for what a retry may cure: the server unreachable, a timeout, a 502/503/504.
        self.transient = transient

    def line(self) -> str:
        return f"error: {self.message} ({self.code})"


class UsageError(CliError):
    exit_code = EXIT_USAGE

    def __init__(self, message: str, *, code: str = "usage") -> None:
        super().__init__(message, code=code)


class NotFound(CliError):
    exit_code = EXIT_NOT_FOUND

    def __init__(self, message: str, *, code: str = "not_found") -> None:
        super().__init__(message, code=code, status=404)


class WaitTimeout(CliError):
    exit_code = EXIT_TIMEOUT

    def __init__(self, message: str) -> None:
        super().__init__(message, code="timeout")


class ApiError(CliError):
    """An error answer of the API. 401/403/404 mean "not found or not yours": exit 3.
    `details`: the error body's per-field messages ({} when none)."""

    def __init__(self, message: str, *, code: str, status: int,
                 details: dict[str, object] | None = None) -> None:
        super().__init__(message, code=code, status=status, transient=status in TRANSIENT_STATUS)
        self.details = details or {}
        if status in (401, 403, 404):
            self.exit_code = EXIT_NOT_FOUND


class Terminated(BaseException):
    """SIGTERM, raised in the main thread by the handler main() installs: like KeyboardInterrupt,
    it unwinds through everything (a waiting command cancels its lease on the way out)."""

    exit_code = EXIT_TERMINATED


def stop_name(stop: BaseException) -> str:
    """How the user stopped us, in the words an audit reason uses."""
    return "SIGTERM" if isinstance(stop, Terminated) else "Ctrl-C"


def stop_exit_code(stop: BaseException) -> int:
    return EXIT_TERMINATED if isinstance(stop, Terminated) else EXIT_INTERRUPTED
