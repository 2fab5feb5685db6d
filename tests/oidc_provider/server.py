"""Start the test OpenID provider in a second process on a free port (uvicorn), with an RSA
signing key generated here, and drive it: its users and groups (its management command), and
a browser's part of the authorization-code flow (the provider's login form, then its redirect
back to the portal)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urljoin

import httpx
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.conftest import free_port, wait_for

ROOT = Path(__file__).resolve().parents[2]
CLIENT_ID = "spark-portal"
CLIENT_SECRET = "test-client-secret-0123456789"  # the test provider's only client; not a real secret
PORTAL_CALLBACK = "http://testserver/oidc/callback/"  # the portal under Django's test client


class Provider:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.issuer = f"{self.url}/o"
        self.process: subprocess.Popen[bytes] | None = None
        self.log = directory / "provider.log"

    def environment(self) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items() if not key.startswith(("PORTAL_", "DJANGO_"))}
        env.update(DJANGO_SETTINGS_MODULE="tests.oidc_provider.settings", OIDC_PROVIDER_DIR=str(self.directory),
                   OIDC_PROVIDER_ISSUER=self.issuer, PYTHONPATH=str(ROOT))
        return env

    def manage(self, *args: str) -> None:
        result = subprocess.run([sys.executable, "-m", "django", *args], cwd=ROOT, env=self.environment(),
                                capture_output=True, text=True, timeout=120, check=False)
        assert result.returncode == 0, f"provider {args[0]} failed: {result.stderr[-3000:]}"

    def start(self) -> Provider:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        (self.directory / "signing-key.pem").write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        self.manage("migrate", "--noinput", "-v", "0")
        self.manage("provider_client", "--client-id", CLIENT_ID, "--client-secret", CLIENT_SECRET,
                    "--redirect-uri", PORTAL_CALLBACK)
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "uvicorn", "tests.oidc_provider.asgi:application", "--host", "127.0.0.1",
                 "--port", str(self.port), "--log-level", "warning", "--lifespan", "off"],
                cwd=ROOT, env=self.environment(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        wait_for(self._answers, timeout=120, interval=0.2, what="the test OpenID provider to answer")
        return self

    def _answers(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"the test OpenID provider exited: {self.log.read_text(errors='replace')[-3000:]}")
        try:
            return httpx.get(f"{self.issuer}/.well-known/openid-configuration", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)

    def allow_redirect(self, uri: str) -> None:
        """Register the portal's callback at another address too (a live server's)."""
        self.manage("provider_client", "--client-id", CLIENT_ID, "--client-secret", CLIENT_SECRET,
                    "--redirect-uri", f"{PORTAL_CALLBACK} {uri}")

    def user(self, username: str, *, groups: list[str], email: str = "", password: str = "provider-pass-123") -> None:
        self.manage("provider_user", username, "--password", password, "--email", email, "--groups", ",".join(groups))

    def portal_settings(self) -> dict[str, object]:
        """The portal's settings for this provider, as docs/configuration.md names them."""
        return {"OIDC_ENABLED": True, "OIDC_PROVIDER_NAME": "Test IdP", "OIDC_RP_CLIENT_ID": CLIENT_ID,
                "OIDC_RP_CLIENT_SECRET": CLIENT_SECRET, "OIDC_ISSUER": self.issuer,
                "OIDC_OP_AUTHORIZATION_ENDPOINT": f"{self.issuer}/authorize/",
                "OIDC_OP_TOKEN_ENDPOINT": f"{self.issuer}/token/",
                "OIDC_OP_USER_ENDPOINT": f"{self.issuer}/userinfo/", "OIDC_OP_JWKS_ENDPOINT": f"{self.issuer}/.well-known/jwks.json"}

    def authorize(self, authorize_url: str, username: str, password: str = "provider-pass-123") -> str:
        """A browser at the provider: the authorization request, its login form, and back; the
        URL the provider sends the browser to (the portal's callback with code and state)."""
        with httpx.Client(timeout=30) as browser:
            url = authorize_url
            for _ in range(10):
                response = browser.get(url)
                if response.status_code == 200 and 'name="password"' in response.text:
                    response = browser.post(str(response.url), data={
                        "username": username, "password": password,
                        "csrfmiddlewaretoken": browser.cookies["provider_csrftoken"],
                        "next": response.url.params.get("next", "")})
                assert response.status_code == 302, f"provider answered {response.status_code}: {response.text[:500]}"
                url = urljoin(str(response.url), response.headers["location"])
                if url.startswith("http://testserver/"):
                    return url
        raise AssertionError("the provider never sent the browser back to the portal")
