import CrashWire
import Foundation

/// Null guard (kind `null`): a typed reader over `JSONSerialization` output or any `Any`
/// tree (`[String: Any]`, `[Any]`, `NSNull`, numbers, strings).
///
/// The crash it replaces: `json["data"] as! String` (or, in Objective-C,
/// `[json[@"data"] lowercaseString]`) when the server sent `"data": null`, which dies with
/// `-[NSNull lowercaseString]: unrecognized selector sent to instance 0x...`. Like the
/// seed's NSNull forwarding to `""`, `0`, `[]` and `{}`, every read answers the caller's
/// default (or `nil`) instead:
///
/// ```swift
/// let json = try GuardedJSON(data: body)
/// let name = json["data"]["name"].string(default: "")   // "" when data is null
/// let count = json["count"].int(default: 0)             // "42" is read as 42
/// ```
///
/// - A value of the wanted type is returned as is.
/// - Numbers and strings are coerced into each other (`"42"` -> `42`, `42` -> `"42"`,
///   `"true"`/`1` -> `true`), like the seed's NSNumber<->NSString forwarding; not recorded.
/// - A missing key or index answers the default and is *not* recorded (optional fields
///   are normal in JSON).
/// - `null` (`NSNull`), or a value of another type, answers the default and is recorded:
///   `-[NSNull stringValue]: null where String expected at $.data.name` or
///   `-[Array stringValue]: Array where String expected at $.data`. Subscripting through
///   a null or a non-container reports the first such step's path.
public struct GuardedJSON: @unchecked Sendable {
    /// The value at this path; `nil` when the path does not exist.
    public let raw: Any?
    /// The path from the root, `$.items[3].name`.
    public let path: String
    /// The first step that was `null` or not a container, when subscripting went through one.
    private let brokenAt: (path: String, found: String)?

    /// A reader over an `Any` tree.
    public init(_ value: Any?) {
        self.init(raw: value, path: "$", brokenAt: nil)
    }

    /// Parses `data` with `JSONSerialization` (fragments allowed).
    public init(data: Data) throws {
        self.init(try JSONSerialization.jsonObject(with: data, options: [.fragmentsAllowed]))
    }

    private init(raw: Any?, path: String, brokenAt: (path: String, found: String)?) {
        self.raw = raw
        self.path = path
        self.brokenAt = brokenAt
    }

    /// The member `key` of an object.
    public subscript(key: String) -> GuardedJSON {
        let childPath = path + "." + key
        if let brokenAt { return GuardedJSON(raw: nil, path: childPath, brokenAt: brokenAt) }
        guard let raw else { return GuardedJSON(raw: nil, path: childPath, brokenAt: nil) }
        if let object = raw as? [String: Any] { return GuardedJSON(raw: object[key], path: childPath, brokenAt: nil) }
        if let object = raw as? NSDictionary { return GuardedJSON(raw: object.object(forKey: key), path: childPath, brokenAt: nil) }
        return GuardedJSON(raw: nil, path: childPath, brokenAt: (path, Self.typeName(raw)))
    }

    /// The element `index` of an array.
    public subscript(index: Int) -> GuardedJSON {
        let childPath = path + "[\(index)]"
        if let brokenAt { return GuardedJSON(raw: nil, path: childPath, brokenAt: brokenAt) }
        guard let raw else { return GuardedJSON(raw: nil, path: childPath, brokenAt: nil) }
        if let array = raw as? [Any] {
            return GuardedJSON(raw: array.indices.contains(index) ? array[index] : nil, path: childPath, brokenAt: nil)
        }
        return GuardedJSON(raw: nil, path: childPath, brokenAt: (path, Self.typeName(raw)))
    }

    /// Whether the value is JSON `null`.
    public var isNull: Bool { raw is NSNull }

    /// Whether the path exists (a `null` value exists).
    public var exists: Bool { raw != nil }

    // MARK: Typed reads

    /// The string (numbers and booleans coerced), or `nil`.
    public func string(fileID: String = #fileID, line: Int = #line, function: String = #function) -> String? {
        read("String", "stringValue", site(fileID, line, function)) { Self.coerceString($0) }
    }

    /// The string (numbers and booleans coerced), or `default`.
    public func string(default value: String, fileID: String = #fileID, line: Int = #line, function: String = #function) -> String {
        string(fileID: fileID, line: line, function: function) ?? value
    }

    /// The integer (whole numbers, numeric strings; fractions truncated toward zero), or `nil`.
    public func int(fileID: String = #fileID, line: Int = #line, function: String = #function) -> Int? {
        read("Int", "integerValue", site(fileID, line, function)) { Self.coerceInt($0) }
    }

    /// The integer, or `default`.
    public func int(default value: Int, fileID: String = #fileID, line: Int = #line, function: String = #function) -> Int {
        int(fileID: fileID, line: line, function: function) ?? value
    }

    /// The number (numeric strings coerced), or `nil`.
    public func double(fileID: String = #fileID, line: Int = #line, function: String = #function) -> Double? {
        read("Double", "doubleValue", site(fileID, line, function)) { Self.coerceDouble($0) }
    }

    /// The number, or `default`.
    public func double(default value: Double, fileID: String = #fileID, line: Int = #line, function: String = #function) -> Double {
        double(fileID: fileID, line: line, function: function) ?? value
    }

    /// The boolean (`1`/`0`, `"true"`/`"false"`/`"yes"`/`"no"`/`"1"`/`"0"` coerced), or `nil`.
    public func bool(fileID: String = #fileID, line: Int = #line, function: String = #function) -> Bool? {
        read("Bool", "boolValue", site(fileID, line, function)) { Self.coerceBool($0) }
    }

    /// The boolean, or `default`.
    public func bool(default value: Bool, fileID: String = #fileID, line: Int = #line, function: String = #function) -> Bool {
        bool(fileID: fileID, line: line, function: function) ?? value
    }

    /// The elements of an array as readers, or `[]`.
    public func array(fileID: String = #fileID, line: Int = #line, function: String = #function) -> [GuardedJSON] {
        let elements: [Any]? = read("Array", "objectAtIndex:", site(fileID, line, function)) { $0 as? [Any] }
        return (elements ?? []).enumerated().map { GuardedJSON(raw: $1, path: path + "[\($0)]", brokenAt: nil) }
    }

    /// The members of an object as readers, or `[:]`.
    public func dictionary(fileID: String = #fileID, line: Int = #line, function: String = #function) -> [String: GuardedJSON] {
        let members: [String: Any]? = read("Dictionary", "objectForKey:", site(fileID, line, function)) { $0 as? [String: Any] }
        var out: [String: GuardedJSON] = [:]
        for (key, value) in members ?? [:] { out[key] = GuardedJSON(raw: value, path: path + "." + key, brokenAt: nil) }
        return out
    }

    // MARK: Internals

    private func site(_ fileID: String, _ line: Int, _ function: String) -> CallSite {
        CallSite(fileID: fileID, line: line, function: function)
    }

    private func read<T>(_ wanted: String, _ selector: String, _ site: CallSite, _ convert: (Any) -> T?) -> T? {
        if let brokenAt {
            let receiver = brokenAt.found == "null" ? "NSNull" : brokenAt.found
            let what = brokenAt.found == "null" ? "null" : brokenAt.found
            record("-[\(receiver) objectForKey:]: \(what) where a container was expected at \(brokenAt.path)", site)
            return nil
        }
        guard let raw else { return nil }  // missing: not an error
        if let value = convert(raw) { return value }
        let found = Self.typeName(raw)
        let receiver = found == "null" ? "NSNull" : found
        record("-[\(receiver) \(selector)]: \(found) where \(wanted) expected at \(path)", site)
        return nil
    }

    private func record(_ reason: @autoclosure () -> String, _ site: CallSite) {
        GuardRecorder.record(
            .null, site: site, in: nil, reason: reason(),
            context: ["action": "returned the default", "path": path]
        )
    }

    static func typeName(_ value: Any) -> String {
        switch value {
        case is NSNull: return "null"
        case is [Any]: return "Array"
        case is [String: Any], is NSDictionary: return "Dictionary"
        case is String: return "String"
        case is NSNumber, is Int, is Double, is Bool: return "Number"
        default: return Describe.typeName(type(of: value))
        }
    }

    static func coerceString(_ value: Any) -> String? {
        if let s = value as? String { return s }
        if value is [Any] || value is [String: Any] || value is NSNull { return nil }
        if let b = value as? Bool, isBoolean(value) { return b ? "true" : "false" }
        if let i = value as? Int { return String(i) }
        if let d = value as? Double { return String(d) }
        return nil
    }

    static func coerceDouble(_ value: Any) -> Double? {
        if value is String, let s = value as? String { return Double(s.trimmingCharacters(in: .whitespaces)) }
        if value is NSNull || value is [Any] || value is [String: Any] { return nil }
        if let d = value as? Double { return d }
        if let i = value as? Int { return Double(i) }
        return nil
    }

    static func coerceInt(_ value: Any) -> Int? {
        if value is String, let s = value as? String {
            let t = s.trimmingCharacters(in: .whitespaces)
            if let i = Int(t) { return i }
            return Double(t).flatMap(exactTruncation)
        }
        if value is NSNull || value is [Any] || value is [String: Any] { return nil }
        if let i = value as? Int { return i }
        if let d = value as? Double { return exactTruncation(d) }
        return nil
    }

    static func coerceBool(_ value: Any) -> Bool? {
        if let s = value as? String {
            switch s.trimmingCharacters(in: .whitespaces).lowercased() {
            case "true", "yes", "1": return true
            case "false", "no", "0": return false
            default: return nil
            }
        }
        if value is NSNull || value is [Any] || value is [String: Any] { return nil }
        if let b = value as? Bool { return b }
        if let i = value as? Int { return i != 0 }
        return nil
    }

    /// `Int(d)` when it would not trap (finite and in range), else `nil`.
    private static func exactTruncation(_ d: Double) -> Int? {
        guard d.isFinite, d > -9.223372036854775808e18, d < 9.223372036854775808e18 else { return nil }
        return Int(d)
    }

    private static func isBoolean(_ value: Any) -> Bool {
        guard let n = value as? NSNumber else { return value is Bool }
        #if canImport(Darwin)
        return CFGetTypeID(n) == CFBooleanGetTypeID()
        #else
        return String(cString: n.objCType) == "c"
        #endif
    }
}
