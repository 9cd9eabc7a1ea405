import CrashWire
import Foundation

/// Notification guard (kind `notification`): `NotificationCenter` observation bound to an
/// owner that is held weakly, like the seed's remover tied to the observer's lifetime.
///
/// ```swift
/// GuardedNotifications.default.addObserver(self, name: .didLogin) { me, note in
///     me.reload()
/// }
/// ```
///
/// - The handler gets the owner back; the center's block never holds the owner, so an
///   owner that is gone is never called (where a block with `[unowned self]` dies with
///   "Attempted to read an unowned reference").
/// - A registration whose owner is gone is removed from the center automatically: when
///   its next notification arrives, and on every `addObserver`/`removeObserver`/`purge`.
///   Not recorded: this is the guard working as designed.
/// - Adding the same owner twice for the same name and object is ignored and recorded:
///   `Repeated additions of the observer <Owner 0x...> for the notification "didLogin"`.
/// - Removing a registration that does not exist is ignored and recorded:
///   `Cannot remove an observer <Owner 0x...> for the notification "didLogin" because it is not registered as an observer.`
///
/// Thread-safe: add, remove and delivery may happen on any thread.
public final class GuardedNotifications: @unchecked Sendable {
    /// The registry over `NotificationCenter.default`.
    public static let `default` = GuardedNotifications(center: .default)

    /// The center observed.
    public let center: NotificationCenter

    private struct Key: Hashable {
        let owner: ObjectIdentifier
        let name: Notification.Name
        let object: ObjectIdentifier?
    }

    private final class Registration: @unchecked Sendable {
        weak var owner: AnyObject?
        var token: (any NSObjectProtocol)?
        init(owner: AnyObject) { self.owner = owner }
    }

    private let registrations = LockedBox<[Key: Registration]>([:])

    /// Creates a registry over `center`.
    public init(center: NotificationCenter) {
        self.center = center
    }

    /// Calls `handler` with `owner` for each `name` notification (from `object`, or any
    /// sender when `nil`), on `queue` or the posting thread, for as long as `owner` lives.
    /// Returns whether it was added (`false`: a duplicate, recorded).
    @discardableResult
    public func addObserver<Owner: AnyObject>(
        _ owner: Owner, name: Notification.Name, object: AnyObject? = nil, queue: OperationQueue? = nil,
        fileID: String = #fileID, line: Int = #line, function: String = #function,
        handler: @escaping (Owner, Notification) -> Void
    ) -> Bool {
        purge()
        let key = Key(owner: ObjectIdentifier(owner), name: name, object: object.map(ObjectIdentifier.init))
        let registration = Registration(owner: owner)
        let added = registrations.withLock { table -> Bool in
            if let existing = table[key], existing.owner != nil { return false }
            table[key] = registration
            return true
        }
        guard added else {
            record(
                "Repeated additions of the observer \(Describe.object(owner)) for the notification \"\(name.rawValue)\"",
                action: "ignored the second add", site: CallSite(fileID: fileID, line: line, function: function))
            return false
        }
        let call = UncheckedBox(handler)
        let token = center.addObserver(forName: name, object: object, queue: queue) { [weak self, weak registration] note in
            guard let registration else { return }
            guard let owner = registration.owner as? Owner else {
                self?.drop(key, registration)
                return
            }
            call.value(owner, note)
        }
        registration.token = token
        return true
    }

    /// Removes `owner`'s registration for `name` and `object`. Returns whether there was
    /// one (`false`: recorded).
    @discardableResult
    public func removeObserver(
        _ owner: AnyObject, name: Notification.Name, object: AnyObject? = nil,
        fileID: String = #fileID, line: Int = #line, function: String = #function
    ) -> Bool {
        purge()
        let key = Key(owner: ObjectIdentifier(owner), name: name, object: object.map(ObjectIdentifier.init))
        let removed = registrations.withLock { table -> Registration? in
            guard let existing = table[key], existing.owner === owner else { return nil }
            table[key] = nil
            return existing
        }
        guard let removed else {
            record(
                "Cannot remove an observer \(Describe.object(owner)) for the notification \"\(name.rawValue)\" because it is not registered as an observer.",
                action: "ignored the remove", site: CallSite(fileID: fileID, line: line, function: function))
            return false
        }
        if let token = removed.token { center.removeObserver(token) }
        return true
    }

    /// Removes every registration of `owner` (not recorded when it had none).
    public func removeObserver(_ owner: AnyObject) {
        let id = ObjectIdentifier(owner)
        let removed = registrations.withLock { table -> [Registration] in
            let keys = table.keys.filter { $0.owner == id }
            return keys.compactMap { table.removeValue(forKey: $0) }
        }
        for registration in removed { if let token = registration.token { center.removeObserver(token) } }
    }

    /// Removes the registrations whose owner is gone.
    public func purge() {
        let dead = registrations.withLock { table -> [Registration] in
            let keys = table.filter { $0.value.owner == nil }.map(\.key)
            return keys.compactMap { table.removeValue(forKey: $0) }
        }
        for registration in dead { if let token = registration.token { center.removeObserver(token) } }
    }

    /// The number of registrations whose owner is alive.
    public var count: Int {
        registrations.withLock { $0.values.filter { $0.owner != nil }.count }
    }

    /// Whether `owner` is registered for `name` and `object`.
    public func isRegistered(_ owner: AnyObject, name: Notification.Name, object: AnyObject? = nil) -> Bool {
        let key = Key(owner: ObjectIdentifier(owner), name: name, object: object.map(ObjectIdentifier.init))
        return registrations.withLock { $0[key]?.owner === owner }
    }

    private func drop(_ key: Key, _ registration: Registration) {
        let removed = registrations.withLock { table -> Bool in
            guard table[key] === registration else { return false }
            table[key] = nil
            return true
        }
        if removed || registration.token != nil, let token = registration.token {
            registration.token = nil
            center.removeObserver(token)
        }
    }

    private func record(_ reason: @autoclosure () -> String, action: String, site: CallSite) {
        GuardRecorder.record(.notification, site: site, in: nil, reason: reason(), context: ["action": action])
    }
}

/// Carries a non-`Sendable` value into a `@Sendable` closure whose callers guarantee the
/// value is used safely (a handler the app gave us, called as the app asked).
final class UncheckedBox<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}
