#!/usr/bin/env python3
"""Keeps the deployment files honest without a Docker engine.

    python3 Tests/Deploy/test_deploy.py          (or: python3 -m pytest -q Tests/Deploy)

Checks docker-compose.yml against the Compose specification's JSON schema (vendored beside this
file), and docker-compose.yml, Deploy/Dockerfile, .dockerignore, .env.example, Deploy/README.md
and the example proxy configs against each other and against the server's configuration names.
Installs PyYAML and jsonschema with pip when they are missing. Ends with 'N passed, N failed'.

The replay of the Dockerfile's steps on the host (which needs a Swift build and PostgreSQL) is
scripts/deploy-replay; here only its parsing is exercised (--dry-run).
"""

from __future__ import annotations

import fnmatch
import importlib
import json
import os
import re
import shlex
import subprocess
import sys
import unittest
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
DOCKERFILE = ROOT / "Deploy" / "Dockerfile"
COMPOSE = ROOT / "docker-compose.yml"
DOCKERIGNORE = ROOT / ".dockerignore"
ENV_EXAMPLE = ROOT / ".env.example"
DEPLOY_README = ROOT / "Deploy" / "README.md"
NGINX = ROOT / "Deploy" / "nginx.conf"
CADDY = ROOT / "Deploy" / "Caddyfile"
REPLAY = ROOT / "scripts" / "deploy-replay"
REPLICAS = ROOT / "docker-compose.replicas.yml"
NGINX_REPLICAS = ROOT / "Deploy" / "nginx.replicas.conf"
STANDBY_SH = ROOT / "Deploy" / "postgres-standby.sh"
REPLICATION_SH = ROOT / "Deploy" / "postgres-replication.sh"
ROLES_SH = ROOT / "Deploy" / "postgres-roles.sh"
SCHEMA = HERE / "compose-spec.json"
SHARED_SCHEMA = ROOT.parent / "shared" / "schemas" / "compose-spec.json"

# The server's configuration names fixed by issue 7, with the defaults the contract or the issue
# states. The full list and every default are read from the server's sources (SERVER_ENV below).
FIXED_ENV = {
    "DATABASE_URL": "postgres://crashguard@127.0.0.1:54329/crashguard?sslmode=disable",
    "CRASHGUARD_HOST": "127.0.0.1",
    "CRASHGUARD_PORT": "8080",
    "CRASHGUARD_LOG_LEVEL": "info",
    "CRASHGUARD_MAX_BODY_BYTES": "1048576",
    "CRASHGUARD_MAX_DECOMPRESSED_BYTES": "16777216",
    "CRASHGUARD_RATE_LIMIT": None,
    "CRASHGUARD_RATE_BURST": None,
    "CRASHGUARD_MAX_QUEUED_REPORTS": None,
    "CRASHGUARD_RETENTION_DAYS": None,
    "CRASHGUARD_DB_POOL_SIZE": None,
}
CONFIG_SWIFT = ROOT / "Sources" / "CrashServer" / "Configuration" / "ServerConfiguration.swift"
ALIASES = {"LOG_LEVEL"}  # read as a fallback for CRASHGUARD_LOG_LEVEL; not passed by compose
# Fixed by the image's CMD flags; compose must not pass them through (they would disagree).
IMAGE_FIXED = {"CRASHGUARD_HOST", "CRASHGUARD_PORT"}
# Used by docker-compose.yml's interpolation only: the three roles' passwords (Deploy/postgres-roles.sh)
# and the migrate service's database URL.
PASSWORD_VARS = ("POSTGRES_PASSWORD", "POSTGRES_OWNER_PASSWORD", "POSTGRES_APP_PASSWORD")
COMPOSE_ONLY_VARS = set(PASSWORD_VARS) | {"MIGRATE_DATABASE_URL"}


def _swift_constant(expr: str) -> str | None:
    """A default as the environment would spell it: `1 << 20` -> 1048576, `.info` -> info."""
    expr = expr.strip()
    if expr == "[]":  # an empty list: the variable's empty text
        return ""
    m = re.fullmatch(r"\.seconds\((.+)\)", expr)  # a Duration, written in seconds
    if m:
        return _swift_constant(m.group(1))
    m = re.fullmatch(r'"([^"\\]*)"', expr)
    if m:
        return m.group(1)
    if re.fullmatch(r"\.[a-z]\w*", expr):
        return expr[1:]
    if re.fullmatch(r"\d+\.\d+", expr):  # a decimal literal, not `Type.constant`
        return expr
    m = re.fullmatch(r"(\w+)\.(\w+)", expr)
    if m:  # a static constant elsewhere in Sources
        for f in (ROOT / "Sources").rglob("*.swift"):
            d = re.search(rf"static let {m.group(2)}(?:: \w+)? = ([^\n]+)", f.read_text(encoding="utf-8"))
            if d:
                return _swift_constant(d.group(1))
        return None
    arith = expr.replace("_", "")
    if re.fullmatch(r"[\d\s.+*<()-]+", arith):
        value = eval(arith, {"__builtins__": {}})  # digits and operators only
        return str(int(value)) if float(value).is_integer() else str(value)
    return None


def server_env() -> dict[str, str | None]:
    """NAME -> default, from the declarations in ServerConfiguration.swift's `settings` table,
    `Setting(\\.prop, "NAME", ...)`, and the property's `public var prop(: T)? = default` (for
    `\\.group.prop`, in the file that declares the group's type, e.g. WebhookSettings.swift for
    `public var webhooks = WebhookSettings()`). Falls back to FIXED_ENV while the file does not
    exist."""
    if not CONFIG_SWIFT.exists():
        return dict(FIXED_ENV)
    text = CONFIG_SWIFT.read_text(encoding="utf-8")
    sources = list((CONFIG_SWIFT.parent.parent).rglob("*.swift"))

    def group_source(group: str) -> str:
        kind = re.search(rf"public var {group} = (\w+)\(\)", text)
        assert kind, f"ServerConfiguration declares no settings group {group}"
        for f in sources:
            body = f.read_text(encoding="utf-8")
            if re.search(rf"\bstruct {kind.group(1)}\b", body):
                return body
        raise AssertionError(f"no file declares {kind.group(1)}")

    out: dict[str, str | None] = {}
    for path, name in re.findall(r'Setting\(\s*\\\.([\w.]+),\s*"([A-Z_][A-Z0-9_]*)"', text):
        *group, prop = path.split(".")
        source = group_source(group[0]) if group else text
        d = re.search(rf"public var {prop}(?:: [\w.\[\]]+)? = ([^\n]+)", source)
        out[name] = _swift_constant(d.group(1)) if d else None
    return out


SERVER_ENV = server_env()
SUBCOMMANDS = {"serve", "migrate", "project"}
ENDPOINTS = {"/healthz", "/readyz", "/metrics", "/v1/reports"}
MAX_BODY = int(SERVER_ENV["CRASHGUARD_MAX_BODY_BYTES"] or FIXED_ENV["CRASHGUARD_MAX_BODY_BYTES"])


def _ensure(module: str, package: str):
    try:
        return importlib.import_module(module)
    except ImportError:
        base = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        for extra in ([], ["--user"], ["--break-system-packages"]):
            if subprocess.run(base + extra + [package]).returncode == 0:
                break
        importlib.invalidate_caches()
        return importlib.import_module(module)


yaml = _ensure("yaml", "PyYAML")
jsonschema = _ensure("jsonschema", "jsonschema")


# ---------------------------------------------------------------- Dockerfile

class Dockerfile:
    """Instructions after line continuations; stages split at FROM."""

    def __init__(self, path: Path):
        self.instructions: list[tuple[str, str]] = []
        cur = ""
        for raw in path.read_text(encoding="utf-8").splitlines():
            stripped = raw.strip()
            if stripped.startswith("#") or (not cur and not stripped):
                continue
            if raw.rstrip().endswith("\\"):
                cur += raw.rstrip()[:-1] + " "
                continue
            cur += raw
            word, _, rest = cur.strip().partition(" ")
            self.instructions.append((word.upper(), " ".join(rest.split())))
            cur = ""
        self.stages: list[list[tuple[str, str]]] = []
        for ins in self.instructions:
            if ins[0] == "FROM":
                self.stages.append([])
            self.stages[-1].append(ins)

    def all(self, word: str, stage: int | None = None) -> list[str]:
        src = self.instructions if stage is None else self.stages[stage]
        return [rest for w, rest in src if w == word]

    def one(self, word: str, stage: int = -1) -> str:
        found = self.all(word, stage)
        assert len(found) == 1, f"expected one {word} in stage {stage}, found {found}"
        return found[0]

    def env(self, stage: int = -1) -> dict[str, str]:
        out = {}
        for rest in self.all("ENV", stage):
            for tok in shlex.split(rest):
                k, _, v = tok.partition("=")
                out[k] = v
        return out

    def from_image(self, stage: int) -> tuple[str, str | None]:
        parts = self.stages[stage][0][1].split()
        alias = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else None
        return parts[0], alias


# ---------------------------------------------------------------- Compose interpolation

class InterpolationError(Exception):
    pass


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's interpolation: $$, $VAR, ${VAR}, ${VAR:-d}, ${VAR-d}, ${VAR:?e}, ${VAR?e},
    ${VAR:+r}, ${VAR+r}, with nested defaults."""
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c != "$":
            out.append(c)
            i += 1
            continue
        nxt = text[i + 1] if i + 1 < len(text) else ""
        if nxt == "$":
            out.append("$")
            i += 2
        elif nxt == "{":
            depth, j = 1, i + 2
            while j < len(text) and depth:
                if text[j] == "{":
                    depth += 1
                elif text[j] == "}":
                    depth -= 1
                j += 1
            if depth:
                raise InterpolationError(f"unclosed ${{ in {text!r}")
            out.append(_expand(text[i + 2:j - 1], env))
            i = j
        else:
            m = re.match(r"[A-Za-z_][A-Za-z0-9_]*", text[i + 1:])
            if not m:
                raise InterpolationError(f"bad $ in {text!r}")
            out.append(env.get(m.group(0), ""))
            i += 1 + m.end()
    return "".join(out)


def _expand(body: str, env: dict[str, str]) -> str:
    m = re.match(r"([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])(.*))?$", body, re.S)
    if not m:
        raise InterpolationError(f"bad ${{{body}}}")
    name, op, arg = m.group(1), m.group(2), m.group(3) or ""
    val = env.get(name)
    unset_or_empty = not val if op and op.startswith(":") else val is None
    if op is None:
        return val or ""
    if op.endswith("-"):
        return interpolate(arg, env) if unset_or_empty else val
    if op.endswith("?"):
        if unset_or_empty:
            raise InterpolationError(f"{name}: {arg}")
        return val
    return "" if unset_or_empty else interpolate(arg, env)


def interpolate_tree(node, env):
    if isinstance(node, str):
        return interpolate(node, env)
    if isinstance(node, list):
        return [interpolate_tree(n, env) for n in node]
    if isinstance(node, dict):
        return {k: interpolate_tree(v, env) for k, v in node.items()}
    return node


def variables_used(text: str) -> set[str]:
    text = text.replace("$$", "")
    return set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", text))


def env_items(service: dict) -> list[tuple[str, str | None]]:
    env = service.get("environment") or []
    if isinstance(env, dict):
        return [(k, None if v is None else str(v)) for k, v in env.items()]
    return [(e.partition("=")[0], e.partition("=")[2] if "=" in e else None) for e in env]


def duration_seconds(text: str) -> float:
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001, "us": 1e-6}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|us|h|m|s)", str(text))
    assert parts and "".join(a + b for a, b in parts) == str(text), f"bad duration {text!r}"
    return sum(float(a) * units[b] for a, b in parts)


def dockerignore_excludes(patterns: list[str], path: str) -> bool:
    """Docker's rules, enough for our file: last matching pattern wins, ! re-includes, a pattern
    matching a parent folder excludes what is inside it."""
    excluded = False
    parts = path.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    for raw in patterns:
        neg = raw.startswith("!")
        pat = raw[1:] if neg else raw
        pat = pat.strip("/")
        rx = fnmatch.translate(pat).replace(".*", "[^/]*")
        rx = rx.replace("[^/]*[^/]*", ".*")  # ** crosses folders
        if any(re.match(rx, p) for p in prefixes):
            excluded = not neg
    return excluded


# ---------------------------------------------------------------- fixtures

TEST_ENV = {"POSTGRES_PASSWORD": "s3cret-Test_pw-superuser", "POSTGRES_OWNER_PASSWORD": "s3cret-Test_pw-owner",
            "POSTGRES_APP_PASSWORD": "s3cret-Test_pw-app", "CRASHGUARD_METRICS_TOKEN": "m3trics-Test_token"}

DF = Dockerfile(DOCKERFILE)
COMPOSE_TEXT = COMPOSE.read_text(encoding="utf-8")
RAW = yaml.safe_load(COMPOSE_TEXT)
RESOLVED = interpolate_tree(RAW, TEST_ENV)
SERVICES = RESOLVED["services"]
SERVER = SERVICES["crash-server"]
POSTGRES = SERVICES["postgres"]
MIGRATE = SERVICES.get("migrate") or {}  # missing: the tests that need it fail, not the import
README = DEPLOY_README.read_text(encoding="utf-8") if DEPLOY_README.exists() else ""


def image_port() -> str:
    cmd = json.loads(DF.one("CMD"))
    return cmd[cmd.index("--port") + 1]


# ---------------------------------------------------------------- tests

def schema_validator():
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    # The spec names draft-07 as "https://json-schema.org/draft-07/schema" (no "#"), which
    # jsonschema does not map by itself.
    cls = (jsonschema.Draft7Validator if "draft-07" in schema.get("$schema", "")
           else jsonschema.validators.validator_for(schema))
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


class ComposeSchema(unittest.TestCase):
    def test_vendored_schema_is_the_shared_one(self):
        if not SHARED_SCHEMA.exists():
            self.skipTest("shared/ not beside the checkout")
        self.assertEqual(json.loads(SCHEMA.read_text()), json.loads(SHARED_SCHEMA.read_text()))

    def test_compose_validates_against_the_spec(self):
        validator = schema_validator()
        for label, doc in (("as written", RAW), ("interpolated", RESOLVED)):
            errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
            self.assertFalse(errors, f"{label}: " + "; ".join(
                f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors))

    def test_schema_catches_a_broken_file(self):
        broken = json.loads(json.dumps(RAW))
        broken["services"]["crash-server"]["depends_on"]["postgres"]["condition"] = "healthy"
        self.assertFalse(schema_validator().is_valid(broken))
        broken = json.loads(json.dumps(RAW))
        broken["services"]["postgres"]["healthcheck"]["intervall"] = "5s"
        self.assertFalse(schema_validator().is_valid(broken))

    def test_two_services_and_the_one_shot_migration(self):
        self.assertEqual(set(SERVICES), {"postgres", "migrate", "crash-server"})


class ComposeInterpolation(unittest.TestCase):
    def test_password_is_required(self):
        with self.assertRaises(InterpolationError):
            interpolate_tree(RAW, {})
        # Each secret on its own: unset or empty, compose refuses to start.
        for name in (*PASSWORD_VARS, "CRASHGUARD_METRICS_TOKEN"):
            for missing in (None, ""):
                env = dict(TEST_ENV)
                if missing is None:
                    del env[name]
                else:
                    env[name] = missing
                with self.assertRaises(InterpolationError, msg=name):
                    interpolate_tree(RAW, env)

    def test_database_url_default_reaches_the_postgres_service(self):
        env = dict(env_items(SERVER))
        url = urlsplit(env["DATABASE_URL"])
        pg_env = POSTGRES["environment"]
        self.assertEqual(url.scheme, "postgres")
        self.assertEqual(url.hostname, "postgres")
        self.assertEqual(url.port, 5432)
        self.assertEqual(url.username, role_names()["app"])
        self.assertEqual(url.password, TEST_ENV["POSTGRES_APP_PASSWORD"])
        self.assertEqual(url.path.lstrip("/"), pg_env["POSTGRES_DB"])
        self.assertIn("sslmode=disable", url.query)

    def test_database_url_from_the_environment_wins(self):
        other = "postgres://u:p@db.internal:6432/crash?sslmode=require"
        resolved = interpolate_tree(RAW, dict(TEST_ENV, DATABASE_URL=other))
        self.assertEqual(dict(env_items(resolved["services"]["crash-server"]))["DATABASE_URL"], other)

    def test_every_variable_is_documented_in_env_example(self):
        example = ENV_EXAMPLE.read_text(encoding="utf-8")
        passthrough = {k for k, v in env_items(RAW["services"]["crash-server"]) if v is None}
        for name in variables_used(COMPOSE_TEXT) | passthrough:
            self.assertRegex(example, rf"(?m)^#? ?{name}=", f"{name} missing from .env.example")


class ComposeServices(unittest.TestCase):
    def test_postgres_official_image_16_or_newer(self):
        m = re.fullmatch(r"(?:docker\.io/)?(?:library/)?postgres:(\d+)(?:[.\-][\w.\-]*)?", POSTGRES["image"])
        self.assertTrue(m, f"not the official postgres image with a major version: {POSTGRES['image']}")
        self.assertGreaterEqual(int(m.group(1)), 16)

    def test_postgres_named_volume_at_its_data_directory(self):
        major = int(re.search(r":(\d+)", POSTGRES["image"]).group(1))
        # The official image keeps PGDATA in /var/lib/postgresql/data up to 17; 18 moved it.
        expected = "/var/lib/postgresql/data" if major < 18 else "/var/lib/postgresql"
        mounts = [v.split(":") for v in POSTGRES["volumes"]]
        named = [(src, dst) for src, dst, *_ in mounts if not src.startswith((".", "/", "~"))]
        self.assertIn(expected, [dst for _, dst in named])
        for src, _ in named:
            self.assertIn(src, RESOLVED.get("volumes") or {})

    def test_postgres_healthcheck_uses_pg_isready(self):
        test = POSTGRES["healthcheck"]["test"]
        self.assertIn("pg_isready", " ".join(test) if isinstance(test, list) else test)
        # Over TCP: during initialization (the role script) the image listens on its socket only.
        self.assertRegex(" ".join(test) if isinstance(test, list) else test, r"pg_isready -h (127\.0\.0\.1|localhost)\b")

    def test_postgres_is_not_published(self):
        self.assertNotIn("ports", POSTGRES)

    def test_server_built_from_the_dockerfile(self):
        build = SERVER["build"]
        self.assertEqual(build["context"], ".")
        self.assertEqual((ROOT / build["context"] / build["dockerfile"]).resolve(), DOCKERFILE)

    def test_server_waits_for_healthy_postgres(self):
        self.assertEqual(SERVER["depends_on"]["postgres"]["condition"], "service_healthy")

    def test_restart_policies(self):
        for name, svc in SERVICES.items():
            if name == "migrate":  # a one-shot: it runs again with `docker compose up`, not in a loop
                self.assertEqual(svc.get("restart"), "no")
                continue
            self.assertIn(svc.get("restart"), {"always", "unless-stopped", "on-failure"}, name)

    def test_resource_limits(self):
        for name, svc in SERVICES.items():
            limits = svc["deploy"]["resources"]["limits"]
            self.assertIn("memory", limits, name)
            self.assertIn("cpus", limits, name)

    def test_published_port_is_the_image_port(self):
        port = image_port()
        self.assertEqual(DF.one("EXPOSE").split("/")[0], port)
        targets = []
        for p in SERVER["ports"]:
            spec = p if isinstance(p, str) else f"{p.get('published')}:{p['target']}"
            targets.append(spec.split("/")[0].split(":")[-1])
        self.assertEqual(targets, [port])

    def test_environment_names_are_the_servers(self):
        names = [k for k, _ in env_items(SERVER)]
        self.assertEqual(len(names), len(set(names)), "duplicate environment entries")
        self.assertIn("DATABASE_URL", names)
        for n in names:
            if CONFIG_SWIFT.exists():
                self.assertIn(n, SERVER_ENV, f"{n} is not a server setting")
            self.assertNotIn(n, IMAGE_FIXED, f"{n} is fixed by the image's CMD flags")
        # every tunable the server has reaches it from .env
        if CONFIG_SWIFT.exists():
            self.assertEqual(set(names), set(SERVER_ENV) - IMAGE_FIXED)
        else:
            self.assertLessEqual(set(FIXED_ENV) - IMAGE_FIXED, set(names))

    def test_server_configuration_has_the_fixed_names_and_defaults(self):
        if not CONFIG_SWIFT.exists():
            self.skipTest("ServerConfiguration.swift not written yet")
        for name, default in FIXED_ENV.items():
            self.assertIn(name, SERVER_ENV, f"the server does not read {name}")
            if default is not None:
                self.assertEqual(SERVER_ENV[name], default, name)
        for name, default in SERVER_ENV.items():
            self.assertIsNotNone(default, f"could not read the default of {name} from the sources")

    def test_server_healthcheck_matches_the_dockerfile(self):
        def url(cmd):
            return re.search(r"https?://[^\s\"']+", cmd).group(0)
        compose_test = SERVER["healthcheck"]["test"]
        compose_cmd = " ".join(compose_test[1:]) if isinstance(compose_test, list) else compose_test
        self.assertEqual(url(compose_cmd), url(DF.one("HEALTHCHECK")))

    def test_graceful_stop_window(self):
        # The contract: on SIGTERM the process commits what it acknowledged and exits within 60 s.
        self.assertGreaterEqual(duration_seconds(SERVER["stop_grace_period"]), 60)
        self.assertEqual(SERVER.get("stop_signal", "SIGTERM"), "SIGTERM")

    def test_one_shot_project_creation_path(self):
        # `docker compose run --rm crash-server project create myapp` works through the ENTRYPOINT:
        # no command/entrypoint override in compose that would swallow the subcommand.
        self.assertNotIn("entrypoint", SERVER)
        self.assertNotIn("command", SERVER)
        self.assertIn("crash-server", SERVICES)

    def test_read_only_root_has_a_tmp(self):
        if SERVER.get("read_only"):
            self.assertIn("/tmp", SERVER.get("tmpfs") or [])


def role_names() -> dict[str, str]:
    """The owner and server roles Deploy/postgres-roles.sh creates when none are named."""
    text = ROLES_SH.read_text(encoding="utf-8")
    return {"owner": re.search(r"owner=\"\$\{DB_OWNER_ROLE:-(\w+)\}\"", text).group(1),
            "app": re.search(r"app=\"\$\{DB_APP_ROLE:-(\w+)\}\"", text).group(1)}


def role_statements() -> dict[str, str]:
    """`ALTER ROLE :"owner" WITH ...` and `ALTER ROLE :"app" WITH ...` of the role script, by variable."""
    text = ROLES_SH.read_text(encoding="utf-8")
    return dict(re.findall(r'(?m)^ALTER ROLE :"(\w+)" WITH ([^;]+);', text))


class DatabaseRoles(unittest.TestCase):
    """The server connects as a role that owns nothing and has no DDL, role or database rights;
    migrations run as the owner role, in a one-shot service the server waits for.
    Tests/Deploy/test_database_roles.py proves the same on a real PostgreSQL."""

    def test_roles_script_runs_at_first_start(self):
        mounts = [v.split(":") for v in POSTGRES["volumes"]]
        self.assertIn(["./Deploy/postgres-roles.sh", "/docker-entrypoint-initdb.d/10-roles.sh", "ro"], mounts)
        # Executable: the image runs it in its own shell instead of sourcing it into its entrypoint.
        self.assertTrue(os.access(ROLES_SH, os.X_OK))
        subprocess.run(["sh", "-n", str(ROLES_SH)], check=True)
        for name in ("POSTGRES_OWNER_PASSWORD", "POSTGRES_APP_PASSWORD"):
            self.assertEqual(POSTGRES["environment"][name], TEST_ENV[name])

    def test_neither_role_is_privileged(self):
        statements = role_statements()
        self.assertEqual(set(statements), {"owner", "app"})
        for variable, options in statements.items():
            words = set(options.split())
            for flag in ("SUPERUSER", "CREATEDB", "CREATEROLE", "REPLICATION", "BYPASSRLS"):
                self.assertIn("NO" + flag, words, f"{variable}: NO{flag}")
                self.assertNotIn(flag, words, f"{variable}: {flag}")
            self.assertIn("LOGIN", words)
        text = ROLES_SH.read_text(encoding="utf-8")
        # No membership that would lend the server role another's rights.
        self.assertNotRegex(text, r'(?im)^GRANT\s+(:"\w+"|pg_\w+|\w+)\s+TO\b')
        self.assertNotRegex(text, r"(?i)\bGRANT\s+ALL\b")

    def test_server_role_gets_rows_only(self):
        text = ROLES_SH.read_text(encoding="utf-8")
        grants = re.findall(r'(?m)^(?:ALTER DEFAULT PRIVILEGES FOR ROLE :"owner"(?: IN SCHEMA public)? )?GRANT ([^;]+?) TO :"app";', text)
        rights = set()
        for grant in grants:
            rights |= {r.strip() for r in grant.split(" ON ")[0].split(",")}
        self.assertEqual(rights, {"SELECT", "INSERT", "UPDATE", "DELETE", "USAGE", "EXECUTE"})
        self.assertIn("SELECT format('GRANT CONNECT ON DATABASE %I TO %I', current_database(), :'app')", text)
        self.assertIn('ALTER DEFAULT PRIVILEGES FOR ROLE :"owner" REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC', text)
        self.assertRegex(text, r'ALTER DEFAULT PRIVILEGES FOR ROLE :"owner" IN SCHEMA public GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO :"app"')
        self.assertRegex(text, r'ALTER DATABASE %I OWNER TO %I\', current_database\(\), :\'owner\'')
        self.assertIn("REVOKE CREATE ON SCHEMA public FROM PUBLIC", text)

    def test_server_and_migrate_connect_as_different_roles(self):
        roles = role_names()
        self.assertNotEqual(roles["owner"], roles["app"])
        server = urlsplit(dict(env_items(SERVER))["DATABASE_URL"])
        migrate = urlsplit(dict(env_items(MIGRATE))["DATABASE_URL"])
        self.assertEqual(server.username, roles["app"])
        self.assertEqual(migrate.username, roles["owner"])
        self.assertEqual(migrate.password, TEST_ENV["POSTGRES_OWNER_PASSWORD"])
        self.assertEqual((server.hostname, server.port, server.path), (migrate.hostname, migrate.port, migrate.path))
        # The superuser is neither: it serves the init scripts, backups and the standby.
        self.assertNotIn(POSTGRES["environment"]["POSTGRES_USER"], roles.values())
        other = "postgres://owner:p@db.internal:6432/crash?sslmode=require"
        resolved = interpolate_tree(RAW, dict(TEST_ENV, MIGRATE_DATABASE_URL=other))
        self.assertEqual(dict(env_items(resolved["services"]["migrate"]))["DATABASE_URL"], other)

    def test_migrate_runs_once_before_the_server(self):
        self.assertEqual(MIGRATE["command"], ["migrate"])
        self.assertEqual(MIGRATE["image"], SERVER["image"])
        self.assertEqual(MIGRATE["build"], SERVER["build"])
        self.assertEqual(MIGRATE["depends_on"]["postgres"]["condition"], "service_healthy")
        self.assertEqual(SERVER["depends_on"]["migrate"]["condition"], "service_completed_successfully")
        self.assertNotIn("ports", MIGRATE)

    def test_partition_upkeep_needs_no_ddl_right(self):
        # The server role keeps the partitions through the owner's SECURITY DEFINER functions.
        schema = (ROOT / "schema.sql").read_text(encoding="utf-8")
        for function in ("crashguard_ensure_partitions(date, date)", "crashguard_drop_partitions_before(date)"):
            self.assertRegex(schema, re.escape(f"ALTER FUNCTION {function} SECURITY DEFINER SET search_path = %I, pg_temp"))

    def test_standby_replicates_as_the_superuser(self):
        script = STANDBY_SH.read_text(encoding="utf-8")
        self.assertRegex(script, rf"pg_basebackup\s[^\n]*-U {POSTGRES['environment']['POSTGRES_USER']}\b")
        example = ENV_EXAMPLE.read_text(encoding="utf-8")
        read_url = re.search(r"(?m)^# ?DATABASE_READ_URL=(\S+)", example).group(1)
        self.assertEqual(urlsplit(read_url).username, role_names()["app"])


class MetricsToken(unittest.TestCase):
    """/metrics answers only the bearer token on the published port, and no proxy passes it on."""

    def test_compose_requires_the_token(self):
        self.assertEqual(dict(env_items(SERVER))["CRASHGUARD_METRICS_TOKEN"], TEST_ENV["CRASHGUARD_METRICS_TOKEN"])
        raw = dict(env_items(RAW["services"]["crash-server"]))["CRASHGUARD_METRICS_TOKEN"]
        self.assertRegex(raw, r"^\$\{CRASHGUARD_METRICS_TOKEN:\?")

    def test_proxies_do_not_publish_metrics(self):
        for path in (NGINX, NGINX_REPLICAS):
            text = path.read_text(encoding="utf-8")
            self.assertRegex(text, r"location = /metrics\s*\{\s*(deny all;|return 404;)\s*\}", path.name)
            self.assertNotRegex(text, r"location\s+(~\*?|\^~)?\s*/metrics[^{]*\{[^}]*proxy_pass", path.name)
        caddy = CADDY.read_text(encoding="utf-8")
        matcher = re.search(r"@(\w+) path /metrics\b", caddy)
        self.assertTrue(matcher, "Caddyfile: no matcher for /metrics")
        self.assertRegex(caddy, rf"respond @{matcher.group(1)} 40[34]")


class DockerfileShape(unittest.TestCase):
    def test_two_stages_swift_63_and_same_ubuntu(self):
        self.assertEqual(len(DF.stages), 2)
        builder, alias = DF.from_image(0)
        runtime, _ = DF.from_image(-1)
        m = re.fullmatch(r"swift:6\.3(?:\.\d+)?-(jammy|noble)", builder)
        self.assertTrue(m, builder)
        self.assertEqual(runtime, f"ubuntu:{m.group(1)}")
        self.assertTrue(alias)
        self.assertTrue(any(f"--from={alias}" in c for c in DF.all("COPY", -1)))

    def test_builds_the_crash_server_product_statically(self):
        runs = " && ".join(DF.all("RUN", 0))
        self.assertIn("swift build -c release --product crash-server --static-swift-stdlib", runs)
        manifest = (ROOT / "Package.swift").read_text(encoding="utf-8")
        self.assertRegex(manifest, r'\.executable\(\s*name:\s*"crash-server"')

    def test_dependencies_resolve_in_their_own_layer(self):
        ins = DF.stages[0]
        idx = {w + " " + r: i for i, (w, r) in enumerate(ins)}
        copy_manifest = idx.get("COPY ./Package.* ./")
        resolve = idx.get("RUN swift package resolve")
        copy_all = idx.get("COPY . .")
        self.assertIsNotNone(copy_manifest)
        self.assertIsNotNone(resolve)
        self.assertIsNotNone(copy_all)
        self.assertLess(copy_manifest, resolve)
        self.assertLess(resolve, copy_all)

    def test_builder_has_zlib_headers(self):
        # Package.swift's CZlib system library needs zlib's headers (pkg-config zlib).
        self.assertIn("zlib1g-dev", " ".join(DF.all("RUN", 0)))

    def test_non_root_user(self):
        user = DF.one("USER").split(":")[0]
        self.assertNotIn(user, {"root", "0"})
        self.assertTrue(any(re.search(rf"useradd\b.*\b{re.escape(user)}$", r) for r in DF.all("RUN", -1)))
        names = [w for w, _ in DF.stages[-1]]
        self.assertLess(names.index("USER"), names.index("ENTRYPOINT"))

    def test_backtracer_on(self):
        value = DF.env()["SWIFT_BACKTRACE"]
        opts = dict(o.split("=", 1) for o in value.split(","))
        for key, want in {"enable": "yes", "sanitize": "yes", "threads": "all", "images": "all",
                          "interactive": "no"}.items():
            self.assertEqual(opts.get(key), want, key)
        tracer = opts.get("swift-backtrace")
        self.assertTrue(tracer and tracer.startswith("/app/"), "static binaries need the backtracer's path")
        staged = Path(tracer).name
        self.assertIn(f"cp /usr/libexec/swift/linux/{staged} ./", " ".join(DF.all("RUN", 0)))

    def test_staging_copies_executable_and_schema(self):
        runs = " ".join(DF.all("RUN", 0))
        self.assertRegex(runs, r'--show-bin-path\)/crash-server" \./')
        m = re.search(r"cp /build/(\S+) \./schema\.sql", runs)
        self.assertTrue(m, "schema.sql is not staged into /app")
        self.assertIn("WORKDIR /staging", [f"WORKDIR {r}" for r in DF.all("WORKDIR", 0)])
        self.assertIn("COPY --from=build /staging /app", [f"COPY {r}" for r in DF.all("COPY", -1)])
        self.assertTrue((ROOT / m.group(1)).is_file(), f"{m.group(1)} is missing from the repository")

    def test_entrypoint_and_cmd(self):
        self.assertEqual(json.loads(DF.one("ENTRYPOINT")), ["/app/crash-server"])
        cmd = json.loads(DF.one("CMD"))
        self.assertEqual(cmd, ["serve", "--host", "0.0.0.0", "--port", "8080"])
        self.assertIn(cmd[0], SUBCOMMANDS)

    def test_healthcheck_on_healthz(self):
        hc = DF.one("HEALTHCHECK")
        m = re.search(r"http://(127\.0\.0\.1|localhost):(\d+)(/\S*)", hc)
        self.assertTrue(m, hc)
        self.assertEqual(m.group(2), image_port())
        self.assertEqual(m.group(3), "/healthz")
        if "curl" in hc:  # the probe's tool must be in the runtime image
            self.assertRegex(" ".join(DF.all("RUN", -1)), r"apt-get -q install .*\bcurl\b")

    def test_workdir_is_app(self):
        self.assertEqual(DF.all("WORKDIR", -1), ["/app"])



def target_folders(manifest: str, kinds: str) -> list[str]:
    """The source folder of each declared target: its `path:` when given, else the default."""
    calls = list(re.finditer(r"\.(" + kinds + r")\(\s*name:\s*\"([^\"]+)\"", manifest))
    folders = []
    for i, call in enumerate(calls):
        end = calls[i + 1].start() if i + 1 < len(calls) else len(manifest)
        explicit = re.search(r"\bpath:\s*\"([^\"]+)\"", manifest[call.end():end])
        kind, name = call.group(1), call.group(2)
        folders.append(explicit.group(1) if explicit else f"{'Tests' if kind == 'testTarget' else 'Sources'}/{name}")
    return folders


class DockerIgnore(unittest.TestCase):
    PATTERNS = [l.strip() for l in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
                if l.strip() and not l.strip().startswith("#")]

    def test_keeps_what_the_build_needs(self):
        manifest = (ROOT / "Package.swift").read_text(encoding="utf-8")
        needed = ["Package.swift", "schema.sql"]
        for folder in target_folders(manifest, kinds="target|executableTarget|systemLibrary|testTarget"):
            needed.append(f"{folder}/x.swift")
        for path in needed:
            self.assertFalse(dockerignore_excludes(self.PATTERNS, path), f".dockerignore drops {path}")

    def test_every_target_folder_is_in_the_context(self):
        # `COPY . .` then `swift build` loads the whole manifest: a declared target whose folder
        # is missing (say, a test target not committed) fails the image build.
        manifest = (ROOT / "Package.swift").read_text(encoding="utf-8")
        for relative in target_folders(manifest, kinds="target|executableTarget|testTarget"):
            folder = ROOT / relative
            self.assertTrue(folder.is_dir(), f"{relative} is missing")

    def test_drops_build_output_git_and_secrets(self):
        for path in (".build/release/x", ".git/HEAD", ".env", ".swiftpm/config", ".build-linux/x"):
            self.assertTrue(dockerignore_excludes(self.PATTERNS, path), path)


class EnvExample(unittest.TestCase):
    TEXT = ENV_EXAMPLE.read_text(encoding="utf-8")

    def test_names_are_known(self):
        for name in re.findall(r"(?m)^#? ?([A-Z][A-Z0-9_]*)=", self.TEXT):
            self.assertIn(name, set(SERVER_ENV) | COMPOSE_ONLY_VARS, name)

    def test_defaults_match_the_server(self):
        for name, value in re.findall(r"(?m)^# ?([A-Z][A-Z0-9_]*)=(\S*)", self.TEXT):
            want = SERVER_ENV.get(name)
            if want is not None and value and "://" not in value:
                self.assertEqual(value, want, name)

    def test_no_accepted_weak_default(self):
        # The secrets are empty: `cp .env.example .env` alone cannot start the stack (compose
        # refuses), so no database is ever created with a placeholder password.
        values = dict(re.findall(r"(?m)^([A-Z][A-Z0-9_]*)=(.*)$", self.TEXT))
        for name in (*PASSWORD_VARS, "CRASHGUARD_METRICS_TOKEN"):
            self.assertIn(name, values, f"{name} is not listed uncommented")
            self.assertEqual(values[name], "", f"{name} has a default")
        with self.assertRaises(InterpolationError):
            interpolate_tree(RAW, values)
        self.assertNotIn("change-me", self.TEXT.replace("`change-me`", ""))


class Readme(unittest.TestCase):
    def setUp(self):
        if not README:
            self.fail("Deploy/README.md is missing")

    def test_topics(self):
        for needle in ("docker compose up", "docker compose run --rm crash-server project create myapp",
                       "pg_dump", "pg_restore", "forward-only", "idempotent", "Caddyfile", "nginx.conf",
                       "replicas", "SIGTERM", ".env.example"):
            self.assertIn(needle, README, needle)

    def test_every_setting_and_endpoint_is_named(self):
        for name in SERVER_ENV:
            self.assertIn(name, README, name)
        for path in ENDPOINTS:
            self.assertIn(path, README, path)

    def test_stated_defaults_match(self):
        # Table rows: | `NAME` | `default` | meaning |
        for name, default in re.findall(r"(?m)^\| `([A-Z_]+)` \| `?([^|`]*?)`? \|", README):
            want = SERVER_ENV.get(name)
            if want is not None:
                self.assertEqual(default.strip(), want, name)

    def test_sizing_table_placeholder_is_marked(self):
        self.assertIn("<!-- sizing:begin", README)
        self.assertIn("<!-- sizing:end -->", README)

    def test_compose_services_and_ports_agree(self):
        for name in SERVICES:
            self.assertIn(name, README)
        self.assertIn(f":{image_port()}", README)


class ProxyConfigs(unittest.TestCase):
    def test_nginx_body_limit_above_ours_and_upstream_port(self):
        text = NGINX.read_text(encoding="utf-8")
        m = re.search(r"client_max_body_size\s+(\d+)([kKmMgG]?)\s*;", text)
        self.assertTrue(m, "client_max_body_size missing")
        size = int(m.group(1)) * {"": 1, "k": 1024, "m": 1024 ** 2, "g": 1024 ** 3}[m.group(2).lower()]
        self.assertGreater(size, MAX_BODY)
        self.assertRegex(text, rf"server\s+[\w.\-]+:{image_port()}\b")
        self.assertRegex(text, r"proxy_request_buffering\s+off|proxy_http_version\s+1\.1")

    def test_caddy_body_limit_above_ours_and_upstream_port(self):
        text = CADDY.read_text(encoding="utf-8")
        m = re.search(r"max_size\s+(\d+)\s*([KMG]i?B|B)?", text, re.I)
        self.assertTrue(m, "request_body max_size missing")
        unit = (m.group(2) or "B").upper()
        mult = {"B": 1, "KB": 1000, "MB": 1000 ** 2, "GB": 1000 ** 3,
                "KIB": 1024, "MIB": 1024 ** 2, "GIB": 1024 ** 3}[unit]
        self.assertGreater(int(m.group(1)) * mult, MAX_BODY)
        self.assertRegex(text, rf"reverse_proxy\s+[^\n]*:{image_port()}\b")

    def test_proxies_health_check_the_servers_probe(self):
        for path in (NGINX, CADDY):
            text = path.read_text(encoding="utf-8")
            self.assertIn("/readyz", text, path.name)


class _ComposeLoader(yaml.SafeLoader):
    """PyYAML plus Compose's merge tags: `!reset` (drop the base file's value) and `!override`
    (replace it instead of merging); both load as a (tag, value) pair."""


def _tagged(loader, node, tag):
    if isinstance(node, yaml.SequenceNode):
        return (tag, loader.construct_sequence(node, deep=True))
    if isinstance(node, yaml.MappingNode):
        return (tag, loader.construct_mapping(node, deep=True))
    return (tag, loader.construct_scalar(node) or None)


for _tag in ("!reset", "!override"):
    _ComposeLoader.add_constructor(_tag, lambda loader, node, tag=_tag: _tagged(loader, node, tag))


def compose_merge(base, override):
    """Compose's merge of an override file onto a base file, enough for our files: mappings merge
    key by key, `ports`/`volumes`/`command`-like sequences: override's replace only with
    !override; `!reset` removes the key."""
    if isinstance(override, tuple):
        tag, value = override
        return None if tag == "!reset" else value
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for k, v in override.items():
            merged = compose_merge(base.get(k), v)
            if merged is None and isinstance(v, tuple) and v[0] == "!reset":
                out.pop(k, None)
            else:
                out[k] = merged
        return out
    if isinstance(base, list) and isinstance(override, list):
        return base + [x for x in override if x not in base]
    return override


def strip_tags(node):
    if isinstance(node, tuple):
        return strip_tags(node[1]) if node[1] is not None else []
    if isinstance(node, dict):
        return {k: strip_tags(v) for k, v in node.items()}
    if isinstance(node, list):
        return [strip_tags(v) for v in node]
    return node


class ReplicasOverride(unittest.TestCase):
    """docker-compose.replicas.yml: replicas behind nginx on the one PostgreSQL, and a standby."""

    @classmethod
    def setUpClass(cls):
        cls.raw = yaml.load(REPLICAS.read_text(encoding="utf-8"), Loader=_ComposeLoader)
        cls.merged = interpolate_tree(compose_merge(RAW, cls.raw), TEST_ENV)
        cls.services = cls.merged["services"]

    def test_override_and_merged_file_validate_against_the_spec(self):
        validator = schema_validator()
        for label, doc in (("override", strip_tags(self.raw)), ("merged", self.merged)):
            errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
            self.assertFalse(errors, f"{label}: " + "; ".join(
                f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors))

    def test_replicas_publish_nothing_and_the_proxy_publishes_the_image_port(self):
        server = self.services["crash-server"]
        self.assertNotIn("ports", server)
        self.assertGreaterEqual(server["deploy"]["replicas"], 2)
        self.assertEqual(self.services["proxy"]["ports"], [f"{image_port()}:{image_port()}"])
        self.assertEqual(self.services["proxy"]["depends_on"]["crash-server"]["condition"], "service_healthy")

    def test_pool_times_replicas_fits_max_connections(self):
        command = " ".join(self.services["postgres"]["command"])
        max_connections = int(re.search(r"max_connections=(\d+)", command).group(1))
        # Each replica: its pool and its query pool, the ingest pool's two connections and the
        # ingest-key listener's own connection (docs/scaling.md).
        pool = 2 * int(SERVER_ENV["CRASHGUARD_DB_POOL_SIZE"]) + 3
        self.assertLess(self.services["crash-server"]["deploy"]["replicas"] * pool, max_connections)

    def test_proxy_config_is_mounted_and_balances_the_service(self):
        volumes = self.services["proxy"]["volumes"]
        self.assertTrue(any(v.startswith("./Deploy/nginx.replicas.conf:") for v in volumes))
        text = NGINX_REPLICAS.read_text(encoding="utf-8")
        self.assertRegex(text, rf"server\s+crash-server:{image_port()}\b")
        self.assertRegex(text, rf"listen\s+{image_port()}\s*;")
        m = re.search(r"client_max_body_size\s+(\d+)([kKmMgG]?)\s*;", text)
        size = int(m.group(1)) * {"": 1, "k": 1024, "m": 1024 ** 2, "g": 1024 ** 3}[m.group(2).lower()]
        self.assertGreater(size, MAX_BODY)
        self.assertIn("proxy_next_upstream", text)

    def test_standby_is_optional_and_streams_from_the_primary(self):
        standby = self.services["postgres-standby"]
        self.assertEqual(standby["profiles"], ["standby"])
        self.assertEqual(standby["image"], POSTGRES["image"])
        self.assertIn("standby", self.merged["volumes"])
        script = STANDBY_SH.read_text(encoding="utf-8")
        self.assertRegex(script, r"pg_basebackup\s[^\n]*-h postgres\b[^\n]*-R\b[^\n]*-X stream")
        self.assertIn("hot_standby=on", script)
        hba = REPLICATION_SH.read_text(encoding="utf-8")
        self.assertRegex(hba, r"host replication \S+ all scram-sha-256")
        self.assertTrue(any("/docker-entrypoint-initdb.d/" in v for v in self.services["postgres"]["volumes"]))
        for path in (STANDBY_SH, REPLICATION_SH):
            subprocess.run(["sh", "-n", str(path)], check=True)

    def test_merge_keeps_the_base_services_whole(self):
        for name in ("postgres", "crash-server"):
            for key in ("image", "healthcheck", "stop_grace_period"):
                self.assertEqual(self.services[name].get(key), SERVICES[name].get(key), f"{name}.{key}")


class Replay(unittest.TestCase):
    def test_script_is_executable_bash(self):
        self.assertTrue(os.access(REPLAY, os.X_OK))
        subprocess.run(["bash", "-n", str(REPLAY)], check=True)

    def test_dry_run_replays_the_dockerfile(self):
        out = subprocess.run([str(REPLAY), "--dry-run"], check=True, capture_output=True, text=True,
                             env=dict(os.environ, CRASHGUARD_REPLAY_PORT="18080")).stdout
        lines = dict(l.split(": ", 1) for l in out.splitlines())
        self.assertEqual(lines["build"], "swift build -c release --product crash-server --static-swift-stdlib")
        run = lines["run"].split()
        self.assertTrue(run[0].endswith("/app/crash-server"))
        self.assertEqual(run[1:], ["serve", "--host", "0.0.0.0", "--port", "18080"])
        self.assertIn("http://127.0.0.1:18080/healthz", lines["healthcheck"])
        self.assertTrue(lines["env"].startswith("SWIFT_BACKTRACE=" + DF.env()["SWIFT_BACKTRACE"].split(",swift")[0]))
        passthrough = {l.split(": ", 1)[1] for l in out.splitlines() if l.startswith("passthrough: ")}
        compose_names = {k for k, v in env_items(RAW["services"]["crash-server"]) if v is None}
        self.assertEqual(passthrough, compose_names)


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=1).result
    failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
    skipped = len(result.skipped)
    passed = result.testsRun - failed - skipped
    print(f"deploy: {passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else ""))
    sys.exit(1 if failed else 0)
