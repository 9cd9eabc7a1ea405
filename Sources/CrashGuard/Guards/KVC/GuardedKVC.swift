import CrashWire
import Foundation

/// KVC guard (kind `kvc`): reading properties by name through `Mirror`, and writing them
/// through a keyed-setter table for types that opt in, without Objective-C's
/// `valueForUndefinedKey:` / `setValue:forUndefinedKey:` exceptions.
///
/// ```swift
/// GuardedKVC.value(forKey: "name", of: student)           // "Ann"
/// GuardedKVC.value(forKey: "nickname", of: student)       // nil, recorded
/// GuardedKVC.value(forKeyPath: "address.city", of: student)
/// ```
///
/// Reasons are Foundation's: `[<Student 0x...> valueForUndefinedKey:]: this class is not key value coding-compliant for the key nickname.`
public enum GuardedKVC {
    /// The stored property `key` of `object` (a class instance, including inherited
    /// properties, or a value), or `nil`: when the property is `nil`, and (recorded) when
    /// there is no such property.
    public static func value(
        forKey key: String, of object: Any,
        fileID: String = #fileID, line: Int = #line, function: String = #function
    ) -> Any? {
        let site = CallSite(fileID: fileID, line: line, function: function)
        guard !key.isEmpty else {
            record("-[\(Describe.typeName(type(of: object))) valueForKey:]: attempt to retrieve a value for an empty key", site: site)
            return nil
        }
        switch lookup(key, in: object) {
        case .found(let value): return value
        case .missing:
            record(
                "[\(Describe.instance(object)) valueForUndefinedKey:]: this class is not key value coding-compliant for the key \(key).", site: site)
            return nil
        }
    }

    /// Follows a dotted key path (`address.city`); `nil` when a step is `nil`, and
    /// (recorded, naming the step) when a step does not exist.
    public static func value(
        forKeyPath keyPath: String, of object: Any,
        fileID: String = #fileID, line: Int = #line, function: String = #function
    ) -> Any? {
        var current: Any = object
        for key in keyPath.split(separator: ".", omittingEmptySubsequences: false) {
            guard let next = value(forKey: String(key), of: current, fileID: fileID, line: line, function: function) else { return nil }
            current = next
        }
        return current
    }

    private enum Lookup { case found(Any?), missing }

    private static func lookup(_ key: String, in object: Any) -> Lookup {
        var mirror: Mirror? = Mirror(reflecting: object)
        while let current = mirror {
            for child in current.children where child.label == key || child.label == "_" + key {
                return .found(flatten(child.value))
            }
            mirror = current.superclassMirror
        }
        return .missing
    }

    /// `Optional<T>.none` inside an `Any` becomes `nil`; `.some(x)` becomes `x`.
    static func flatten(_ value: Any) -> Any? {
        let mirror = Mirror(reflecting: value)
        guard mirror.displayStyle == .optional else { return value }
        return mirror.children.first.map { flatten($0.value) } ?? nil
    }

    static func record(_ reason: @autoclosure () -> String, action: String = "returned nil", site: CallSite) {
        GuardRecorder.record(.kvc, site: site, in: nil, reason: reason(), context: ["action": action])
    }
}

/// A table of named, typed setters: the Swift shape of `setValue:forKey:` for a type that
/// opts in by conforming to ``KeyValueSettable``.
///
/// ```swift
/// extension Student: KeyValueSettable {
///     static let keyedSetters = KeyedSetters<Student>()
///         .settable("name", \.name)
///         .settable("age", \.age)
/// }
/// student.guardedSetValue("Bo", forKey: "name")     // set
/// student.guardedSetValue(3, forKey: "nickname")    // ignored, recorded
/// ```
///
/// A write is ignored and recorded when the key is not in the table
/// (`[<Student 0x...> setValue:forUndefinedKey:]: this class is not key value coding-compliant for the key nickname.`),
/// when the value has the wrong type
/// (`-[Student setValue:forKey:]: value of type Int is not String for the key name.`), or
/// when it is `nil` for a non-optional property
/// (`[<Student 0x...> setNilValueForKey]: could not set nil as the value for the key age.`).
public struct KeyedSetters<Root>: @unchecked Sendable {
    /// The result of one typed setter.
    enum Outcome { case set, wrongType(String), nilForNonOptional }

    private var setters: [String: (inout Root, Any?) -> Outcome] = [:]
    private var types: [String: String] = [:]

    /// An empty table.
    public init() {}

    /// Adds `key` writing through `keyPath` (a `ReferenceWritableKeyPath` for classes).
    public func settable<Value>(_ key: String, _ keyPath: WritableKeyPath<Root, Value>) -> KeyedSetters {
        var copy = self
        copy.types[key] = String(describing: Value.self)
        copy.setters[key] = { root, value in
            if let value {
                guard let typed = value as? Value else { return .wrongType(Describe.typeName(type(of: value))) }
                root[keyPath: keyPath] = typed
                return .set
            }
            guard let none = Optional<Any>.none as Any as? Value else { return .nilForNonOptional }
            root[keyPath: keyPath] = none
            return .set
        }
        return copy
    }

    /// The keys in the table, sorted.
    public var keys: [String] { setters.keys.sorted() }

    /// Writes `value` for `key` into `root`; returns whether it was written.
    @discardableResult
    public func setValue(
        _ value: Any?, forKey key: String, in root: inout Root,
        fileID: String = #fileID, line: Int = #line, function: String = #function
    ) -> Bool {
        let site = CallSite(fileID: fileID, line: line, function: function)
        let instance = Describe.instance(root)
        guard let setter = setters[key] else {
            GuardedKVC.record(
                "[\(instance) setValue:forUndefinedKey:]: this class is not key value coding-compliant for the key \(key).",
                action: "ignored the write", site: site)
            return false
        }
        switch setter(&root, value) {
        case .set:
            return true
        case .wrongType(let found):
            GuardedKVC.record(
                "-[\(Describe.typeName(Root.self)) setValue:forKey:]: value of type \(found) is not \(types[key] ?? "?") for the key \(key).",
                action: "ignored the write", site: site)
        case .nilForNonOptional:
            GuardedKVC.record(
                "[\(instance) setNilValueForKey]: could not set nil as the value for the key \(key).",
                action: "ignored the write", site: site)
        }
        return false
    }
}

/// A type whose properties can be written by name through ``KeyedSetters``.
public protocol KeyValueSettable {
    /// The writable keys.
    static var keyedSetters: KeyedSetters<Self> { get }
}

extension KeyValueSettable {
    /// Writes `value` for `key` through ``keyedSetters``; returns whether it was written
    /// (unknown key, wrong type or `nil` for a non-optional: ignored and recorded).
    @discardableResult
    public mutating func guardedSetValue(
        _ value: Any?, forKey key: String, fileID: String = #fileID, line: Int = #line, function: String = #function
    ) -> Bool {
        Self.keyedSetters.setValue(value, forKey: key, in: &self, fileID: fileID, line: line, function: function)
    }

    /// The property `key` read through `Mirror`, see ``GuardedKVC/value(forKey:of:fileID:line:function:)``.
    public func guardedValue(
        forKey key: String, fileID: String = #fileID, line: Int = #line, function: String = #function
    ) -> Any? {
        GuardedKVC.value(forKey: key, of: self, fileID: fileID, line: line, function: function)
    }
}

extension KeyValueSettable where Self: AnyObject {
    /// Writes `value` for `key` into this instance; see the value-type form.
    @discardableResult
    public func guardedSetValue(
        _ value: Any?, forKey key: String, fileID: String = #fileID, line: Int = #line, function: String = #function
    ) -> Bool {
        var root = self
        return Self.keyedSetters.setValue(value, forKey: key, in: &root, fileID: fileID, line: line, function: function)
    }
}
