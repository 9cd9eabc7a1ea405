import Foundation

/// Helpers that write reasons the way the Objective-C runtime wrote its messages, so that
/// the server's normalizer (which turns `0x...` into `0x?` and `<Student 0x...>` into
/// `<Student>`) groups them. Reasons name the type, the operation and numbers; user data
/// (keys, string contents) goes into the context, not the reason.
enum Describe {
    /// `Array<Int>` -> `Array`: the type's base name, as the class name in `-[__NSArrayI objectAtIndex:]`.
    static func typeName(_ type: Any.Type) -> String {
        let full = String(describing: type)
        if let angle = full.firstIndex(of: "<") { return String(full[..<angle]) }
        return full
    }

    /// `<Student 0x600000016c70>`, the runtime's description of an instance.
    static func object(_ object: AnyObject) -> String {
        "<\(typeName(type(of: object))) \(address(object))>"
    }

    /// `0x600000016c70`.
    static func address(_ object: AnyObject) -> String {
        "0x" + String(UInt(bitPattern: Unmanaged.passUnretained(object).toOpaque()), radix: 16)
    }

    /// `<Student 0x...>` for a class instance, `<Point>` for a value.
    static func instance(_ value: Any) -> String {
        if type(of: value) is AnyClass { return object(value as AnyObject) }
        return "<\(typeName(type(of: value)))>"
    }

    /// A short, bounded description of a value for the context.
    static func value(_ value: Any?) -> String {
        guard let value else { return "nil" }
        let text = String(describing: value)
        return text.count > 200 ? String(text.prefix(200)) + "…" : text
    }

    /// `name` from `\Student.name`.
    static func keyPath(_ keyPath: AnyKeyPath) -> String {
        let text = String(describing: keyPath)
        guard text.hasPrefix("\\") else { return text }
        let root = "\\" + String(describing: type(of: keyPath).rootType) + "."
        if text.hasPrefix(root) { return String(text.dropFirst(root.count)) }
        if let dot = text.firstIndex(of: ".") { return String(text[text.index(after: dot)...]) }
        return text
    }
}
