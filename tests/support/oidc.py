"""A real OpenID Provider on 127.0.0.1 for the single sign-on tests: node-oidc-provider, a certified
OpenID Connect implementation (discovery, JWKS, authorization code with PKCE, userinfo, the device
authorization grant), run by `tests/support/oidc_provider/provider.mjs` with its own login page.

`install()` puts the package (the version the committed package-lock.json pins) under
var/oidc-provider with the machine's npm, once; scripts/test.sh runs it before the suite
(`python -m tests.support.oidc install`) and the fixture runs it again if needed. Where node or
npm is missing, or the registry cannot be reached, the tests skip and say so.

`OidcProvider` runs one provider process, its users in a JSON file the provider re-reads at each
login: `set_groups()` changes a user's groups "at the IdP" between two logins.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stacktools.processes import Proc, log_says
from stacktools.ready import free_port

REPO = Path(__file__).resolve().parents[2]
SOURCE = Path(__file__).with_name("oidc_provider")
INSTALL_DIR = REPO / "var" / "oidc-provider"  # git-ignored; kept between runs, so npm runs once
FILES = ("package.json", "package-lock.json", "provider.mjs")
MIN_NODE = 20
CLIENT_ID = "gpupool"
CLIENT_SECRET = "gpupool-test-secret"
SCOPES = "openid profile email groups"


def missing_reason() -> str | None:
    """Why the provider cannot run here (node or npm absent, node too old), or None."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        return "node and npm are needed for the test OpenID Provider (apt-get install nodejs npm)"
    version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    try:
        major = int(version.lstrip("v").split(".")[0])
    except ValueError:
        return f"node --version said {version!r}"
    if major < MIN_NODE:
        return f"node {version} is older than the {MIN_NODE}.x that oidc-provider 9 needs"
    return None


def install() -> Path:
    """The provider's folder with its node_modules (npm ci when the lock file changed). Raises
    RuntimeError with npm's output when the install fails."""
    INSTALL_DIR.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        shutil.copyfile(SOURCE / name, INSTALL_DIR / name)
    stamp = INSTALL_DIR / ".installed"
    digest = hashlib.sha256((SOURCE / "package-lock.json").read_bytes()).hexdigest()
    if stamp.exists() and stamp.read_text() == digest and (INSTALL_DIR / "node_modules" / "oidc-provider").is_dir():
        return INSTALL_DIR
    done = subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=INSTALL_DIR,
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"npm ci failed in {INSTALL_DIR}:\n{done.stdout}\n{done.stderr}")
    stamp.write_text(digest)
    return INSTALL_DIR


def installed_or_skip() -> Path:
    """install(), or skip the test saying why it cannot run here."""
    reason = missing_reason()
    if reason:
        pytest.skip(f"single sign-on tier skipped: {reason}")
    try:
        return install()
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"single sign-on tier skipped: the test OpenID Provider could not be installed: {exc}")


class OidcProvider:
    """One provider process on a free port. `users`: login → {password, sub, claims}."""

    def __init__(self, folder: Path, *, redirect_uris: list[str], users: dict[str, dict[str, Any]]) -> None:
        self.folder = folder
        self.port = free_port()
        self.issuer = f"http://127.0.0.1:{self.port}"
        self.users_file = folder / "users.json"
        self.users = users
        self.redirect_uris = redirect_uris
        self._process: Proc | None = None

    def settings(self) -> dict[str, Any]:
        """The OIDC settings of a gpupool that uses this provider."""
        return {"ISSUER": self.issuer, "CLIENT_ID": CLIENT_ID, "CLIENT_SECRET": CLIENT_SECRET, "SCOPES": SCOPES,
                "REDIRECT_URI": None, "LABEL": "SSO", "TIMEOUT_S": 10, "TOKEN_DAYS": 7, "RATE": "1000/min"}

    def write_users(self) -> None:
        self.users_file.write_text(json.dumps(self.users))

    def set_groups(self, login: str, groups: list[str]) -> None:
        """Change `login`'s groups at the provider (seen at its next login)."""
        self.users[login]["claims"]["groups"] = groups
        self.write_users()

    def start(self, install_dir: Path) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.write_users()
        config = self.folder / "config.json"
        config.write_text(json.dumps({
            "issuer": self.issuer, "port": self.port, "users_file": str(self.users_file),
            "clients": [{"client_id": CLIENT_ID, "client_secret": CLIENT_SECRET, "client_name": "gpupool",
                         "redirect_uris": self.redirect_uris, "response_types": ["code"],
                         "grant_types": ["authorization_code", "urn:ietf:params:oauth:grant-type:device_code"],
                         "token_endpoint_auth_method": "client_secret_basic"}]}))
        self._process = Proc("test OpenID Provider", ["node", str(install_dir / "provider.mjs"), str(config)],
                             dict(os.environ), self.folder / "provider.log", log_says(f"listening {self.issuer}"))
        self._process.start(timeout=30)

    def stop(self) -> None:
        if self._process is not None:
            self._process.stop(timeout=5)


@pytest.fixture(scope="session")
def oidc_provider(live_server: Any, tmp_path_factory: Any) -> Iterator[OidcProvider]:
    """A running provider whose client `gpupool` may return to the live server's callback; users
    alice (group ml-vision) and root (gpu-admins), passwords "pw-<login>"."""
    install_dir = installed_or_skip()
    users = {login: {"password": f"pw-{login}", "sub": f"sub-{login}-0001",
                     "claims": {"preferred_username": login, "email": f"{login}@example.org",
                                "email_verified": True, "name": login.title(), "groups": groups}}
             for login, groups in (("alice", ["ml-vision"]), ("root", ["gpu-admins"]))}
    provider = OidcProvider(tmp_path_factory.mktemp("oidc"), users=users,
                            redirect_uris=[f"{live_server.url}/login/sso/callback/"])
    provider.start(install_dir)
    try:
        yield provider
    finally:
        provider.stop()


if __name__ == "__main__":  # scripts/test.sh: `python -m tests.support.oidc install`
    if sys.argv[1:] != ["install"]:
        sys.exit("usage: python -m tests.support.oidc install")
    why = missing_reason()
    if why:
        sys.exit(why)
    try:
        print(f"test OpenID Provider installed in {install()}")
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        sys.exit(str(exc))
