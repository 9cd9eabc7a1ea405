import Foundation

/// One crash or guarded error, as the SDK sends it and the server stores it.
///
/// The `id` is the idempotency key: the server stores a report at most once per project,
/// so a client may resend a report as often as it needs to.
public struct Report: Codable, Sendable, Hashable {
    /// Idempotency key, generated on the device.
    public var id: UUID
    /// When it happened on the client.
    public var timestamp: Date
    /// What kind of failure this is.
    public var kind: ReportKind
    /// The runtime message, in the style of the original (so grouping works).
    public var reason: String
    /// Symbolicated frames, innermost first.
    public var stack: [String]?
    /// `true` when the process died; `false` (or absent) when a guard kept it alive.
    public var fatal: Bool?
    /// The app that reported.
    public var app: AppInfo
    /// The device it ran on.
    public var device: DeviceInfo?
    /// Replaces the computed grouping when present.
    public var fingerprint: [String]?
    /// Free-form details: what a guard did instead, call site, counters.
    public var context: [String: String]?
    /// Where the app ran (`production`, `staging`); absent means ``ReportLimits/defaultEnvironment``.
    /// Not part of the signature: one group spans environments.
    public var environment: String?

    /// Creates a report; `id` and `timestamp` default to a fresh UUID and now.
    public init(
        id: UUID = UUID(),
        timestamp: Date = Date(),
        kind: ReportKind,
        reason: String,
        stack: [String]? = nil,
        fatal: Bool? = nil,
        app: AppInfo,
        device: DeviceInfo? = nil,
        fingerprint: [String]? = nil,
        context: [String: String]? = nil,
        environment: String? = nil
    ) {
        self.id = id
        self.timestamp = timestamp
        self.kind = kind
        self.reason = reason
        self.stack = stack
        self.fatal = fatal
        self.app = app
        self.device = device
        self.fingerprint = fingerprint
        self.context = context
        self.environment = environment
    }
}

/// The app a report comes from.
public struct AppInfo: Codable, Sendable, Hashable {
    /// Bundle or package identifier.
    public var id: String
    /// Marketing version, compared numerically dot by dot (`1.10.0` > `1.4.0`).
    public var version: String
    /// Build number, when the app has one.
    public var build: String?

    /// Creates app information.
    public init(id: String, version: String, build: String? = nil) {
        self.id = id
        self.version = version
        self.build = build
    }
}

/// The device a report comes from. Every field is optional and may be empty.
public struct DeviceInfo: Codable, Sendable, Hashable {
    /// Operating system name (`iOS`, `Linux`).
    public var os: String?
    /// Operating system version.
    public var osVersion: String?
    /// Hardware model (`iPhone14,2`).
    public var model: String?
    /// A random install id, persisted by the SDK; counts affected devices.
    public var id: String?

    /// Creates device information.
    public init(os: String? = nil, osVersion: String? = nil, model: String? = nil, id: String? = nil) {
        self.os = os
        self.osVersion = osVersion
        self.model = model
        self.id = id
    }
}

/// The body of `POST /v1/reports`.
public struct ReportBatch: Codable, Sendable {
    /// 1 to 1000 reports.
    public var reports: [Report]

    /// Creates a batch.
    public init(reports: [Report]) { self.reports = reports }
}
