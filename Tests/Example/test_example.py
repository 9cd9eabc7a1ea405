#!/usr/bin/env python3
"""The example app end to end against a real crash-server and PostgreSQL.

`crashguard-example` (built -O) crashes three ways (abort at two call sites, an index out
of range), and each next run uploads the crash with its guards' reports. Then the read
API must show: one group per crash site (the two aborts apart), each crash's stack
starting at the function that crashed, the worker threads and the scope in its context,
and the guard reports; and a crash record sent twice must be a duplicate, never counted
twice.

Sessions: three runs of the example in a fresh project, one that crashes, one killed with
SIGKILL and one that exits cleanly, must show in `GET .../releases` as one crashed, one
abnormal and one exited session of version 1.0.0 (crash-free sessions 2/3), one user.

Needs DATABASE_URL (scripts/test exports CRASHGUARD_TEST_DATABASE_URL) and the debug
binaries (CRASHGUARD_BIN_PATH, default .build/debug).
"""
import os
import shutil
import tempfile

from harness import (bin_path, check, create_project, crash as crash_with, finish, get, report as report_with,
                     running_server, session_run)

example_bin = os.environ.get("CRASHGUARD_EXAMPLE") or os.path.join(bin_path, "crashguard-example")


def crash(kind, directory):
    crash_with(example_bin, kind, directory)


def report(port, key, directory):
    report_with(example_bin, port, key, directory)


slug, key, token = create_project("example")
work = tempfile.mkdtemp(prefix="crashguard-example-")
with running_server("example") as (port, log_name):
    try:
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

        # Sessions: crash, SIGKILL, clean exit. Each run's start ends the previous run's
        # session (crashed: it left a crash record; abnormal: it left neither record nor end).
        session_slug, session_key, session_token = create_project("example-sessions")
        session_directory = os.path.join(work, "sessions")
        for end in ["crash", "kill", "exit"]:
            session_run(example_bin, port, session_key, session_directory, end)
        releases = get(port, f"/v1/projects/{session_slug}/releases", session_token)["releases"]
        release = next((r for r in releases if r["version"] == "1.0.0"), None)
        check(release is not None, f"release 1.0.0 has sessions ({releases})")
        if release:
            counts = {k: release[k] for k in ["sessions", "crashedSessions", "abnormalSessions", "erroredSessions", "users", "crashedUsers"]}
            check(counts == {"sessions": 3, "crashedSessions": 1, "abnormalSessions": 1, "erroredSessions": 0, "users": 1, "crashedUsers": 1},
                  f"three sessions: 1 crashed, 1 abnormal, 1 exited, one install ({counts})")
            check(abs(release["crashFreeSessions"] - 2 / 3) < 1e-9, f"crash-free sessions 2/3 ({release['crashFreeSessions']})")
        session_crashes = get(port, f"/v1/projects/{session_slug}/crashes", session_token)["groups"]
        check([g["count"] for g in session_crashes if g["kind"] == "signal"] == [1], f"the crashed run's crash arrived once ({[(g['kind'], g['count']) for g in session_crashes]})")
    finally:
        shutil.rmtree(work, ignore_errors=True)

finish(log_name)
print("example app end to end: ok")
