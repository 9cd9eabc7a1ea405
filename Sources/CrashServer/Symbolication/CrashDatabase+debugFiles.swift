import Crypto
import Foundation
import NIOCore
import PostgresNIO

/// A stored debug file, without its contents.
public struct DebugFileInfo: Codable, Sendable, Equatable {
    public var buildId: String
    public var kind: String
    public var name: String
    public var size: Int64
    public var sha256: String
    public var hasDebugInfo: Bool
    public var hasSymbols: Bool
    public var uploadedAt: Date
}

/// What an upload did.
public struct DebugFileUpload: Codable, Sendable, Equatable {
    /// `created` (new build id), `replaced` (the stored file had less: no DWARF, or no
    /// symbols) or `unchanged` (the same or a no better file was there: a re-upload).
    public var outcome: String
    public var file: DebugFileInfo
}

extension CrashDatabase {
    /// Stores an ELF debug file for `project` under its build id. Idempotent: uploading the
    /// same build id again keeps the stored file unless the new one has more (DWARF where the
    /// stored one has none, or a symbol table where it has neither), so a stripped binary
    /// uploaded first is upgraded by its debug file and never the other way round.
    public func storeDebugFile(project: Int64, name: String, contents: ByteBuffer) async throws -> DebugFileUpload {
        let elf = try ELFDebugFile(parsing: contents.readableBytesView)
        let sha = SHA256.hash(data: contents.readableBytesView).map { String(format: "%02x", $0) }.joined()
        let load = Int64(bitPattern: elf.loadAddress)
        let size = Int64(contents.readableBytes)
        let rank = (elf.hasDebugInfo ? 2 : 0) + (elf.hasSymbols ? 1 : 0)
        let rows = try await client.query(
            """
            INSERT INTO debug_files AS d (project_id, build_id, kind, name, size, sha256, load_address, has_debug_info,
                                          has_symbols, content)
            VALUES (\(project), \(elf.buildID), 'elf', \(name), \(size), \(sha), \(load), \(elf.hasDebugInfo),
                    \(elf.hasSymbols), \(contents))
            ON CONFLICT (project_id, build_id) DO UPDATE
                SET name = EXCLUDED.name, size = EXCLUDED.size, sha256 = EXCLUDED.sha256,
                    load_address = EXCLUDED.load_address, has_debug_info = EXCLUDED.has_debug_info,
                    has_symbols = EXCLUDED.has_symbols, content = EXCLUDED.content, uploaded_at = now()
                WHERE (CASE WHEN d.has_debug_info THEN 2 ELSE 0 END + CASE WHEN d.has_symbols THEN 1 ELSE 0 END) < \(rank)
            RETURNING (xmax = 0)
            """, logger: logger)
        var outcome = "unchanged"
        for try await inserted in rows.decode(Bool.self) { outcome = inserted ? "created" : "replaced" }
        guard let info = try await debugFiles(project: project, buildIDs: [elf.buildID]).first else {
            throw APIError.notFound("the debug file's project no longer exists")
        }
        return DebugFileUpload(outcome: outcome, file: info.info)
    }

    /// ``storeDebugFile(project:name:contents:)`` for the command line: by project slug.
    public func storeDebugFile(projectSlug: String, name: String, contents: Data) async throws -> DebugFileUpload {
        let rows = try await client.query("SELECT id FROM projects WHERE slug = \(projectSlug)", logger: logger)
        var id: Int64?
        for try await value in rows.decode(Int64.self) { id = value }
        guard let id else { throw APIError.notFound("no project '\(projectSlug)'") }
        return try await storeDebugFile(project: id, name: name, contents: ByteBuffer(bytes: contents))
    }

    /// The stored debug files of `project` among `buildIDs`, with their load addresses.
    func debugFiles(project: Int64, buildIDs: [String]) async throws -> [(info: DebugFileInfo, loadAddress: UInt64)] {
        guard !buildIDs.isEmpty else { return [] }
        let rows = try await client.query(
            """
            SELECT build_id, kind, name, size, sha256, has_debug_info, has_symbols, uploaded_at, load_address
            FROM debug_files WHERE project_id = \(project) AND build_id = ANY(\(buildIDs))
            """, logger: logger)
        var files: [(DebugFileInfo, UInt64)] = []
        for try await row in rows.decode((String, String, String, Int64, String, Bool, Bool, Date, Int64).self) {
            files.append(
                (
                    DebugFileInfo(
                        buildId: row.0, kind: row.1, name: row.2, size: row.3, sha256: row.4, hasDebugInfo: row.5,
                        hasSymbols: row.6, uploadedAt: row.7), UInt64(bitPattern: row.8)
                ))
        }
        return files
    }

    /// The contents of one stored debug file, if it still has the given digest.
    func debugFileContents(project: Int64, buildID: String, sha256: String) async throws -> ByteBuffer? {
        let rows = try await client.query(
            """
            SELECT content FROM debug_files
            WHERE project_id = \(project) AND build_id = \(buildID) AND sha256 = \(sha256)
            """, logger: logger)
        for try await content in rows.decode(ByteBuffer.self) { return content }
        return nil
    }
}
