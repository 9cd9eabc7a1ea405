import CrashWire
import NIOCore
import PostgresNIO

/// A string enum bound as `text`, so SQL takes the typed value (`\(filters.kind)`) and only
/// ever sees one of its cases; decoded from `text` the same way, a value that is not a case
/// being a decoding error rather than a string passed along.
protocol PostgresTextEnum: PostgresNonThrowingEncodable, PostgresDecodable, RawRepresentable where RawValue == String {}

extension PostgresTextEnum {
    static var psqlType: PostgresDataType { .text }
    static var psqlFormat: PostgresFormat { .binary }

    func encode<JSONEncoder: PostgresJSONEncoder>(into byteBuffer: inout ByteBuffer, context: PostgresEncodingContext<JSONEncoder>) {
        byteBuffer.writeString(rawValue)
    }

    init<JSONDecoder: PostgresJSONDecoder>(
        from byteBuffer: inout ByteBuffer, type: PostgresDataType, format: PostgresFormat, context: PostgresDecodingContext<JSONDecoder>
    ) throws {
        guard type == .text || type == .varchar, let value = Self(rawValue: String(buffer: byteBuffer)) else {
            throw PostgresDecodingError.Code.failure
        }
        self = value
    }
}

extension GroupStatus: PostgresTextEnum {}
extension GroupSort: PostgresTextEnum {}
extension StatsInterval: PostgresTextEnum {}
extension StatsGrouping: PostgresTextEnum {}

/// The wire's report kind, bound as `text` like the enums above (public: ReportKind is).
extension ReportKind: PostgresNonThrowingEncodable {
    public static var psqlType: PostgresDataType { .text }
    public static var psqlFormat: PostgresFormat { .binary }

    public func encode<JSONEncoder: PostgresJSONEncoder>(into byteBuffer: inout ByteBuffer, context: PostgresEncodingContext<JSONEncoder>) {
        byteBuffer.writeString(rawValue)
    }
}
