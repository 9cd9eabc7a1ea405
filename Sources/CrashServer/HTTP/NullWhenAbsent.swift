/// An optional field that a JSON response always carries: `null` when absent, never a missing
/// key, so clients see one shape (api-v1.md). With it, synthesized `Codable` writes the body:
/// no hand-written `encode(to:)` that lists every field again to call `encode` instead of
/// `encodeIfPresent`. Decoding takes a missing key or `null` as nil.
@propertyWrapper
struct NullWhenAbsent<Value: Codable & Sendable & Equatable>: Codable, Sendable, Equatable {
    var wrappedValue: Value?

    init(wrappedValue: Value?) { self.wrappedValue = wrappedValue }

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        wrappedValue = container.decodeNil() ? nil : try container.decode(Value.self)
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        if let wrappedValue { try container.encode(wrappedValue) } else { try container.encodeNil() }
    }
}

extension KeyedDecodingContainer {
    /// A missing key is nil too (synthesized decoding would call this with the key absent).
    func decode<Value>(_ type: NullWhenAbsent<Value>.Type, forKey key: Key) throws -> NullWhenAbsent<Value> {
        try decodeIfPresent(type, forKey: key) ?? NullWhenAbsent(wrappedValue: nil)
    }
}
