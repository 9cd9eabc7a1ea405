import CrashWire
import Foundation

/// A change delivered to a key-value observer.
public struct KeyValueChange<Subject: AnyObject, Value> {
    /// The observed object.
    public let object: Subject
    /// The key path's name (`name` for `\Student.name`).
    public let keyPath: String
    /// The value before the change.
    public let oldValue: Value
    /// The value after the change.
    public let newValue: Value
}

/// An observer in the style of `-observeValueForKeyPath:ofObject:change:context:`.
///
/// The default implementation throws ``KeyValueObservationError/unhandled``: an observer
/// that registers without implementing the callback gets its changes recorded as
/// "message was received but not handled" instead of crashing the app.
public protocol KeyValueObserver: AnyObject {
    /// Called after an observed key path changed. Throwing is caught and recorded.
    func observeValue(forKeyPath keyPath: String, change: KeyValueChange<AnyObject, Any>) throws
}

extension KeyValueObserver {
    /// Throws ``KeyValueObservationError/unhandled``.
    public func observeValue(forKeyPath keyPath: String, change: KeyValueChange<AnyObject, Any>) throws {
        throw KeyValueObservationError.unhandled
    }
}

/// Errors an observer callback may throw to the registry.
public enum KeyValueObservationError: Error, Sendable {
    /// The observer did not handle the change (the default ``KeyValueObserver`` callback).
    case unhandled
}

/// KVO guard (kind `kvo`): an observation registry over key paths, the seed's KVO proxy
/// with its `{keyPath: weak observers}` table, for plain Swift classes.
///
/// The observed object owns the registry and announces its changes; observers are held
/// weakly:
///
/// ```swift
/// final class Student {
///     lazy var observers = KeyValueObservers(self)
///     var name = "" { didSet { observers.didChange(\.name, from: oldValue, to: name) } }
/// }
/// student.observers.addObserver(self, for: \.name) { me, change in me.render(change.newValue) }
/// ```
///
/// Every failure mode of Objective-C KVO (seed 004) is handled and recorded:
///
/// | mode | Objective-C | here |
/// | --- | --- | --- |
/// | remove an observer never added | crash: `Cannot remove an observer <O 0x..> for the key path "name" from <S 0x..> because it is not registered as an observer.` | ignored, recorded with that reason |
/// | remove twice | same crash | ignored, recorded, same reason |
/// | add twice | called twice per change | ignored, recorded: `Repeated additions to the observer <O 0x..> for the key path "name" from <S 0x..>` |
/// | observed object released with observers registered | crash: `An instance 0x.. of class S was deallocated while key value observers were still registered with it.` | registrations dropped, recorded with that reason and the key paths |
/// | observer without a callback | crash: `<O 0x..>: An -observeValueForKeyPath:ofObject:change:context: message was received but not handled.` | change dropped for that observer, recorded with that reason |
/// | empty key path (`\S.self` or `""`) | crash: `-[__NSCFConstantString characterAtIndex:]: Range or index out of bounds` | refused, recorded: `Cannot add an observer <O 0x..> for an empty key path to <S 0x..>` |
/// | observer released while registered | wild pointer on old systems | dropped silently (held weakly) |
///
/// Swift's Observation module is not used: it is not among the SDK's allowed imports,
/// and its one-shot `withObservationTracking` has no observer identity to add or remove,
/// which is what the failure modes above are about.
///
/// Thread-safe: add, remove and change announcements may come from any thread; handlers
/// run on the announcing thread, outside the registry's lock.
public final class KeyValueObservers<Subject: AnyObject>: @unchecked Sendable {
    private struct Entry {
        weak var observer: AnyObject?
        let id: ObjectIdentifier
        let description: String
        let handler: (AnyObject, Subject, Any, Any) throws -> Void
    }

    private weak var subject: Subject?
    private let subjectDescription: String
    private let subjectAddress: String
    private let subjectType: String
    private let scope = GuardRecorder.captureScope()
    private let site: CallSite
    private let table = LockedBox<(entries: [String: [Entry]], released: Bool)>(([:], false))
    private let keyPathNames: [AnyKeyPath: String]

    /// Creates the registry for `subject`, which it holds weakly.
    ///
    /// `keyPathNames` names typed key paths in reasons and in ``observedKeyPaths``. A key
    /// path to a stored property without observers names itself (`name` for
    /// `\Student.name`); one to a property with `didSet` (the usual case here) or a
    /// computed property describes itself only as `<computed 0x... (String)>`, so name it:
    /// `KeyValueObservers(self, keyPathNames: [\.name: "name"])`.
    public init(
        _ subject: Subject, keyPathNames: [PartialKeyPath<Subject>: String] = [:],
        fileID: String = #fileID, line: Int = #line, function: String = #function
    ) {
        self.subject = subject
        var names: [AnyKeyPath: String] = [:]
        for (keyPath, name) in keyPathNames { names[keyPath as AnyKeyPath] = name }
        self.keyPathNames = names
        self.subjectDescription = Describe.object(subject)
        self.subjectAddress = Describe.address(subject)
        self.subjectType = Describe.typeName(type(of: subject))
        self.site = CallSite(fileID: fileID, line: line, function: function)
    }

    deinit {
        reportReleasedSubject(site: site)
    }

    // MARK: Adding

    /// Adds `observer` for `keyPath`; `handler` gets the observer back (it is held weakly)
    /// and the change. Returns whether it was added (`false`: duplicate or empty key path,
    /// recorded).
    @discardableResult
    public func addObserver<Observer: AnyObject, Value>(
        _ observer: Observer, for keyPath: KeyPath<Subject, Value>,
        fileID: String = #fileID, line: Int = #line, function: String = #function,
        handler: @escaping (Observer, KeyValueChange<Subject, Value>) throws -> Void
    ) -> Bool {
        let name = self.name(of: keyPath)
        return add(observer, name: name, site: CallSite(fileID: fileID, line: line, function: function)) { obs, subject, old, new in
            guard let obs = obs as? Observer, let old = old as? Value, let new = new as? Value else { return }
            try handler(obs, KeyValueChange(object: subject, keyPath: name, oldValue: old, newValue: new))
        }
    }

    /// Adds a ``KeyValueObserver`` for `keyPath`.
    @discardableResult
    public func addObserver<Value>(
        _ observer: some KeyValueObserver, for keyPath: KeyPath<Subject, Value>,
        fileID: String = #fileID, line: Int = #line, function: String = #function
    ) -> Bool {
        addObserver(observer, forKeyPath: self.name(of: keyPath), fileID: fileID, line: line, function: function)
    }

    /// Adds a ``KeyValueObserver`` for a key path given by name (announced with
    /// ``didChange(keyPath:from:to:fileID:line:function:)``).
    @discardableResult
    public func addObserver(
        _ observer: some KeyValueObserver, forKeyPath keyPath: String,
        fileID: String = #fileID, line: Int = #line, function: String = #function
    ) -> Bool {
        add(observer, name: keyPath, site: CallSite(fileID: fileID, line: line, function: function)) { obs, subject, old, new in
            guard let obs = obs as? any KeyValueObserver else { return }
            try obs.observeValue(forKeyPath: keyPath, change: KeyValueChange(object: subject, keyPath: keyPath, oldValue: old, newValue: new))
        }
    }

    // MARK: Removing

    /// Removes `observer` for `keyPath`. Returns whether it was registered (`false`:
    /// recorded, `Cannot remove an observer ... because it is not registered as an observer.`).
    @discardableResult
    public func removeObserver<Value>(
        _ observer: AnyObject, for keyPath: KeyPath<Subject, Value>,
        fileID: String = #fileID, line: Int = #line, function: String = #function
    ) -> Bool {
        removeObserver(observer, forKeyPath: self.name(of: keyPath), fileID: fileID, line: line, function: function)
    }

    /// Removes `observer` for the key path named `keyPath`.
    @discardableResult
    public func removeObserver(
        _ observer: AnyObject, forKeyPath keyPath: String,
        fileID: String = #fileID, line: Int = #line, function: String = #function
    ) -> Bool {
        let site = CallSite(fileID: fileID, line: line, function: function)
        if keyPath.isEmpty {
            record(
                "Cannot remove an observer \(Describe.object(observer)) for an empty key path from \(subjectDescription)",
                action: "refused the empty key path", site: site)
            return false
        }
        let id = ObjectIdentifier(observer)
        let removed = table.withLock { state -> Bool in
            let list = state.entries[keyPath] ?? []
            let found = list.contains { $0.id == id && $0.observer === observer }
            let kept = list.filter { $0.observer != nil && !($0.id == id && $0.observer === observer) }
            state.entries[keyPath] = kept.isEmpty ? nil : kept
            return found
        }
        if !removed {
            record(
                "Cannot remove an observer \(Describe.object(observer)) for the key path \"\(keyPath)\" from \(subjectDescription) because it is not registered as an observer.",
                action: "ignored the remove", site: site)
        }
        return removed
    }

    /// Removes `observer` from every key path (not recorded when it had none).
    public func removeObserver(_ observer: AnyObject) {
        table.withLock { state in
            for (name, list) in state.entries {
                let kept = list.filter { $0.observer != nil && $0.observer !== observer }
                state.entries[name] = kept.isEmpty ? nil : kept
            }
        }
    }

    // MARK: Announcing

    /// Announces a change of `keyPath` to its live observers (call from `didSet`).
    public func didChange<Value>(
        _ keyPath: KeyPath<Subject, Value>, from oldValue: Value, to newValue: Value,
        fileID: String = #fileID, line: Int = #line, function: String = #function
    ) {
        didChange(keyPath: self.name(of: keyPath), from: oldValue, to: newValue, fileID: fileID, line: line, function: function)
    }

    /// Announces a change of the key path named `keyPath`.
    public func didChange(
        keyPath: String, from oldValue: Any, to newValue: Any,
        fileID: String = #fileID, line: Int = #line, function: String = #function
    ) {
        let site = CallSite(fileID: fileID, line: line, function: function)
        guard let subject else {
            reportReleasedSubject(site: site)
            return
        }
        let live: [(AnyObject, Entry)] = table.withLock { state in
            guard let list = state.entries[keyPath] else { return [] }
            let kept = list.filter { $0.observer != nil }
            state.entries[keyPath] = kept.isEmpty ? nil : kept
            return kept.compactMap { entry in entry.observer.map { ($0, entry) } }
        }
        for (observer, entry) in live {
            do {
                try entry.handler(observer, subject, oldValue, newValue)
            } catch KeyValueObservationError.unhandled {
                record(
                    "\(entry.description): An -observeValueForKeyPath:ofObject:change:context: message was received but not handled.\nKey path: \(keyPath)\nObserved object: \(subjectDescription)",
                    action: "dropped the change for this observer", site: site)
            } catch {
                record(
                    "KVO exception in observer \(entry.description) for the key path \"\(keyPath)\" of \(subjectDescription): \(error)",
                    action: "dropped the change for this observer", site: site)
            }
        }
    }

    // MARK: Inspecting

    /// The live observers of the key path named `keyPath`.
    public func observers(forKeyPath keyPath: String) -> [AnyObject] {
        table.withLock { $0.entries[keyPath]?.compactMap(\.observer) ?? [] }
    }

    /// The live observers of `keyPath`.
    public func observers<Value>(for keyPath: KeyPath<Subject, Value>) -> [AnyObject] {
        observers(forKeyPath: self.name(of: keyPath))
    }

    /// The key paths with at least one live observer, sorted.
    public var observedKeyPaths: [String] {
        table.withLock { state in
            state.entries.filter { $0.value.contains { $0.observer != nil } }.keys.sorted()
        }
    }

    // MARK: Internals

    private func name(of keyPath: AnyKeyPath) -> String {
        if keyPath == (\Subject.self as AnyKeyPath) { return "" }
        return keyPathNames[keyPath] ?? Describe.keyPath(keyPath)
    }

    private func add(
        _ observer: AnyObject, name: String, site: CallSite,
        handler: @escaping (AnyObject, Subject, Any, Any) throws -> Void
    ) -> Bool {
        let observerDescription = Describe.object(observer)
        if name.isEmpty {
            record(
                "Cannot add an observer \(observerDescription) for an empty key path to \(subjectDescription)",
                action: "refused the empty key path", site: site)
            return false
        }
        if subject == nil {
            reportReleasedSubject(site: site)
            return false
        }
        let id = ObjectIdentifier(observer)
        let added = table.withLock { state -> Bool in
            var list = (state.entries[name] ?? []).filter { $0.observer != nil }
            if list.contains(where: { $0.id == id && $0.observer === observer }) { return false }
            list.append(Entry(observer: observer, id: id, description: observerDescription, handler: handler))
            state.entries[name] = list
            state.released = false
            return true
        }
        if !added {
            record(
                "Repeated additions to the observer \(observerDescription) for the key path \"\(name)\" from \(subjectDescription)",
                action: "ignored the second add", site: site)
        }
        return added
    }

    /// The observed object is gone: drop every registration, and record once if live
    /// observers were still registered.
    private func reportReleasedSubject(site: CallSite) {
        let stillRegistered: [String] = table.withLock { state in
            if state.released { return [] }
            state.released = true
            let names = state.entries.filter { $0.value.contains { $0.observer != nil } }.keys.sorted()
            state.entries.removeAll()
            return names
        }
        guard !stillRegistered.isEmpty else { return }
        GuardRecorder.record(
            .kvo, site: site, in: scope,
            reason:
                "An instance \(subjectAddress) of class \(subjectType) was deallocated while key value observers were still registered with it. Key paths: \(stillRegistered.joined(separator: ", "))",
            context: ["action": "removed the remaining observers", "keyPaths": stillRegistered.joined(separator: ",")]
        )
    }

    private func record(_ reason: @autoclosure () -> String, action: String, site: CallSite) {
        GuardRecorder.record(.kvo, site: site, in: scope, reason: reason(), context: ["action": action])
    }
}
