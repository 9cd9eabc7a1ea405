import Foundation

extension Report {
    /// Checks the report against the contract's limits.
    ///
    /// - Returns: `nil` when valid, otherwise a message that starts with the offending
    ///   field's path (`app.version: ...`), as the server puts it in `rejected[].error`.
    public func validationError(now: Date = Date()) -> String? {
        validationError(now: now, stackError: stack.flatMap(Self.stackError))
    }

    /// ``validationError(now:)`` for a report whose reader checked the stack's frames where
    /// they lie (``stackError(frameCount:)``, ``frameError(index:bytes:hasNUL:)``) instead of keeping them in `stack`:
    /// `stackError` takes the stack's place in the order of the checks.
    public func validationError(now: Date, stackError: @autoclosure () -> String?) -> String? {
        let age = now.timeIntervalSince(timestamp)
        if age > ReportLimits.maxAge { return "timestamp: older than 30 days" }
        if -age > ReportLimits.maxSkew { return "timestamp: more than 1 day in the future" }
        if let e = Self.check(reason, "reason", ReportLimits.reasonBytes) { return e }
        if let e = stackError() { return e }
        if let e = Self.check(app.id, "app.id", ReportLimits.appFieldBytes) { return e }
        if let e = Self.check(app.version, "app.version", ReportLimits.appFieldBytes) { return e }
        if let build = app.build, let e = Self.check(build, "app.build", ReportLimits.appFieldBytes) { return e }
        if let device {
            let limit = 0...ReportLimits.deviceFieldBytes
            if let os = device.os, let e = Self.check(os, "device.os", limit) { return e }
            if let osVersion = device.osVersion, let e = Self.check(osVersion, "device.osVersion", limit) { return e }
            if let model = device.model, let e = Self.check(model, "device.model", limit) { return e }
            if let id = device.id, let e = Self.check(id, "device.id", limit) { return e }
        }
        if let fingerprint {
            if !ReportLimits.fingerprintParts.contains(fingerprint.count) {
                return "fingerprint: \(fingerprint.count) parts, 1 to 8 allowed"
            }
            for (i, part) in fingerprint.enumerated() {
                if let e = Self.check(part, "fingerprint[\(i)]", 0...ReportLimits.fingerprintPartBytes) { return e }
            }
        }
        if let context {
            if context.count > ReportLimits.maxContextEntries {
                return "context: \(context.count) entries, at most \(ReportLimits.maxContextEntries) allowed"
            }
            // A dictionary's order differs between instances; the error names the smallest
            // bad key so that the same body always gets the same answer.
            var first: (key: String, error: String)?
            for (key, value) in context where first == nil || key < first!.key {
                if let e = Self.check(key, "context key", 0...ReportLimits.contextKeyBytes)
                    ?? Self.check(value, "context[\(key)]", 0...ReportLimits.contextValueBytes)
                {
                    first = (key, e)
                }
            }
            if let first { return first.error }
        }
        if let environment, let e = Self.environmentError(environment) { return e }
        return nil
    }

    /// What is wrong with an `environment` value (1 to 64 bytes, no control characters); nil
    /// when nothing. The search language and the `environment` filter share these limits.
    public static func environmentError(_ value: String) -> String? {
        if let e = check(value, "environment", ReportLimits.environmentBytes) { return e }
        if value.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) {
            return "environment: must not contain control characters"
        }
        return nil
    }

    private static func stackError(_ stack: [String]) -> String? {
        if let e = stackError(frameCount: stack.count) { return e }
        for (i, frame) in stack.enumerated() {
            if let e = check(frame, "stack[\(i)]", 0...ReportLimits.frameBytes) { return e }
        }
        return nil
    }

    /// What is wrong with a stack of `frameCount` frames as a whole; nil when nothing. Checked
    /// before its frames (``frameError(index:bytes:hasNUL:)``): the first failure wins.
    public static func stackError(frameCount: Int) -> String? {
        guard frameCount > ReportLimits.maxFrames else { return nil }
        return "stack: \(frameCount) frames, at most \(ReportLimits.maxFrames) allowed"
    }

    /// What is wrong with frame `index` of a stack, measured where it lies: its length in
    /// UTF-8 bytes, and whether it holds U+0000. Nil when nothing.
    public static func frameError(index: Int, bytes: Int, hasNUL: Bool) -> String? {
        check(bytes: bytes, hasNUL: hasNUL, "stack[\(index)]", 0...ReportLimits.frameBytes)
    }

    /// Length in UTF-8 bytes within `range`, and no NUL (PostgreSQL text cannot hold one).
    /// The field's name is only built for an error: every frame of every report is checked.
    private static func check(_ value: String, _ field: @autoclosure () -> String, _ range: ClosedRange<Int>) -> String? {
        check(bytes: value.utf8.count, hasNUL: containsNUL(value), field(), range)
    }

    /// `hasNUL` is asked only of a value whose length passed.
    private static func check(
        bytes count: Int, hasNUL: @autoclosure () -> Bool, _ field: @autoclosure () -> String, _ range: ClosedRange<Int>
    ) -> String? {
        if count < range.lowerBound {
            return "\(field()): must not be empty"
        }
        if count > range.upperBound {
            return "\(field()): \(count) bytes, at most \(range.upperBound) allowed"
        }
        if hasNUL() {
            return "\(field()): must not contain NUL characters"
        }
        return nil
    }

    /// Whether a string holds a NUL byte: `memchr` over native (contiguous) UTF-8, a byte
    /// walk otherwise. (A byte walk over every string was 5 % of the server's ingest CPU.)
    private static func containsNUL(_ value: String) -> Bool {
        let found = value.utf8.withContiguousStorageIfAvailable { bytes in
            guard let base = bytes.baseAddress, !bytes.isEmpty else { return false }
            return memchr(base, 0, bytes.count) != nil
        }
        return found ?? value.utf8.contains(0)
    }
}
