"""The real sentry-cli (PyPI's `sentry-cli`) uploading Apple debug files to a real crash-server
(apple.md, "`sentry-cli` works unchanged").

    python test_sentry_cli.py PATH/TO/crash-server PATH/TO/sentry-cli   (DATABASE_URL in the environment)

Starts crash-server on a free loopback port, creates a project, and runs
`sentry-cli debug-files upload --wait` with the read token on the fixtures of
Tests/Fixtures/apple/debug-files: the fat executable (sentry-cli splits it per architecture)
and the dSYM bundle. Then checks through the REST upload that the server holds each debug id
(re-uploading the same files is `unchanged`, the dSYM's DWARF included), that a second
sentry-cli run has nothing to upload, and that another project's slug is refused.
Run by scripts/test.d/22-sentry-cli.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
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


def main():
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = dict(os.environ, CRASHGUARD_PUBLIC_URL=base, CRASHGUARD_RATE_LIMIT="0", CRASHGUARD_LOG_LEVEL="warning")
    projects = []
    for slug in ("apple-cli", "apple-other"):
        created = subprocess.run([SERVER, "project", "create", slug], env=env, check=True, capture_output=True, text=True)
        projects.append(json.loads(created.stdout))
    project, other = projects
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
        log(f"ok in {time.monotonic() - started:.1f} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        stop(server)


if __name__ == "__main__":
    main()
