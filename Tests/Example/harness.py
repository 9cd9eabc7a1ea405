"""What the end-to-end example tests share: a project, a real crash-server on a free loopback
port (stopped with SIGTERM at the end), read-API requests, and check/report bookkeeping.

Needs DATABASE_URL or CRASHGUARD_TEST_DATABASE_URL (scripts/test exports the latter) and
CRASHGUARD_BIN_PATH (the directory holding crash-server, default .build/debug).
"""
import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid

bin_path = os.environ.get("CRASHGUARD_BIN_PATH", ".build/debug")
server_bin = os.path.join(bin_path, "crash-server")
database_url = os.environ.get("DATABASE_URL") or os.environ["CRASHGUARD_TEST_DATABASE_URL"]
env = dict(os.environ, DATABASE_URL=database_url)
failures = []


def check(condition, message):
    print(("ok   " if condition else "FAIL ") + message)
    if not condition:
        failures.append(message)


def finish(log_name):
    """Exit 1 naming the server log when any check failed; else the log is removed."""
    if failures:
        print(f"{len(failures)} check(s) failed; server log: {log_name}")
        sys.exit(1)
    os.remove(log_name)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(port, method, path, token, body=None):
    """(status, decoded JSON or raw bytes) of one request with the read token."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Authorization": f"Bearer {token}"}
    if body is not None:
        headers["Content-Type"] = "application/octet-stream"
    c.request(method, path, body=body, headers=headers)
    r = c.getresponse()
    data = r.read()
    try:
        return r.status, json.loads(data)
    except ValueError:
        return r.status, data


def get(port, path, token):
    status, body = request(port, "GET", path, token)
    if status != 200:
        raise RuntimeError(f"GET {path}: {status} {body!r:.200}")
    return body


def create_project(prefix):
    """A fresh project through the CLI: (slug, ingest key, read token)."""
    slug = f"{prefix}-{uuid.uuid4().hex[:8]}"
    created = json.loads(subprocess.run([server_bin, "project", "create", slug], env=env, check=True,
                                        capture_output=True, text=True).stdout)
    return slug, created["ingestKey"], created["readToken"]


@contextlib.contextmanager
def running_server(name, extra_env=None):
    """crash-server on a free loopback port, ready (/readyz 200); yields (port, log file name)."""
    port = free_port()
    log = open(os.path.join(tempfile.gettempdir(), f"crashguard-{name}-server-{port}.log"), "w")
    server = subprocess.Popen([server_bin, "serve", "--host", "127.0.0.1", "--port", str(port)],
                              env=dict(env, **(extra_env or {})), stdout=log, stderr=subprocess.STDOUT)
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
        yield port, log.name
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()


def crash(example, kind, directory):
    p = subprocess.run([example, "crash", kind, directory], capture_output=True, text=True, timeout=60)
    check(p.returncode < 0, f"crash {kind}: died by signal {-p.returncode}")


def report(example, port, key, directory):
    p = subprocess.run([example, "report", f"http://127.0.0.1:{port}", key, directory],
                       capture_output=True, text=True, timeout=120)
    check(p.returncode == 0 and "flushed" in p.stdout, f"report run uploaded everything ({p.stdout.strip()} {p.stderr.strip()[-300:]})")


def session_run(example, port, key, directory, end):
    """One run of the example with a session, ended by `end`: crash, kill (SIGKILL once it
    printed "ready") or exit (a clean close)."""
    command = [example, "session", f"http://127.0.0.1:{port}", key, directory, end]
    if end != "kill":
        p = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if end == "crash":
            check(p.returncode < 0, f"session run crashed (exit {p.returncode}; {p.stderr.strip()[-300:]})")
        else:
            check(p.returncode == 0 and "closed" in p.stdout, f"session run closed cleanly ({p.stdout.strip()} {p.stderr.strip()[-300:]})")
        return
    p = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        check(line.strip() == "ready", f"session run got ready to be killed ({line.strip()!r})")
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=60)
    check(p.returncode == -signal.SIGKILL, f"session run killed by SIGKILL (exit {p.returncode})")
