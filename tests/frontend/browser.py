"""Chromium for the browser tests: the system binary driven by Playwright, never a downloaded one."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--no-first-run", "--disable-sync", "--disable-quic"]
WIDTHS = {"desktop": (1280, 900), "phone": (390, 844)}

needs_chromium = pytest.mark.skipif(not CHROMIUM.exists(),
                                    reason="browser tier: /usr/bin/chromium is absent (apt-get install chromium)")


def launch() -> Iterator[Any]:
    """A fresh persistent context (its own --user-data-dir) in headless Chromium."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="browser tier: playwright is not installed")
    with tempfile.TemporaryDirectory(prefix="gpupool-chromium-") as profile, sync_api.sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            profile, executable_path=str(CHROMIUM), headless=True, args=ARGS,
            viewport={"width": WIDTHS["desktop"][0], "height": WIDTHS["desktop"][1]})
        context.set_default_timeout(10_000)
        try:
            yield context
        finally:
            context.close()


def shoot(page: Any, shots: Path, name: str) -> list[Path]:
    """Full-page screenshots of the current page at desktop and phone width."""
    shots.mkdir(parents=True, exist_ok=True)
    paths = []
    for label, (width, height) in WIDTHS.items():
        page.set_viewport_size({"width": width, "height": height})
        # From the top: a sticky header would otherwise be drawn wherever the page was scrolled to.
        page.evaluate("window.scrollTo(0, 0)")
        page.wait_for_timeout(80)  # let the layout settle after the resize
        path = shots / f"{name}-{width}.png"
        page.screenshot(path=str(path), full_page=True)
        paths.append(path)
        if label == "phone":
            # Nothing may stick out sideways at phone width (a horizontal scrollbar on a phone).
            overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
            assert overflow <= 1, f"{name} is {overflow}px wider than a {width}px phone screen"
    page.set_viewport_size({"width": WIDTHS["desktop"][0], "height": WIDTHS["desktop"][1]})
    return paths


def log_in(page: Any, base: str, username: str, password: str) -> None:
    page.goto(f"{base}/login/")
    page.get_by_label("User name").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{base}/")


# Pixels of a Chart.js canvas in its first series' colour: its line, beyond the 12 px legend box.
_SERIES_PIXELS = """(canvas) => {
  const hex = Chart.getChart(canvas).data.datasets[0].borderColor;
  const rgb = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
  const px = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
  let n = 0;
  for (let i = 0; i < px.length; i += 4) {
    if (px[i + 3] > 200 && rgb.every((v, k) => Math.abs(px[i + k] - v) < 40)) n++;
  }
  return n;
}"""


def series_pixels(canvas: Any) -> int:
    """How many pixels of the chart on `canvas` (a Playwright locator) show its first series."""
    return int(canvas.evaluate(_SERIES_PIXELS))
