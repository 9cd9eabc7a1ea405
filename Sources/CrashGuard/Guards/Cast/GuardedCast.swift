import CrashWire
import Foundation

// Cast guard (kinds `cast` and `unrecognizedSelector`): the Swift face of Objective-C's
// "unrecognized selector sent to instance", a message sent to an object of the wrong type.

/// `value as! T`, except that a value of another type answers `default` and records
/// (kind `cast`) `Could not cast value of type 'NSNull' to 'String'`, the Swift runtime's
/// message without the metadata addresses.
///
/// ```swift
/// let title = guardedCast(payload["title"] as Any, to: String.self, default: "")
/// ```
public func guardedCast<T>(
    _ value: Any, to type: T.Type = T.self, default fallback: @autoclosure () -> T,
    fileID: String = #fileID, line: Int = #line, function: String = #function
) -> T {
    if let cast = value as? T { return cast }
    recordCastFailure(value, T.self, action: "returned the default", site: CallSite(fileID: fileID, line: line, function: function))
    return fallback()
}

/// `value as? T`, recording (kind `cast`) when the cast fails: for places where the cast
/// is expected to succeed and a failure is a bug to hear about.
public func guardedCast<T>(
    _ value: Any, to type: T.Type = T.self,
    fileID: String = #fileID, line: Int = #line, function: String = #function
) -> T? {
    if let cast = value as? T { return cast }
    recordCastFailure(value, T.self, action: "returned nil", site: CallSite(fileID: fileID, line: line, function: function))
    return nil
}

private func recordCastFailure<T>(_ value: Any, _ target: T.Type, action: String, site: CallSite) {
    GuardRecorder.record(
        .cast, site: site, in: nil,
        reason: "Could not cast value of type '\(String(describing: type(of: value)))' to '\(String(describing: target))'",
        context: ["action": action, "value": Describe.value(value)]
    )
}

/// A name-based dispatch table, the Swift shape of `objc_msgSend` for routers, bridges
/// and plugin commands: handlers registered by name (a "selector") and performed by name.
///
/// An unknown name does not crash: it goes to a stub that answers the caller's default,
/// like the seed's forwarding stub that returns 0, and records (kind
/// `unrecognizedSelector`) `-[Router openProfile:]: unrecognized selector sent to instance 0x...`.
///
/// ```swift
/// let router = SelectorTable<URL, Bool>("Router")
/// router.register("openProfile:") { url in ...; return true }
/// router.perform("openSettings:", with: url, default: false)   // false, recorded
/// ```
///
/// Thread-safe: registering, removing and performing may happen concurrently; handlers
/// run on the caller's thread, outside the table's lock.
public final class SelectorTable<Input, Output>: @unchecked Sendable {
    /// The receiver's name in reasons (`Router` in `-[Router openProfile:]`).
    public let name: String
    private let handlers = LockedBox<[String: @Sendable (Input) -> Output]>([:])

    /// Creates an empty table named `name`.
    public init(_ name: String) {
        self.name = name
    }

    /// Registers (or replaces) the handler for `selector`.
    public func register(_ selector: String, _ handler: @escaping @Sendable (Input) -> Output) {
        handlers.withLock { $0[selector] = handler }
    }

    /// Removes the handler for `selector`; returns whether there was one.
    @discardableResult
    public func unregister(_ selector: String) -> Bool {
        handlers.withLock { $0.removeValue(forKey: selector) != nil }
    }

    /// Whether a handler is registered for `selector` (`respondsToSelector:`).
    public func responds(to selector: String) -> Bool {
        handlers.withLock { $0[selector] != nil }
    }

    /// The registered selectors, sorted.
    public var selectors: [String] {
        handlers.withLock { $0.keys.sorted() }
    }

    /// Performs the handler for `selector`; an unknown selector answers `default` and is
    /// recorded as `unrecognizedSelector`.
    public func perform(
        _ selector: String, with input: Input, default fallback: @autoclosure () -> Output,
        fileID: String = #fileID, line: Int = #line, function: String = #function
    ) -> Output {
        if let handler = handlers.withLock({ $0[selector] }) { return handler(input) }
        GuardRecorder.record(
            .unrecognizedSelector, site: CallSite(fileID: fileID, line: line, function: function), in: nil,
            reason: "-[\(name) \(selector)]: unrecognized selector sent to instance \(Describe.address(self))",
            context: ["action": "returned the default", "selector": selector]
        )
        return fallback()
    }
}

extension SelectorTable where Input == Void {
    /// Performs a handler that takes no input.
    public func perform(
        _ selector: String, default fallback: @autoclosure () -> Output,
        fileID: String = #fileID, line: Int = #line, function: String = #function
    ) -> Output {
        perform(selector, with: (), default: fallback(), fileID: fileID, line: line, function: function)
    }
}
