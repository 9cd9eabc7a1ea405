import CrashDebugFiles
import Foundation
import NIOCore
import PostgresNIO

/// A stored debug file, without its contents.
///
/// In JSON an ELF file carries its key as `buildId`, a Mach-O file as `debugId` (its
/// `LC_UUID`) with its `arch` (apple.md).
public struct DebugFileInfo: Codable, Sendable, Equatable {
    /// The key within the project: the GNU build id (ELF) or the debug id (Mach-O).
    public var buildId: String
    /// `elf` or `macho`.
    public var kind: String
    public var name: String
    public var size: Int64
    public var sha256: String
    public var hasDebugInfo: Bool
    public var hasSymbols: Bool
    public var uploadedAt: Date
    /// The architecture (Mach-O; nil for ELF).
    public var arch: String? = nil

    private enum CodingKeys: String, CodingKey {
        case buildId, debugId, kind, arch, name, size, sha256, hasDebugInfo, hasSymbols, uploadedAt
    }

    public init(
        buildId: String, kind: String, name: String, size: Int64, sha256: String, hasDebugInfo: Bool, hasSymbols: Bool,
        uploadedAt: Date, arch: String? = nil
    ) {
        self.buildId = buildId
        self.kind = kind
        self.name = name
        self.size = size
        self.sha256 = sha256
        self.hasDebugInfo = hasDebugInfo
        self.hasSymbols = hasSymbols
        self.uploadedAt = uploadedAt
        self.arch = arch
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        kind = try c.decode(String.self, forKey: .kind)
        buildId = try c.decodeIfPresent(String.self, forKey: .buildId) ?? c.decode(String.self, forKey: .debugId)
        arch = try c.decodeIfPresent(String.self, forKey: .arch)
        name = try c.decode(String.self, forKey: .name)
        size = try c.decode(Int64.self, forKey: .size)
        sha256 = try c.decode(String.self, forKey: .sha256)
        hasDebugInfo = try c.decode(Bool.self, forKey: .hasDebugInfo)
        hasSymbols = try c.decode(Bool.self, forKey: .hasSymbols)
        uploadedAt = try c.decode(Date.self, forKey: .uploadedAt)
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(buildId, forKey: kind == "macho" ? .debugId : .buildId)
        if let arch { try c.encode(arch, forKey: .arch) }
        try c.encode(kind, forKey: .kind)
        try c.encode(name, forKey: .name)
        try c.encode(size, forKey: .size)
        try c.encode(sha256, forKey: .sha256)
        try c.encode(hasDebugInfo, forKey: .hasDebugInfo)
        try c.encode(hasSymbols, forKey: .hasSymbols)
        try c.encode(uploadedAt, forKey: .uploadedAt)
    }
}

/// One stored file of an upload and what storing it did: ``DebugFileInfo``'s fields and
/// `outcome` in one JSON object.
public struct DebugFileUploadEntry: Codable, Sendable, Equatable {
    public var info: DebugFileInfo
    /// `created`, `replaced` or `unchanged` (see ``DebugFileUpload/outcome``).
    public var outcome: String

    private enum CodingKeys: String, CodingKey { case outcome }

    public init(info: DebugFileInfo, outcome: String) {
        self.info = info
        self.outcome = outcome
    }

    public init(from decoder: any Decoder) throws {
        info = try DebugFileInfo(from: decoder)
        outcome = try decoder.container(keyedBy: CodingKeys.self).decode(String.self, forKey: .outcome)
    }

    public func encode(to encoder: any Encoder) throws {
        try info.encode(to: encoder)
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(outcome, forKey: .outcome)
    }
}

/// What an upload did: one entry per debug file it held (a fat Mach-O file holds one per
/// architecture, a dSYM zip one per DWARF file).
public struct DebugFileUpload: Codable, Sendable, Equatable {
    /// `created` when at least one debug id is new, else `replaced` when at least one stored
    /// file had less (no DWARF, or no symbols), else `unchanged` (a re-upload).
    public var outcome: String
    /// The first of ``files``.
    public var file: DebugFileUploadEntry
    public var files: [DebugFileUploadEntry]

    public init(files: [DebugFileUploadEntry]) {
        precondition(!files.isEmpty)
        let outcomes = Set(files.map(\.outcome))
        outcome = outcomes.contains("created") ? "created" : outcomes.contains("replaced") ? "replaced" : "unchanged"
        file = files[0]
        self.files = files
    }
}

/// What identifies a debug file and ranks it: its key, kind and what it carries.
struct DebugFileIdentity: Sendable, Equatable {
    /// Build id (ELF) or debug id (Mach-O).
    var key: String
    var kind: String
    var arch: String?
    /// The address an image offset is added to: ELF's lowest `PT_LOAD`, Mach-O's `__TEXT` vmaddr.
    var loadAddress: UInt64
    var hasDebugInfo: Bool
    var hasSymbols: Bool

    init(elf: ELFDebugFile) {
        key = elf.buildID
        kind = "elf"
        arch = nil
        loadAddress = elf.loadAddress
        hasDebugInfo = elf.hasDebugInfo
        hasSymbols = elf.hasSymbols
    }

    init(macho slice: MachODebugFile.Slice) {
        key = slice.debugID
        kind = "macho"
        arch = slice.arch
        loadAddress = slice.textAddress
        hasDebugInfo = slice.hasDebugInfo
        hasSymbols = slice.hasSymbols
    }
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

/// The debug-file aggregate: uploaded ELF and Mach-O files by project and key (build id or debug id) (`debug_files`) and
/// their contents in chunks (`debug_file_chunks`).
///
/// Used by ``DebugFileController`` (uploads), `crash-server debug-files upload`, and
/// ``ReportSymbolicator`` / ``DebugFileCache`` (lookups and contents);
/// ``PostgresDebugFileStore`` is the implementation.
protocol DebugFileStore: Sendable {
    /// Stores the one debug file in `spool` (identified as `identity`) for `project` under
    /// its key, within `quota`; keeps a stored file that has as much or more.
    func store(
        project: Int64, name: String, spool: DebugFileSpool, identity: DebugFileIdentity, quota: DebugFileQuota
    ) async throws -> DebugFileUploadEntry
    /// The stored debug file of `project` whose contents have this SHA-1, if any.
    func file(project: Int64, sha1: String) async throws -> DebugFileInfo?
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
        } catch let error as TransactionError {
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
