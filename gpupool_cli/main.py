"""`gpupool` CLI entry point (the full CLI grows in its own issue)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    print("gpupool CLI: coming with the API issue; use the REST API meanwhile", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
