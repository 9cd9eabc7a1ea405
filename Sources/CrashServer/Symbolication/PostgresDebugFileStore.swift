import CrashDebugFiles
import Foundation
import Logging
import NIOCore
import PostgresNIO

/// ``DebugFileStore`` on PostgreSQL: the primary's pool (``CrashDatabase/client``). Uploads
/// are writes, and symbolication reads a file right after its upload, which a lagging
/// standby might not have yet.
public struct PostgresDebugFileStore: DebugFileStore {
    let client: PostgresClient
    let logger: Logger

    public init(database: CrashDatabase) {
        client = database.client
        logger = database.logger
    }

    /// The advisory lock class that serializes the uploads of one project (the second key is
    /// the project id), so that two uploads never both pass the quota on the same room.
    static let lockClass: Int32 = 0x6466_696c  // "dfil"

    /// Stores the debug file in `spool` (identified as `identity`) for `project` under its key
    /// (an ELF file's build id, a Mach-O file's debug id).
    /// Idempotent: uploading the same key again keeps the stored file unless the new one
    /// has more (DWARF where the stored one has none, or a symbol table where it has neither),
    /// so a stripped binary uploaded first is upgraded by its debug file and never the other
    /// way round. A file that would take the project past `quota` is refused
    /// (``DebugFileQuotaError``); a file that replaces one counts once.
    ///
    /// The contents go to `debug_file_chunks` chunk by chunk from the spool, in the same
    /// transaction as the file's row: readers see the old file or the new one.
    func store(
        project: Int64, name: String, spool: DebugFileSpool, identity: DebugFileIdentity, quota: DebugFileQuota
    ) async throws -> DebugFileUploadEntry {
        let sha = spool.sha256
        let sha1 = spool.sha1
        let load = Int64(bitPattern: identity.loadAddress)
        let size = Int64(spool.size)
        let key = identity.key
        let rank = (identity.hasDebugInfo ? 2 : 0) + (identity.hasSymbols ? 1 : 0)
        let outcome = try await DebugFileQuotaError.unwrapping {
            try await client.withTransactionEndingOnClose(logger: logger) { connection -> String in
                try await connection.query(
                    "SELECT pg_advisory_xact_lock(\(Self.lockClass), \(Int32(truncatingIfNeeded: project)))", logger: logger)
                var stored: Int?
                let existing = try await connection.query(
                    """
                    SELECT (CASE WHEN has_debug_info THEN 2 ELSE 0 END + CASE WHEN has_symbols THEN 1 ELSE 0 END)::int
                    FROM debug_files WHERE project_id = \(project) AND build_id = \(key) FOR UPDATE
                    """, logger: logger)
                for try await value in existing.decode(Int.self) { stored = value }
                if let stored, stored >= rank { return "unchanged" }
                var count = 0
                var bytes: Int64 = 0
                let usage = try await connection.query(
                    """
                    SELECT count(*)::bigint, coalesce(sum(size), 0)::bigint FROM debug_files
                    WHERE project_id = \(project) AND build_id <> \(key)
                    """, logger: logger)
                for try await (files, total) in usage.decode((Int64, Int64).self) {
                    count = Int(files)
                    bytes = total
                }
                if count + 1 > quota.maxCount { throw DebugFileQuotaError.count(quota.maxCount) }
                if bytes + size > quota.maxBytes { throw DebugFileQuotaError.bytes(quota.maxBytes) }
                try await connection.query(
                    """
                    INSERT INTO debug_files AS d (project_id, build_id, kind, arch, name, size, sha256, sha1, load_address,
                                                  has_debug_info, has_symbols, content)
                    VALUES (\(project), \(key), \(identity.kind), \(identity.arch), \(name), \(size), \(sha), \(sha1), \(load),
                            \(identity.hasDebugInfo), \(identity.hasSymbols), NULL)
                    ON CONFLICT (project_id, build_id) DO UPDATE
                        SET kind = EXCLUDED.kind, arch = EXCLUDED.arch, name = EXCLUDED.name, size = EXCLUDED.size,
                            sha256 = EXCLUDED.sha256, sha1 = EXCLUDED.sha1,
                            load_address = EXCLUDED.load_address, has_debug_info = EXCLUDED.has_debug_info,
                            has_symbols = EXCLUDED.has_symbols, content = NULL, uploaded_at = now()
                    """, logger: logger)
                try await connection.query(
                    "DELETE FROM debug_file_chunks WHERE project_id = \(project) AND build_id = \(key)", logger: logger)
                var seq: Int32 = 0
                try await spool.forEachChunk { chunk in
                    try await connection.query(
                        """
                        INSERT INTO debug_file_chunks (project_id, build_id, seq, data)
                        VALUES (\(project), \(key), \(seq), \(chunk))
                        """, logger: logger)
                    seq += 1
                }
                return stored == nil ? "created" : "replaced"
            }
        }
        guard let info = try await files(project: project, buildIDs: [key]).first else {
            throw APIError.notFound("the debug file's project no longer exists")
        }
        return DebugFileUploadEntry(info: info.info, outcome: outcome)
    }

    /// The stored debug file of `project` whose contents have this SHA-1, if any.
    func file(project: Int64, sha1: String) async throws -> DebugFileInfo? {
        let rows = try await client.query(
            "SELECT build_id FROM debug_files WHERE project_id = \(project) AND sha1 = \(sha1) LIMIT 1", logger: logger)
        var key: String?
        for try await value in rows.decode(String.self) { key = value }
        guard let key else { return nil }
        return try await files(project: project, buildIDs: [key]).first?.info
    }

    /// Stores the debug file at `path` for the command line: by project slug, with the same
    /// parsing (ELF, Mach-O, dSYM zip), quota and storage as an upload.
    public func store(
        projectSlug: String, name: String, path: String, quota: DebugFileQuota, spoolDirectory: URL
    ) async throws -> DebugFileUpload {
        let rows = try await client.query("SELECT id FROM projects WHERE slug = \(projectSlug)", logger: logger)
        var id: Int64?
        for try await value in rows.decode(Int64.self) { id = value }
        guard let id else { throw APIError.notFound("no project '\(projectSlug)'") }
        let spool = try DebugFileSpool(in: spoolDirectory)
        try await spool.append(contentsOf: path)
        return try await DebugFileIntake(store: self, maxBytes: Int.max, spoolDirectory: spoolDirectory)
            .store(project: id, name: name, spool: spool, quota: quota)
    }

    /// The stored debug files of `project` among `buildIDs`, with their load addresses.
    func files(project: Int64, buildIDs: [String]) async throws -> [(info: DebugFileInfo, loadAddress: UInt64)] {
        guard !buildIDs.isEmpty else { return [] }
        let rows = try await client.query(
            """
            SELECT build_id, kind, name, size, sha256, has_debug_info, has_symbols, uploaded_at, load_address, arch
            FROM debug_files WHERE project_id = \(project) AND build_id = ANY(\(buildIDs))
            """, logger: logger)
        var files: [(DebugFileInfo, UInt64)] = []
        for try await row in rows.decode((String, String, String, Int64, String, Bool, Bool, Date, Int64, String?).self) {
            files.append(
                (
                    DebugFileInfo(
                        buildId: row.0, kind: row.1, name: row.2, size: row.3, sha256: row.4, hasDebugInfo: row.5,
                        hasSymbols: row.6, uploadedAt: row.7, arch: row.9), UInt64(bitPattern: row.8)
                ))
        }
        return files
    }

    /// Calls `body` with each stored chunk of one debug file, in order, if the file still has
    /// the given digest; false when it does not (replaced or deleted). Each chunk is its own
    /// statement: a replacement committed meanwhile shows as a copy whose digest is wrong,
    /// which the caller checks.
    func chunks(
        project: Int64, buildID: String, sha256: String, _ body: (ByteBuffer) async throws -> Void
    ) async throws -> Bool {
        var count: Int32?
        let rows = try await client.query(
            """
            SELECT (SELECT count(*)::int FROM debug_file_chunks c WHERE c.project_id = d.project_id AND c.build_id = d.build_id)
            FROM debug_files d WHERE project_id = \(project) AND build_id = \(buildID) AND sha256 = \(sha256)
            """, logger: logger)
        for try await value in rows.decode(Int32.self) { count = value }
        guard let count else { return false }
        for seq in 0..<count {
            var chunk: ByteBuffer?
            let rows = try await client.query(
                """
                SELECT data FROM debug_file_chunks WHERE project_id = \(project) AND build_id = \(buildID) AND seq = \(seq)
                """, logger: logger)
            for try await data in rows.decode(ByteBuffer.self) { chunk = data }
            guard let chunk else { return false }
            try await body(chunk)
        }
        return true
    }
}
