import CrashDebugFiles
import DequeModule
import Foundation
import Logging
import NIOCore
import PostgresNIO

/// One frame of a report's `stack`, resolved with the debug file of its image.
///
/// In JSON the image's key is `buildId` (ELF) or `debugId` (Mach-O, its `LC_UUID`), as in
/// ``DebugFileInfo``.
public struct SymbolicatedFrame: Codable, Sendable, Equatable {
    /// Index into the report's `stack`.
    public var frame: Int
    /// The image's file name, as in the frame.
    public var image: String
    /// The image's key: a GNU build id, or a Mach-O debug id (UUID, lower case with dashes).
    public var buildId: String
    /// The function the address is in (for an inlined call: the function it was inlined into).
    public var function: String?
    public var file: String?
    public var line: Int?
    public var column: Int?
    /// Functions inlined at this address, innermost first: each called the next one, the
    /// last called from `function`'s `file:line`.
    public var inlined: [SymbolizedLocation]?

    private enum CodingKeys: String, CodingKey { case frame, image, buildId, debugId, function, file, line, column, inlined }

    public init(
        frame: Int, image: String, buildId: String, function: String?, file: String?, line: Int?, column: Int?,
        inlined: [SymbolizedLocation]?
    ) {
        self.frame = frame
        self.image = image
        self.buildId = buildId
        self.function = function
        self.file = file
        self.line = line
        self.column = column
        self.inlined = inlined
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        frame = try c.decode(Int.self, forKey: .frame)
        image = try c.decode(String.self, forKey: .image)
        buildId = try c.decodeIfPresent(String.self, forKey: .buildId) ?? c.decode(String.self, forKey: .debugId)
        function = try c.decodeIfPresent(String.self, forKey: .function)
        file = try c.decodeIfPresent(String.self, forKey: .file)
        line = try c.decodeIfPresent(Int.self, forKey: .line)
        column = try c.decodeIfPresent(Int.self, forKey: .column)
        inlined = try c.decodeIfPresent([SymbolizedLocation].self, forKey: .inlined)
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(frame, forKey: .frame)
        try c.encode(image, forKey: .image)
        try c.encode(buildId, forKey: ReportSymbolicator.isDebugID(buildId) ? .debugId : .buildId)
        try c.encodeIfPresent(function, forKey: .function)
        try c.encodeIfPresent(file, forKey: .file)
        try c.encodeIfPresent(line, forKey: .line)
        try c.encodeIfPresent(column, forKey: .column)
        try c.encodeIfPresent(inlined, forKey: .inlined)
    }
}

/// Resolves the frames of stored reports against the project's uploaded debug files:
/// at read time (the first read after an upload already shows it), with a cache by
/// (build id, address), through a ``SymbolizerPool``. Failures are logged and leave the
/// frames unresolved; a read never fails because of symbolication.
///
/// The SDK sends, per crash report, the images its frames fall in (`context["image.N"]`:
/// `0x<base> <size> <build id or -> <path>`) and, when it skipped crash machinery,
/// `context["crash.machineryFrames"]`; each frame is `"<i> <image> 0x<address> ..."`.
/// Apple's reports (Sentry Cocoa events, `.ips`, MetricKit) carry the same entries with the
/// image's debug id (`LC_UUID`) in place of the build id, and frames in Apple's form
/// `"<i> <image> 0x<address> 0x<base> + <offset>"` (or `<symbol> + <offset>` where the device
/// named it); a frame in that form is matched by image name and base, its offset read from
/// the line (MetricKit gives no image size). The address looked up is the file's load address
/// (ELF: lowest `PT_LOAD`; Mach-O: `__TEXT` vmaddr) plus the offset.
final class ReportSymbolicator: Sendable {
    /// The debug files' lookups and contents.
    let store: any DebugFileStore
    /// Reports are read again in a snapshot of the query store, through the read routing
    /// (``CrashDatabase/withReadSnapshot(_:)``), like every report the query API shows.
    let reports: PostgresQueryStore
    let pool: SymbolizerPool
    let files: DebugFileCache
    let logger: Logger
    private let cache: SymbolCache

    /// `directory` holds the copies of debug files the symbolizer reads (``DebugFileCache``),
    /// at most `cacheBytes` of them.
    init(
        store: any DebugFileStore, reports: PostgresQueryStore, pool: SymbolizerPool, directory: URL? = nil, cacheBytes: Int64 = 4 << 30,
        cacheEntries: Int = 100_000, logger: Logger
    ) {
        self.store = store
        self.reports = reports
        self.pool = pool
        self.files = DebugFileCache(
            directory: directory ?? Self.defaultDirectory, maxBytes: cacheBytes, logger: logger)
        self.cache = SymbolCache(capacity: cacheEntries)
        self.logger = logger
    }

    /// `$TMPDIR/crashguard-debug-files`.
    static var defaultDirectory: URL {
        FileManager.default.temporaryDirectory.appendingPathComponent("crashguard-debug-files", isDirectory: true)
    }

    /// An image a report's frames fall in.
    struct Image: Equatable {
        var base: UInt64
        var size: UInt64
        var buildID: String
        var name: String
    }

    /// One frame to resolve: where it is in the stack, its image, its image offset.
    struct Site: Equatable {
        var frame: Int
        var image: Image
        /// Bytes from the image base to the instruction (a return address is moved back
        /// into its call).
        var offset: UInt64
    }

    /// The images of `context` (`image.N` entries), keyed by GNU build id or Mach-O debug id.
    static func images(context: [String: String]) -> [Image] {
        context.keys.filter { $0.hasPrefix("image.") }.sorted().compactMap { key in
            let parts = context[key]!.split(separator: " ", maxSplits: 3, omittingEmptySubsequences: true)
            guard parts.count == 4, parts[0].hasPrefix("0x"), let base = UInt64(parts[0].dropFirst(2), radix: 16),
                let size = UInt64(parts[1])
            else { return nil }
            let id = parts[2].lowercased()
            guard ELFDebugFile.isBuildID(id) || isDebugID(id) else { return nil }
            let path = String(parts[3])
            return Image(base: base, size: size, buildID: id, name: path.split(separator: "/").last.map(String.init) ?? path)
        }
    }

    /// A Mach-O debug id: a UUID in lower case with dashes (`4c4c4480-5555-3144-a123-46faaaed6c55`).
    static func isDebugID(_ text: some StringProtocol) -> Bool {
        let bytes = Array(text.utf8)
        guard bytes.count == 36 else { return false }
        return bytes.indices.allSatisfy { i in
            [8, 13, 18, 23].contains(i) ? bytes[i] == UInt8(ascii: "-") : (bytes[i] >= 48 && bytes[i] <= 57) || (bytes[i] >= 97 && bytes[i] <= 102)
        }
    }

    /// The base and offset of a frame in Apple's form, from what follows its address:
    /// `0x<base> + <offset>` (offset in decimal).
    static func appleOffset(_ rest: Substring) -> (base: UInt64, offset: UInt64)? {
        let parts = rest.split(separator: " ", omittingEmptySubsequences: true)
        guard parts.count == 3, parts[0].hasPrefix("0x"), parts[1] == "+", let base = UInt64(parts[0].dropFirst(2), radix: 16),
            let offset = UInt64(parts[2])
        else { return nil }
        return (base, offset)
    }

    /// The frames of `stack` that fall in one of `images`.
    static func sites(stack: [String], context: [String: String]) -> [Site] {
        let images = images(context: context)
        guard !images.isEmpty else { return [] }
        let skipped = context["crash.machineryFrames"].flatMap { Int($0) } ?? 0
        var sites: [Site] = []
        for (i, frame) in stack.enumerated() {
            let parts = frame.split(separator: " ", maxSplits: 3, omittingEmptySubsequences: true)
            guard parts.count >= 3, parts[2].hasPrefix("0x"), let address = UInt64(parts[2].dropFirst(2), radix: 16) else {
                continue
            }
            let index = Int(parts[0]) ?? i
            let apple = parts.count == 4 ? appleOffset(parts[3]) : nil
            guard
                let image = images.first(where: { image in
                    guard image.name == parts[1] else { return false }
                    if let apple { return image.base == apple.base }
                    return address >= image.base && address - image.base < image.size
                })
            else { continue }
            var offset = apple?.offset ?? address - image.base
            // Every frame but the crashing instruction is a return address: look up its call.
            if index + skipped > 0, offset > 0 { offset -= 1 }
            sites.append(Site(frame: i, image: image, offset: offset))
        }
        return sites
    }

    /// `reports` with `symbolicated` set where a frame could be resolved.
    func symbolicate(project: Int64, _ reports: [StoredReport]) async -> [StoredReport] {
        let perReport = reports.map { report in
            report.stack.map { Self.sites(stack: $0, context: report.context ?? [:]) } ?? []
        }
        let buildIDs = Set(perReport.joined().map(\.image.buildID))
        guard !buildIDs.isEmpty else { return reports }
        let files: [(info: DebugFileInfo, loadAddress: UInt64)]
        do {
            files = try await store.files(project: project, buildIDs: buildIDs.sorted())
        } catch {
            logger.warning("debug files not readable", metadata: ["error.message": "\(error)"])
            return reports
        }
        var resolved: [String: [UInt64: [SymbolizedLocation]]] = [:]
        for file in files {
            let addresses = Set(perReport.joined().filter { $0.image.buildID == file.info.buildId }.map { file.loadAddress &+ $0.offset })
            resolved[file.info.buildId] = await resolve(project: project, file: file.info, addresses: addresses.sorted())
        }
        var result = reports
        for (r, sites) in perReport.enumerated() {
            var frames: [SymbolicatedFrame] = []
            for site in sites {
                guard let load = files.first(where: { $0.info.buildId == site.image.buildID })?.loadAddress,
                    let locations = resolved[site.image.buildID]?[load &+ site.offset], let outer = locations.last
                else { continue }
                frames.append(
                    SymbolicatedFrame(
                        frame: site.frame, image: site.image.name, buildId: site.image.buildID, function: outer.function,
                        file: outer.file, line: outer.line, column: outer.column,
                        inlined: locations.count > 1 ? Array(locations.dropLast()) : nil))
            }
            if !frames.isEmpty { result[r].symbolicated = frames }
        }
        return result
    }

    /// The detail's `latest` reports (sent without their stacks, read within `environments`)
    /// with `symbolicated` frames: their stacks are read again here, resolved, and dropped.
    func symbolicateLatest(project: Int64, group: Int64, _ latest: [StoredReport], environments: [String] = []) async -> [StoredReport] {
        let full: [StoredReport]
        do {
            full = try await reports.read { reader in
                try await reader.reports(
                    project: project, group: group, after: nil, limit: latest.count, includeStack: true,
                    environments: environments)
            }.map(\.report)
        } catch {
            logger.warning("latest reports not readable for symbolication", metadata: ["error.message": "\(error)"])
            return latest
        }
        let resolved = await symbolicate(project: project, full)
        var frames: [String: [SymbolicatedFrame]] = [:]
        for report in resolved { frames[report.id] = report.symbolicated }
        return latest.map { report in
            var report = report
            report.symbolicated = frames[report.id]
            return report
        }
    }

    /// Locations of `addresses` in one debug file: cached ones at once, the rest from the pool.
    private func resolve(project: Int64, file: DebugFileInfo, addresses: [UInt64]) async -> [UInt64: [SymbolizedLocation]] {
        var found: [UInt64: [SymbolizedLocation]] = [:]
        var missing: [UInt64] = []
        for address in addresses {
            if let hit = await cache.get(SymbolCache.Key(sha256: file.sha256, address: address)) {
                found[address] = hit
            } else {
                missing.append(address)
            }
        }
        guard !missing.isEmpty else { return found }
        do {
            let path = try await localFile(project: project, file: file)
            let answers = try await pool.symbolize(file: path.path, addresses: missing)
            for (address, locations) in zip(missing, answers) {
                found[address] = locations
                await cache.set(SymbolCache.Key(sha256: file.sha256, address: address), locations)
            }
        } catch {
            logger.warning(
                "symbolication failed", metadata: ["build.id": "\(file.buildId)", "error.message": "\(error)"])
        }
        return found
    }

    /// The symbolizer's copy of the debug file (``DebugFileCache``).
    func localFile(project: Int64, file: DebugFileInfo) async throws -> URL {
        try await files.file(project: project, info: file, store: store)
    }
}

/// Resolved addresses by (file digest, address), the oldest forgotten past `capacity`.
actor SymbolCache {
    struct Key: Hashable {
        var sha256: String
        var address: UInt64
    }

    private let capacity: Int
    private var entries: [Key: [SymbolizedLocation]] = [:]
    private var order: Deque<Key> = []

    init(capacity: Int) { self.capacity = max(1, capacity) }

    func get(_ key: Key) -> [SymbolizedLocation]? { entries[key] }

    func set(_ key: Key, _ value: [SymbolizedLocation]) {
        if entries.updateValue(value, forKey: key) == nil { order.append(key) }
        while order.count > capacity, let oldest = order.popFirst() { entries[oldest] = nil }
    }

    var count: Int { entries.count }
}
