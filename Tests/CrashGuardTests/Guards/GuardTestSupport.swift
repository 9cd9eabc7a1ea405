import CrashGuard
import CrashWire
import Foundation
import Testing

/// Collects events; thread-safe.
final class GuardTestSink: GuardEventSink, @unchecked Sendable {
    private let lock = NSLock()
    private var storage: [GuardEvent] = []

    func record(_ event: GuardEvent) {
        lock.lock()
        storage.append(event)
        lock.unlock()
    }

    var events: [GuardEvent] {
        lock.lock()
        defer { lock.unlock() }
        return storage
    }
}

/// Runs `body` with a fresh sink scoped to this test (tests run in parallel), every guard
/// on and no rate limit; returns what `body` returned and the events recorded.
func recording<R>(
    _ enabled: Set<ReportKind> = Set(ReportKind.allCases),
    rateLimit: GuardRecorder.RateLimit = .unlimited,
    _ body: () throws -> R
) rethrows -> (value: R, events: [GuardEvent]) {
    let sink = GuardTestSink()
    let value = try GuardRecorder.withSink(sink, enabled: enabled, rateLimit: rateLimit, operation: body)
    return (value, sink.events)
}

/// The `async` form of ``recording(_:rateLimit:_:)``; the sink is also returned so that
/// events arriving later (timers, main queue) can be read.
func recordingAsync<R>(
    _ enabled: Set<ReportKind> = Set(ReportKind.allCases),
    _ body: (GuardTestSink) async throws -> R
) async rethrows -> (value: R, events: [GuardEvent]) {
    let sink = GuardTestSink()
    let value = try await GuardRecorder.withSink(sink, enabled: enabled) { try await body(sink) }
    return (value, sink.events)
}

/// Expects exactly one event, of `kind`, non-fatal, with `reason`, a call site and a stack.
@discardableResult
func expectOne(
    _ events: [GuardEvent], _ kind: ReportKind, _ reason: String,
    sourceLocation: SourceLocation = #_sourceLocation
) -> GuardEvent? {
    #expect(events.count == 1, "events: \(events.map(\.reason))", sourceLocation: sourceLocation)
    guard let event = events.first else { return nil }
    #expect(event.kind == kind, sourceLocation: sourceLocation)
    #expect(event.reason == reason, sourceLocation: sourceLocation)
    #expect(event.fatal == false, sourceLocation: sourceLocation)
    #expect(event.context["file"]?.hasPrefix("CrashGuardTests/") == true, "file: \(event.context["file"] ?? "nil")", sourceLocation: sourceLocation)
    #expect(event.context["line"] != nil && event.context["function"] != nil, sourceLocation: sourceLocation)
    #expect(event.context["action"] != nil, sourceLocation: sourceLocation)
    #expect(!event.stack.isEmpty, sourceLocation: sourceLocation)
    return event
}

/// `0x7f...`, as the guards print an object's address.
func objectAddress(_ object: AnyObject) -> String {
    "0x" + String(UInt(bitPattern: Unmanaged.passUnretained(object).toOpaque()), radix: 16)
}

/// Polls `condition` until it holds or `seconds` pass.
func eventuallyTrue(_ seconds: Double = 5, _ condition: () -> Bool) async -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if condition() { return true }
        try? await Task.sleep(nanoseconds: 10_000_000)
    }
    return condition()
}

/// `value`, opaque to the optimizer, so that traps happen at run time.
@inline(never)
func runtimeOpaque<T>(_ value: T) -> T { value }
