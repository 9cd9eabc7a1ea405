import CrashWire
import Foundation

// String guard (kind `string`): offset-based access to `String` (in Characters) and to
// `NSString` (in UTF-16 units, as `NSRange` counts), clamped rather than trapping.
// Unguarded, `s[s.index(s.startIndex, offsetBy: 10)]` on a shorter string traps
// ("String index is out of bounds", SIGILL on Linux), and `NSString.substring(with:)`
// raises NSRangeException (Apple) or traps (Linux). Reasons follow Foundation's:
// `-[__NSCFString substringWithRange:]: Range {5, 10} out of bounds; string length 7`.

enum StringReason {
    static func record(_ typeName: String, _ selector: String, _ detail: String, action: String, site: CallSite) {
        GuardRecorder.record(.string, site: site, in: nil, reason: "-[\(typeName) \(selector)]: \(detail)", context: ["action": action])
    }

    /// `range` clamped to `0..<length`.
    static func clamp(location: Int, length: Int, to total: Int) -> (Int, Int) {
        let start = Swift.min(Swift.max(location, 0), total)
        let end = Swift.min(Swift.max(location &+ Swift.max(length, 0), start), total)
        return (start, end - start)
    }

    static func describe(_ location: Int, _ length: Int) -> String { "{\(location), \(length)}" }
}

extension StringProtocol {
    /// The character at `offset` (counted in `Character`s), or `nil` (recorded,
    /// `-[String characterAtIndex:]: Index 9 out of bounds; string length 3`) when out of range.
    public func guardedCharacter(
        at offset: Int, fileID: String = #fileID, line: Int = #line, function: String = #function
    ) -> Character? {
        if offset >= 0, let index = index(startIndex, offsetBy: offset, limitedBy: endIndex), index < endIndex {
            return self[index]
        }
        StringReason.record(
            "String", "characterAtIndex:", "Index \(offset) out of bounds; string length \(count)",
            action: "returned nil", site: CallSite(fileID: fileID, line: line, function: function)
        )
        return nil
    }

    /// The characters at offsets `range`, clamped to the string (possibly empty); recorded
    /// when out of bounds: `-[String substringWithRange:]: Range {5, 10} out of bounds; string length 7`.
    public func guardedSubstring(
        _ range: Range<Int>, fileID: String = #fileID, line: Int = #line, function: String = #function
    ) -> Substring {
        let total = count
        let (start, length) = StringReason.clamp(location: range.lowerBound, length: range.count, to: total)
        if start != range.lowerBound || length != range.count {
            StringReason.record(
                "String", "substringWithRange:",
                "Range \(StringReason.describe(range.lowerBound, range.count)) out of bounds; string length \(total)",
                action: "returned characters \(start)..<\(start + length)",
                site: CallSite(fileID: fileID, line: line, function: function)
            )
        }
        let lower = index(startIndex, offsetBy: start)
        return Substring(self[lower..<index(lower, offsetBy: length)])
    }

    /// The characters from `offset` to the end; `offset` is clamped to `0...count`, recorded
    /// when outside (`-[String substringFromIndex:]: Index 9 out of bounds; string length 3`).
    public func guardedSubstring(
        from offset: Int, fileID: String = #fileID, line: Int = #line, function: String = #function
    ) -> Substring {
        let total = count
        let clamped = Swift.min(Swift.max(offset, 0), total)
        if clamped != offset {
            StringReason.record(
                "String", "substringFromIndex:", "Index \(offset) out of bounds; string length \(total)",
                action: "used offset \(clamped)", site: CallSite(fileID: fileID, line: line, function: function)
            )
        }
        return Substring(self[index(startIndex, offsetBy: clamped)...])
    }

    /// The first `offset` characters; `offset` is clamped to `0...count`, recorded when
    /// outside (`-[String substringToIndex:]: Index 9 out of bounds; string length 3`).
    public func guardedSubstring(
        to offset: Int, fileID: String = #fileID, line: Int = #line, function: String = #function
    ) -> Substring {
        let total = count
        let clamped = Swift.min(Swift.max(offset, 0), total)
        if clamped != offset {
            StringReason.record(
                "String", "substringToIndex:", "Index \(offset) out of bounds; string length \(total)",
                action: "used offset \(clamped)", site: CallSite(fileID: fileID, line: line, function: function)
            )
        }
        return Substring(self[..<index(startIndex, offsetBy: clamped)])
    }
}

extension String {
    /// The `String.Index` range for a UTF-16 `NSRange` (from `NSString`, regular
    /// expressions, text views), clamped to the string. `Range(_:in:)` answers `nil` and
    /// `String.Index(utf16Offset:in:)` past the end traps later; this answers the clamped
    /// range and records `-[String rangeOfNSRange:]: Range {5, 10} out of bounds; string length 7`
    /// (length in UTF-16 units). A range that splits a surrogate pair is widened to whole
    /// characters.
    public func guardedRange(
        _ nsRange: NSRange, fileID: String = #fileID, line: Int = #line, function: String = #function
    ) -> Range<String.Index> {
        let total = utf16.count
        let location = nsRange.location == NSNotFound ? total : nsRange.location
        let (start, length) = StringReason.clamp(location: location, length: nsRange.length, to: total)
        if start != nsRange.location || length != nsRange.length {
            StringReason.record(
                "String", "rangeOfNSRange:",
                "Range \(StringReason.describe(nsRange.location, nsRange.length)) out of bounds; string length \(total)",
                action: "returned UTF-16 range \(StringReason.describe(start, length))",
                site: CallSite(fileID: fileID, line: line, function: function)
            )
        }
        // Round outward to character boundaries so the range can slice the String.
        var lowerChar = startIndex
        var upperChar = endIndex
        var offset = 0
        var previous = startIndex
        for index in indices {
            offset += utf16.distance(from: previous, to: index)
            previous = index
            if offset <= start { lowerChar = index }
            if offset >= start + length {
                upperChar = index
                break
            }
        }
        return lowerChar..<Swift.max(lowerChar, upperChar)
    }
}

extension NSString {
    /// `substring(with:)` with `range` clamped to the string (UTF-16 units); recorded when
    /// out of bounds: `-[NSString substringWithRange:]: Range {5, 10} out of bounds; string length 7`.
    public func guardedSubstring(
        with range: NSRange, fileID: String = #fileID, line: Int = #line, function: String = #function
    ) -> String {
        let total = length
        let (start, count) = StringReason.clamp(
            location: range.location == NSNotFound ? total : range.location,
            length: range.length, to: total)
        if start != range.location || count != range.length {
            StringReason.record(
                Describe.typeName(type(of: self)), "substringWithRange:",
                "Range \(StringReason.describe(range.location, range.length)) out of bounds; string length \(total)",
                action: "returned range \(StringReason.describe(start, count))",
                site: CallSite(fileID: fileID, line: line, function: function)
            )
        }
        return substring(with: NSRange(location: start, length: count))
    }

    /// `substring(from:)` with `index` clamped to `0...length`; recorded when outside
    /// (`-[NSString substringFromIndex:]: Index 9 out of bounds; string length 3`).
    public func guardedSubstring(
        from index: Int, fileID: String = #fileID, line: Int = #line, function: String = #function
    ) -> String {
        let clamped = Swift.min(Swift.max(index, 0), length)
        if clamped != index {
            StringReason.record(
                Describe.typeName(type(of: self)), "substringFromIndex:", "Index \(index) out of bounds; string length \(length)",
                action: "used index \(clamped)", site: CallSite(fileID: fileID, line: line, function: function)
            )
        }
        return substring(from: clamped)
    }

    /// `substring(to:)` with `index` clamped to `0...length`; recorded when outside
    /// (`-[NSString substringToIndex:]: Index 9 out of bounds; string length 3`).
    public func guardedSubstring(
        to index: Int, fileID: String = #fileID, line: Int = #line, function: String = #function
    ) -> String {
        let clamped = Swift.min(Swift.max(index, 0), length)
        if clamped != index {
            StringReason.record(
                Describe.typeName(type(of: self)), "substringToIndex:", "Index \(index) out of bounds; string length \(length)",
                action: "used index \(clamped)", site: CallSite(fileID: fileID, line: line, function: function)
            )
        }
        return substring(to: clamped)
    }

    /// The UTF-16 unit at `index`, or `nil` (recorded,
    /// `-[NSString characterAtIndex:]: Range or index out of bounds`) when out of range.
    public func guardedCharacter(
        at index: Int, fileID: String = #fileID, line: Int = #line, function: String = #function
    ) -> unichar? {
        if index >= 0 && index < length { return character(at: index) }
        StringReason.record(
            Describe.typeName(type(of: self)), "characterAtIndex:", "Range or index out of bounds",
            action: "returned nil", site: CallSite(fileID: fileID, line: line, function: function)
        )
        return nil
    }
}
