import CrashWire
import Foundation

// Container guard (kind `container`) for Swift's integer-indexed collections: `Array`,
// `ContiguousArray`, `ArraySlice` (and any `RandomAccessCollection` indexed by `Int`,
// such as `Data`). The unguarded operations trap ("Index out of range", SIGILL on Linux
// x86_64); the guarded ones return `nil` or do nothing, and record a reason in the
// style of Foundation's `-[__NSArrayI objectAtIndex:]: index 5 beyond bounds [0 .. 2]`,
// with the collection's type name in place of the class name.

enum ContainerReason {
    /// `index 5 beyond bounds [0 .. 2]`, or `index 5 beyond bounds for empty array`.
    static func bounds(_ index: Int, lower: Int, upper: Int, empty: Bool) -> String {
        empty ? "index \(index) beyond bounds for empty array" : "index \(index) beyond bounds [\(lower) .. \(upper)]"
    }

    static func record(
        _ typeName: String, _ selector: String, _ detail: String,
        action: String, extra: [String: String] = [:], site: CallSite
    ) {
        GuardRecorder.record(
            .container, site: site, in: nil,
            reason: "-[\(typeName) \(selector)]: \(detail)",
            context: extra.merging(["action": action]) { $1 }
        )
    }
}

extension RandomAccessCollection where Index == Int {
    /// The element at `index`, or `nil` (recorded) when `index` is outside `indices`.
    ///
    /// ```swift
    /// let names = ["a", "b", "c"]
    /// names[guarded: 5]   // nil; reason "-[Array objectAtIndex:]: index 5 beyond bounds [0 .. 2]"
    /// ```
    public subscript(
        guarded index: Int, fileID: String = #fileID, line: Int = #line, function: String = #function
    ) -> Element? {
        if index >= startIndex && index < endIndex { return self[index] }
        recordOutOfBounds(index, "objectAtIndex:", action: "returned nil", site: CallSite(fileID: fileID, line: line, function: function))
        return nil
    }

    /// The elements in `range` clamped to `indices` (possibly empty); recorded when
    /// `range` reaches outside. Reason: `-[Array subarrayWithRange:]: range {1, 9} extends beyond bounds [0 .. 2]`.
    public subscript(
        guarded range: Range<Int>, fileID: String = #fileID, line: Int = #line, function: String = #function
    ) -> SubSequence {
        if range.lowerBound >= startIndex && range.upperBound <= endIndex { return self[range] }
        let clamped = range.clamped(to: startIndex..<endIndex)
        let detail =
            isEmpty
            ? "range {\(range.lowerBound), \(range.count)} extends beyond bounds for empty array"
            : "range {\(range.lowerBound), \(range.count)} extends beyond bounds [\(startIndex) .. \(endIndex - 1)]"
        ContainerReason.record(
            Describe.typeName(Self.self), "subarrayWithRange:", detail,
            action: "returned elements \(clamped.lowerBound)..<\(clamped.upperBound)",
            extra: ["count": String(count)], site: CallSite(fileID: fileID, line: line, function: function)
        )
        return self[clamped]
    }

    fileprivate func recordOutOfBounds(_ index: Int, _ selector: String, action: String, insertion: Bool = false, site: CallSite) {
        let upper = insertion ? endIndex : endIndex - 1
        ContainerReason.record(
            Describe.typeName(Self.self), selector,
            ContainerReason.bounds(index, lower: startIndex, upper: upper, empty: isEmpty && !insertion),
            action: action, extra: ["index": String(index), "count": String(count)], site: site
        )
    }
}

extension MutableCollection where Self: RandomAccessCollection, Index == Int {
    /// Reads like the read-only `[guarded:]` (out of range: `nil`, recorded);
    /// writing outside `indices`, or writing `nil`, is ignored and recorded
    /// (`-[Array replaceObjectAtIndex:withObject:]: index 5 beyond bounds [0 .. 2]`).
    public subscript(
        guarded index: Int, fileID: String = #fileID, line: Int = #line, function: String = #function
    ) -> Element? {
        get {
            if index >= startIndex && index < endIndex { return self[index] }
            recordOutOfBounds(index, "objectAtIndex:", action: "returned nil", site: CallSite(fileID: fileID, line: line, function: function))
            return nil
        }
        set {
            let site = CallSite(fileID: fileID, line: line, function: function)
            guard index >= startIndex && index < endIndex else {
                recordOutOfBounds(index, "replaceObjectAtIndex:withObject:", action: "ignored the write", site: site)
                return
            }
            guard let newValue else {
                ContainerReason.record(
                    Describe.typeName(Self.self), "replaceObjectAtIndex:withObject:", "object cannot be nil",
                    action: "ignored the write", extra: ["index": String(index)], site: site
                )
                return
            }
            self[index] = newValue
        }
    }
}

extension RangeReplaceableCollection where Self: RandomAccessCollection, Index == Int {
    /// Inserts `element` at `index` when `startIndex <= index <= endIndex`; otherwise does
    /// nothing and records `-[Array insertObject:atIndex:]: index 9 beyond bounds [0 .. 3]`.
    /// Returns whether it inserted.
    @discardableResult
    public mutating func guardedInsert(
        _ element: Element, at index: Int, fileID: String = #fileID, line: Int = #line, function: String = #function
    ) -> Bool {
        if index >= startIndex && index <= endIndex {
            insert(element, at: index)
            return true
        }
        recordOutOfBounds(
            index, "insertObject:atIndex:", action: "ignored the insert", insertion: true,
            site: CallSite(fileID: fileID, line: line, function: function))
        return false
    }

    /// Removes and returns the element at `index`, or returns `nil` (recorded,
    /// `-[Array removeObjectAtIndex:]: index 5 beyond bounds [0 .. 2]`) when out of range.
    @discardableResult
    public mutating func guardedRemove(
        at index: Int, fileID: String = #fileID, line: Int = #line, function: String = #function
    ) -> Element? {
        if index >= startIndex && index < endIndex { return remove(at: index) }
        recordOutOfBounds(index, "removeObjectAtIndex:", action: "returned nil", site: CallSite(fileID: fileID, line: line, function: function))
        return nil
    }

    /// Removes and returns the first element, or returns `nil` (recorded,
    /// `-[Array removeFirstObject]: cannot remove first element from an empty collection`) when empty.
    @discardableResult
    public mutating func guardedRemoveFirst(
        fileID: String = #fileID, line: Int = #line, function: String = #function
    ) -> Element? {
        if !isEmpty { return removeFirst() }
        ContainerReason.record(
            Describe.typeName(Self.self), "removeFirstObject", "cannot remove first element from an empty collection",
            action: "returned nil", site: CallSite(fileID: fileID, line: line, function: function)
        )
        return nil
    }

    /// Removes and returns the last element, or returns `nil` (recorded,
    /// `-[Array removeLastObject]: cannot remove last element from an empty collection`) when empty.
    @discardableResult
    public mutating func guardedRemoveLast(
        fileID: String = #fileID, line: Int = #line, function: String = #function
    ) -> Element? {
        if !isEmpty { return remove(at: endIndex - 1) }
        ContainerReason.record(
            Describe.typeName(Self.self), "removeLastObject", "cannot remove last element from an empty collection",
            action: "returned nil", site: CallSite(fileID: fileID, line: line, function: function)
        )
        return nil
    }
}

extension Dictionary {
    /// Like `init(uniqueKeysWithValues:)`, which traps on a duplicate key ("Duplicate
    /// values for key"), but keeps the first value for each key and records once per
    /// call: `-[Dictionary initWithObjects:forKeys:]: duplicate key of type String`
    /// (the keys go into `context["keys"]`, the number of dropped pairs into `context["duplicates"]`).
    public init<S: Sequence>(
        guardedUniqueKeysWithValues pairs: S,
        fileID: String = #fileID, line: Int = #line, function: String = #function
    ) where S.Element == (Key, Value) {
        self.init()
        var duplicates: [Key] = []
        for (key, value) in pairs {
            if self[key] == nil { self[key] = value } else { duplicates.append(key) }
        }
        guard let first = duplicates.first else { return }
        ContainerReason.record(
            "Dictionary", "initWithObjects:forKeys:", "duplicate key of type \(Describe.typeName(type(of: first)))",
            action: "kept the first value for each key",
            extra: ["duplicates": String(duplicates.count), "keys": duplicates.prefix(10).map { Describe.value($0) }.joined(separator: ", ")],
            site: CallSite(fileID: fileID, line: line, function: function)
        )
    }
}

extension Range {
    /// `lower..<upper`, or the empty range `lower..<lower` when `lower > upper` (where
    /// `lower..<upper` traps: "Range requires lowerBound <= upperBound"), recorded as
    /// `Range<Int> requires lowerBound <= upperBound`.
    public init(
        guardedLower lower: Bound, upper: Bound,
        fileID: String = #fileID, line: Int = #line, function: String = #function
    ) {
        if lower <= upper {
            self = lower..<upper
            return
        }
        self = lower..<lower
        GuardRecorder.record(
            .container, site: CallSite(fileID: fileID, line: line, function: function), in: nil,
            reason: "\(String(describing: Range<Bound>.self)) requires lowerBound <= upperBound",
            context: ["action": "returned an empty range", "lowerBound": Describe.value(lower), "upperBound": Describe.value(upper)]
        )
    }
}
