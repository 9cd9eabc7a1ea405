import CrashGrouping
import CrashWire
import Foundation
import Logging
import PostgresNIO

/// ``ProjectStore`` on PostgreSQL: the primary's pool (``CrashDatabase/client``), since key
/// lookups and changes must see the latest commit, never a lagging standby.
public struct PostgresProjectStore: ProjectStore {
    let client: PostgresClient
    let logger: Logger
    /// How long ``changingProjects(_:)`` waits for the servers' confirmations (tests shorten it).
    var keyCacheConfirmationTimeout = Duration.seconds(5)

    public init(database: CrashDatabase) {
        client = database.client
        logger = database.logger
    }

    /// Creates a project with new keys. Fails, keeping the old keys, if it exists.
    public func create(
        slug: String, grouping: GroupingVersion = .newProjectDefault
    ) async throws
        -> ProjectCredentials
    {
        try ProjectError.validate(slug: slug)
        let ingest = ProjectKeys.generate(prefix: ProjectKeys.ingestPrefix)
        let read = ProjectKeys.generate(prefix: ProjectKeys.readPrefix)
        let rows = try await client.query(
            """
            INSERT INTO projects (slug, ingest_key_hash, read_token_hash, grouping_version)
            VALUES (\(slug), \(ProjectKeys.hash(ingest)), \(ProjectKeys.hash(read)), \(grouping.rawValue))
            ON CONFLICT (slug) DO NOTHING RETURNING sentry_id
            """, logger: logger)
        guard let sentryID = try await rows.decode(Int64.self).first(where: { _ in true }) else {
            throw ProjectError.alreadyExists(slug)
        }
        logger.info("project created", metadata: ["project.slug": "\(slug)", "project.grouping": "\(grouping)"])
        return ProjectCredentials(project: slug, ingestKey: ingest, readToken: read, sentryId: sentryID)
    }

    /// Replaces both of a project's keys (`project rotate NAME`); see ``rotateKeys(slug:_:)``.
    public func rotate(slug: String) async throws -> ProjectCredentials {
        let rotated = try await rotateKeys(slug: slug, .both)
        guard let ingestKey = rotated.ingestKey, let readToken = rotated.readToken else {
            preconditionFailure("rotating both keys returns both")
        }
        return ProjectCredentials(project: rotated.project, ingestKey: ingestKey, readToken: readToken, sentryId: rotated.sentryId)
    }

    /// Replaces one or both of a project's keys; an old key fails from the next request on, on
    /// every server: returns once every server listening for key changes dropped its cached
    /// ingest keys (``changingProjects(_:)``; read tokens are not cached). The key that is
    /// kept keeps working. A new read token also ends every dashboard session of the project
    /// (its rows are deleted in the same statement; sessions are bound to the token anyway).
    public func rotateKeys(slug: String, _ keys: KeyRotation) async throws -> RotatedCredentials {
        let ingest = keys.rotatesIngestKey ? ProjectKeys.generate(prefix: ProjectKeys.ingestPrefix) : nil
        let read = keys.rotatesReadToken ? ProjectKeys.generate(prefix: ProjectKeys.readPrefix) : nil
        let ingestHash = ingest.map(ProjectKeys.hash), readHash = read.map(ProjectKeys.hash)
        let sentryID: Int64? = try await changingProjects { (connection) -> (Int64?, transaction: String?) in
            let rows = try await connection.query(
                """
                WITH rotated AS (
                    UPDATE projects SET ingest_key_hash = coalesce(\(ingestHash)::bytea, ingest_key_hash),
                        read_token_hash = coalesce(\(readHash)::bytea, read_token_hash), rotated_at = now()
                    WHERE slug = \(slug) RETURNING id, sentry_id
                ),
                ended AS (DELETE FROM dashboard_sessions WHERE \(read != nil) AND project_id IN (SELECT id FROM rotated))
                SELECT sentry_id, pg_current_xact_id()::text FROM rotated
                """, logger: logger)
            for try await (sentryID, transaction) in rows.decode((Int64, String).self) { return (sentryID, transaction) }
            return (nil, nil)
        }
        guard let sentryID else { throw ProjectError(description: "no project '\(slug)'") }
        logger.info("project keys rotated", metadata: ["project.slug": "\(slug)", "project.keys": "\(keys)"])
        return RotatedCredentials(project: slug, ingestKey: ingest, readToken: read, sentryId: sentryID)
    }

    /// Runs `change`, one statement that changes `projects` and returns its result and its
    /// transaction id (`pg_current_xact_id()::text`; nil when it changed nothing), and waits
    /// until every server listening for key changes has dropped its cached ingest keys: the
    /// statement's trigger notifies them (schema.sql), each confirms with that transaction id
    /// (``IngestKeyListener``). So when `project rotate` returns, no server still accepts the
    /// old key. A server that does not confirm within ``keyCacheConfirmationTimeout`` (hung,
    /// or losing its connection, which makes it bypass its cache anyway) is logged, and the
    /// change stands.
    func changingProjects<T: Sendable>(
        _ change: (PostgresConnection) async throws -> (T, transaction: String?)
    ) async throws -> T {
        try await client.withConnection { connection in
            try await connection.listen(on: IngestKeyCache.confirmationChannel) { confirmations in
                let rows = try await connection.query(
                    """
                    SELECT count(*)::int FROM pg_stat_activity
                    WHERE datname = current_database() AND application_name = \(IngestKeyCache.listenerName)
                    """, logger: logger)
                var listeners = 0
                for try await count in rows.decode(Int.self) { listeners = count }
                let (result, transaction) = try await change(connection)
                guard let transaction, listeners > 0 else { return result }
                let confirmed = await Self.count(
                    confirmations, of: transaction, upTo: listeners, within: keyCacheConfirmationTimeout)
                if confirmed < listeners {
                    logger.warning(
                        "not every server confirmed it dropped its cached ingest keys",
                        metadata: ["servers.listening": "\(listeners)", "servers.confirmed": "\(confirmed)"])
                }
                return result
            }
        }
    }

    /// Confirmations carrying `payload`, counted until there are `wanted` or `timeout` passed.
    private static func count(
        _ confirmations: PostgresNotificationSequence, of payload: String, upTo wanted: Int, within timeout: Duration
    ) async -> Int {
        await withTaskGroup(of: Int?.self) { group in
            group.addTask {
                var seen = 0
                do {
                    for try await confirmation in confirmations where confirmation.payload == payload {
                        seen += 1
                        if seen >= wanted { break }
                    }
                } catch {}
                return seen
            }
            group.addTask {
                try? await Task.sleep(for: timeout)
                return nil
            }
            var seen = 0
            for await result in group {
                if let result { seen = result }
                group.cancelAll()
            }
            return seen
        }
    }

    /// Every project as a JSON array of `{"project", "createdAt", "rotatedAt", "groupingVersion",
    /// "sentryId", "sentryDsn"}`. Only the keys' hashes are stored, so `sentryDsn` is a template
    /// with the literal placeholder `<ingestKey>` where the key goes (docs/sentry.md).
    public func listJSON(publicURL: String = ServerConfiguration.defaultPublicURL) async throws -> String {
        struct Entry: Encodable {
            var project: String
            var createdAt: String
            var rotatedAt: String?
            var groupingVersion: String
            var sentryId: Int64
            var sentryDsn: String
        }
        var entries: [Entry] = []
        let rows = try await client.query(
            "SELECT slug, created_at, rotated_at, grouping_version, sentry_id FROM projects ORDER BY slug", logger: logger)
        for try await (slug, created, rotated, grouping, sentryID) in rows.decode((String, Date, Date?, String, Int64).self) {
            entries.append(
                Entry(
                    project: slug, createdAt: RFC3339.format(created), rotatedAt: rotated.map(RFC3339.format),
                    groupingVersion: grouping, sentryId: sentryID,
                    sentryDsn: SentryDSN.format(publicURL: publicURL, key: SentryDSN.keyPlaceholder, sentryID: sentryID)))
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        return String(decoding: try encoder.encode(entries), as: UTF8.self)
    }

    /// The project whose ingest key has the SHA-256 `hash`, or nil.
    func owner(ingestKeyHash hash: Data) async throws -> IngestKeyCache.Owner? {
        let rows = try await client.query(
            "SELECT id, slug, grouping_version, sentry_id FROM projects WHERE ingest_key_hash = \(hash)", logger: logger)
        for try await (id, slug, grouping, sentryID) in rows.decode((Int64, String, String, Int64).self) {
            return IngestKeyCache.Owner(
                project: ProjectRef(id: id, slug: slug, groupingVersion: GroupingVersion(rawValue: grouping) ?? .v1),
                sentryID: sentryID)
        }
        return nil
    }

    /// The project named `slug`, or nil.
    public func project(slug: String) async throws -> ProjectRef? {
        let rows = try await client.query("SELECT id, slug FROM projects WHERE slug = \(slug)", logger: logger)
        for try await (id, slug) in rows.decode((Int64, String).self) { return ProjectRef(id: id, slug: slug) }
        return nil
    }

    /// The project a read token belongs to, or nil.
    public func project(readToken: String) async throws -> ProjectRef? {
        let rows = try await client.query(
            "SELECT id, slug FROM projects WHERE read_token_hash = \(ProjectKeys.hash(readToken))", logger: logger)
        for try await (id, slug) in rows.decode((Int64, String).self) { return ProjectRef(id: id, slug: slug) }
        return nil
    }

    /// Switches the version a project's new reports are grouped with, on every server from
    /// the next request on (``changingProjects(_:)``). Existing groups keep theirs (their
    /// reports are never regrouped); returns the version before the switch.
    @discardableResult
    public func setGroupingVersion(slug: String, to version: GroupingVersion) async throws -> GroupingVersion {
        let previous: String? = try await changingProjects { (connection) -> (String?, transaction: String?) in
            let rows = try await connection.query(
                """
                UPDATE projects p SET grouping_version = \(version.rawValue)
                FROM (SELECT id, grouping_version FROM projects WHERE slug = \(slug) FOR UPDATE) old
                WHERE p.id = old.id RETURNING old.grouping_version, pg_current_xact_id()::text
                """, logger: logger)
            for try await (previous, transaction) in rows.decode((String, String).self) { return (previous, transaction) }
            return (nil, nil)
        }
        guard let previous else { throw ProjectError(description: "no project '\(slug)'") }
        logger.info(
            "project grouping version switched",
            metadata: ["project.slug": "\(slug)", "grouping.from": "\(previous)", "grouping.to": "\(version)"])
        return GroupingVersion(rawValue: previous) ?? .v1
    }

    /// The grouping version a project's new reports get.
    public func groupingVersion(slug: String) async throws -> GroupingVersion {
        let rows = try await client.query("SELECT grouping_version FROM projects WHERE slug = \(slug)", logger: logger)
        for try await version in rows.decode(String.self) { return GroupingVersion(rawValue: version) ?? .v1 }
        throw ProjectError(description: "no project '\(slug)'")
    }

    /// A dry run: groups the project's reports of the last `days` days (by client
    /// timestamp) with `target`, and compares with the groups they are in. Reads only.
    public func groupingPreview(
        slug: String, target: GroupingVersion, days: Int, now: Date = Date()
    ) async throws
        -> GroupingPreview
    {
        guard (1...3660).contains(days) else { throw ProjectError(description: "--days must be 1 to 3660") }
        let current = try await groupingVersion(slug: slug)
        let to = now
        let from = now.addingTimeInterval(-Double(days) * 86_400)
        let rows = try await client.query(
            """
            SELECT r.group_id, r.kind, r.reason, COALESCE(r.stack, r.stack_jsonb::text), COALESCE(r.fingerprint, r.fingerprint_jsonb::text)
            FROM reports r JOIN projects p ON p.id = r.project_id
            WHERE p.slug = \(slug) AND r.ts >= \(from) AND r.ts < \(to)
            """, logger: logger)
        let decoder = JSONDecoder()
        var comparison = RegroupComparison()
        for try await (group, kindText, reason, stackText, fingerprintText) in rows.decode(
            (Int64, String, String, String?, String?).self)
        {
            let stack = try stackText.map { try decoder.decode([String].self, from: Data($0.utf8)) }
            let fingerprint = try fingerprintText.map { try decoder.decode([String].self, from: Data($0.utf8)) }
            let kind = ReportKind(rawValue: kindText) ?? .custom
            let signature = Grouping.signature(
                kind: kind, reason: reason, stack: stack, fingerprint: fingerprint, version: target)
            comparison.add(group: group, signature: signature.hash, title: signature.title)
        }
        let result = comparison.result()
        var titles: [Int64: String] = [:]
        let ids = Set(result.splits.map(\.group))
        if !ids.isEmpty {
            let titleRows = try await client.query(
                "SELECT id, title FROM crash_groups WHERE id = ANY(\(Array(ids)))", logger: logger)
            for try await (id, title) in titleRows.decode((Int64, String).self) { titles[id] = title }
        }
        return GroupingPreview(
            project: slug, currentVersion: current.rawValue, targetVersion: target.rawValue, from: RFC3339.format(from),
            to: RFC3339.format(to), reports: comparison.reports, groupsNow: result.groupsNow,
            groupsAfter: result.groupsAfter, unchanged: result.unchanged, split: result.splits.count,
            merged: result.merges.count,
            splitExamples: result.splits.prefix(20).map {
                GroupingPreview.Split(group: $0.group, title: titles[$0.group] ?? "", reports: $0.reports, into: $0.into)
            },
            mergeExamples: result.merges.prefix(20).map {
                GroupingPreview.Merge(title: $0.title, reports: $0.reports, groups: $0.groups)
            })
    }
}
