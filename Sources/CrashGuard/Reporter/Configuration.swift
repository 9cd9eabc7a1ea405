import CCrashCapture
import CrashWire
import Foundation

extension CrashGuard {
    /// Everything ``CrashGuard/start(_:)`` needs: where reports go, who sends them, how they
    /// are queued and batched, and the reporter block that sees each one first.
    public struct Configuration: Sendable {
        /// The crash server's base URL; reports go to `serverURL` + `/v1/reports`.
        public var serverURL: URL
        /// The project's ingest key, sent as `X-Crash-Key`.
        public var ingestKey: String
        /// The app stamped on every report.
        public var app: AppInfo
        /// The device stamped on every report. `id` defaults to an install id kept in
        /// ``directory`` (a random UUID created on first start).
        public var device: DeviceInfo
        /// The guard kinds that record (a guard that is off still does the safe thing).
        /// Default: all of them.
        public var enabledGuards: Set<ReportKind>
        /// Holds the queue, the install id and the crash record. Default: a `CrashGuard`
        /// folder in the user's caches directory.
        public var directory: URL
        /// Reports per upload, 1 to 1000 (the contract's limit); a full batch is sent at once.
        public var batchSize: Int
        /// Longest a queued report waits before an upload is tried.
        public var flushInterval: Duration
        /// Most bytes the on-disk queue holds; beyond it the oldest guard reports are dropped
        /// and counted (the count travels in the next upload's context as `crashguard.dropped`);
        /// fatal reports and session updates are never dropped for room.
        public var maxQueueBytes: Int
        /// Fraction (0...1) of non-fatal reports kept; fatal ones (crashes) are always kept.
        public var sampleRate: Double
        /// Called with every report before it is queued, on the thread that recorded it.
        /// Return it (changed or not) to queue it, or `nil` to drop it; forward it anywhere.
        public var reporter: (@Sendable (Report) -> Report?)?
        /// `false`: nothing is queued or uploaded; reports only reach ``reporter``
        /// (for apps with their own transport).
        public var uploadEnabled: Bool
        /// Installs the fatal signal handlers and turns a previous run's crash into a report.
        public var captureCrashes: Bool
        /// The HTTP transport; `nil` uses ``URLSessionTransport``.
        public var transport: (any ReportTransport)?
        /// Where the SDK's own diagnostics go (rejections, a 401). Default: standard error.
        public var log: @Sendable (String) -> Void
        /// Debug mode: a guard that catches a bug records it as usual, then stops the process
        /// with `fatalError` (the crash is recorded too), so bugs are not hidden while you
        /// develop. Default `false`; a typical setup turns it on in debug builds only:
        /// `#if DEBUG configuration.debugTraps = true #endif`.
        public var debugTraps: Bool = false
        /// Session tracking for release health (`docs/sdk.md`, "Sessions"): one session per
        /// run, sent to `POST /v1/sessions`, so the server can compute crash-free rates.
        /// Needs ``uploadEnabled``. Default `true`.
        public var trackSessions: Bool = true
        /// The environment reports and sessions are stamped with (`production`, `staging`,
        /// …; 1 to 64 bytes, no control characters; another value is ignored and logged at
        /// start). `nil`: the server's default, `production`.
        public var environment: String?

        /// Creates a configuration with the defaults: batches of 100, a 30 s flush
        /// interval, a 5 MiB queue, every report kept, uploads and crash capture on.
        public init(
            serverURL: URL,
            ingestKey: String,
            appID: String,
            appVersion: String,
            appBuild: String? = nil,
            device: DeviceInfo = .current,
            enabledGuards: Set<ReportKind> = GuardRecorder.guardKinds,
            directory: URL = Configuration.defaultDirectory,
            batchSize: Int = 100,
            flushInterval: Duration = .seconds(30),
            maxQueueBytes: Int = 5 << 20,
            sampleRate: Double = 1,
            uploadEnabled: Bool = true,
            captureCrashes: Bool = true,
            transport: (any ReportTransport)? = nil,
            reporter: (@Sendable (Report) -> Report?)? = nil,
            log: @escaping @Sendable (String) -> Void = Configuration.standardErrorLog
        ) {
            self.serverURL = serverURL
            self.ingestKey = ingestKey
            self.app = AppInfo(id: appID, version: appVersion, build: appBuild)
            self.device = device
            self.enabledGuards = enabledGuards
            self.directory = directory
            self.batchSize = batchSize
            self.flushInterval = flushInterval
            self.maxQueueBytes = maxQueueBytes
            self.sampleRate = sampleRate
            self.uploadEnabled = uploadEnabled
            self.captureCrashes = captureCrashes
            self.transport = transport
            self.reporter = reporter
            self.log = log
        }

        /// `<caches>/CrashGuard`, or `$TMPDIR/CrashGuard` where there is no caches directory.
        public static var defaultDirectory: URL {
            let caches =
                FileManager.default.urls(for: .cachesDirectory, in: .userDomainMask).first
                ?? FileManager.default.temporaryDirectory
            return caches.appendingPathComponent("CrashGuard", isDirectory: true)
        }

        /// Writes `[CrashGuard] message` to standard error.
        public static let standardErrorLog: @Sendable (String) -> Void = { message in
            FileHandle.standardError.write(Data("[CrashGuard] \(message)\n".utf8))
        }

        /// The ingest endpoint.
        var endpoint: URL { serverURL.appendingPathComponent("v1").appendingPathComponent("reports") }

        /// ``environment`` when the contract allows it, else `nil` (the server's `production`).
        var validEnvironment: String? { environment.flatMap { Report.environmentError($0) == nil ? $0 : nil } }

        /// `batchSize` clamped to 1...1000.
        var effectiveBatchSize: Int { min(max(batchSize, 1), WireProtocol.maxReportsPerBatch) }
    }
}

extension DeviceInfo {
    /// This device: OS name and version, hardware model (`uname` machine); no id yet.
    public static var current: DeviceInfo {
        #if os(iOS)
        let os = "iOS"
        #elseif os(macOS)
        let os = "macOS"
        #elseif os(tvOS)
        let os = "tvOS"
        #elseif os(watchOS)
        let os = "watchOS"
        #elseif os(visionOS)
        let os = "visionOS"
        #elseif os(Linux)
        let os = "Linux"
        #elseif os(Windows)
        let os = "Windows"
        #else
        let os = "unknown"
        #endif
        let v = ProcessInfo.processInfo.operatingSystemVersion
        return DeviceInfo(
            os: os,
            osVersion: "\(v.majorVersion).\(v.minorVersion).\(v.patchVersion)",
            model: machineModel(),
            id: nil
        )
    }

    private static func machineModel() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        ccrash_machine(&buffer, buffer.count)
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
