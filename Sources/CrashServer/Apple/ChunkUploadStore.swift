import Foundation
import Logging
import NIOCore
import PostgresNIO

/// The chunks of Sentry's chunk-upload protocol (`upload_chunks`): by project and the SHA-1
/// of their (uncompressed) bytes, kept until a `difs/assemble` puts them together, at least
/// an hour. Used by ``ChunkUploadController``; ``PostgresChunkUploadStore`` is the
/// implementation.
protocol ChunkUploadStore: Sendable {
    /// Keeps `chunks` for `project`, unless the project's chunks would then hold more than
    /// `maxBytes` (``DebugFileQuotaError``). Chunks older than ``PostgresChunkUploadStore/keep``
    /// go first.
    func save(project: Int64, chunks: [(sha1: String, data: ByteBuffer)], maxBytes: Int64) async throws
    /// The digests among `sha1s` that `project` has no chunk for.
    func missing(project: Int64, among sha1s: [String]) async throws -> [String]
    /// One chunk's bytes.
    func chunk(project: Int64, sha1: String) async throws -> ByteBuffer?
    /// Forgets chunks an assembled file no longer needs.
    func delete(project: Int64, sha1s: [String]) async throws
    /// Records that the file named `sha1` was assembled into the debug file `key`.
    func remember(project: Int64, sha1: String, key: String) async throws
    /// The debug file an earlier assemble of `sha1` went to.
    func assembled(project: Int64, sha1: String) async throws -> String?
    /// Forgets every project's chunks last uploaded more than ``PostgresChunkUploadStore/keep``
    /// before `now` (the periodic maintenance: a project that never uploads again still frees
    /// them); how many.
    func sweepExpired(now: Date) async throws -> Int
}

/// ``ChunkUploadStore`` on the primary's pool: an assemble reads the chunks right after
/// their upload.
struct PostgresChunkUploadStore: ChunkUploadStore {
    let client: PostgresClient
    let logger: Logger

    init(database: CrashDatabase) {
        client = database.client
        logger = database.logger
    }

    /// How long a chunk is kept after its last upload: the protocol asks for an hour.
    static let keep: Duration = .seconds(2 * 3600)
    /// The advisory lock class that serializes one project's chunk uploads (the quota check).
    static let lockClass: Int32 = 0x6368_6e6b  // "chnk"

    func save(project: Int64, chunks: [(sha1: String, data: ByteBuffer)], maxBytes: Int64) async throws {
        let keepSeconds = Double(Self.keep.components.seconds)
        try await DebugFileQuotaError.unwrapping {
            try await client.withTransactionEndingOnClose(logger: logger) { connection in
                try await connection.query(
                    "SELECT pg_advisory_xact_lock(\(Self.lockClass), \(Int32(truncatingIfNeeded: project)))", logger: logger)
                try await connection.query(
                    """
                    DELETE FROM upload_chunks
                    WHERE project_id = \(project) AND uploaded_at < now() - make_interval(secs => \(keepSeconds))
                    """, logger: logger)
                var held: Int64 = 0
                let rows = try await connection.query(
                    "SELECT coalesce(sum(size), 0)::bigint FROM upload_chunks WHERE project_id = \(project)", logger: logger)
                for try await value in rows.decode(Int64.self) { held = value }
                let adding = chunks.reduce(Int64(0)) { $0 + Int64($1.data.readableBytes) }
                if held + adding > maxBytes { throw DebugFileQuotaError.bytes(maxBytes) }
                for chunk in chunks {
                    let size = Int32(chunk.data.readableBytes)
                    try await connection.query(
                        """
                        INSERT INTO upload_chunks (project_id, sha1, size, data) VALUES (\(project), \(chunk.sha1), \(size), \(chunk.data))
                        ON CONFLICT (project_id, sha1) DO UPDATE SET uploaded_at = now()
                        """, logger: logger)
                }
            }
        }
    }

    func missing(project: Int64, among sha1s: [String]) async throws -> [String] {
        guard !sha1s.isEmpty else { return [] }
        let rows = try await client.query(
            "SELECT sha1 FROM upload_chunks WHERE project_id = \(project) AND sha1 = ANY(\(sha1s))", logger: logger)
        var present = Set<String>()
        for try await sha1 in rows.decode(String.self) { present.insert(sha1) }
        var seen = Set<String>()
        return sha1s.filter { !present.contains($0) && seen.insert($0).inserted }
    }

    func chunk(project: Int64, sha1: String) async throws -> ByteBuffer? {
        let rows = try await client.query(
            "SELECT data FROM upload_chunks WHERE project_id = \(project) AND sha1 = \(sha1)", logger: logger)
        var data: ByteBuffer?
        for try await value in rows.decode(ByteBuffer.self) { data = value }
        return data
    }

    func delete(project: Int64, sha1s: [String]) async throws {
        guard !sha1s.isEmpty else { return }
        try await client.query("DELETE FROM upload_chunks WHERE project_id = \(project) AND sha1 = ANY(\(sha1s))", logger: logger)
    }

    func remember(project: Int64, sha1: String, key: String) async throws {
        try await client.query(
            """
            INSERT INTO assembled_files (project_id, sha1, build_id) VALUES (\(project), \(sha1), \(key))
            ON CONFLICT (project_id, sha1) DO UPDATE SET build_id = EXCLUDED.build_id
            """, logger: logger)
    }

    func sweepExpired(now: Date) async throws -> Int {
        let cutoff = now.addingTimeInterval(-Double(Self.keep.components.seconds))
        let rows = try await client.query(
            "WITH gone AS (DELETE FROM upload_chunks WHERE uploaded_at < \(cutoff) RETURNING 1) SELECT count(*)::bigint FROM gone",
            logger: logger)
        var count: Int64 = 0
        for try await value in rows.decode(Int64.self) { count = value }
        return Int(count)
    }

    func assembled(project: Int64, sha1: String) async throws -> String? {
        let rows = try await client.query(
            "SELECT build_id FROM assembled_files WHERE project_id = \(project) AND sha1 = \(sha1)", logger: logger)
        var key: String?
        for try await value in rows.decode(String.self) { key = value }
        return key
    }
}
