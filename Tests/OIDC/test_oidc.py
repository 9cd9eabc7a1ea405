"""Single sign-on against a real OpenID Connect provider (accounts.md, "Single sign-on").

    python test_oidc.py PATH/TO/crash-server PATH/TO/venv-python   (DATABASE_URL in the environment)

Starts PyPI's `oidc-provider-mock` (a real provider: discovery, JWKS, authorization form,
token endpoint, RS256 ID tokens) and a crash-server configured for it, both on loopback,
and drives the browser's part with an HTTP client that keeps each site's cookies, follows the
redirects by hand and posts the provider's form:

- a first sign-in by a person of an allowed domain creates the user, a viewer of every project
  (CRASHGUARD_OIDC_DEFAULT_ROLE), and signs the dashboard in as that user (the authorization
  request carries PKCE S256, state and nonce);
- a person of another domain is refused with a page saying so, and gets no account;
- a forged `state`, a callback without the browser's binding cookie, a replayed callback and
  a used code under a fresh state are refused;
- every sign-in, refusal and failure is in the audit log;
- a provider that accepts connections but never answers gives an error page within the
  server's bound, not a hang.
Run by scripts/test.d/25-oidc.
"""
import html.parser
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from crash_server_process import free_port, stop, wait_answer, wait_ready  # noqa: E402

SERVER, PYTHON = sys.argv[1], sys.argv[2]
CLIENT_ID, CLIENT_SECRET = "crashguard-test", "s3cret-for-the-mock-provider"


def log(*args):
    print("[oidc]", *args, flush=True)


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


OPENER = urllib.request.build_opener(NoRedirect)


class Browser:
    """Cookies per host:port (enough here: each site sets only host cookies), redirects by hand."""

    def __init__(self):
        self.jars = {}

    def request(self, url, data=None, method=None):
        origin = urllib.parse.urlsplit(url).netloc
        jar = self.jars.setdefault(origin, {})
        headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in jar.items())} if jar else {}
        body = urllib.parse.urlencode(data).encode() if data is not None else None
        if body is not None:
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        request = urllib.request.Request(url, data=body, headers=headers, method=method)
        try:
            response = OPENER.open(request, timeout=30)
        except urllib.error.HTTPError as error:
            response = error
        text = response.read().decode("utf-8", "replace")
        for header in response.headers.get_all("Set-Cookie") or []:
            name, _, rest = header.partition("=")
            value = rest.split(";", 1)[0]
            if "max-age=0" in header.lower() or not value:
                jar.pop(name.strip(), None)
            else:
                jar[name.strip()] = value
        return response.status, response.headers, text

    def follow(self, url, data=None, stop_at=None, limit=10):
        """Requests `url` and follows redirects until an answer that is not one, or a URL starting with `stop_at`."""
        for _ in range(limit):
            status, headers, text = self.request(url, data)
            data = None
            if status not in (301, 302, 303, 307, 308):
                return url, status, text
            url = urllib.parse.urljoin(url, headers["Location"])
            if stop_at and url.startswith(stop_at):
                return url, status, text
        raise AssertionError("too many redirects")


class FormParser(html.parser.HTMLParser):
    """The provider's forms: action and the names of their inputs."""

    def __init__(self):
        super().__init__()
        self.forms = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "form":
            self.forms.append({"action": attrs.get("action"), "method": attrs.get("method", "get"), "inputs": []})
        elif tag == "input" and self.forms:
            self.forms[-1]["inputs"].append(attrs.get("name"))


def provider_approves(browser, authorize_url, sub, callback_prefix):
    """The person at the provider: opens the authorization page and posts its form as `sub`; returns the callback URL."""
    url, status, text = browser.follow(authorize_url)
    assert status == 200, (status, text[:400])
    parser = FormParser()
    parser.feed(text)
    form = next(f for f in parser.forms if "sub" in f["inputs"])
    action = urllib.parse.urljoin(url, form["action"] or url)
    callback, status, _ = browser.follow(action, data={"sub": sub}, stop_at=callback_prefix)
    assert callback.startswith(callback_prefix), (callback, status)
    return callback


def start_sign_in(browser, base):
    """`GET /dashboard/sso/start` on the crash-server: the provider's authorization URL and its parameters."""
    status, headers, text = browser.request(base + "/dashboard/sso/start")
    assert status == 302, (status, text[:400])
    location = headers["Location"]
    return location, dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(location).query))


def sign_in(browser, base, sub):
    location, params = start_sign_in(browser, base)
    callback = provider_approves(browser, location, sub, base + "/dashboard/sso/callback")
    status, _, text = browser.request(callback)
    return callback, params, status, text


def put_user(provider, sub, claims):
    request = urllib.request.Request(
        f"{provider}/users/{urllib.parse.quote(sub)}", data=json.dumps(claims).encode(), method="PUT",
        headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 204


def silent_provider():
    """A provider that accepts connections and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held = []

    def accept():
        while True:
            try:
                held.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    return listener, f"http://127.0.0.1:{listener.getsockname()[1]}"


def audit_entries():
    """(action, target) of the audit log's sso entries, through psql (scripts/postgres)."""
    out = subprocess.run(
        ["scripts/postgres", "psql", "-d", os.environ["DATABASE_URL"], "-tA", "-F", "|", "-c",
         "SELECT action, coalesce(target, '') FROM audit_log WHERE action LIKE 'sso.%' ORDER BY id"],
        check=True, capture_output=True, text=True).stdout
    return [tuple(line.split("|", 1)) for line in out.splitlines() if line]


def serve(issuer, **extra):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = dict(
        os.environ, CRASHGUARD_PUBLIC_URL=base, CRASHGUARD_LOG_LEVEL="warning", CRASHGUARD_OIDC_ISSUER=issuer,
        CRASHGUARD_OIDC_CLIENT_ID=CLIENT_ID, CRASHGUARD_OIDC_CLIENT_SECRET=CLIENT_SECRET, **extra)
    server = subprocess.Popen([SERVER, "serve", "--port", str(port)], env=env)
    wait_ready(base, server)
    return server, base, env


def main():
    provider_port = free_port()
    provider = f"http://127.0.0.1:{provider_port}"
    mock = subprocess.Popen([PYTHON, "-m", "oidc_provider_mock", "--port", str(provider_port), "--require-nonce"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    servers = []
    try:
        wait_answer(provider + "/.well-known/openid-configuration", mock, "oidc-provider-mock")
        put_user(provider, "ada", {"email": "ada@allowed.example", "email_verified": True, "name": "Ada Lovelace"})
        put_user(provider, "eve", {"email": "eve@other.example", "email_verified": True, "name": "Eve"})
        server, base, env = serve(
            provider, CRASHGUARD_OIDC_ALLOWED_DOMAINS="allowed.example", CRASHGUARD_OIDC_DEFAULT_ROLE="viewer")
        servers.append(server)
        subprocess.run([SERVER, "project", "create", "oidc-app"], env=env, check=True, capture_output=True)

        # First sign-in of a person of an allowed domain: the user is created, the dashboard signed in.
        ada = Browser()
        _, status, page = ada.follow(base + "/")
        assert status == 200 and 'href="/dashboard/sso/start" id="sso-link"' in page, "the sign-in page offers no SSO"
        callback, params, status, text = sign_in(ada, base, "ada")
        assert params["code_challenge_method"] == "S256" and len(params["code_challenge"]) == 43, params
        assert params["scope"] == "openid email profile" and params["client_id"] == CLIENT_ID, params
        assert len(params["state"]) == 43 and len(params["nonce"]) == 43, params
        assert params["redirect_uri"] == base + "/dashboard/sso/callback", params
        assert status == 200 and 'id="signed-in"' in text, (status, text[:600])
        assert "cg_session" in ada.jars[urllib.parse.urlsplit(base).netloc], ada.jars
        users = subprocess.run([SERVER, "user", "list"], env=env, check=True, capture_output=True, text=True).stdout
        assert "ada@allowed.example" in users, users
        url, status, page = ada.follow(base + "/")
        assert status == 200 and ("ada@allowed.example" in page or "Ada Lovelace" in page), (url, status, page[:800])
        assert 'name="password"' not in page, "the dashboard shows the sign-in form, not the signed-in user"
        # CRASHGUARD_OIDC_DEFAULT_ROLE: the new user is a viewer of every project.
        assert "/projects/oidc-app" in page, page[:800]
        url, status, page = ada.follow(base + "/projects/oidc-app/crashes")
        assert status == 200 and url.endswith("/projects/oidc-app/crashes"), (url, status, page[:400])
        log("first sign-in by an allowed domain: signed in as ada@allowed.example, viewer of oidc-app")

        # A replayed callback (same state and code): the sign-in was used up.
        status, _, text = ada.request(callback)
        assert status == 400 and "expired, was already used" in text, (status, text[:400])
        # The used code under a fresh state of the same browser: the provider refuses it.
        location, params = start_sign_in(ada, base)
        code = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(callback).query))["code"]
        status, _, text = ada.request(f"{base}/dashboard/sso/callback?code={code}&state={params['state']}")
        assert status == 400 and "invalid_grant" in text, (status, text[:400])
        log("replayed callback and replayed code refused")

        # A person of another domain: refused, with a page saying why; no account made.
        eve = Browser()
        _, _, status, text = sign_in(eve, base, "eve")
        assert status == 403 and "no account for eve@other.example" in text.lower(), (status, text[:600])
        assert "cg_session" not in eve.jars.get(urllib.parse.urlsplit(base).netloc, {}), eve.jars
        users = subprocess.run([SERVER, "user", "list"], env=env, check=True, capture_output=True, text=True).stdout
        assert "eve@other.example" not in users, users
        log("another domain refused")

        # A forged state: the provider's code arrives with a state the server never issued.
        mallory = Browser()
        location, params = start_sign_in(mallory, base)
        callback = provider_approves(mallory, location, "ada", base + "/dashboard/sso/callback")
        query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(callback).query))
        forged = f"{base}/dashboard/sso/callback?code={query['code']}&state=" + "A" * 43
        status, _, text = mallory.request(forged)
        assert status == 400 and "cg_session" not in mallory.jars[urllib.parse.urlsplit(base).netloc], (status, text[:400])
        # The real callback opened in another browser (no binding cookie): refused, and used up.
        victim = Browser()
        status, _, text = victim.request(callback)
        assert status == 400 and "started in another browser" in text, (status, text[:400])
        status, _, text = mallory.request(callback)
        assert status == 400, (status, text[:400])
        log("forged state and foreign browser refused")

        # The provider's own refusal (the person pressed "Deny").
        denier = Browser()
        location, _ = start_sign_in(denier, base)
        url, status, text = denier.follow(location)
        deny, status, _ = denier.follow(url, data={"action": "deny"}, stop_at=base)
        status, _, text = denier.request(deny)
        assert status == 400 and "access_denied" in text, (status, text[:400])
        log("provider's refusal shown")

        # Each sign-in and refusal is in the audit log.
        audit = audit_entries()
        assert ("sso.sign-in", "ada@allowed.example") in audit, audit
        assert ("sso.sign-in-refused", "eve@other.example") in audit, audit
        assert sum(1 for action, _ in audit if action == "sso.sign-in-failed") >= 5, audit
        log("audit log: sign-ins, refusals and failures recorded")

        # A provider that never answers: an error page within the bound (10 s per exchange).
        listener, silent = silent_provider()
        try:
            server2, base2, _ = serve(silent)
            servers.append(server2)
            started = time.monotonic()
            status, _, text = Browser().request(base2 + "/dashboard/sso/start")
            took = time.monotonic() - started
            assert status == 504 and "did not answer in time" in text and took < 25, (status, took, text[:400])
            log(f"silent provider: 504 after {took:.1f} s")
        finally:
            listener.close()
    finally:
        for server in servers:
            stop(server)
        mock.terminate()
        mock.wait(timeout=30)
    print("oidc: 8 passed, 0 failed")


if __name__ == "__main__":
    main()
