"""Dashboard pages in Chromium at fleet scale: time to interactive per page, on the fleet that
bench/bench_dashboard.py builds (2,000 hosts, 16,000 GPUs, 10,000 pending, 100,000 audit events).

    .venv/bin/python bench/bench_dashboard_browser.py [--hosts 2000] [--pending 10000] [--repeat 5]
        [--db NAME] [--reuse] [--only SUBSTRING]

The server is the production one (gunicorn + uvicorn workers, pool/gunicorn_conf.py) in processes
of its own; the browser is the system's headless Chromium driven by Playwright, logged in as a pool
admin (and as a member of team-0 for the member's pages). Per page, median of `--repeat` loads after
one warm-up, from the page's Navigation Timing:

- server: request sent to first byte (responseStart - requestStart), the server's time as the
  browser sees it;
- interactive: navigation start to the end of DOMContentLoaded (every script has run and bound its
  handlers), or to the moment the page's own data is drawn when it fetches it after load (the
  heatmap's canvas, `data-cells`);
- load: navigation start to the load event.

The targets are ≤ 300 ms server time and ≤ 1 s to interactive a page; a blank page of the same
server (`/healthz`, the same origin, the same browser) is the baseline measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _django

# HTML pages only (the JSON the pages fetch is timed through the page that fetches it).
PAGES = ["/healthz", "/", "/quotas/", "/fleet/", "/fleet/?page=20", "/fleet/?state=free&sort=free",
         "/fleet/?q=node-1", "/fleet/table/", "/fleet/table/?page=10", "/fleet/heatmap/",
         "/fleet/heatmap/?group=source", "/fleet/hosts/{host}/", "/queue/", "/queue/?page=150",
         "/queue/?team=team-3&sort=size&q=bench", "/leases/", "/leases/?state=granted&page=60",
         "/leases/?model=h100&sort=team", "/audit/", "/audit/?page=300", "/audit/?kind=lease&window=24h&q=granted",
         "/capacity/", "/teams/", "/pools/", "/pools/bench/", "/pools/bench/?range=90d", "/teams/team-0/",
         "/teams/team-0/?range=90d", "/gpus/{gpu}/?range=1h", "/gpus/{gpu}/?range=90d", "/usage/"]
MEMBER_PAGES = ["/", "/teams/", "/leases/"]
TARGET_SERVER_S, TARGET_INTERACTIVE_S = 0.3, 1.0
CHROMIUM = "/usr/bin/chromium"  # the system's, as the browser tests drive it (tests/frontend/browser.py)

# Navigation Timing of the current document, and when its own data was drawn (the heatmap draws
# after fetching heatmap.json; other pages are drawn by DOMContentLoaded).
_TIMING = """() => {
  const n = performance.getEntriesByType("navigation")[0];
  const canvas = document.getElementById("heat-canvas");
  return {server: n.responseStart - n.requestStart, dcl: n.domContentLoadedEventEnd,
          load: n.loadEventEnd, drawn: canvas ? Number(canvas.dataset.drawnAt || 0) : 0,
          bytes: n.transferSize};
}"""
# Marks the moment the heatmap's canvas first has cells (a MutationObserver set before any script).
_DRAWN_MARK = """
new MutationObserver((_, observer) => {
  const canvas = document.getElementById("heat-canvas");
  if (canvas && canvas.dataset.cells && !canvas.dataset.drawnAt) {
    canvas.dataset.drawnAt = String(performance.now());
    observer.disconnect();
  }
}).observe(document, {subtree: true, attributes: true, childList: true, attributeFilter: ["data-cells"]});
"""


def _session_cookie(user: Any, base: str) -> Any:
    """A logged-in session for `user` (as Django's login makes one), as a browser cookie."""
    from django.test import Client

    client = Client()
    client.force_login(user)
    return {"name": "sessionid", "value": client.cookies["sessionid"].value, "url": base}  # SetCookieParam


def _server(port: int, log: Path) -> Any:
    from stacktools.processes import Proc, answers, web_command

    env = {**os.environ, "GPUPOOL_AUTOSCHEDULE": "0"}
    return Proc("web", web_command(port), env, log, answers(f"http://127.0.0.1:{port}/healthz"))


def _load(page: Any, url: str) -> dict[str, float]:
    page.goto(url, wait_until="load")
    if page.locator("#heat-canvas").count():
        page.wait_for_function("() => document.getElementById('heat-canvas').dataset.drawnAt", timeout=30_000)
    timing = page.evaluate(_TIMING)
    return {"server": timing["server"] / 1000, "interactive": max(timing["dcl"], timing["drawn"]) / 1000,
            "load": timing["load"] / 1000, "bytes": timing["bytes"]}


def measure(context: Any, base: str, pages: list[str], repeat: int, only: str) -> dict[str, dict[str, float]]:
    page = context.new_page()
    out = {}
    for path in pages:
        if only and only not in path and path != "/healthz":
            continue
        _load(page, base + path)  # warm-up: the server's caches, the browser's static files
        runs = [_load(page, base + path) for _ in range(repeat)]
        out[path] = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
    page.close()
    return out


def _report(label: str, figures: dict[str, dict[str, float]]) -> int:
    """Print one line a page; return how many pages miss a target."""
    base = figures["/healthz"]["interactive"] if "/healthz" in figures else 0.0
    misses = 0
    print(f"{label}: {'page':44s} {'server':>9s} {'interactive':>12s} {'load':>9s} {'KB':>7s}")
    for path, fig in figures.items():
        over = [name for name, seconds, target in (("server", fig["server"], TARGET_SERVER_S),
                                                   ("interactive", fig["interactive"], TARGET_INTERACTIVE_S))
                if seconds > target]
        misses += bool(over) and path != "/healthz"
        ratio = f"({fig['interactive'] / base:4.1f}x blank)" if base else ""
        print(f"{'':{len(label) + 2}s}{path:44s} {fig['server'] * 1000:7.0f}ms {fig['interactive'] * 1000:10.0f}ms "
              f"{fig['load'] * 1000:7.0f}ms {fig['bytes'] / 1024:7.0f} {ratio}"
              f"{'  OVER: ' + ', '.join(over) if over else '  ok'}")
    return misses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=2000)
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--db", default="gpupool_bench_dashboard", help="PostgreSQL database (bench_dashboard's)")
    parser.add_argument("--reuse", action="store_true", help="keep a database an earlier run built")
    parser.add_argument("--only", default="", help="measure only the pages whose path contains this")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    if not Path(CHROMIUM).exists():
        print(f"skipped: {CHROMIUM} is not installed (apt-get install chromium); the server times alone: "
              "bench/bench_dashboard.py")
        return
    os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/13")
    vendor = _django.setup(args.db, fresh=not args.reuse)
    from bench import bench_dashboard as fleet
    from stacktools.ready import free_port

    started = time.perf_counter()
    if not (args.reuse and fleet._built()):
        fleet.build(args.hosts, args.pending)
    fleet.audit_history(args.events)
    gpu, host = fleet.build_history(), fleet._host_id()
    print(f"fleet: {args.hosts} hosts, {args.hosts * 8} GPUs, {args.pending} pending, {args.events} audit events "
          f"on {vendor} (built in {time.perf_counter() - started:.0f} s)")
    from django.contrib.auth import get_user_model
    from django.db import connection
    from playwright.sync_api import sync_playwright

    admin, _ = get_user_model().objects.get_or_create(username="admin", defaults={"is_staff": True})
    member = fleet._member()
    port = args.port or free_port()
    base = f"http://127.0.0.1:{port}"
    # Sessions made here, before Playwright's event loop runs (Django's ORM refuses an async context).
    cookies = {"admin": _session_cookie(admin, base), "member": _session_cookie(member, base)}
    connection.close()  # the server's processes take the connections from here
    web = _server(port, Path(tempfile.mkdtemp(prefix="gpupool-bench-web-")) / "web.log")
    pages = [page.format(host=host, gpu=gpu) for page in PAGES]
    web.start()
    try:
        with tempfile.TemporaryDirectory(prefix="gpupool-chromium-") as profile, sync_playwright() as pw:
            context = pw.chromium.launch_persistent_context(
                profile, executable_path=CHROMIUM, headless=True,
                args=["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"],
                viewport={"width": 1280, "height": 900})
            context.add_init_script(_DRAWN_MARK)
            context.add_cookies([cookies["admin"]])
            misses = _report("admin", measure(context, base, pages, args.repeat, args.only))
            context.clear_cookies()
            context.add_cookies([cookies["member"]])
            misses += _report("member of team-0", measure(context, base, ["/healthz", *MEMBER_PAGES],
                                                          args.repeat, args.only))
            context.close()
    finally:
        web.stop()
    print(f"targets: server ≤ {TARGET_SERVER_S * 1000:.0f} ms, interactive ≤ {TARGET_INTERACTIVE_S:.0f} s: "
          f"{'all pages met' if not misses else f'{misses} page(s) over'}")


if __name__ == "__main__":
    main()
