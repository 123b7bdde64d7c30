"""`gpupool notify`: your own notification subscriptions (`notifications/subscriptions/`).

    gpupool notify --on granted,preempted --webhook URL [--secret-env VAR] [--name NAME]
    gpupool notify --on expiring --email [ADDR]
    gpupool notify ls | rm NAME

Events are named as the API names them (`lease.granted`, …) or by their short forms (`granted`,
`expiring`, `preempted`, `lost`, `idle`, `budget`); `all` is every one. Sending a name again
replaces that subscription (the server's rule), so the command may be repeated."""

from __future__ import annotations

import os
from typing import Any

import click
from rich.text import Text

from gpupool_cli.errors import ApiError, CliError, NotFound, UsageError
from gpupool_cli.options import current, global_options, no_headers_option
from gpupool_cli.output import parse_duration, table

EVENTS = {"granted": "lease.granted", "expiring": "lease.expiring", "preempted": "lease.preempted",
          "lost": "lease.lost", "idle": "lease.idle", "budget": "budget.warning"}
PATH = "notifications/subscriptions/"


def event_names(text: str) -> list[str]:
    """`granted,preempted` → the API's names, in the order given, once each. A name with a dot
    passes as it is (the server knows its events; it answers 400 naming a wrong one)."""
    names: list[str] = []
    for word in filter(None, (w.strip() for w in text.split(","))):
        expanded = list(EVENTS.values()) if word == "all" else [EVENTS.get(word, word)]
        if not all("." in name for name in expanded):
            raise UsageError(f"unknown event {word!r} (one of: {', '.join(EVENTS)}, all)", code="bad_event")
        names += [name for name in expanded if name not in names]
    if not names:
        raise UsageError("--on names no event, e.g. --on granted,preempted", code="bad_event")
    return names


def _body(on: str, webhook: str | None, email: str | None, secret_env: str | None, name: str,
          granted_after: str | None, expiring_before: str | None) -> dict[str, Any]:
    if (webhook is None) == (email is None):
        raise UsageError("say where to: --webhook URL or --email [ADDR]")
    body: dict[str, Any] = {"name": name, "events": event_names(on)}
    if webhook is not None:
        body.update(kind="webhook", url=webhook)
        if secret_env:
            secret = os.environ.get(secret_env, "")
            if not secret:
                raise UsageError(f"--secret-env {secret_env}: that variable is not set (or empty)", code="no_secret")
            body["secret"] = secret
    else:
        if secret_env:
            raise UsageError("--secret-env signs webhooks; an e-mail has no signature")
        body["kind"] = "email"
        if email:
            body["to"] = [email]  # else the server sends to your own address
    if granted_after:
        body["granted_after_s"] = parse_duration(granted_after)
    if expiring_before:
        body["expiring_before_s"] = parse_duration(expiring_before)
    return body


def _where(sub: dict[str, Any]) -> str:
    return str(sub.get("url") or ", ".join(sub.get("to") or []) or "-")


@click.group("notify", invoke_without_command=True)
@click.option("--on", "on", metavar="EVENTS",
              help="events, comma-separated: granted, expiring, preempted, lost, idle, budget (or all, or the "
                   "API's names: lease.granted, …)")
@click.option("--webhook", metavar="URL", help="POST each event as JSON to this http(s) URL (Slack-compatible)")
@click.option("--secret-env", metavar="VAR",
              help="sign the webhook bodies (X-Gpupool-Signature) with the secret in this environment variable")
@click.option("--email", is_flag=False, flag_value="", default=None, metavar="[ADDR]",
              help="e-mail each event (default: to your own address; another needs a pool admin)")
@click.option("--name", default="default", show_default=True, help="its name: the same name again replaces it")
@click.option("--granted-after", metavar="DURATION", help="granted: only after a wait longer than this (default 60s)")
@click.option("--expiring-before", metavar="DURATION", help="expiring: this long before expiry (default 10m)")
@global_options
@click.pass_context
def cmd_notify(click_ctx: click.Context, on: str | None, webhook: str | None, secret_env: str | None,
               email: str | None, name: str, granted_after: str | None, expiring_before: str | None) -> int:
    """Be told when your leases are granted after a wait, expire soon, are preempted or lost, go
    idle, or your teams' budgets reach 80%/100%: a webhook or an e-mail.

        gpupool notify --on granted,preempted --webhook https://hooks.slack.com/services/T/B/X

    `gpupool notify ls` lists your subscriptions, `gpupool notify rm NAME` removes one."""
    if click_ctx.invoked_subcommand is not None:
        return 0
    if on is None:
        raise UsageError("say which events with --on (e.g. --on granted,preempted), or: notify ls | rm NAME")
    ctx = current()
    body = _body(on, webhook, email, secret_env, name, granted_after, expiring_before)
    existed = any(sub["name"] == name for sub in ctx.client.all(PATH))
    try:
        sub: dict[str, Any] = ctx.client.request("POST", PATH, json=body, idempotent=True)  # a name: safe to repeat
    except ApiError as exc:
        if body["kind"] == "email" and "to" not in body and "to" in exc.details:
            raise CliError("your account has no e-mail address on the server: ask a pool admin to set it",
                           code="no_address") from exc
        raise
    signed = " (signed)" if sub.get("signed") else ""
    ctx.emit(sub, lambda: Text(f"subscription {sub['name']!r} {'replaced' if existed else 'created'}: "
                               f"{sub['kind']} to {_where(sub)}{signed} on {', '.join(sub['events'])}"))
    return 0


@cmd_notify.command("ls")
@no_headers_option
@global_options
def notify_ls() -> int:
    """Your notification subscriptions."""
    ctx = current()
    subs = ctx.client.all(PATH)
    if not subs and not ctx.machine:
        ctx.note("No subscriptions: gpupool notify --on granted,preempted --webhook URL")
        return 0
    rows = [[s["name"], s["kind"], _where(s), ",".join(s["events"]), "yes" if s.get("signed") else "no",
             "yes" if s.get("enabled", True) else f"no: {s.get('disabled_reason') or '?'}"] for s in subs]
    ctx.emit(subs, lambda: table(["NAME", "KIND", "TO", "EVENTS", "SIGNED", "ENABLED"], rows,
                                 headers=not ctx.no_headers))
    return 0


@cmd_notify.command("rm")
@click.argument("name")
@global_options
def notify_rm(name: str) -> int:
    """Remove your subscription NAME (its delivery log stays)."""
    ctx = current()
    found = [sub for sub in ctx.client.all(PATH) if sub["name"] == name]
    if not found:
        raise NotFound(f"no subscription {name!r} of yours (gpupool notify ls lists them)")
    ctx.client.request("DELETE", f"{PATH}{found[0]['id']}/", idempotent=True)
    if not ctx.machine:
        ctx.note(f"removed subscription {name!r}")
    return 0


COMMANDS = (cmd_notify,)
