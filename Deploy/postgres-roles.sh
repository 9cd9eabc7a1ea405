#!/bin/sh
# The database's two roles, neither a superuser nor able to create roles or databases:
#
#   crashguard      owns the database and every table, sequence and function schema.sql makes;
#                   `crash-server migrate` (compose's migrate service) connects as it.
#   crashguard_app  the server's role: reads and writes the rows of those tables, runs their
#                   functions, owns nothing and may create nothing; `crash-server serve` and the
#                   one-shot commands (`docker compose run --rm crash-server ...`) connect as it.
#
# Tables and sequences the owner creates later (a new schema.sql) are the server's to use by
# default privileges; the daily partitions of `reports` are made and dropped by two SECURITY
# DEFINER functions of the owner (schema.sql), so the server needs no DDL right for them.
#
# Run by the official postgres image when it first creates its data directory
# (docker-compose.yml mounts it into /docker-entrypoint-initdb.d), as the superuser over the
# local socket. Safe to run again, which also grants what the owner already has to the server
# role and resets both passwords:
#   docker compose exec postgres sh /docker-entrypoint-initdb.d/10-roles.sh
# Tests/Deploy/test_database_roles.py runs it against a real PostgreSQL.
#
# Environment: POSTGRES_OWNER_PASSWORD and POSTGRES_APP_PASSWORD (required), POSTGRES_USER and
# POSTGRES_DB (the image's), DB_OWNER_ROLE and DB_APP_ROLE (role names; crashguard and
# crashguard_app), and libpq's PGHOST/PGPORT when not on the local socket.
set -eu
: "${POSTGRES_OWNER_PASSWORD:?POSTGRES_OWNER_PASSWORD is required}"
: "${POSTGRES_APP_PASSWORD:?POSTGRES_APP_PASSWORD is required}"

psql -X -q -v ON_ERROR_STOP=1 --username "${POSTGRES_USER:-postgres}" --dbname "${POSTGRES_DB:-crashguard}" \
  -v owner="${DB_OWNER_ROLE:-crashguard}" -v app="${DB_APP_ROLE:-crashguard_app}" \
  -v owner_password="$POSTGRES_OWNER_PASSWORD" -v app_password="$POSTGRES_APP_PASSWORD" <<'SQL'
SELECT format('CREATE ROLE %I', :'owner') WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'owner') \gexec
SELECT format('CREATE ROLE %I', :'app') WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'app') \gexec
ALTER ROLE :"owner" WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS PASSWORD :'owner_password';
ALTER ROLE :"app" WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS PASSWORD :'app_password';

-- The owner owns the database (and so, from PostgreSQL 15 on, its public schema); only the two
-- roles may connect, and only the owner may create in the schema.
SELECT format('ALTER DATABASE %I OWNER TO %I', current_database(), :'owner') \gexec
SELECT format('REVOKE ALL ON DATABASE %I FROM PUBLIC', current_database()) \gexec
SELECT format('GRANT CONNECT ON DATABASE %I TO %I', current_database(), :'app') \gexec
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT USAGE, CREATE ON SCHEMA public TO :"owner";
GRANT USAGE ON SCHEMA public TO :"app";

-- What the owner creates from now on: rows and sequences usable by the server role, functions
-- executable by it alone.
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner" IN SCHEMA public GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO :"app";
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner" IN SCHEMA public GRANT USAGE, SELECT ON SEQUENCES TO :"app";
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner" REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner" IN SCHEMA public GRANT EXECUTE ON FUNCTIONS TO :"app";

-- What the owner already has (a second run, after migrations or on an existing database).
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO :"app";
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO :"app";
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO :"app";
SQL
