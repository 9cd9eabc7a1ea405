import CrashWire
import Foundation

/// What a guard (or the crash handler) caught, before the reporter stamps it with the
/// app and device and turns it into a wire ``Report``.
public struct GuardEvent: Sendable, Hashable {
    /// The contract kind of the error.
    public var kind: ReportKind
    /// A reason in the style of the original runtime message, so grouping works.
    public var reason: String
    /// Frames at the point of the catch, innermost first.
    public var stack: [String]
    /// What the guard did instead, call site, and other details.
    public var context: [String: String]
    /// `true` only for crashes no guard prevented.
    public var fatal: Bool
    /// When it was caught.
    public var timestamp: Date

    /// Creates an event.
    public init(
        kind: ReportKind,
        reason: String,
        stack: [String] = [],
        context: [String: String] = [:],
        fatal: Bool = false,
        timestamp: Date = Date()
    ) {
        self.kind = kind
        self.reason = reason
        self.stack = stack
        self.context = context
        self.fatal = fatal
        self.timestamp = timestamp
    }
}

/// Receives every event the guards record; the reporter is one, tests install their own.
public protocol GuardEventSink: Sendable {
    /// Called synchronously on the thread where the guard fired; must not block for long.
    func record(_ event: GuardEvent)
}
