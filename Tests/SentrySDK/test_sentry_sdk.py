"""The real Sentry Python SDK against a real crash-server (issue 15).

    python test_sentry_sdk.py PATH/TO/crash-server      (DATABASE_URL in the environment)

Starts crash-server on a free loopback port, creates a project with `crash-server project
create`, points `sentry_sdk.init` at the printed DSN, and sends what an app sends: handled
exceptions from two users, messages, and (from a child process) an uncaught exception.
Then it checks through the query API (GET /v1/projects/{p}/crashes and the group's reports)
that each landed as the contract's "Ingest from Sentry SDKs" section maps it: one group per
bug, devices from set_user, app id, version and build from the release, fatal only for the
uncaught one. Then two app runs report release health in application mode, one exiting
cleanly and one crashing, and both show up in GET /v1/projects/{p}/releases.
Run by scripts/test.d/20-sentry-sdk.
"""
import json
import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from crash_server_process import free_port, stop, wait_ready  # noqa: E402

SERVER = sys.argv[1]
RELEASE = "com.example.shop@3.2.1+99"


def log(*args):
    print("[sentry-sdk]", *args, flush=True)


def get(base, path, token):
    request = urllib.request.Request(base + path, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def divide(a, b):
    return a / b


def checkout(order):
    return divide(order, 0)


def send_events(dsn):
    import sentry_sdk

    sentry_sdk.init(dsn=dsn, release=RELEASE, environment="staging", default_integrations=True)
    sentry_sdk.set_tag("region", "eu")
    for user in ["py-user-1", "py-user-2", "py-user-1"]:
        sentry_sdk.set_user({"id": user})
        try:
            checkout(7)
        except ZeroDivisionError as error:
            event_id = sentry_sdk.capture_exception(error)
            assert event_id, "capture_exception returned no event id"
    sentry_sdk.set_user({"id": "py-user-3"})
    sentry_sdk.capture_message("Payment failed for order 1234")
    sentry_sdk.capture_message("Payment failed for order 5678")
    sentry_sdk.flush(timeout=15)


UNCAUGHT = """
import sys, sentry_sdk
sentry_sdk.init(dsn=sys.argv[1], release=sys.argv[2])
sentry_sdk.set_user({"id": "py-user-4"})
def explode():
    raise RuntimeError("inventory service unavailable")
explode()
"""


# Release health in application mode (release-health.md): one run that exits cleanly and
# one that dies of an uncaught exception, each in its own process, as apps report them.
SESSION_EXITED = """
import sys, sentry_sdk
sentry_sdk.init(dsn=sys.argv[1], release=sys.argv[2], environment="production")
sentry_sdk.set_user({"id": "session-user-1"})
scope = sentry_sdk.get_isolation_scope()
scope.start_session(session_mode="application")
scope.end_session()
sentry_sdk.flush(timeout=15)
"""

SESSION_CRASHED = """
import sys, sentry_sdk
sentry_sdk.init(dsn=sys.argv[1], release=sys.argv[2], environment="production")
sentry_sdk.set_user({"id": "session-user-2"})
sentry_sdk.get_isolation_scope().start_session(session_mode="application")
def explode():
    raise RuntimeError("session ends in a crash")
explode()
"""

SESSION_RELEASE = "com.example.shop@4.0.0+7"


def send_sessions(dsn):
    for script in [SESSION_EXITED, SESSION_CRASHED]:
        subprocess.run([sys.executable, "-c", script, dsn, SESSION_RELEASE], capture_output=True, timeout=60)


def check_sessions(base, project):
    slug, token = project["project"], project["readToken"]
    release = None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        releases = get(base, f"/v1/projects/{slug}/releases?app=com.example.shop", token)["releases"]
        release = next((r for r in releases if r["version"] == "4.0.0"), None)
        if release and release["sessions"] >= 2 and release["crashedSessions"] >= 1:
            break
        time.sleep(0.3)
    log("release", json.dumps(release))
    assert release, "no release 4.0.0 in GET .../releases"
    assert (release["sessions"], release["crashedSessions"], release["erroredSessions"]) == (2, 1, 0), release
    assert (release["users"], release["crashedUsers"]) == (2, 1), release
    assert release["crashFreeSessions"] == 0.5 and release["crashFreeUsers"] == 0.5, release
    detail = get(base, f"/v1/projects/{slug}/releases/4.0.0?app=com.example.shop&environment=production", token)
    assert detail["sessions"] == 2 and sum(p["crashed"] for p in detail["series"]) == 1, detail
    assert [g["title"] for g in detail["newGroups"]] == ["RuntimeError: session ends in a crash"], detail["newGroups"]


def main():
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = dict(os.environ, CRASHGUARD_PUBLIC_URL=base, CRASHGUARD_RATE_LIMIT="0", CRASHGUARD_LOG_LEVEL="warning")
    created = subprocess.run([SERVER, "project", "create", "sdk-python"], env=env, check=True, capture_output=True, text=True)
    project = json.loads(created.stdout)
    dsn = project["sentryDsn"]
    parsed = urllib.parse.urlsplit(dsn)
    assert parsed.username == project["ingestKey"], dsn
    assert (parsed.hostname, parsed.port, parsed.path) == ("127.0.0.1", port, f"/{project['sentryId']}"), dsn
    log("DSN", dsn.replace(project["ingestKey"], "<ingestKey>"))

    server = subprocess.Popen([SERVER, "serve", "--port", str(port)], env=env)
    try:
        wait_ready(base, server)
        started = time.monotonic()
        send_events(dsn)
        # An uncaught exception: the SDK's excepthook reports it (handled: false) before exit.
        subprocess.run([sys.executable, "-c", UNCAUGHT, dsn, RELEASE], capture_output=True, timeout=60)
        check(base, project)
        send_sessions(dsn)
        check_sessions(base, project)
        log(f"ok in {time.monotonic() - started:.1f} s")
    finally:
        stop(server)


def check(base, project):
    slug, token = project["project"], project["readToken"]
    groups = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        groups = get(base, f"/v1/projects/{slug}/crashes", token)["groups"]
        if sum(g["count"] for g in groups) >= 6:
            break
        time.sleep(0.3)
    by_title = {g["title"]: g for g in groups}
    log("groups", json.dumps([(g["title"], g["kind"], g["count"], g["devices"], g["fatal"]) for g in groups]))

    division = by_title.get("ZeroDivisionError: division by zero")
    assert division, f"no ZeroDivisionError group in {list(by_title)}"
    assert (division["kind"], division["count"], division["devices"], division["fatal"]) == ("exception", 3, 2, False), division
    assert division["versions"] == ["3.2.1"], division

    message = by_title.get("Payment failed for order <n>")
    assert message, f"the two messages did not group as one: {list(by_title)}"
    assert (message["kind"], message["count"], message["devices"]) == ("custom", 2, 1), message

    uncaught = by_title.get("RuntimeError: inventory service unavailable")
    assert uncaught, f"the uncaught exception did not land: {list(by_title)}"
    assert (uncaught["count"], uncaught["fatal"]) == (1, True), uncaught
    assert len(groups) == 3, f"unexpected groups: {list(by_title)}"

    reports = get(base, f"/v1/projects/{slug}/crashes/{division['id']}/reports", token)["reports"]
    assert len(reports) == 3, reports
    for report in reports:
        assert report["app"] == {"id": "com.example.shop", "version": "3.2.1", "build": "99"}, report["app"]
        assert report["device"]["id"] in {"py-user-1", "py-user-2"}, report["device"]
        assert report["fatal"] is False, report
        # Innermost first, the script's own frames (in_app) named by module.
        assert report["stack"][:3] == ["divide (__main__)", "checkout (__main__)", "send_events (__main__)"], report["stack"]
        assert report["context"]["environment"] == "staging" and report["context"]["region"] == "eu", report["context"]
        assert len(report["id"]) == 36, report["id"]
    assert sorted(r["device"]["id"] for r in reports) == ["py-user-1", "py-user-1", "py-user-2"]

    fatal = get(base, f"/v1/projects/{slug}/crashes/{uncaught['id']}/reports", token)["reports"][0]
    assert fatal["device"]["id"] == "py-user-4" and fatal["stack"][0] == "explode (__main__)", fatal


if __name__ == "__main__":
    main()
