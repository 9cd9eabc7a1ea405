"""The real sentry-cli (PyPI's `sentry-cli`) uploading Apple debug files to a real crash-server
(apple.md, "`sentry-cli` works unchanged").

    python test_sentry_cli.py PATH/TO/crash-server PATH/TO/sentry-cli   (DATABASE_URL in the environment)

Starts crash-server on a free loopback port, creates a project, and runs
`sentry-cli debug-files upload --wait` with the read token on the fixtures of
Tests/Fixtures/apple/debug-files: the fat executable (sentry-cli splits it per architecture)
and the dSYM bundle. Then checks through the REST upload that the server holds each debug id
(re-uploading the same files is `unchanged`, the dSYM's DWARF included), that a second
sentry-cli run has nothing to upload, and that another project's slug is refused. Then the same
upload with an API token (accounts.md: `debug-files:write`, limited to one project) made by a
user signed in from a `crash-server user create` set-up link, and a token without that scope
refused.
Run by scripts/test.d/22-sentry-cli.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import http.cookiejar
import re
import time
import urllib.parse
import urllib.request
import zipfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from crash_server_process import free_port, stop, wait_ready  # noqa: E402

SERVER, CLI = sys.argv[1], sys.argv[2]
FIXTURES = os.path.join(os.path.dirname(__file__), "..", "Fixtures", "apple", "debug-files")


def log(*args):
    print("[sentry-cli]", *args, flush=True)


def rest_upload(base, slug, token, path):
    request = urllib.request.Request(
        f"{base}/v1/projects/{slug}/debug-files?name={os.path.basename(path)}", data=open(path, "rb").read(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/octet-stream"}, method="POST")
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.status, json.load(response)


def cli(base, token, slug, *paths):
    env = dict(os.environ, SENTRY_LOAD_DOTENV="0", SENTRY_DISABLE_UPDATE_CHECK="1", HOME=tempfile.gettempdir())
    env.pop("SENTRY_AUTH_TOKEN", None)
    command = [CLI, "--url", base, "--auth-token", token, "--log-level", "info", "debug-files", "upload", "--org", "any-org",
               "--project", slug, "--wait", *paths]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


def api_token(base, env, scopes, project):
    """A `cgt_` token of a new server admin: set-up link, password, then POST /v1/tokens signed in."""
    email = f"cli-{os.getpid()}-{time.monotonic_ns()}@example.com"
    made = subprocess.run([SERVER, "user", "create", email, "--admin"], env=env, check=True, capture_output=True, text=True)
    setup = urllib.parse.urlsplit(json.loads(made.stdout)["setupUrl"]).path
    browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    page = browser.open(base + setup, timeout=30).read().decode()
    csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)
    form = urllib.parse.urlencode({"csrf": csrf, "password": "correct horse battery staple"}).encode()
    browser.open(base + setup, data=form, timeout=30).read()
    body = json.dumps({"name": "sentry-cli", "scopes": scopes, "projects": [project]}).encode()
    request = urllib.request.Request(base + "/v1/tokens", data=body, method="POST", headers={"Content-Type": "application/json"})
    with browser.open(request, timeout=30) as response:
        return json.load(response)["token"]


def main():
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = dict(os.environ, CRASHGUARD_PUBLIC_URL=base, CRASHGUARD_RATE_LIMIT="0", CRASHGUARD_LOG_LEVEL="warning")
    projects = []
    for slug in ("apple-cli", "apple-other", "apple-token"):
        created = subprocess.run([SERVER, "project", "create", slug], env=env, check=True, capture_output=True, text=True)
        projects.append(json.loads(created.stdout))
    project, other, tokens = projects
    slug, token = project["project"], project["readToken"]
    work = tempfile.mkdtemp()
    server = subprocess.Popen([SERVER, "serve", "--port", str(port)], env=env)
    try:
        wait_ready(base, server)
        started = time.monotonic()
        with zipfile.ZipFile(os.path.join(FIXTURES, "Crashy.dSYM.zip")) as z:
            z.extractall(work)
        fat = os.path.join(work, "Crashy")
        shutil.copy(os.path.join(FIXTURES, "Crashy-fat"), fat)
        dsym = os.path.join(work, "Crashy.dSYM")

        done = cli(base, token, slug, fat, dsym)
        log("upload:", done.returncode, done.stdout.strip()[-600:], done.stderr.strip()[-600:])
        assert done.returncode == 0, "sentry-cli debug-files upload failed"

        # The server holds each architecture of the fat file and the dSYM's DWARF.
        for name, outcome in (("Crashy-x86_64", "unchanged"), ("Crashy-arm64", "unchanged"), ("Crashy.dSYM.zip", "unchanged")):
            status, body = rest_upload(base, slug, token, os.path.join(FIXTURES, name))
            assert (status, body["outcome"]) == (200, outcome), (name, status, body)
        status, body = rest_upload(base, slug, token, os.path.join(FIXTURES, "Crashy.dSYM.zip"))
        assert body["file"]["hasDebugInfo"] is True, body

        again = cli(base, token, slug, fat, dsym)
        log("again:", again.returncode, again.stdout.strip()[-300:], again.stderr.strip()[-300:])
        assert again.returncode == 0, "a second upload of the same files failed"
        assert "Nothing to upload" in again.stdout + again.stderr, again.stdout

        # Another project's slug with this token: refused, and sentry-cli says so.
        refused = cli(base, token, other["project"], fat)
        log("other project:", refused.returncode, refused.stderr.strip()[-300:])
        assert refused.returncode != 0, "another project's slug was accepted"

        # An API token with debug-files:write for one project: the chunks go to that project.
        secret = api_token(base, env, ["debug-files:write"], tokens["project"])
        assert secret.startswith("cgt_"), secret
        with_token = cli(base, secret, tokens["project"], fat)
        log("api token:", with_token.returncode, with_token.stdout.strip()[-300:], with_token.stderr.strip()[-300:])
        assert with_token.returncode == 0, "sentry-cli with an API token failed"
        for name in ("Crashy-x86_64", "Crashy-arm64"):
            status, body = rest_upload(base, tokens["project"], tokens["readToken"], os.path.join(FIXTURES, name))
            assert (status, body["outcome"]) == (200, "unchanged"), (name, status, body)
        read_only = api_token(base, env, ["project:read"], tokens["project"])
        scopeless = cli(base, read_only, tokens["project"], dsym)
        log("token without debug-files:write:", scopeless.returncode, scopeless.stderr.strip()[-300:])
        assert scopeless.returncode != 0, "a token without debug-files:write uploaded"
        log(f"ok in {time.monotonic() - started:.1f} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        stop(server)


if __name__ == "__main__":
    main()
