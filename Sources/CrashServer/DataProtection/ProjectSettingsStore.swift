/// The project settings aggregate (table `project_settings`, data-protection.md): read at
/// ingest through ``ProjectSettingsCache`` and by the settings routes;
/// ``PostgresProjectSettingsStore`` is the implementation.
protocol ProjectSettingsStore: Sendable {
    /// The project's settings; the defaults when it never changed any.
    func settings(project: Int64) async throws -> ProjectSettings
    /// Replaces the project's settings with `change` of the current ones, atomically (two
    /// changes at once never lose one); nothing is written when `change` throws.
    func update(
        project: Int64, _ change: @escaping @Sendable (ProjectSettings) throws -> ProjectSettings
    ) async throws -> ProjectSettings
    /// Reports of the project newly stored since the last UTC midnight (`quotaUsedToday`), erased
    /// ones included: the daily quota's counter.
    func quotaUsedToday(project: Int64) async throws -> Int
}
