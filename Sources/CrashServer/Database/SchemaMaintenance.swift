import Foundation

/// The schema's upkeep: applying `schema.sql` (`migrate`) and the daily partitions of
/// `reports` (``PartitionMaintenance`` runs it hourly).
///
/// Used by `buildApplication`'s start-up (``prepareDatabase(_:partitions:logger:)``),
/// ``PartitionMaintenance`` and the `crash-server` commands that migrate before they run;
/// ``PostgresSchemaMaintenance`` is the implementation.
protocol SchemaMaintenance: Sendable {
    /// Applies schema.sql unless this exact schema is recorded as applied.
    func migrate() async throws
    /// Creates the daily partitions covering the UTC days of `from`...`to` and drops those
    /// older than `dropBefore`'s UTC day; returns how many of each.
    func maintainPartitions(from: Date, to: Date, dropBefore: Date) async throws -> (created: Int, dropped: Int)
}

/// The schema needs applying and the connected role may not change it: a server role without
/// DDL rights (Deploy/README.md, "Database roles") waits for `crash-server migrate` run as the
/// role that owns the tables.
public struct SchemaPrivilegeError: Error, CustomStringConvertible {
    /// What the database refused.
    let detail: String

    public var description: String {
        "the database schema is not applied and this role may not apply it (\(detail)): run `crash-server migrate` "
            + "as the role that owns the tables (in compose: the migrate service), then start the server again"
    }
}
