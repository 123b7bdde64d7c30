"""CLI errors and their exit codes: 0 ok, 1 API error, 2 usage, 3 not found or not allowed,
130 interrupted. Each prints as one line on stderr: `error: <message> (<code>)`."""

from __future__ import annotations

EXIT_OK, EXIT_API, EXIT_USAGE, EXIT_DENIED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class CliError(Exception):
    exit_code = EXIT_API

    def __init__(self, message: str, *, code: str = "error", status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status

    def line(self) -> str:
        return f"error: {self.message} ({self.code})"


class UsageError(CliError):
    exit_code = EXIT_USAGE

    def __init__(self, message: str, *, code: str = "usage") -> None:
        super().__init__(message, code=code)


class ApiError(CliError):
    """An error answer of the API. 401/403/404 mean "not found or not yours": exit 3."""

    def __init__(self, message: str, *, code: str, status: int) -> None:
        super().__init__(message, code=code, status=status)
        if status in (401, 403, 404):
            self.exit_code = EXIT_DENIED
