import Foundation
import Logging
import PostgresNIO

/// ``ProjectSettingsStore`` on PostgreSQL: the primary's pool (settings are read where they
/// were written, and ingest must not act on a standby's older copy).
struct PostgresProjectSettingsStore: ProjectSettingsStore {
    let client: PostgresClient
    let logger: Logger

    init(database: CrashDatabase) {
        client = database.client
        logger = database.logger
    }

    func settings(project: Int64) async throws -> ProjectSettings {
        let rows = try await client.query(
            """
            SELECT scrub_defaults, scrub_ips, scrub_emails, sensitive_fields, safe_fields, patterns, retention_days, daily_quota
            FROM project_settings WHERE project_id = \(project)
            """, logger: logger)
        return try await Self.decode(rows) ?? ProjectSettings()
    }

    func update(
        project: Int64, _ change: @escaping @Sendable (ProjectSettings) throws -> ProjectSettings
    ) async throws -> ProjectSettings {
        do {
            return try await locked(project: project, change)
        } catch let error as TransactionError {
            // A refused change (a 400) is the caller's error, not the transaction's.
            if let refusal = error.closureError, error.rollbackError == nil { throw refusal }
            throw error
        }
    }

    private func locked(
        project: Int64, _ change: @escaping @Sendable (ProjectSettings) throws -> ProjectSettings
    ) async throws -> ProjectSettings {
        try await client.withTransactionEndingOnClose(logger: logger) { connection in
            try await connection.query(
                "INSERT INTO project_settings (project_id) VALUES (\(project)) ON CONFLICT (project_id) DO NOTHING",
                logger: logger)
            let rows = try await connection.query(
                """
                SELECT scrub_defaults, scrub_ips, scrub_emails, sensitive_fields, safe_fields, patterns, retention_days, daily_quota
                FROM project_settings WHERE project_id = \(project) FOR UPDATE
                """, logger: logger)
            let new = try change(try await Self.decode(rows) ?? ProjectSettings())
            try await connection.query(
                """
                UPDATE project_settings SET scrub_defaults = \(new.scrubDefaults), scrub_ips = \(new.scrubIPs),
                    scrub_emails = \(new.scrubEmails), sensitive_fields = \(new.sensitiveFields),
                    safe_fields = \(new.safeFields), patterns = \(new.patterns),
                    retention_days = \(new.retentionDays.map { Int32($0) }), daily_quota = \(new.dailyQuota.map { Int64($0) }),
                    updated_at = now()
                WHERE project_id = \(project)
                """, logger: logger)
            return new
        }
    }

    func quotaUsedToday(project: Int64) async throws -> Int {
        // The quota's counter of the day (QuotaSQL), or the reports received since midnight.
        let rows = try await client.query(QuotaSQL.usedToday(project: project, now: Date()), logger: logger)
        for try await count in rows.decode(Int64.self) { return Int(count) }
        return 0
    }

    private static func decode(_ rows: PostgresRowSequence) async throws -> ProjectSettings? {
        for try await (defaults, ips, emails, sensitive, safe, patterns, retention, quota) in rows.decode(
            (Bool, Bool, Bool, [String], [String], [String], Int?, Int?).self)
        {
            return ProjectSettings(
                scrubDefaults: defaults, scrubIPs: ips, scrubEmails: emails, sensitiveFields: sensitive, safeFields: safe,
                patterns: patterns, retentionDays: retention, dailyQuota: quota)
        }
        return nil
    }
}
