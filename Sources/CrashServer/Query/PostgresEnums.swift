import CrashWire
import NIOCore
import PostgresNIO

/// A string enum bound as `text`, so SQL takes the typed value (`\(filters.kind)`) and only
/// ever sees one of its cases.
protocol PostgresTextEnum: PostgresNonThrowingEncodable, RawRepresentable where RawValue == String {}

extension PostgresTextEnum {
    static var psqlType: PostgresDataType { .text }
    static var psqlFormat: PostgresFormat { .binary }

    func encode<JSONEncoder: PostgresJSONEncoder>(into byteBuffer: inout ByteBuffer, context: PostgresEncodingContext<JSONEncoder>) {
        byteBuffer.writeString(rawValue)
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
