import Foundation
import NIOCore
import PostgresNIO

/// A time bound to PostgreSQL rounded to its resolution, the microsecond.
///
/// PostgresNIO's `Date` encoding truncates (`Int64(seconds * 1e6)`), and a time read from text is
/// a `Double` that may sit a hair below its microsecond: `…00.995Z` was stored as `…00.994999`
/// and answered 1 µs early, for about a third of millisecond values. Every `Date` interpolated
/// into a `PostgresQuery` in this module binds through this type instead (the overloads below
/// are more specific than PostgresNIO's generic ones), so no statement can truncate.
struct PostgresTimestamp: PostgresNonThrowingEncodable, PostgresArrayEncodable {
    var date: Date

    static var psqlType: PostgresDataType { .timestamptz }
    static var psqlArrayType: PostgresDataType { .timestamptzArray }
    static var psqlFormat: PostgresFormat { .binary }

    /// PostgreSQL's epoch, 2000-01-01T00:00:00Z.
    private static let epoch = Date(timeIntervalSince1970: 946_684_800)

    /// Microseconds since PostgreSQL's epoch, to the nearest.
    var microseconds: Int64 { Int64((date.timeIntervalSince(Self.epoch) * 1_000_000).rounded()) }

    func encode<JSONEncoder: PostgresJSONEncoder>(into buffer: inout ByteBuffer, context: PostgresEncodingContext<JSONEncoder>) {
        buffer.writeInteger(microseconds)
    }
}

extension PostgresQuery.StringInterpolation {
    /// A `Date`, rounded to the microsecond (``PostgresTimestamp``).
    mutating func appendInterpolation(_ value: Date) {
        appendInterpolation(PostgresTimestamp(date: value))
    }

    /// An optional `Date`, rounded to the microsecond; NULL when absent.
    mutating func appendInterpolation(_ value: Date?) {
        appendInterpolation(value.map { PostgresTimestamp(date: $0) })
    }

    /// A `timestamptz[]`, each rounded to the microsecond.
    mutating func appendInterpolation(_ value: [Date]) {
        appendInterpolation(value.map { PostgresTimestamp(date: $0) })
    }
}
