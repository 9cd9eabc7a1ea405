#!/usr/bin/env python3
"""The compose stack's database roles, proven on a real PostgreSQL instead of read from YAML.

    python3 Tests/Deploy/test_database_roles.py

On the cluster of scripts/postgres (started when it is not running, stopped again only then),
in a database of its own with two roles of its own: runs Deploy/postgres-roles.sh as the
compose image runs it at first start, `crash-server migrate` as the owner role, and
`crash-server serve`, `project create` and SQL as the server role; then ingests, queries,
checks that partition upkeep works for the server role and that the server role owns nothing
and may change no schema. Removes the database and the roles when it ends.

The server binary: CRASHGUARD_SERVER_BIN, else `swift build --product crash-server`.
The cluster trusts loopback connections, so passwords are not what is checked here: the
roles' rights are (the password rules are the server's, tested in DeploymentSettingsTests).
"""

from __future__ import annotations

import datetime
import gzip
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PG = ROOT / "scripts" / "postgres"
ROLES = ROOT / "Deploy" / "postgres-roles.sh"
SUFFIX = secrets.token_hex(4)
DB, OWNER, APP = f"cg_roles_{SUFFIX}", f"cg_owner_{SUFFIX}", f"cg_app_{SUFFIX}"
METRICS_TOKEN = secrets.token_hex(16)


def pg(*args: str) -> str:
    return subprocess.run([str(PG), *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_binary() -> str:
    binary = os.environ.get("CRASHGUARD_SERVER_BIN")
    if binary:
        return binary
    subprocess.run(["swift", "build", "--product", "crash-server"], cwd=ROOT, check=True)
    bin_dir = subprocess.run(["swift", "build", "--show-bin-path"], cwd=ROOT, check=True, capture_output=True,
                             text=True).stdout.strip()
    return os.path.join(bin_dir, "crash-server")


class Cluster:
    started_here = False
    port = os.environ.get("CRASHGUARD_PG_PORT", "54329")
    superuser = "crashguard"  # scripts/postgres's

    @classmethod
    def start(cls):
        cls.started_here = subprocess.run([str(PG), "status"], cwd=ROOT, capture_output=True, text=True).stdout.strip() != "running"
        pg("start")
        cls.bin = Path(pg("bin"))

    @classmethod
    def url(cls, role: str, password: str = "change-me") -> str:
        # A loopback database: `serve` accepts any password here, as for any development cluster.
        return f"postgres://{role}:{password}@127.0.0.1:{cls.port}/{DB}?sslmode=disable"

    @classmethod
    def psql(cls, sql: str, role: str | None = None, database: str | None = None, check: bool = True):
        return subprocess.run(
            [str(cls.bin / "psql"), "-X", "-q", "-tA", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", cls.port,
             "-U", role or cls.superuser, "-d", database or DB, "-c", sql],
            check=check, capture_output=True, text=True)

    @classmethod
    def value(cls, sql: str, role: str | None = None) -> str:
        return cls.psql(sql, role).stdout.strip()


def http(method: str, url: str, body: bytes | None = None, headers: dict | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


class DatabaseRoles(unittest.TestCase):
    """Numbered: each step builds on the one before, as the compose stack's start does."""

    server: subprocess.Popen | None = None

    @classmethod
    def setUpClass(cls):
        Cluster.start()
        cls.binary = server_binary()
        Cluster.psql(f'CREATE DATABASE "{DB}"', database="postgres")
        env = dict(os.environ, PATH=f"{Cluster.bin}:{os.environ['PATH']}", PGHOST="127.0.0.1", PGPORT=Cluster.port,
                   POSTGRES_USER=Cluster.superuser, POSTGRES_DB=DB, DB_OWNER_ROLE=OWNER, DB_APP_ROLE=APP,
                   POSTGRES_OWNER_PASSWORD=secrets.token_hex(12), POSTGRES_APP_PASSWORD=secrets.token_hex(12))
        cls.roles_env = env
        subprocess.run(["sh", str(ROLES)], env=env, check=True, capture_output=True, text=True)
        # Shown in a failure message (log_text); removed when closed.
        cls.log = tempfile.TemporaryFile("w+")

    @classmethod
    def tearDownClass(cls):
        if cls.server and cls.server.poll() is None:
            cls.server.send_signal(signal.SIGTERM)
            try:
                cls.server.wait(60)
            except subprocess.TimeoutExpired:
                cls.server.kill()
        Cluster.psql(f'DROP DATABASE IF EXISTS "{DB}" WITH (FORCE)', database="postgres", check=False)
        for role in (APP, OWNER):
            Cluster.psql(f'DROP ROLE IF EXISTS "{role}"', database="postgres", check=False)
        if Cluster.started_here:
            subprocess.run([str(PG), "stop"], cwd=ROOT, check=False, capture_output=True)

    def run_server(self, role: str, *args: str, **extra_env: str) -> subprocess.CompletedProcess:
        env = dict(os.environ, DATABASE_URL=Cluster.url(role), **extra_env)
        return subprocess.run([self.binary, *args], env=env, capture_output=True, text=True, timeout=120)

    def test_1_neither_role_is_privileged(self):
        for role in (OWNER, APP):
            flags = Cluster.value(
                "SELECT rolsuper, rolcreaterole, rolcreatedb, rolreplication, rolbypassrls, rolcanlogin "
                f"FROM pg_roles WHERE rolname = '{role}'")
            self.assertEqual(flags, "f|f|f|f|f|t", role)
        self.assertEqual(Cluster.value(f"SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = '{DB}'"), OWNER)

    def test_2_the_server_role_cannot_apply_the_schema(self):
        for args in (["migrate"], ["serve", "--port", "0"]):
            done = self.run_server(APP, *args)
            self.assertNotEqual(done.returncode, 0, args)
            self.assertIn("run `crash-server migrate` as the role that owns the tables", done.stderr, args)
        self.assertEqual(Cluster.value("SELECT count(*) FROM pg_class WHERE relnamespace = 'public'::regnamespace"), "0")

    def test_3_the_owner_role_migrates_and_owns_everything(self):
        done = self.run_server(OWNER, "migrate")
        self.assertEqual(done.returncode, 0, done.stderr)
        owners = Cluster.value(
            "SELECT string_agg(DISTINCT pg_get_userbyid(relowner), ',') FROM pg_class "
            "WHERE relnamespace = 'public'::regnamespace")
        self.assertEqual(owners, OWNER)
        self.assertIn("reports", Cluster.value("SELECT string_agg(relname, ',') FROM pg_class WHERE relkind = 'p'"))
        # Partition upkeep runs with the owner's rights, whoever calls it.
        definer = Cluster.value(
            f"SELECT count(*) FILTER (WHERE prosecdef AND proowner = '{OWNER}'::regrole) FROM pg_proc "
            "WHERE proname IN ('crashguard_ensure_partitions', 'crashguard_drop_partitions_before')")
        self.assertEqual(definer, "2")

    def test_4_the_server_role_may_change_no_schema(self):
        refused = {
            "CREATE TABLE intruder (x int)": "permission denied",
            "ALTER TABLE projects ADD COLUMN intruder int": "must be owner",
            "DROP TABLE group_hourly": "must be owner",
            "TRUNCATE report_ids": "permission denied",
            "CREATE INDEX intruder ON projects (slug)": "must be owner",
            "CREATE ROLE intruder": "permission denied",
            f'CREATE DATABASE "{DB}_intruder"': "permission denied",
            "CREATE FUNCTION intruder() RETURNS int LANGUAGE sql AS 'SELECT 1'": "permission denied",
        }
        for sql, error in refused.items():
            done = Cluster.psql(sql, role=APP, check=False)
            self.assertNotEqual(done.returncode, 0, sql)
            self.assertIn(error, done.stderr, sql)

    def test_5_the_server_role_serves_ingests_and_keeps_the_partitions(self):
        today = datetime.datetime.now(datetime.timezone.utc).date()
        old = today - datetime.timedelta(days=400)
        # A partition past the longest retention a project may have (365 days), made as the owner
        # does; the server's upkeep must drop it.
        Cluster.psql(f"SELECT crashguard_ensure_partitions('{old}', '{old}')", role=OWNER)
        ahead = f"reports_p{(today + datetime.timedelta(days=3)):%Y%m%d}"
        self.assertEqual(Cluster.value(f"SELECT to_regclass('{ahead}') IS NULL"), "t")

        port = free_port()
        env = dict(os.environ, DATABASE_URL=Cluster.url(APP), CRASHGUARD_RETENTION_DAYS="31",
                   CRASHGUARD_METRICS_TOKEN=METRICS_TOKEN, CRASHGUARD_RATE_LIMIT="0")
        type(self).server = subprocess.Popen([self.binary, "serve", "--host", "127.0.0.1", "--port", str(port)],
                                             env=env, stdout=self.log, stderr=self.log)
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 90
        while True:
            self.assertIsNone(self.server.poll(), "serve exited; log: " + self.log_text())
            try:
                if http("GET", base + "/readyz")[0] == 200:
                    break
            except OSError:
                pass
            self.assertLess(time.monotonic(), deadline, "serve never became ready; log: " + self.log_text())
            time.sleep(0.2)

        # Partition upkeep ran at start as the server role: created ahead, dropped past retention,
        # every partition owned by the owner role.
        self.assertEqual(Cluster.value(f"SELECT to_regclass('{ahead}') IS NOT NULL"), "t")
        self.assertEqual(Cluster.value(f"SELECT to_regclass('reports_p{old:%Y%m%d}') IS NULL"), "t")
        self.assertEqual(Cluster.value(
            "SELECT string_agg(DISTINCT pg_get_userbyid(c.relowner), ',') FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'reports'::regclass"), OWNER)
        # The hourly upkeep's calls, made directly as the server role.
        later = today + datetime.timedelta(days=5)
        self.assertEqual(Cluster.value(f"SELECT crashguard_ensure_partitions('{later}', '{later}')", role=APP), "1")
        self.assertEqual(Cluster.value(f"SELECT crashguard_drop_partitions_before('{today - datetime.timedelta(days=35)}')",
                                       role=APP), "0")

        # The one-shot commands connect as the server role too.
        slug = f"roles-{SUFFIX}"
        created = self.run_server(APP, "project", "create", slug)
        self.assertEqual(created.returncode, 0, created.stderr)
        keys = json.loads(created.stdout)

        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        report = {"id": str(uuid.uuid4()), "timestamp": now, "kind": "container",
                  "reason": "-[__NSArrayI objectAtIndex:]: index 5 beyond bounds [0 .. 2]",
                  "app": {"id": "com.example.app", "version": "1.0.0"}, "device": {"os": "iOS", "id": "install-1"}}
        status, body = http("POST", base + "/v1/reports", gzip.compress(json.dumps({"reports": [report]}).encode()),
                            {"X-Crash-Key": keys["ingestKey"], "Content-Type": "application/json",
                             "Content-Encoding": "gzip"})
        self.assertEqual(status, 202, body)
        self.assertEqual(json.loads(body)["accepted"], 1)

        auth = {"Authorization": f"Bearer {keys['readToken']}"}
        status, body = http("GET", f"{base}/v1/projects/{slug}/crashes", headers=auth)
        self.assertEqual(status, 200, body)
        crashes = json.loads(body)
        rows = next(v for v in crashes.values() if isinstance(v, list)) if isinstance(crashes, dict) else crashes
        self.assertEqual(len(rows), 1, body)
        self.assertEqual(Cluster.value(f"SELECT count(*) FROM reports_p{today:%Y%m%d}", role=OWNER), "1")

        # /metrics on the published port: the token or nothing.
        self.assertEqual(http("GET", base + "/metrics")[0], 401)
        status, body = http("GET", base + "/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
        self.assertEqual(status, 200)
        self.assertIn(b'crashguard_reports_total{outcome="accepted"} 1', body)

    def test_6_the_server_role_reads_what_the_server_asks_of_the_catalog(self):
        # The standby's lag polls and the key-cache confirmation count (ReadReplica.swift,
        # PostgresProjectStore.swift) need no privileged view or function.
        done = Cluster.psql(
            "SELECT pg_current_wal_lsn(), pg_current_wal_insert_lsn(), pg_is_in_recovery(), pg_last_wal_replay_lsn(), "
            "pg_last_xact_replay_timestamp(), pg_current_snapshot(), pg_current_xact_id(); "
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name <> ''",
            role=APP, check=False)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertNotEqual(done.stdout.strip().splitlines()[-1], "0", "the server's own sessions are not visible")

    def test_7_the_server_role_owns_nothing(self):
        owned = Cluster.value(
            f"SELECT (SELECT count(*) FROM pg_class WHERE relowner = '{APP}'::regrole)"
            f" + (SELECT count(*) FROM pg_proc WHERE proowner = '{APP}'::regrole)"
            f" + (SELECT count(*) FROM pg_type WHERE typowner = '{APP}'::regrole)"
            f" + (SELECT count(*) FROM pg_namespace WHERE nspowner = '{APP}'::regrole)"
            f" + (SELECT count(*) FROM pg_database WHERE datdba = '{APP}'::regrole)")
        self.assertEqual(owned, "0")

    def test_8_the_role_script_runs_again(self):
        # A second run (an upgraded stack, a restore) keeps the roles and grants what exists.
        subprocess.run(["sh", str(ROLES)], env=self.roles_env, check=True, capture_output=True, text=True)
        self.assertEqual(Cluster.value("SELECT count(*) FROM projects", role=APP), Cluster.value("SELECT count(*) FROM projects"))
        self.assertEqual(Cluster.value(f"SELECT rolsuper OR rolcreaterole OR rolcreatedb FROM pg_roles WHERE rolname = '{APP}'"), "f")

    def log_text(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()[-4000:]


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=1, failfast=True).result
    failed = len(result.failures) + len(result.errors)
    print(f"database roles: {result.testsRun - failed} passed, {failed} failed")
    sys.exit(1 if failed or not result.wasSuccessful() else 0)
