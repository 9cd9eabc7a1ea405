import CrashDebugFiles
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

/// Each project's limits on stored debug files (`CRASHGUARD_DEBUG_FILES_MAX_COUNT`,
/// `CRASHGUARD_DEBUG_FILES_MAX_BYTES`).
public struct DebugFileQuota: Sendable, Equatable {
    public var maxCount: Int
    public var maxBytes: Int64

    public init(maxCount: Int, maxBytes: Int64) {
        self.maxCount = maxCount
        self.maxBytes = maxBytes
    }
}

/// The debug-file aggregate: uploaded ELF files by project and build id (`debug_files`) and
/// their contents in chunks (`debug_file_chunks`).
///
/// Used by ``DebugFileController`` (uploads), `crash-server debug-files upload`, and
/// ``ReportSymbolicator`` / ``DebugFileCache`` (lookups and contents);
/// ``PostgresDebugFileStore`` is the implementation.
protocol DebugFileStore: Sendable {
    /// Stores the ELF file in `spool` (parsed as `elf`) for `project` under its build id,
    /// within `quota`; keeps a stored file that has as much or more.
    func store(
        project: Int64, name: String, spool: DebugFileSpool, elf: ELFDebugFile, quota: DebugFileQuota
    ) async throws
        -> DebugFileUpload
    /// The stored debug files of `project` among `buildIDs`, with their load addresses.
    func files(project: Int64, buildIDs: [String]) async throws -> [(info: DebugFileInfo, loadAddress: UInt64)]
    /// Calls `body` with each stored chunk of one debug file, in order, if the file still has
    /// the given digest; false when it does not.
    func chunks(project: Int64, buildID: String, sha256: String, _ body: (ByteBuffer) async throws -> Void) async throws -> Bool
}

/// An upload that would take its project past a debug-file quota: 413 naming it.
struct DebugFileQuotaError: Error, CustomStringConvertible {
    private enum Code { case count, bytes }
    private let code: Code
    private let limit: Int64
    static func count(_ limit: Int) -> Self { Self(code: .count, limit: Int64(limit)) }
    static func bytes(_ limit: Int64) -> Self { Self(code: .bytes, limit: limit) }

    /// Runs `body`, a transaction: a quota error thrown inside it comes out as itself rather
    /// than wrapped in PostgresNIO's transaction error.
    static func unwrapping<T>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch let error as PostgresTransactionError {
            if let quota = error.closureError as? DebugFileQuotaError { throw quota }
            throw error
        }
    }
    var description: String {
        switch code {
        case .count: "quota: the project already stores \(limit) debug files (CRASHGUARD_DEBUG_FILES_MAX_COUNT)"
        case .bytes: "quota: the project's debug files would exceed \(limit) bytes (CRASHGUARD_DEBUG_FILES_MAX_BYTES)"
        }
    }
}
