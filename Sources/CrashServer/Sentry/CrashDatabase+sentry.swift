import PostgresNIO

extension CrashDatabase {
    /// The `sentryId` of a project, or nil when the project is gone.
    func sentryID(project: Int64) async throws -> Int64? {
        let rows = try await client.query("SELECT sentry_id FROM projects WHERE id = \(project)", logger: logger)
        for try await id in rows.decode(Int64.self) { return id }
        return nil
    }
}
