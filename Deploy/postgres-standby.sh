#!/bin/sh
# The hot standby of docker-compose.replicas.yml: cloned once from the primary with
# pg_basebackup (-R writes primary_conninfo and standby.signal), then kept by streaming
# replication, as the superuser `postgres` (the server's roles may not replicate).
# PGPASSWORD comes from the compose file.
set -eu
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  until pg_basebackup -h postgres -p 5432 -U postgres -D "$PGDATA" -R -X stream -c fast; do
    echo "standby: primary not ready for a base backup; retrying in 2 s" >&2
    rm -rf "${PGDATA:?}"/* 2>/dev/null || true
    sleep 2
  done
  chmod 700 "$PGDATA"
fi
exec postgres -c hot_standby=on -c hot_standby_feedback=on -c max_connections=300
