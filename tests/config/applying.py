"""`manage.py apply -f` on a YAML text, as the config tests run it."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

from django.core.management import call_command


def apply_file(tmp_path: Path, text: str, *args: str) -> str:
    """Write `text` to a file under `tmp_path`, apply it (with `args`, e.g. "--prune") and return
    what the command printed."""
    path = tmp_path / "c.yaml"
    path.write_text(text)
    out = StringIO()
    call_command("apply", "-f", str(path), *args, stdout=out)
    return out.getvalue()
