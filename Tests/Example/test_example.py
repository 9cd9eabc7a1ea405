#!/usr/bin/env python3
"""The example app end to end (issue 19) against a real crash-server and PostgreSQL.

`crashguard-example` (built -O) crashes three ways (abort at two call sites, an index out
of range), and each next run uploads the crash with its guards' reports. Then the read
API must show: one group per crash site (the two aborts apart), each crash's stack
starting at the function that crashed, the worker threads and the scope in its context,
and the guard reports; and a crash record sent twice must be a duplicate, never counted
twice.

Needs DATABASE_URL (scripts/test exports CRASHGUARD_TEST_DATABASE_URL) and the debug
binaries (CRASHGUARD_BIN_PATH, default .build/debug).
"""
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid

bin_path = os.environ.get("CRASHGUARD_BIN_PATH", ".build/debug")
server_bin = os.path.join(bin_path, "crash-server")
example_bin = os.environ.get("CRASHGUARD_EXAMPLE") or os.path.join(bin_path, "crashguard-example")
database_url = os.environ.get("DATABASE_URL") or os.environ["CRASHGUARD_TEST_DATABASE_URL"]
env = dict(os.environ, DATABASE_URL=database_url)
failures = []


def check(condition, message):
    print(("ok   " if condition else "FAIL ") + message)
    if not condition:
        failures.append(message)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port, path, token):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", path, headers={"Authorization": f"Bearer {token}"})
    r = c.getresponse()
    body = r.read()
    if r.status != 200:
        raise RuntimeError(f"GET {path}: {r.status} {body[:200]!r}")
    return json.loads(body)


def crash(kind, directory):
    p = subprocess.run([example_bin, "crash", kind, directory], capture_output=True, text=True, timeout=60)
    check(p.returncode < 0, f"crash {kind}: died by signal {-p.returncode}")


def report(port, key, directory):
    p = subprocess.run([example_bin, "report", f"http://127.0.0.1:{port}", key, directory],
                       capture_output=True, text=True, timeout=120)
    check(p.returncode == 0 and "flushed" in p.stdout, f"report run uploaded everything ({p.stdout.strip()} {p.stderr.strip()[-300:]})")


slug = "example-" + uuid.uuid4().hex[:8]
created = json.loads(subprocess.run([server_bin, "project", "create", slug], env=env, check=True,
                                    capture_output=True, text=True).stdout)
key, token = created["ingestKey"], created["readToken"]
port = free_port()
log = open(f"/tmp/crashguard-example-server-{port}.log", "w")
server = subprocess.Popen([server_bin, "serve", "--host", "127.0.0.1", "--port", str(port)], env=env,
                          stdout=log, stderr=subprocess.STDOUT)
work = tempfile.mkdtemp(prefix="crashguard-example-")
try:
    for _ in range(600):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/readyz")
            if c.getresponse().status == 200:
                break
        except OSError:
            pass
        time.sleep(0.1)
    else:
        raise RuntimeError("crash-server not ready")

    directory = os.path.join(work, "app")
    for kind in ["abort", "abort2", "index"]:
        crash(kind, directory)
        if kind == "index":  # keep this record to send it again below
            shutil.copy(os.path.join(directory, "crash", "record"), os.path.join(work, "record"))
        report(port, key, directory)
    # The same crash record again (a crash between queuing and deleting it): a duplicate.
    shutil.copy(os.path.join(work, "record"), os.path.join(directory, "crash", "record"))
    report(port, key, directory)

    base = f"/v1/projects/{slug}"
    groups = get(port, f"{base}/crashes?limit=200", token)["groups"]
    signal_groups = [g for g in groups if g["kind"] == "signal"]
    check(len(signal_groups) == 3, f"three signal groups, one per crash site (got {[g['title'] for g in signal_groups]})")
    check(all(g["count"] == 1 for g in signal_groups), f"each crash counted once, the resent one a duplicate ({[g['count'] for g in signal_groups]})")
    kinds = {g["kind"] for g in groups}
    check({"container", "arithmetic", "custom"} <= kinds, f"guard and custom reports arrived ({sorted(kinds)})")

    first_frames = {}
    for g in signal_groups:
        reports = get(port, f"{base}/crashes/{g['id']}/reports?limit=10", token)["reports"]
        r = reports[0]
        first_frames[g["id"]] = r["stack"][0]
        ctx = r.get("context", {})
        workers = [v for k, v in ctx.items() if k.startswith("thread.") and "example-worker" in v]
        check(len(workers) == 2, f"{g['title']}: both worker threads in context")
        check(ctx.get("user.id") == "user-42" and "about to crash" in ctx.get("breadcrumb.00", ""),
              f"{g['title']}: scope and breadcrumb at the crash")
    frames = " | ".join(first_frames.values())
    for function in ["crashAbortInParser", "crashAbortInLoader", "crashIndexOutOfRange"]:
        check(any(function in f for f in first_frames.values()), f"a group's stack starts in {function} ({frames})")
    titles = [g["title"] for g in signal_groups]
    check(any(t.startswith("Swift runtime trap (ud2) in ") and "crashIndexOutOfRange" in t for t in titles),
          f"the -O trap's reason names its function ({titles})")
finally:
    server.send_signal(signal.SIGTERM)
    try:
        server.wait(timeout=60)
    except subprocess.TimeoutExpired:
        server.kill()
    shutil.rmtree(work, ignore_errors=True)

if failures:
    print(f"{len(failures)} check(s) failed; server log: {log.name}")
    sys.exit(1)
print("example app end to end: ok")
