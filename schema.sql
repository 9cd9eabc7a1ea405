-- CrashGuard schema, applied by `crash-server migrate` and at every `serve` start.
-- Forward-only and idempotent: every statement may run again on a database that has it.
-- A change is a new statement appended below (or an IF NOT EXISTS column), never an edit
-- that would rewrite stored data.

CREATE TABLE IF NOT EXISTS projects (
    id              bigserial PRIMARY KEY,
    slug            text NOT NULL UNIQUE CHECK (slug ~ '^[a-z0-9][a-z0-9-]{0,63}$'),
    -- SHA-256 of the keys; the keys themselves are shown once and never stored.
    ingest_key_hash bytea NOT NULL UNIQUE,
    read_token_hash bytea NOT NULL UNIQUE,
    created_at      timestamptz NOT NULL DEFAULT now(),
    rotated_at      timestamptz
);

-- One row per crash group: a project's reports that share a signature.
CREATE TABLE IF NOT EXISTS crash_groups (
    id                bigserial PRIMARY KEY,
    project_id        bigint NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    signature         text NOT NULL,
    grouping_version  text NOT NULL,
    kind              text NOT NULL,
    title             text NOT NULL,
    normalized_reason text NOT NULL,
    report_count      bigint NOT NULL DEFAULT 0,
    first_seen        timestamptz NOT NULL,
    last_seen         timestamptz NOT NULL,
    fatal             boolean NOT NULL DEFAULT false,
    status            text NOT NULL DEFAULT 'open'
                      CHECK (status IN ('open', 'resolved', 'ignored', 'regressed')),
    resolved_in       text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    -- The grouping key, and the index every ingest upsert relies on.
    CONSTRAINT crash_groups_project_signature UNIQUE (project_id, signature)
);

-- The idempotency ledger: a report id is stored at most once per project. Kept apart
-- from the partitioned reports table, whose unique keys would have to include the
-- partition key. A row goes with its report (docs/server.md, "Schema and migrations"): erased with it
-- (ReportEraser, the retention sweep included), or deleted through the partition's rows when
-- crashguard_drop_partitions_before drops the partition. A retry of a stored report's id is a
-- duplicate for as long as the report is stored; once it is erased, ingest refuses its
-- timestamp as past the retention. The row is the key alone: nothing reads a report's
-- timestamp here, nor prunes by it (its index cost 29 bytes per stored report, the column 8,
-- docs/performance.md "Bytes on disk per report"). `ts` stays as a nullable column no server
-- of this version writes (a null costs nothing in a row of three columns): a server of the
-- version before it, still running beside a migrated database in a rolling upgrade, writes it.
CREATE TABLE IF NOT EXISTS report_ids (
    project_id bigint NOT NULL,
    id         uuid NOT NULL,
    ts         timestamptz,
    PRIMARY KEY (project_id, id)
);
DO $$ BEGIN
    IF (SELECT attnotnull FROM pg_attribute WHERE attrelid = 'report_ids'::regclass AND attname = 'ts' AND NOT attisdropped) THEN
        ALTER TABLE report_ids ALTER COLUMN ts DROP NOT NULL;
    END IF;
END; $$;
DROP INDEX IF EXISTS report_ids_ts;

-- Raw reports, range-partitioned by the client timestamp (daily partitions created
-- ahead by the server; old ones dropped by the retention setting).
CREATE TABLE IF NOT EXISTS reports (
    project_id  bigint NOT NULL,
    id          uuid NOT NULL,
    group_id    bigint NOT NULL,
    ts          timestamptz NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    kind        text NOT NULL,
    reason      text NOT NULL,
    -- stack and fingerprint (JSON arrays of strings) and context (a JSON object of strings)
    -- are JSON text, as the server's reader checked it in the body (RFC 8259) or its writer
    -- wrote it; text rather than jsonb, see "Report JSON as text" below.
    stack       text,
    fatal       boolean,
    app_id      text NOT NULL,
    app_version text NOT NULL,
    app_build   text,
    os          text,
    os_version  text,
    model       text,
    device_id   text,
    fingerprint text,
    context     text
) PARTITION BY RANGE (ts);
-- Newest-first listing of one group's reports, and the detail view's latest reports: the
-- index orders by time; reports of the same microsecond are put in id order by an incremental
-- sort of those few rows. Without `id` an entry is 16 bytes of key instead of 32: 50.5 bytes
-- per stored report instead of 80.4 (docs/performance.md, "Bytes on disk per report"). A
-- database with the index of three columns gets this one at the migration, built before the
-- old one is dropped: writes to `reports` wait while it builds (about 1 s per million
-- reports), reads only for the drop's moment.
DO $$ BEGIN
    IF pg_get_indexdef(to_regclass('reports_group_ts')) LIKE '%(group_id, ts DESC, id DESC)' THEN
        CREATE INDEX reports_group_ts_lean ON reports (group_id, ts DESC);
        DROP INDEX reports_group_ts;
        ALTER INDEX reports_group_ts_lean RENAME TO reports_group_ts;
    END IF;
END; $$;
CREATE INDEX IF NOT EXISTS reports_group_ts ON reports (group_id, ts DESC);
-- Window scans over a project (edges of rollup windows, device counts).
CREATE INDEX IF NOT EXISTS reports_project_ts ON reports (project_id, ts);
CREATE TABLE IF NOT EXISTS reports_default PARTITION OF reports DEFAULT;

-- Hourly rollup per group and the filter dimensions, written by the rollup aggregator from the
-- facts the ingest transaction appends (rollup_pending, below): window queries read this
-- instead of raw reports.
CREATE TABLE IF NOT EXISTS group_hourly (
    project_id  bigint NOT NULL,
    group_id    bigint NOT NULL,
    hour        timestamptz NOT NULL,
    app_id      text NOT NULL,
    app_version text NOT NULL,
    os          text NOT NULL,
    count       bigint NOT NULL,
    fatal_count bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (project_id, hour, group_id, app_id, app_version, os)
);
CREATE INDEX IF NOT EXISTS group_hourly_group ON group_hourly (group_id, hour);

-- Creates the daily partitions of `reports` covering [first, last]; safe to race. A day whose
-- reports went to the default partition (none was made for it in time: maintenance that could
-- not run for days) gets its partition with those reports moved into it, columns, `xact`
-- included, as they were: PostgreSQL refuses to make a partition for rows the default one
-- holds, so that day, and the maintenance's drops with it, would otherwise fail from then on.
CREATE OR REPLACE FUNCTION crashguard_ensure_partitions(first date, last date) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    d date := first;
    created integer := 0;
    name text;
    lo timestamptz;
    hi timestamptz;
    columns text;
BEGIN
    WHILE d <= last LOOP
        name := 'reports_p' || to_char(d, 'YYYYMMDD');
        lo := d::timestamp AT TIME ZONE 'UTC';
        hi := (d + 1)::timestamp AT TIME ZONE 'UTC';
        IF to_regclass(name) IS NULL THEN
            BEGIN
                EXECUTE format('CREATE TABLE %I PARTITION OF reports FOR VALUES FROM (%L) TO (%L)', name, lo, hi);
                created := created + 1;
            EXCEPTION
                WHEN duplicate_table THEN
                    NULL;
                WHEN check_violation THEN
                    SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) INTO columns
                    FROM pg_attribute WHERE attrelid = 'reports'::regclass AND attnum > 0 AND NOT attisdropped;
                    EXECUTE format('CREATE TEMP TABLE crashguard_moving ON COMMIT DROP AS SELECT %s FROM reports_default WITH NO DATA',
                                   columns);
                    EXECUTE format('WITH moved AS (DELETE FROM reports_default WHERE ts >= %L AND ts < %L RETURNING %s) '
                                   'INSERT INTO crashguard_moving SELECT * FROM moved', lo, hi, columns);
                    EXECUTE format('CREATE TABLE %I PARTITION OF reports FOR VALUES FROM (%L) TO (%L)', name, lo, hi);
                    EXECUTE format('INSERT INTO reports (%s) SELECT %s FROM crashguard_moving', columns, columns);
                    DROP TABLE crashguard_moving;
                    created := created + 1;
            END;
        END IF;
        d := d + 1;
    END LOOP;
    RETURN created;
END;
$$;

-- Drops daily partitions whose whole day is before `cutoff`, and the ledger rows of the
-- reports still in them, found through the partition's own rows: one primary-key probe each
-- (hash and merge joins are off in the function), so a drop costs what the partition holds,
-- never a scan of the ledger; the retention sweep has usually emptied it. Group counts and
-- rollups are kept.
CREATE OR REPLACE FUNCTION crashguard_drop_partitions_before(cutoff date) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    part record;
    dropped integer := 0;
BEGIN
    FOR part IN
        SELECT c.relname FROM pg_inherits i
        JOIN pg_class c ON c.oid = i.inhrelid
        JOIN pg_class p ON p.oid = i.inhparent
        WHERE p.relname = 'reports' AND c.relname ~ '^reports_p[0-9]{8}$'
          AND to_date(substring(c.relname from 10), 'YYYYMMDD') < cutoff
    LOOP
        EXECUTE format('DELETE FROM report_ids r USING %I p WHERE r.project_id = p.project_id AND r.id = p.id', part.relname);
        EXECUTE format('DROP TABLE IF EXISTS %I', part.relname);
        dropped := dropped + 1;
    END LOOP;
    RETURN dropped;
END;
$$;

-- Both run with the rights of the role that owns `reports` (the one that applies this file),
-- so a server connected as a role with no DDL rights keeps the partitions (Deploy/README.md,
-- "Database roles"). Their search path is fixed to this schema, with pg_temp last, so a
-- caller's own objects can never stand in for the tables they name.
DO $$ BEGIN
    EXECUTE format('ALTER FUNCTION crashguard_ensure_partitions(date, date) SECURITY DEFINER SET search_path = %I, pg_temp',
                   current_schema());
    EXECUTE format('ALTER FUNCTION crashguard_drop_partitions_before(date) SECURITY DEFINER SET search_path = %I, pg_temp '
                   'SET enable_hashjoin = off SET enable_mergejoin = off', current_schema());
END; $$;

-- Query rollups, all written by the rollup aggregator next to group_hourly.
-- Daily copy of group_hourly: windows read whole days here and only their edge hours there.
CREATE TABLE IF NOT EXISTS group_daily (
    project_id  bigint NOT NULL,
    group_id    bigint NOT NULL,
    day         timestamptz NOT NULL,
    app_id      text NOT NULL,
    app_version text NOT NULL,
    os          text NOT NULL,
    count       bigint NOT NULL,
    PRIMARY KEY (project_id, day, group_id, app_id, app_version, os)
);
DO $$ BEGIN IF to_regclass('group_daily_group') IS NULL THEN CREATE INDEX group_daily_group ON group_daily (group_id, day); END IF; END; $$;

-- All-time count per group and report dimension (facet app, version or os; 'model' rows,
-- which nothing read, are no longer written: see the end of this file): the `versions`
-- list, and the upper bounds that let a filtered top-N stop early.
CREATE TABLE IF NOT EXISTS group_facets (
    project_id bigint NOT NULL,
    group_id   bigint NOT NULL,
    facet      text NOT NULL CHECK (facet IN ('app', 'version', 'os', 'model')),
    value      text NOT NULL,
    count      bigint NOT NULL,
    first_seen timestamptz NOT NULL,
    last_seen  timestamptz NOT NULL,
    PRIMARY KEY (group_id, facet, value)
);
DO $$ BEGIN IF to_regclass('group_facets_rank') IS NULL THEN CREATE INDEX group_facets_rank ON group_facets (project_id, facet, value, count DESC, group_id); END IF; END; $$;

-- The (hour of the day, count) entries of a group_environment_model_daily row's `hours` (below).
CREATE OR REPLACE FUNCTION crashguard_model_hours(p_hours bytea, OUT hour integer, OUT count bigint) RETURNS SETOF record
LANGUAGE sql IMMUTABLE STRICT AS $$
    SELECT get_byte(p_hours, i), (get_byte(p_hours, i + 1)::bigint << 24) + (get_byte(p_hours, i + 2) << 16)
                                 + (get_byte(p_hours, i + 3) << 8) + get_byte(p_hours, i + 4)
    FROM generate_series(0, length(p_hours) - 5, 5) AS i
$$;
-- One entry of that form: the hour of the day (0-23), then the count as uint32 big-endian.
CREATE OR REPLACE FUNCTION crashguard_model_hours_entry(p_hour integer, p_count bigint) RETURNS bytea
LANGUAGE sql IMMUTABLE STRICT AS $$
    SELECT substring(int4send(p_hour) FROM 4) || substring(int8send(p_count) FROM 5)
$$;
-- `a` plus `sign` times `b`, hour by hour, in the same form (hours left at zero are dropped):
-- the aggregator adds a batch's hours (sign 1), erasure takes erased reports' away (-1).
CREATE OR REPLACE FUNCTION crashguard_model_hours_add(a bytea, b bytea, sign bigint) RETURNS bytea
LANGUAGE sql IMMUTABLE STRICT AS $$
    SELECT COALESCE(string_agg(crashguard_model_hours_entry(h, n), ''::bytea ORDER BY h), ''::bytea)
    FROM (SELECT h, sum(n)::bigint AS n
          FROM (SELECT hour AS h, count AS n FROM crashguard_model_hours(a)
                UNION ALL SELECT hour, sign * count FROM crashguard_model_hours(b)) x
          GROUP BY h HAVING sum(n) <> 0) y
$$;

-- Project-wide hourly counts by kind and version: the stats endpoint.
CREATE TABLE IF NOT EXISTS project_hourly (
    project_id  bigint NOT NULL,
    hour        timestamptz NOT NULL,
    kind        text NOT NULL,
    app_version text NOT NULL,
    count       bigint NOT NULL,
    PRIMARY KEY (project_id, hour, kind, app_version)
);

-- Per group, app version ('' for all versions) and hour or UTC day: the report count and a
-- HyperLogLog sketch of device ids (DeviceSketch.swift). Windows without app/os filters read
-- their counts here (a few rows per group and day instead of one per app/version/os), and
-- `devices` of large groups is estimated from the sketches. A sketch is a sparse list of
-- 3-byte entries (register uint16 big-endian, rank uint8) sorted by register. Written by the
-- rollup aggregator, one upsert per key and cycle: counts are added, and the sketch it merged
-- from the stored one and the cycle's devices replaces it when a register grew.
CREATE TABLE IF NOT EXISTS group_version_hourly (
    group_id    bigint NOT NULL,
    app_version text NOT NULL,
    hour        timestamptz NOT NULL,
    count       bigint NOT NULL,
    sketch      bytea NOT NULL,
    PRIMARY KEY (group_id, app_version, hour)
);
CREATE TABLE IF NOT EXISTS group_version_daily (
    group_id    bigint NOT NULL,
    app_version text NOT NULL,
    day         timestamptz NOT NULL,
    count       bigint NOT NULL,
    sketch      bytea NOT NULL,
    PRIMARY KEY (group_id, app_version, day)
);

-- The sketch register and rank of a device id, as DeviceSketch.register(for:) computes it:
-- the first 64 bits of SHA-256, the top 10 choosing the register, the rank one more than
-- the leading zeros of the other 54 (55 when all are zero). Used by `crash-bench seed`, the
-- rollups' recounts and the device counts of raw reports. A set of one row, not a record: a
-- call in FROM (LATERAL) is then inlined into the query instead of going through the function
-- executor for each device (the edge hours of an `environment=` list after a burst, 21,000
-- devices: 275 ms through the executor, 155 to 198 ms inlined; docs/performance.md).
DO $$ BEGIN
    IF (SELECT NOT proretset FROM pg_proc WHERE oid = to_regprocedure('crashguard_device_register(text)')) THEN
        DROP FUNCTION crashguard_device_register(text);
    END IF;
END; $$;
CREATE OR REPLACE FUNCTION crashguard_device_register(device_id text) RETURNS TABLE (register int, rank int)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT substring(h FROM 1 FOR 10)::bit(10)::int,
           COALESCE(NULLIF(position('1' IN substring(h FROM 11)::text), 0), 55)
    FROM (SELECT ('x' || encode(substring(sha256(convert_to(device_id, 'UTF8')) FROM 1 FOR 8), 'hex'))::bit(64) AS h) x
$$;

-- A project's per-version rollup rows recomputed from its stored reports, per 'hour' or
-- 'day' (UTC): what ingest writes batch by batch into group_version_hourly/daily. Used by
-- `crash-bench seed` to fill them, and by a test that checks ingest against it.
CREATE OR REPLACE FUNCTION crashguard_version_rollups(p_project bigint, p_unit text)
RETURNS TABLE (group_id bigint, app_version text, bucket timestamptz, count bigint, sketch bytea)
LANGUAGE sql STABLE AS $$
    SELECT s.g, s.v, s.b, sum(s.n)::bigint,
           COALESCE(string_agg(int2send(s.register::int2) || substring(int2send(s.rank::int2) FROM 2 FOR 1), ''::bytea
                               ORDER BY s.register), ''::bytea)
    FROM (
        SELECT r.group_id AS g, x.v, date_trunc(p_unit, r.ts, 'UTC') AS b, d.register, max(d.rank) AS rank, count(*) AS n
        FROM reports r
        CROSS JOIN LATERAL (VALUES (''), (r.app_version)) AS x(v)
        LEFT JOIN LATERAL (SELECT * FROM crashguard_device_register(r.device_id) WHERE r.device_id <> '') d ON true
        WHERE r.project_id = p_project
        GROUP BY 1, 2, 3, 4
    ) s GROUP BY 1, 2, 3
$$;

-- Top-N by all-time count (upper bounds for window counts), and the lastSeen/firstSeen sorts.
DO $$ BEGIN IF to_regclass('crash_groups_by_count') IS NULL THEN CREATE INDEX crash_groups_by_count ON crash_groups (project_id, report_count DESC, id); END IF; END; $$;
DO $$ BEGIN IF to_regclass('crash_groups_by_last_seen') IS NULL THEN CREATE INDEX crash_groups_by_last_seen ON crash_groups (project_id, last_seen DESC, id); END IF; END; $$;
DO $$ BEGIN IF to_regclass('crash_groups_by_first_seen') IS NULL THEN CREATE INDEX crash_groups_by_first_seen ON crash_groups (project_id, first_seen DESC, id); END IF; END; $$;

-- The inserting transaction of each report: paginated lists count "as of" the first page's
-- snapshot, subtracting reports committed since (found through this index), so a walk over
-- pages sees every group exactly once while ingest goes on.
-- (Checked first: ALTER TABLE would take an exclusive lock on reports at every start.)
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'reports'::regclass AND attname = 'xact' AND NOT attisdropped) THEN
        ALTER TABLE reports ADD COLUMN xact xid8 NOT NULL DEFAULT pg_current_xact_id();
    END IF;
END;
$$;
DO $$ BEGIN IF to_regclass('reports_project_xact') IS NULL THEN CREATE INDEX reports_project_xact ON reports (project_id, xact); END IF; END; $$;

-- Sentry ingest (docs/sentry.md): every project has a numeric id, unique on the server,
-- that Sentry SDKs put in their DSN's path and in /api/{sentryId}/envelope/. Adding the
-- column with a sequence default numbers the existing projects too.
CREATE SEQUENCE IF NOT EXISTS projects_sentry_id_seq;
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'projects'::regclass AND attname = 'sentry_id' AND NOT attisdropped) THEN
        ALTER TABLE projects ADD COLUMN sentry_id bigint NOT NULL DEFAULT nextval('projects_sentry_id_seq');
        ALTER SEQUENCE projects_sentry_id_seq OWNED BY projects.sentry_id;
    END IF;
END;
$$;
CREATE UNIQUE INDEX IF NOT EXISTS projects_sentry_id ON projects (sentry_id);

-- Grouping version per project (docs/grouping.md): a report is grouped by its project's
-- current version; each group keeps the version it was made with (crash_groups.grouping_version,
-- and the version is the first part of the signature hash, so (project_id, signature) stays
-- unique across versions). Projects that existed before this column keep v1, the rules their
-- groups were made with; projects created afterwards get v2.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'projects'::regclass AND attname = 'grouping_version' AND NOT attisdropped) THEN
        ALTER TABLE projects ADD COLUMN grouping_version text NOT NULL DEFAULT 'v1'
            CONSTRAINT projects_grouping_version_known CHECK (grouping_version IN ('v1', 'v2'));
        ALTER TABLE projects ALTER COLUMN grouping_version SET DEFAULT 'v2';
    END IF;
END;
$$;

-- The database snapshot of a paginated crash list's first page (pg_current_snapshot()),
-- kept here so a cursor carries only this row's id: a snapshot lists every transaction in
-- progress in the cluster and would not fit in a URL under load. Pruned after a day by
-- the partition maintenance; a cursor whose snapshot is gone walks on over current data.
CREATE TABLE IF NOT EXISTS list_snapshots (
    id         bigserial PRIMARY KEY,
    snapshot   pg_snapshot NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
DO $$ BEGIN IF to_regclass('list_snapshots_created_at') IS NULL THEN CREATE INDEX list_snapshots_created_at ON list_snapshots (created_at); END IF; END; $$;

-- Alerts (issue 16, docs/alerts.md): a project's webhooks. The secret signs every body
-- (HMAC-SHA256), so unlike the project keys it is stored as is: signing needs the key itself.
CREATE TABLE IF NOT EXISTS webhooks (
    id          bigserial PRIMARY KEY,
    project_id  bigint NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    url         text NOT NULL,
    events      text[] NOT NULL,
    format      text NOT NULL CHECK (format IN ('json', 'slack')),
    secret      text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS webhooks_project ON webhooks (project_id);

-- The transactional outbox: one row per (webhook, event), written in the transaction that
-- caused the event (ingest for group.new/group.regressed, the spike detector for group.spike).
-- `id` is the X-CrashGuard-Delivery header, the same on every retry. A sender claims due rows
-- under an advisory lock, at most two per webhook, and leases them (leased_until, and
-- next_attempt_at moved past the timeout, so a dead sender's rows are taken again).
-- Deleting a webhook deletes its pending deliveries.
CREATE TABLE IF NOT EXISTS webhook_deliveries (
    id              uuid PRIMARY KEY,
    webhook_id      bigint NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    group_id        bigint NOT NULL,
    event           text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    state           text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts        integer NOT NULL DEFAULT 0,
    last_attempt_at timestamptz,
    last_status     integer,
    last_error      text
);
CREATE INDEX IF NOT EXISTS webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE state = 'pending';
CREATE INDEX IF NOT EXISTS webhook_deliveries_last ON webhook_deliveries (webhook_id, last_attempt_at DESC);

-- A claimed delivery's lease: set by the claim, cleared by the attempt's outcome. The claim
-- counts a webhook's live leases so that one webhook holds at most two sending slots at once
-- (a hanging receiver's other deliveries wait, never another webhook's); the index holds only
-- the rows being sent. (Checked first: ALTER TABLE would lock the table at every start.)
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'webhook_deliveries'::regclass AND attname = 'leased_until' AND NOT attisdropped) THEN
        ALTER TABLE webhook_deliveries ADD COLUMN leased_until timestamptz;
    END IF;
END;
$$;
DO $$ BEGIN IF to_regclass('webhook_deliveries_leased') IS NULL THEN CREATE INDEX webhook_deliveries_leased ON webhook_deliveries (webhook_id) WHERE leased_until IS NOT NULL; END IF; END; $$;

-- The last group.spike of each group: at most one per group per 24 hours, also with several
-- replicas detecting at once (the conditional upsert is the arbiter).
CREATE TABLE IF NOT EXISTS group_spikes (
    group_id bigint PRIMARY KEY REFERENCES crash_groups (id) ON DELETE CASCADE,
    fired_at timestamptz NOT NULL
);

-- Debug files for server-side symbolication (docs/symbolication.md): ELF files keyed by their
-- GNU build id, per project. Kept in the database so every replica can symbolicate; each
-- server writes a file to its local cache directory on first use.
CREATE TABLE IF NOT EXISTS debug_files (
    project_id     bigint NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    build_id       text NOT NULL CHECK (build_id ~ '^[0-9a-f]{4,128}$'),
    kind           text NOT NULL DEFAULT 'elf' CHECK (kind IN ('elf')),
    name           text NOT NULL,
    size           bigint NOT NULL,
    sha256         text NOT NULL,
    -- Lowest PT_LOAD address, as a signed 64-bit bit pattern.
    load_address   bigint NOT NULL,
    has_debug_info boolean NOT NULL,
    has_symbols    boolean NOT NULL,
    uploaded_at    timestamptz NOT NULL DEFAULT now(),
    -- NULL: the contents are in debug_file_chunks (a value here is moved there below).
    content        bytea,
    PRIMARY KEY (project_id, build_id)
);

-- A debug file's contents in chunks of 1 MiB, in order (docs/symbolication.md): an upload is
-- stored from its file on disk, and a server's cache copy written back, one chunk at a time, so
-- no debug file is held in memory whole. Written in the transaction of the file's row.
CREATE TABLE IF NOT EXISTS debug_file_chunks (
    project_id bigint NOT NULL,
    build_id   text NOT NULL,
    seq        integer NOT NULL,
    data       bytea NOT NULL,
    PRIMARY KEY (project_id, build_id, seq),
    FOREIGN KEY (project_id, build_id) REFERENCES debug_files (project_id, build_id) ON DELETE CASCADE
);
-- Contents held whole in debug_files.content move to chunks.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema()
               AND table_name = 'debug_files' AND column_name = 'content' AND is_nullable = 'NO') THEN
        ALTER TABLE debug_files ALTER COLUMN content DROP NOT NULL;
    END IF;
    IF EXISTS (SELECT 1 FROM debug_files WHERE content IS NOT NULL) THEN
        INSERT INTO debug_file_chunks (project_id, build_id, seq, data)
        SELECT d.project_id, d.build_id, s.i, substring(d.content FROM s.i * 1048576 + 1 FOR 1048576)
        FROM debug_files d, generate_series(0, greatest(octet_length(d.content) - 1, 0) / 1048576) AS s(i)
        WHERE d.content IS NOT NULL
        ON CONFLICT DO NOTHING;
        UPDATE debug_files SET content = NULL WHERE content IS NOT NULL;
    END IF;
END;
$$;

-- Each rollup defined once (issue 14): the rows of a rollup table for one project,
-- recomputed from its stored reports. Ingest adds the same rows batch by batch in its
-- transaction (Ingest/CrashDatabase+*ollups.swift); `crash-bench seed` fills the tables
-- with `INSERT INTO t SELECT * FROM crashguard_rollup_t(project)`; RollupEquivalenceTests
-- ingests through the real route and compares every table with its function. Buckets are
-- UTC hours and days (`date_trunc(unit, ts, 'UTC')`, whatever the session's TimeZone),
-- like TimeWindow.floor in Swift. The per-version tables use crashguard_version_rollups;
-- group_hourly's, group_daily's, project_hourly's and group_facets' functions follow the
-- environment column they read ("Environments" below).
-- The groups' own totals (crash_groups.report_count, first_seen, last_seen, fatal).
CREATE OR REPLACE FUNCTION crashguard_rollup_group_totals(p_project bigint)
RETURNS TABLE (group_id bigint, report_count bigint, first_seen timestamptz, last_seen timestamptz, fatal boolean)
LANGUAGE sql STABLE AS $$
    SELECT r.group_id, count(*), min(r.ts), max(r.ts), bool_or(coalesce(r.fatal, false))
    FROM reports r WHERE r.project_id = p_project GROUP BY 1
$$;

-- Ingest path v2 (issue 13, docs/performance.md "Session 5"). Nothing reads a group's 'model'
-- facet (the models breakdown has its own table): ingest stopped writing it, one
-- upsert and two index entries per report group less, and its rows go.
DELETE FROM group_facets WHERE facet = 'model';

-- Report JSON as text (docs/performance.md, "Session 14"). Nothing queries inside stack,
-- fingerprint or context (the API and regrouping read them back as text), and building jsonb
-- cost PostgreSQL about 40 µs of CPU per 3.7 kB stack, half of it checking JSON the server
-- had checked. A database from before keeps its jsonb columns under the names *_jsonb (a
-- rename and new empty columns: no rewrite), read back with COALESCE; they are empty once the
-- partitions written before have passed the retention period. A new database has them empty.
DO $$
BEGIN
    IF (SELECT atttypid FROM pg_attribute WHERE attrelid = 'reports'::regclass AND attname = 'stack') = 'jsonb'::regtype THEN
        ALTER TABLE reports RENAME COLUMN stack TO stack_jsonb;
        ALTER TABLE reports RENAME COLUMN fingerprint TO fingerprint_jsonb;
        ALTER TABLE reports RENAME COLUMN context TO context_jsonb;
        ALTER TABLE reports ADD COLUMN stack text, ADD COLUMN fingerprint text, ADD COLUMN context text;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'reports'::regclass AND attname = 'stack_jsonb') THEN
        ALTER TABLE reports ADD COLUMN stack_jsonb jsonb, ADD COLUMN fingerprint_jsonb jsonb, ADD COLUMN context_jsonb jsonb;
    END IF;
END;
$$;

-- stack, fingerprint and context (about 2.5 kB of JSON per report, compressed inline) use lz4
-- instead of pglz: less CPU per stored report for the same size. Only rows written from now on
-- (no rewrite); partitions created later inherit the parent's setting; each table is checked
-- first so a re-application takes no lock. A server built without lz4 keeps pglz.
DO $$
DECLARE
    t regclass;
BEGIN
    FOR t IN SELECT 'reports'::regclass UNION ALL SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent = 'reports'::regclass LOOP
        IF EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = t AND attname IN ('stack', 'fingerprint', 'context') AND attcompression <> 'l') THEN
            EXECUTE format('ALTER TABLE %s ALTER COLUMN stack SET COMPRESSION lz4, ALTER COLUMN fingerprint SET COMPRESSION lz4, '
                           'ALTER COLUMN context SET COMPRESSION lz4', t);
        END IF;
    END LOOP;
EXCEPTION WHEN feature_not_supported THEN
    NULL;
END;
$$;

-- Ingest-key caches (docs/server.md "Keys"): every server caches which project an ingest key
-- belongs to, and LISTENs on crashguard_keys to drop its cache. Any change to projects,
-- by `project rotate`, `project grouping` or by hand in psql, notifies it when it commits;
-- the payload is the transaction id, which each server echoes on crashguard_keys_dropped
-- so `project rotate` can wait until no server still accepts the old key.
CREATE OR REPLACE FUNCTION crashguard_projects_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('crashguard_keys', pg_current_xact_id()::text);
    RETURN NULL;
END;
$$;
CREATE OR REPLACE TRIGGER projects_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON projects
    FOR EACH STATEMENT EXECUTE FUNCTION crashguard_projects_changed();

-- Release health (release-health.md, docs/release-health.md). A session is counted once as
-- started and once in its final state. session_states holds each session while an update may
-- still change it (updates are accepted for sessions started within 30 days; rows are pruned
-- after 31); `status` is 'ok' while open, else the final state it was counted in.
-- `did_hash` is the first 64 bits of SHA-256 of the session's `did` (the id itself is not kept).
CREATE TABLE IF NOT EXISTS session_states (
    project_id  bigint NOT NULL,
    sid         uuid NOT NULL,
    app_id      text NOT NULL,
    version     text NOT NULL,
    environment text NOT NULL,
    did_hash    bigint,
    started     timestamptz NOT NULL,
    status      text NOT NULL CHECK (status IN ('ok', 'exited', 'errored', 'crashed', 'abnormal')),
    seq         bigint NOT NULL,
    errors      bigint NOT NULL,
    duration    double precision,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project_id, sid)
) WITH (fillfactor = 80);
-- Room in each page (fillfactor) lets the update that ends a session be a HOT update: it
-- changes no indexed column, so no index entry is written. One index besides the key, on
-- `started` alone (the windows' sub-hour edges, the pruning): an index that also led with
-- project_id was chosen to lock sessions by key for a project new since the last ANALYZE,
-- reading all of the project's sessions.
CREATE INDEX IF NOT EXISTS session_states_started ON session_states (started);

-- Sentry `sessions` aggregates as sent (one row per entry): the sub-hour edges of a window
-- read them with session_states; pruned with it.
CREATE TABLE IF NOT EXISTS session_aggregates (
    project_id  bigint NOT NULL,
    app_id      text NOT NULL,
    version     text NOT NULL,
    environment text NOT NULL,
    started     timestamptz NOT NULL,
    did_hash    bigint,
    sessions    bigint NOT NULL,
    crashed     bigint NOT NULL,
    errored     bigint NOT NULL,
    abnormal    bigint NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS session_aggregates_project_started ON session_aggregates (project_id, started);

-- The rollups of sessions, by `started`, in three tables (docs/release-health.md, "Storage"):
-- each ingest transaction appends what it counted to session_deltas (an insert: no row lock
-- that concurrent requests of one release would queue on), and SessionCompactor folds the
-- deltas, about every second, into one row per hour (session_hours) and per UTC day
-- (session_days) per project, app, version and environment. A query reads whole days from
-- session_days, the whole hours of its partial edge days from session_hours, the deltas not
-- folded yet, and its sub-hour edges from the sessions themselves: O(days x releases) rows.
-- Every row has the counts, the earliest and latest `started` of its sessions (`firstSeen`,
-- `lastSeen`) and its users and crashed users as SessionUsers.encoded: the hashes while at most
-- 250, else a HyperLogLog sketch of 16,384 registers (sparse or dense). Folding moves a delta
-- into both rollups and deletes it in one transaction, so a snapshot counts it exactly once.
CREATE TABLE IF NOT EXISTS session_deltas (
    project_id    bigint NOT NULL,
    hour          timestamptz NOT NULL,
    app_id        text NOT NULL,
    version       text NOT NULL,
    environment   text NOT NULL,
    started       bigint NOT NULL,
    crashed       bigint NOT NULL,
    errored       bigint NOT NULL,
    abnormal      bigint NOT NULL,
    first_started timestamptz,
    last_started  timestamptz,
    users         bytea NOT NULL,
    crashed_users bytea NOT NULL
);
CREATE INDEX IF NOT EXISTS session_deltas_project_hour ON session_deltas (project_id, hour);

CREATE TABLE IF NOT EXISTS session_hours (
    project_id    bigint NOT NULL,
    hour          timestamptz NOT NULL,
    app_id        text NOT NULL,
    version       text NOT NULL,
    environment   text NOT NULL,
    started       bigint NOT NULL,
    crashed       bigint NOT NULL,
    errored       bigint NOT NULL,
    abnormal      bigint NOT NULL,
    first_started timestamptz,
    last_started  timestamptz,
    users         bytea NOT NULL,
    crashed_users bytea NOT NULL,
    PRIMARY KEY (project_id, hour, app_id, version, environment)
);
CREATE INDEX IF NOT EXISTS session_hours_version ON session_hours (project_id, version, hour);

CREATE TABLE IF NOT EXISTS session_days (
    project_id    bigint NOT NULL,
    day           timestamptz NOT NULL,
    app_id        text NOT NULL,
    version       text NOT NULL,
    environment   text NOT NULL,
    started       bigint NOT NULL,
    crashed       bigint NOT NULL,
    errored       bigint NOT NULL,
    abnormal      bigint NOT NULL,
    first_started timestamptz,
    last_started  timestamptz,
    users         bytea NOT NULL,
    crashed_users bytea NOT NULL,
    PRIMARY KEY (project_id, day, app_id, version, environment)
);
-- firstSeen/lastSeen: the first and last day of a version, one probe each.
CREATE INDEX IF NOT EXISTS session_days_version ON session_days (project_id, version, day);
-- Out of line and uncompressed: a dense sketch (16 KB) is read whole, and random ranks do not
-- compress enough to pay for decompressing them on every read.
ALTER TABLE session_hours ALTER COLUMN users SET STORAGE EXTERNAL, ALTER COLUMN crashed_users SET STORAGE EXTERNAL;
ALTER TABLE session_days ALTER COLUMN users SET STORAGE EXTERNAL, ALTER COLUMN crashed_users SET STORAGE EXTERNAL;

-- A database whose sessions were counted into 8 shard rows per release and hour
-- (session_hourly, its sketches as register rows in session_user_registers): its rows become
-- deltas, folded by the compactor like any other, and the two tables are dropped.
DO $$
BEGIN
    IF to_regclass('session_hourly') IS NOT NULL AND to_regclass('session_user_registers') IS NOT NULL THEN
        INSERT INTO session_deltas (project_id, hour, app_id, version, environment, started, crashed, errored, abnormal,
                                    first_started, last_started, users, crashed_users)
        SELECT h.project_id, h.hour, h.app_id, h.version, h.environment, h.started, h.crashed, h.errored, h.abnormal,
               h.first_started, h.last_started,
               CASE WHEN h.users_over THEN '\x01'::bytea || COALESCE((
                        SELECT string_agg(int2send(r.register::int2) || set_byte('\x00'::bytea, 0, r.rank), ''::bytea ORDER BY r.register)
                        FROM session_user_registers r
                        WHERE r.project_id = h.project_id AND r.hour = h.hour AND r.app_id = h.app_id AND r.version = h.version
                          AND r.environment = h.environment AND r.shard = h.shard AND NOT r.crashed), ''::bytea)
                    ELSE '\x00'::bytea || COALESCE((SELECT string_agg(int8send(x), ''::bytea) FROM unnest(h.users) x), ''::bytea) END,
               CASE WHEN h.crashed_users_over THEN '\x01'::bytea || COALESCE((
                        SELECT string_agg(int2send(r.register::int2) || set_byte('\x00'::bytea, 0, r.rank), ''::bytea ORDER BY r.register)
                        FROM session_user_registers r
                        WHERE r.project_id = h.project_id AND r.hour = h.hour AND r.app_id = h.app_id AND r.version = h.version
                          AND r.environment = h.environment AND r.shard = h.shard AND r.crashed), ''::bytea)
                    ELSE '\x00'::bytea || COALESCE((SELECT string_agg(int8send(x), ''::bytea) FROM unnest(h.crashed_users) x), ''::bytea) END
        FROM session_hourly h;
        DROP TABLE session_user_registers;
        DROP TABLE session_hourly;
    END IF;
END;
$$;

-- Drops the per-session state and raw aggregates of sessions started before `cutoff`
-- (no update can change them any more); the rollups are kept.
CREATE OR REPLACE FUNCTION crashguard_prune_sessions(cutoff timestamptz) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
    m bigint;
BEGIN
    DELETE FROM session_states WHERE started < cutoff;
    GET DIAGNOSTICS n = ROW_COUNT;
    DELETE FROM session_aggregates a USING projects p WHERE a.project_id = p.id AND a.started < cutoff;
    GET DIAGNOSTICS m = ROW_COUNT;
    RETURN n + m;
END;
$$;

-- Dashboard sessions (docs/dashboard.md "Sessions and security"): kept on the server, so
-- signing out or rotating the read token ends a session on every replica at once. The cookie
-- holds a random id; only its SHA-256 is stored. A session is bound to the read token it was
-- started with (a rotation also deletes the project's rows); rows past expires_at are deleted
-- at the next sign-in.
CREATE TABLE IF NOT EXISTS dashboard_sessions (
    id_hash         bytea PRIMARY KEY,
    project_id      bigint NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    read_token_hash bytea NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    expires_at      timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS dashboard_sessions_project ON dashboard_sessions (project_id);
CREATE INDEX IF NOT EXISTS dashboard_sessions_expires ON dashboard_sessions (expires_at);

-- Mach-O debug files (apple.md): keyed by their LC_UUID in build_id (lower case with dashes),
-- kind 'macho', one row per architecture (`arch`); `sha1` names a file's contents the way
-- Sentry's difs/assemble does. (Checked first: ALTER TABLE would lock the table at every start.)
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema()
                   AND table_name = 'debug_files' AND column_name = 'arch') THEN
        ALTER TABLE debug_files
            ADD COLUMN arch text,
            ADD COLUMN sha1 text,
            DROP CONSTRAINT IF EXISTS debug_files_build_id_check,
            DROP CONSTRAINT IF EXISTS debug_files_kind_check,
            ADD CONSTRAINT debug_files_build_id_check
                CHECK (build_id ~ '^([0-9a-f]{4,128}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$'),
            ADD CONSTRAINT debug_files_kind_check CHECK (kind IN ('elf', 'macho'));
    END IF;
END;
$$;
CREATE INDEX IF NOT EXISTS debug_files_project_sha1 ON debug_files (project_id, sha1);

-- Chunks of Sentry's chunk-upload protocol (apple.md, `sentry-cli`), by project and the SHA-1
-- of their bytes, until a difs/assemble names them; kept at least an hour (older ones are
-- deleted as new chunks arrive).
CREATE TABLE IF NOT EXISTS upload_chunks (
    project_id  bigint NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    sha1        text NOT NULL CHECK (sha1 ~ '^[0-9a-f]{40}$'),
    size        integer NOT NULL,
    data        bytea NOT NULL,
    uploaded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project_id, sha1)
);

-- Files sentry-cli assembled (by the SHA-1 it names them by) and the debug file each went to:
-- a file whose debug id was already stored with more (an executable after its dSYM) is still
-- known, so a later upload of it is `ok` without its chunks.
CREATE TABLE IF NOT EXISTS assembled_files (
    project_id bigint NOT NULL,
    sha1       text NOT NULL CHECK (sha1 ~ '^[0-9a-f]{40}$'),
    build_id   text NOT NULL,
    PRIMARY KEY (project_id, sha1),
    FOREIGN KEY (project_id, build_id) REFERENCES debug_files (project_id, build_id) ON DELETE CASCADE
);

-- accounts (accounts.md): users, their one-time set-up links, server-side sign-in sessions,
-- project members with a role, API tokens, sign-in failures (the rate limit, shared by
-- replicas) and the audit log. Secrets (set-up links, session ids, tokens) are stored as
-- SHA-256 hashes; passwords as Argon2id strings.
CREATE TABLE IF NOT EXISTS users (
    id            bigserial PRIMARY KEY,
    email         text NOT NULL CHECK (length(email) BETWEEN 3 AND 320),
    name          text NOT NULL DEFAULT '',
    is_admin      boolean NOT NULL DEFAULT false,
    password_hash text,
    disabled_at   timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX IF NOT EXISTS users_email ON users (lower(email));
CREATE TABLE IF NOT EXISTS user_setup_links (
    token_hash bytea PRIMARY KEY,
    user_id    bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    expires_at timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS user_sessions (
    id_hash      bytea PRIMARY KEY,
    user_id      bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS user_sessions_user ON user_sessions (user_id);
CREATE TABLE IF NOT EXISTS project_members (
    project_id bigint NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    user_id    bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    role       text NOT NULL CHECK (role IN ('viewer', 'member', 'admin')),
    PRIMARY KEY (project_id, user_id)
);
CREATE INDEX IF NOT EXISTS project_members_user ON project_members (user_id);
CREATE TABLE IF NOT EXISTS api_tokens (
    id           bigserial PRIMARY KEY,
    user_id      bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name         text NOT NULL,
    token_hash   bytea NOT NULL UNIQUE,
    scopes       text[] NOT NULL,
    -- The slugs the token is limited to; NULL: all of the user's projects.
    projects     text[],
    expires_at   timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz
);
CREATE INDEX IF NOT EXISTS api_tokens_user ON api_tokens (user_id);
CREATE TABLE IF NOT EXISTS sign_in_failures (
    key text NOT NULL,
    at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS sign_in_failures_key ON sign_in_failures (key, at);
CREATE TABLE IF NOT EXISTS audit_log (
    id         bigserial PRIMARY KEY,
    at         timestamptz NOT NULL DEFAULT now(),
    actor_type text NOT NULL,
    actor_id   text,
    actor_name text NOT NULL,
    action     text NOT NULL,
    project_id bigint REFERENCES projects (id) ON DELETE SET NULL,
    project    text,
    target     text,
    address    text
);
CREATE INDEX IF NOT EXISTS audit_log_project ON audit_log (project_id, id);
CREATE INDEX IF NOT EXISTS audit_log_at ON audit_log (at, id);

-- triage actions (triage.md: assignment, snooze, merge, activity). A group's assignee (an
-- e-mail address as sent); its snooze (status 'ignored' with one condition: until a time, a
-- count of new reports or of new devices; snooze_seen counts the new reports so far); and the
-- group it is merged into. The columns are checked first: ALTER TABLE would lock crash_groups
-- at every start.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'crash_groups'::regclass AND attname = 'assignee' AND NOT attisdropped) THEN
        ALTER TABLE crash_groups
            ADD COLUMN assignee text,
            ADD COLUMN snooze_since timestamptz,
            ADD COLUMN snooze_until timestamptz,
            ADD COLUMN snooze_count integer,
            ADD COLUMN snooze_devices integer,
            ADD COLUMN snooze_seen bigint NOT NULL DEFAULT 0,
            ADD COLUMN merged_into bigint REFERENCES crash_groups (id) ON DELETE SET NULL;
    END IF;
END;
$$;
-- The snoozes a periodic check ends when their time comes.
CREATE INDEX IF NOT EXISTS crash_groups_snooze_until ON crash_groups (snooze_until) WHERE snooze_until IS NOT NULL;
-- The distinct device ids seen by a group snoozed until a number of new devices, since the snooze.
CREATE TABLE IF NOT EXISTS snooze_devices (
    group_id  bigint NOT NULL REFERENCES crash_groups (id) ON DELETE CASCADE,
    device_id text NOT NULL,
    PRIMARY KEY (group_id, device_id)
);
-- What happened to a group, newest first by id: status and assignee changes, merges, comments.
CREATE TABLE IF NOT EXISTS group_activity (
    id       bigserial PRIMARY KEY,
    group_id bigint NOT NULL REFERENCES crash_groups (id) ON DELETE CASCADE,
    at       timestamptz NOT NULL DEFAULT now(),
    type     text NOT NULL,
    actor    text NOT NULL,
    data     text NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS group_activity_group ON group_activity (group_id, id DESC);
-- The groups merged into a group (its `merged` list).
CREATE INDEX IF NOT EXISTS crash_groups_merged_into ON crash_groups (merged_into) WHERE merged_into IS NOT NULL;

-- Environments (triage.md, docs/api.md "Environments"): every report has one ('production'
-- when it names none, so reports stored before this column read as production). The rollups
-- the list, detail and stats read are keyed by it too, so an `environment` filter or search
-- term reads the same rows as an unfiltered query; `group_facets` gains an 'environment'
-- facet (count, firstSeen, lastSeen per group and environment). Adding a column with a
-- constant default rewrites nothing; each step is checked first so a re-application takes no lock.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'reports'::regclass AND attname = 'environment' AND NOT attisdropped) THEN
        ALTER TABLE reports ADD COLUMN environment text NOT NULL DEFAULT 'production';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'group_hourly'::regclass AND attname = 'environment' AND NOT attisdropped) THEN
        ALTER TABLE group_hourly ADD COLUMN environment text NOT NULL DEFAULT 'production';
        ALTER TABLE group_hourly DROP CONSTRAINT group_hourly_pkey,
            ADD PRIMARY KEY (project_id, hour, group_id, app_id, app_version, os, environment);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'group_daily'::regclass AND attname = 'environment' AND NOT attisdropped) THEN
        ALTER TABLE group_daily ADD COLUMN environment text NOT NULL DEFAULT 'production';
        ALTER TABLE group_daily DROP CONSTRAINT group_daily_pkey,
            ADD PRIMARY KEY (project_id, day, group_id, app_id, app_version, os, environment);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'project_hourly'::regclass AND attname = 'environment' AND NOT attisdropped) THEN
        ALTER TABLE project_hourly ADD COLUMN environment text NOT NULL DEFAULT 'production';
        ALTER TABLE project_hourly DROP CONSTRAINT project_hourly_pkey,
            ADD PRIMARY KEY (project_id, hour, kind, app_version, environment);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'group_facets_facet_check'
                   AND pg_get_constraintdef(oid) LIKE '%environment%') THEN
        ALTER TABLE group_facets DROP CONSTRAINT IF EXISTS group_facets_facet_check,
            ADD CONSTRAINT group_facets_facet_check CHECK (facet IN ('app', 'version', 'os', 'model', 'environment'));
        INSERT INTO group_facets (project_id, group_id, facet, value, count, first_seen, last_seen)
        SELECT project_id, id, 'environment', 'production', report_count, first_seen, last_seen FROM crash_groups
        WHERE report_count > 0
        ON CONFLICT (group_id, facet, value) DO NOTHING;
    END IF;
END;
$$;
-- The facets recomputed from stored reports (RollupEquivalenceTests, `crash-bench seed`), with
-- the environment facet.
CREATE OR REPLACE FUNCTION crashguard_rollup_group_facets(p_project bigint)
RETURNS TABLE (project_id bigint, group_id bigint, facet text, value text, count bigint,
               first_seen timestamptz, last_seen timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT r.project_id, r.group_id, f.facet, f.value, count(*), min(r.ts), max(r.ts)
    FROM reports r,
         LATERAL (VALUES ('app', r.app_id), ('version', r.app_version), ('os', coalesce(r.os, '')),
                         ('environment', r.environment)) AS f(facet, value)
    WHERE r.project_id = p_project GROUP BY 1, 2, 3, 4
$$;
-- The hourly, daily and project rollups recomputed, by environment as the tables are. A
-- function's columns cannot be altered: one made before it returned the environment is dropped
-- first (once; a re-application finds 'environment' among its columns and drops nothing).
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_proc WHERE proname IN ('crashguard_rollup_group_hourly', 'crashguard_rollup_group_daily',
                                                       'crashguard_rollup_project_hourly')
               AND NOT ('environment' = ANY(proargnames))) THEN
        DROP FUNCTION IF EXISTS crashguard_rollup_group_hourly(bigint), crashguard_rollup_group_daily(bigint),
            crashguard_rollup_project_hourly(bigint);
    END IF;
END;
$$;
CREATE OR REPLACE FUNCTION crashguard_rollup_group_hourly(p_project bigint)
RETURNS TABLE (project_id bigint, group_id bigint, hour timestamptz, app_id text, app_version text, os text,
               environment text, count bigint, fatal_count bigint)
LANGUAGE sql STABLE AS $$
    SELECT r.project_id, r.group_id, date_trunc('hour', r.ts, 'UTC'), r.app_id, r.app_version, coalesce(r.os, ''),
           r.environment, count(*), count(*) FILTER (WHERE r.fatal)
    FROM reports r WHERE r.project_id = p_project GROUP BY 1, 2, 3, 4, 5, 6, 7
$$;
CREATE OR REPLACE FUNCTION crashguard_rollup_group_daily(p_project bigint)
RETURNS TABLE (project_id bigint, group_id bigint, day timestamptz, app_id text, app_version text, os text,
               environment text, count bigint)
LANGUAGE sql STABLE AS $$
    SELECT r.project_id, r.group_id, date_trunc('day', r.ts, 'UTC'), r.app_id, r.app_version, coalesce(r.os, ''),
           r.environment, count(*)
    FROM reports r WHERE r.project_id = p_project GROUP BY 1, 2, 3, 4, 5, 6, 7
$$;
CREATE OR REPLACE FUNCTION crashguard_rollup_project_hourly(p_project bigint)
RETURNS TABLE (project_id bigint, hour timestamptz, kind text, app_version text, environment text, count bigint)
LANGUAGE sql STABLE AS $$
    SELECT r.project_id, date_trunc('hour', r.ts, 'UTC'), r.kind, r.app_version, r.environment, count(*)
    FROM reports r WHERE r.project_id = p_project GROUP BY 1, 2, 3, 4, 5
$$;

-- Per project, hour and environment: the reports, and the fatal ones among them. The stats
-- without a kind or version split (`groupBy` none or environment) and the fatal split (the
-- dashboard's overview) read here: a row per hour and environment, where project_hourly has one
-- per kind and version as well (about 900 an hour at 100 M reports a month) and group_hourly
-- one per group too (about 60,000). Written by the rollup aggregator with the other rollups.
-- A database made before the table gets it filled from group_hourly at the migration, in its
-- transaction: every folded report is there, and the pending ones are folded into both later.
DO $$ BEGIN
    IF to_regclass('project_environment_hourly') IS NULL THEN
        CREATE TABLE project_environment_hourly (
            project_id  bigint NOT NULL,
            hour        timestamptz NOT NULL,
            environment text NOT NULL,
            count       bigint NOT NULL,
            fatal_count bigint NOT NULL,
            PRIMARY KEY (project_id, hour, environment)
        );
        PERFORM pg_advisory_xact_lock(7165915779985864048);
        INSERT INTO project_environment_hourly (project_id, hour, environment, count, fatal_count)
        SELECT project_id, hour, environment, sum(count), sum(fatal_count) FROM group_hourly GROUP BY 1, 2, 3;
    END IF;
END; $$;
CREATE OR REPLACE FUNCTION crashguard_rollup_project_environment_hourly(p_project bigint)
RETURNS TABLE (project_id bigint, hour timestamptz, environment text, count bigint, fatal_count bigint)
LANGUAGE sql STABLE AS $$
    SELECT r.project_id, date_trunc('hour', r.ts, 'UTC'), r.environment, count(*), count(*) FILTER (WHERE r.fatal)
    FROM reports r WHERE r.project_id = p_project GROUP BY 1, 2, 3
$$;

-- Per group, environment and UTC day, by hour: a group's hourly counts under `environment=`
-- (without a version), where group_hourly has a row per hour, app, version and OS as well: the
-- crash list's trends (hourly buckets, and the edge hours of daily ones), its window counts'
-- edge hours and the crash detail's histogram. `count` and `hours` are in
-- group_environment_model_daily's form (the day's reports; the same by hour of the day as
-- 5-byte entries, crashguard_model_hours): a row per group, environment and day instead of one
-- per hour, 2.5 bytes per report where an hourly table took 18.5 at the 100 M plan's density
-- (docs/performance.md). Written by the rollup aggregator with the other rollups; erasure
-- subtracts its counts. A database made before the table gets it filled from group_hourly at the
-- migration, under the aggregator's lock: every folded report is there, and the pending ones are
-- folded into both later.
DO $$ BEGIN
    IF to_regclass('group_environment_hours') IS NULL THEN
        CREATE TABLE group_environment_hours (
            group_id    bigint NOT NULL,
            environment text NOT NULL,
            day         timestamptz NOT NULL,
            count       bigint NOT NULL,
            hours       bytea NOT NULL,
            PRIMARY KEY (group_id, environment, day)
        );
        PERFORM pg_advisory_xact_lock(7165915779985864048);
        INSERT INTO group_environment_hours (group_id, environment, day, count, hours)
        SELECT group_id, environment, date_trunc('day', hour, 'UTC'), sum(n)::bigint,
               string_agg(crashguard_model_hours_entry(extract(hour FROM hour AT TIME ZONE 'UTC')::int, n),
                          ''::bytea ORDER BY hour)
        FROM (SELECT group_id, environment, hour, sum(count)::bigint AS n FROM group_hourly GROUP BY 1, 2, 3 HAVING sum(count) > 0) x
        GROUP BY 1, 2, 3;
    END IF;
END; $$;
CREATE OR REPLACE FUNCTION crashguard_rollup_group_environment_hours(p_project bigint)
RETURNS TABLE (group_id bigint, environment text, day timestamptz, count bigint, hours bytea)
LANGUAGE sql STABLE AS $$
    SELECT g, e, date_trunc('day', h, 'UTC'), sum(n)::bigint,
           string_agg(crashguard_model_hours_entry(extract(hour FROM h AT TIME ZONE 'UTC')::int, n),
                      ''::bytea ORDER BY h)
    FROM (SELECT r.group_id AS g, r.environment AS e, date_trunc('hour', r.ts, 'UTC') AS h, count(*) AS n
          FROM reports r WHERE r.project_id = p_project GROUP BY 1, 2, 3) x
    GROUP BY g, e, 3
$$;

-- oidc (accounts.md, single sign-on): sign-ins between the redirect to the identity provider
-- and its callback, each finished once (DELETE ... RETURNING) and for 10 minutes at most. The
-- state is stored as its SHA-256, the browser's binding cookie too.
CREATE TABLE IF NOT EXISTS oidc_logins (
    state_hash    bytea PRIMARY KEY,
    nonce         text NOT NULL,
    code_verifier text NOT NULL,
    browser_hash  bytea NOT NULL,
    expires_at    timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS oidc_logins_expires ON oidc_logins (expires_at);

-- alert rules (docs/alerts.md, "Alert rules"): a project's rules, each one trigger, filters and
-- actions; `spec` is the rule's JSON as sent (defaults filled in), the other columns what the
-- ingest step and the periodic check select on. Firings go to the webhook outbox
-- (`webhook_deliveries`, with the rule's id and name, and for e-mail the address instead of a
-- webhook). `alert_firings` is the throttle: the last firing per rule and group (group 0 and
-- the version for crash-free sessions), written by a conditional upsert in the transaction
-- that queues the firing, so several servers fire a rule once.
CREATE TABLE IF NOT EXISTS alert_rules (
    id                 bigserial PRIMARY KEY,
    project_id         bigint NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    name               text NOT NULL,
    trigger            text NOT NULL,
    enabled            boolean NOT NULL,
    throttle_minutes   integer NOT NULL,
    spec               text NOT NULL,
    webhook_ids        bigint[] NOT NULL DEFAULT '{}',
    email_to           text[] NOT NULL DEFAULT '{}',
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    last_fired_at      timestamptz,
    last_fired_group   bigint,
    last_fired_release text
);
CREATE INDEX IF NOT EXISTS alert_rules_project ON alert_rules (project_id, id);
CREATE TABLE IF NOT EXISTS alert_firings (
    rule_id  bigint NOT NULL REFERENCES alert_rules (id) ON DELETE CASCADE,
    group_id bigint NOT NULL,
    release  text NOT NULL DEFAULT '',
    fired_at timestamptz NOT NULL,
    PRIMARY KEY (rule_id, group_id, release)
);
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'webhook_deliveries'::regclass AND attname = 'rule_id' AND NOT attisdropped) THEN
        ALTER TABLE webhook_deliveries ADD COLUMN rule_id bigint, ADD COLUMN rule_name text, ADD COLUMN email_to text,
            ADD COLUMN release text, ALTER COLUMN webhook_id DROP NOT NULL, ALTER COLUMN group_id DROP NOT NULL;
    END IF;
END;
$$;

-- release health: weekly rollups (docs/release-health.md, "Storage"). The compactor folds each
-- delta into its 7-day row (weeks counted from the Unix epoch, starting on Thursdays at 00:00
-- UTC) beside its hour and day, so a 30-day list reads about three weeks and its edge days
-- instead of 30 days. Exact like the daily rows (counts summed, users merged as SessionUsers).
-- The first fold after this table exists builds it from session_days, in the compaction's
-- transaction, and marks it ready in session_rollup_marks; queries read weeks only once marked.
CREATE TABLE IF NOT EXISTS session_weeks (
    project_id    bigint NOT NULL,
    week          timestamptz NOT NULL,
    app_id        text NOT NULL,
    version       text NOT NULL,
    environment   text NOT NULL,
    started       bigint NOT NULL,
    crashed       bigint NOT NULL,
    errored       bigint NOT NULL,
    abnormal      bigint NOT NULL,
    first_started timestamptz,
    last_started  timestamptz,
    users         bytea NOT NULL,
    crashed_users bytea NOT NULL,
    PRIMARY KEY (project_id, week, app_id, version, environment)
);
ALTER TABLE session_weeks ALTER COLUMN users SET STORAGE EXTERNAL, ALTER COLUMN crashed_users SET STORAGE EXTERNAL;
CREATE TABLE IF NOT EXISTS session_rollup_marks (
    name    text PRIMARY KEY,
    done_at timestamptz NOT NULL DEFAULT now()
);

-- daily quota (data-protection.md, "Daily quota"): reports each project newly stored per UTC day
-- (`day` is the midnight that starts it), counted in the ingest transaction of projects with a
-- `dailyQuota`, under this row's lock so that replicas count exactly. Rows of past days are
-- pruned by the partition upkeep.
CREATE TABLE IF NOT EXISTS project_quota_days (
    project_id bigint NOT NULL,
    day        timestamptz NOT NULL,
    used       bigint NOT NULL,
    PRIMARY KEY (project_id, day)
);

-- data protection: project settings (docs/data-protection.md). One row per project that changed
-- any; a project without one has the defaults. retention_days and daily_quota are NULL when
-- unset (the server's CRASHGUARD_RETENTION_DAYS; no quota). Read through a cache of 1 s by every
-- server (ProjectSettingsCache), so a change applies everywhere within 2 s.
CREATE TABLE IF NOT EXISTS project_settings (
    project_id       bigint PRIMARY KEY REFERENCES projects (id) ON DELETE CASCADE,
    scrub_defaults   boolean NOT NULL DEFAULT true,
    scrub_ips        boolean NOT NULL DEFAULT false,
    scrub_emails     boolean NOT NULL DEFAULT false,
    sensitive_fields text[] NOT NULL DEFAULT '{}',
    safe_fields      text[] NOT NULL DEFAULT '{}',
    patterns         text[] NOT NULL DEFAULT '{}',
    retention_days   integer CHECK (retention_days BETWEEN 7 AND 365),
    daily_quota      bigint CHECK (daily_quota BETWEEN 0 AND 2147483647),
    updated_at       timestamptz NOT NULL DEFAULT now()
);
-- Whether any scrubbing rule changed a report (data-protection.md, "Read back").
ALTER TABLE reports ADD COLUMN IF NOT EXISTS scrubbed boolean NOT NULL DEFAULT false;
-- erasure (data-protection.md "Erasure", docs/data-protection.md): a request to erase a device's
-- reports, carried out by DeletionWorker. `device_hash` (SHA-256 of the device id) is kept only
-- until the worker has listed the device's reports in deletion_reports, in the same transaction
-- that sets it to NULL: a deletion keeps no copy of the device id. Each chunk of the listed
-- reports is erased (ReportEraser), removed from the list and added to `reports` in one
-- transaction, so a worker that dies leaves a deletion that the next one resumes where it was.
-- Workers claim a deletion with FOR UPDATE SKIP LOCKED: one at a time, whatever the replicas.
CREATE TABLE IF NOT EXISTS deletions (
    id           uuid PRIMARY KEY,
    project_id   bigint NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    state        text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'done')),
    reports      bigint NOT NULL DEFAULT 0,
    requested_at timestamptz NOT NULL DEFAULT now(),
    done_at      timestamptz,
    device_hash  bytea,
    listed       boolean NOT NULL DEFAULT false
);
CREATE INDEX IF NOT EXISTS deletions_pending ON deletions (requested_at) WHERE state = 'pending';
CREATE TABLE IF NOT EXISTS deletion_reports (
    deletion_id uuid NOT NULL REFERENCES deletions (id) ON DELETE CASCADE,
    ts          timestamptz NOT NULL,
    id          uuid NOT NULL,
    PRIMARY KEY (deletion_id, ts, id)
);
-- The device sketches of the buckets (p_groups[i], p_versions[i], p_buckets[i]), each the
-- interval p_width ('1 hour' or '24 hours') from its bucket: the sketch of the group's reports in
-- it of that version ('' for all versions), what ingest merges into group_version_hourly/daily
-- (crashguard_version_rollups derives the same bytes for a whole project). The reports of each
-- (group, bucket) are read once, whatever the versions asked of it. Used by erasure to rebuild
-- the sketches of the buckets it took device ids from, all of them in one statement.
CREATE OR REPLACE FUNCTION crashguard_device_sketches(p_groups bigint[], p_versions text[], p_buckets timestamptz[], p_width interval)
RETURNS TABLE (group_id bigint, app_version text, bucket timestamptz, sketch bytea)
LANGUAGE sql STABLE AS $$
    WITH k AS (
        SELECT DISTINCT g, v, b FROM unnest(p_groups, p_versions, p_buckets) AS k(g, v, b)
    ), registers AS (
        SELECT c.g, c.b, x.v, d.register, max(d.rank) AS rank
        FROM (SELECT DISTINCT g, b FROM k) c
        JOIN reports r ON r.group_id = c.g AND r.ts >= c.b AND r.ts < c.b + p_width AND r.device_id <> ''
        CROSS JOIN LATERAL (VALUES (''), (r.app_version)) AS x(v)
        CROSS JOIN LATERAL crashguard_device_register(r.device_id) d
        GROUP BY 1, 2, 3, 4
    )
    SELECT k.g, k.v, k.b,
           COALESCE(string_agg(int2send(s.register::int2) || substring(int2send(s.rank::int2) FROM 2 FOR 1), ''::bytea
                               ORDER BY s.register) FILTER (WHERE s.register IS NOT NULL), ''::bytea)
    FROM k LEFT JOIN registers s ON s.g = k.g AND s.b = k.b AND s.v = k.v
    GROUP BY k.g, k.v, k.b
$$;
-- rollup aggregator
-- The facts the rollups need of each stored report, appended by the ingest transaction (one
-- row per project and statement of a batch, an insert: no rollup row is locked at commit) and
-- folded into group_hourly, group_daily, group_facets, project_hourly,
-- project_environment_hourly, group_environment_hours, group_version_hourly/daily,
-- group_environment_daily and group_environment_model_daily by RollupAggregator, which
-- deletes the rows it folds in the transaction that writes the rollups (docs/server.md, "The
-- rollup aggregator"). `facts` is
-- the server's binary encoding (RollupFacts.swift), kept inline up to a page and never
-- compressed: the commit pays no compression, the aggregator no decompression.
CREATE TABLE IF NOT EXISTS rollup_pending (
    seq        bigserial PRIMARY KEY,
    project_id bigint NOT NULL,
    reports    integer NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    facts      bytea NOT NULL
) WITH (toast_tuple_target = 8160);
ALTER TABLE rollup_pending ALTER COLUMN facts SET STORAGE EXTERNAL;
CREATE INDEX IF NOT EXISTS rollup_pending_project ON rollup_pending (project_id, seq);

-- erasure: sketches and the quota (data-protection.md "Erasure", "Daily quota").
-- The device sketches a deletion has to rebuild: the (group, version, hour or day) buckets of
-- the reports it erased (`daily` false: group_version_hourly, true: group_version_daily;
-- `app_version` '' for the all-versions row). Each chunk adds its buckets in the transaction
-- that erases it; once the list of reports is empty, steps rebuild them in chunks, each deleting
-- the keys it rebuilt in its own transaction, and then the deletion is done. A bucket that many
-- chunks touched is rebuilt once, and a worker that dies leaves the rest to the next.
CREATE TABLE IF NOT EXISTS deletion_sketches (
    deletion_id uuid NOT NULL REFERENCES deletions (id) ON DELETE CASCADE,
    daily       boolean NOT NULL,
    group_id    bigint NOT NULL,
    app_version text NOT NULL,
    bucket      timestamptz NOT NULL,
    PRIMARY KEY (deletion_id, daily, group_id, app_version, bucket)
);
-- Reports erased (by a deletion or by retention) per project and UTC day of their receipt
-- (`day` is the midnight that starts it): `quotaUsedToday` counts the reports stored since
-- midnight, erased ones included, with or without a quota's counter row. Pruned with
-- project_quota_days.
CREATE TABLE IF NOT EXISTS project_erased_days (
    project_id bigint NOT NULL,
    day        timestamptz NOT NULL,
    reports    bigint NOT NULL,
    PRIMARY KEY (project_id, day)
);

-- environments: device sketches and counts per environment (docs/server.md, "The rollup
-- aggregator"). Per group, environment, app version ('' for all versions) and UTC day: the
-- report count and the device sketch (DeviceSketch.swift's stored form, as in
-- group_version_daily). The crash list under `environment=` (alone or with one version) reads its
-- whole days here and its edge hours from group_hourly (counts) and the reports (devices): one
-- row per group, environment and day instead of one per app, version and OS, and no device
-- count over every raw report of the window. Daily only: an hourly copy would cost about as
-- many bytes again per report, for the edges of a window alone. Folded by RollupAggregator with
-- the other rollups; erasure subtracts its counts and rebuilds its sketches of the days it erased
-- device ids from (ReportEraser).
-- A project's group_environment_daily rows recomputed from its stored reports: what the
-- aggregator folds batch by batch. Used by `crash-bench seed`, by RollupEquivalenceTests and
-- to fill the table when it is made (below). With p_folded, the reports of batches still pending
-- (rollup_pending: their transaction's 32-bit id is the row's xmin) are left out: what the
-- aggregator has folded.
CREATE OR REPLACE FUNCTION crashguard_environment_rollups(p_project bigint, p_folded boolean DEFAULT false)
RETURNS TABLE (group_id bigint, environment text, app_version text, day timestamptz, count bigint, sketch bytea)
LANGUAGE sql STABLE AS $$
    SELECT s.g, s.e, s.v, s.b, sum(s.n)::bigint,
           COALESCE(string_agg(int2send(s.register::int2) || substring(int2send(s.rank::int2) FROM 2 FOR 1), ''::bytea
                               ORDER BY s.register), ''::bytea)
    FROM (
        SELECT r.group_id AS g, r.environment AS e, x.v, date_trunc('day', r.ts, 'UTC') AS b, d.register, max(d.rank) AS rank,
               count(*) AS n
        FROM reports r
        CROSS JOIN LATERAL (VALUES (''), (r.app_version)) AS x(v)
        LEFT JOIN LATERAL (SELECT * FROM crashguard_device_register(r.device_id) WHERE r.device_id <> '') d ON true
        WHERE r.project_id = p_project
          AND NOT (p_folded AND EXISTS (SELECT 1 FROM rollup_pending q
                                        WHERE q.project_id = p_project AND q.xmin::text::bigint = (r.xact::text::bigint & 4294967295)))
        GROUP BY 1, 2, 3, 4, 5
    ) s GROUP BY 1, 2, 3, 4
$$;
-- The device sketches of every group_environment_daily row of the days (p_groups[i], p_days[i]),
-- from the reports stored now (rows of environments and versions left with no device id are
-- absent). Erasure rebuilds the sketches of the days it took device ids from with it.
CREATE OR REPLACE FUNCTION crashguard_environment_sketches(p_groups bigint[], p_days timestamptz[])
RETURNS TABLE (group_id bigint, environment text, app_version text, day timestamptz, sketch bytea)
LANGUAGE sql STABLE AS $$
    SELECT s.g, s.e, s.v, s.b,
           string_agg(int2send(s.register::int2) || substring(int2send(s.rank::int2) FROM 2 FOR 1), ''::bytea ORDER BY s.register)
    FROM (
        SELECT c.g, r.environment AS e, x.v, c.b, d.register, max(d.rank) AS rank
        FROM (SELECT DISTINCT g, b FROM unnest(p_groups, p_days) AS k(g, b)) c
        JOIN reports r ON r.group_id = c.g AND r.ts >= c.b AND r.ts < c.b + interval '24 hours' AND r.device_id <> ''
        CROSS JOIN LATERAL (VALUES (''), (r.app_version)) AS x(v)
        CROSS JOIN LATERAL crashguard_device_register(r.device_id) d
        GROUP BY 1, 2, 3, 4, 5
    ) s GROUP BY 1, 2, 3, 4
$$;
-- The table is made once, and filled then from the reports stored so far (the days before a
-- project's retention cut-off, whose reports are gone, are never read), under the aggregator's
-- lock (PostgresRollupStore.lockID): the reports of batches still pending are left to the
-- aggregator, which folds them.
DO $$ BEGIN
    IF to_regclass('group_environment_daily') IS NULL THEN
        CREATE TABLE group_environment_daily (
            group_id    bigint NOT NULL,
            environment text NOT NULL,
            app_version text NOT NULL,
            day         timestamptz NOT NULL,
            count       bigint NOT NULL,
            sketch      bytea NOT NULL,
            PRIMARY KEY (group_id, environment, app_version, day)
        );
        PERFORM pg_advisory_xact_lock(7165915779985864048);
        INSERT INTO group_environment_daily
        SELECT e.* FROM projects p CROSS JOIN LATERAL crashguard_environment_rollups(p.id, true) e;
    END IF;
END; $$;

-- Device models per group, environment, UTC day and model: the crash detail's `models`
-- breakdown, which sums the environments asked (every one without `environment=`). `count` is
-- the day's reports; `hours` the same reports by hour of the day, as 5-byte entries (the hour
-- 0-23, then the count as uint32 big-endian) sorted by hour, no zero counts
-- (crashguard_model_hours reads them). A window reads `count` of its whole days and the entries
-- of its edge days' hours: exact to the hour like an hourly table, at one row per group,
-- environment, day and model instead of one per hour (docs/performance.md, "Bytes on disk per
-- report"). Folded by RollupAggregator with the other rollups; erasure subtracts its counts
-- (ReportEraser). With p_folded, the derivation leaves out the reports of batches still
-- pending, as crashguard_environment_rollups does.
CREATE OR REPLACE FUNCTION crashguard_rollup_group_environment_model_daily(p_project bigint, p_folded boolean DEFAULT false)
RETURNS TABLE (group_id bigint, environment text, day timestamptz, model text, count bigint, hours bytea)
LANGUAGE sql STABLE AS $$
    SELECT g, e, date_trunc('day', h, 'UTC'), m, sum(n)::bigint,
           string_agg(crashguard_model_hours_entry(extract(hour FROM h AT TIME ZONE 'UTC')::int, n),
                      ''::bytea ORDER BY h)
    FROM (SELECT r.group_id AS g, r.environment AS e, date_trunc('hour', r.ts, 'UTC') AS h, coalesce(r.model, '') AS m, count(*) AS n
          FROM reports r
          WHERE r.project_id = p_project
            AND NOT (p_folded AND EXISTS (SELECT 1 FROM rollup_pending q
                                          WHERE q.project_id = p_project AND q.xmin::text::bigint = (r.xact::text::bigint & 4294967295)))
          GROUP BY 1, 2, 3, 4) x
    GROUP BY g, e, 3, m
$$;
-- Made once, and filled then from the reports stored so far under the aggregator's lock, as
-- group_environment_daily is (above): days whose reports are gone are never read here.
DO $$ BEGIN
    IF to_regclass('group_environment_model_daily') IS NULL THEN
        CREATE TABLE group_environment_model_daily (
            group_id    bigint NOT NULL,
            environment text NOT NULL,
            day         timestamptz NOT NULL,
            model       text NOT NULL,
            count       bigint NOT NULL,
            hours       bytea NOT NULL,
            PRIMARY KEY (group_id, environment, day, model)
        );
        PERFORM pg_advisory_xact_lock(7165915779985864048);
        INSERT INTO group_environment_model_daily
        SELECT e.* FROM projects p CROSS JOIN LATERAL crashguard_rollup_group_environment_model_daily(p.id, true) e;
    END IF;
END; $$;

-- One models table. A database made before it has the same counts without the environment
-- (group_model_daily; before that, group_model_hourly by hour): they go. Every report a query
-- can count is in group_environment_model_daily since its fill (above, or the aggregator for
-- those pending then); their rows for days whose reports are gone are never read, as every
-- query clamps its window to the retention and partitions outlive every project's.
DROP TABLE IF EXISTS group_model_hourly;
DROP TABLE IF EXISTS group_model_daily;
DROP FUNCTION IF EXISTS crashguard_rollup_group_model_hourly(bigint);
DROP FUNCTION IF EXISTS crashguard_rollup_group_model_daily(bigint);
