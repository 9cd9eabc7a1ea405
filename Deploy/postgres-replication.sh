#!/bin/sh
# Run once by the official postgres image when it creates its data directory
# (docker-compose.replicas.yml mounts it into /docker-entrypoint-initdb.d): allows streaming
# replication connections from the compose network, for the superuser only (its password,
# POSTGRES_PASSWORD; the server's roles may not replicate).
set -eu
echo "host replication ${POSTGRES_USER:-postgres} all scram-sha-256" >> "$PGDATA/pg_hba.conf"
