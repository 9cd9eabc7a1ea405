"""A real crash-server process for the Python end-to-end tests (Tests/SentrySDK, Tests/SentryCLI):
a free loopback port, waiting until /readyz answers, and a clean stop on SIGTERM.

The tests import it after putting Tests/ on sys.path, so each stays runnable as
`python3 Tests/<Suite>/test_<name>.py ...`.
"""
import socket
import subprocess
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(base, process):
    wait_answer(base + "/readyz", process, "crash-server")


def wait_answer(url, process, name):
    """Until `url` answers 200, for up to 60 s; fails when `process` (called `name`) exits first."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"{name} exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{name} did not become ready within 60 s")


def stop(process):
    """SIGTERM, then fail unless the server exits 0 within 60 s (a clean drain is part of the contract)."""
    process.terminate()
    try:
        status = process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        raise SystemExit("crash-server did not exit within 60 s of SIGTERM")
    if status != 0:
        raise SystemExit(f"crash-server exited {status} on SIGTERM")
