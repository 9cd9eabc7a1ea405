import Foundation
import NIOCore
import PostgresNIO

/// A column of an ingest statement's `unnest(...)`: a one-dimensional PostgreSQL array bound in
/// binary with one element per row of `rows`, each written by `element` straight from its row
/// into the bind's buffer, NULL where it writes nothing.
///
/// - Elements may be NULL: PostgresNIO's `[Element]` binds cannot carry a NULL element, and the
///   nullable columns must keep NULL apart from `""` (a device field may be an empty string, an
///   absent one is NULL).
/// - No array of the column's values is built first: binding a batch's `reports` rows as
///   `items.map(\.report)` and then one array per column copied every report and retained each
///   of its strings again for each column (docs/performance.md).
struct NullableArray<Row>: PostgresDynamicTypeEncodable {
    let rows: [Row]
    let psqlType: PostgresDataType
    var psqlFormat: PostgresFormat { .binary }
    private let elementType: PostgresDataType
    /// Writes the element of a row in its type's binary (receive) form; false for NULL.
    private let element: (Row, inout ByteBuffer) -> Bool

    /// A column of `type` (`arrayType` the array's) whose `element` writes a row's element in
    /// binary, or writes nothing and returns false for NULL.
    init(
        _ rows: [Row], of type: PostgresDataType, arrayType: PostgresDataType,
        element: @escaping (Row, inout ByteBuffer) -> Bool
    ) {
        self.rows = rows
        elementType = type
        psqlType = arrayType
        self.element = element
    }

    /// A column of `value` of each row (nil: NULL), encoded as PostgresNIO encodes a `Value`.
    init<Value: PostgresArrayEncodable & PostgresNonThrowingEncodable>(_ rows: [Row], _ value: @escaping (Row) -> Value?) {
        self.init(rows, of: Value.psqlType, arrayType: Value.psqlArrayType) { row, buffer in
            guard let value = value(row) else { return false }
            value.encode(into: &buffer, context: .default)
            return true
        }
    }

    /// A `timestamptz` column of `value` of each row (nil: NULL), rounded to the microsecond
    /// (``PostgresTimestamp``): PostgresNIO's `Date` encoding truncates.
    init(_ rows: [Row], _ value: @escaping (Row) -> Date?) {
        self.init(rows) { value($0).map { PostgresTimestamp(date: $0) } }
    }

    /// A `text` column of JSON written by `json` (``JSONWriter``), or NULL where it writes nothing.
    static func json(_ rows: [Row], _ json: @escaping (Row, inout ByteBuffer) -> Bool) -> Self {
        Self(rows, of: .text, arrayType: .textArray, element: json)
    }

    /// The binary array format of PostgreSQL's `array_recv`: dimensions (0 for an empty
    /// array), a has-NULLs flag, the element type; per dimension its length and lower bound;
    /// then each element as a length (-1 for NULL) and its bytes.
    func encode<JSONEncoder: PostgresJSONEncoder>(into buffer: inout ByteBuffer, context: PostgresEncodingContext<JSONEncoder>) {
        buffer.writeInteger(Int32(rows.isEmpty ? 0 : 1))
        let hasNullsIndex = buffer.writerIndex
        buffer.writeInteger(Int32(0))
        buffer.writeInteger(elementType.rawValue)
        guard !rows.isEmpty else { return }
        buffer.writeInteger(Int32(rows.count))
        buffer.writeInteger(Int32(1))
        var hasNulls = false
        for row in rows {
            let lengthIndex = buffer.writerIndex
            buffer.writeInteger(Int32(0))
            guard element(row, &buffer) else {
                buffer.setInteger(Int32(-1), at: lengthIndex)
                hasNulls = true
                continue
            }
            buffer.setInteger(Int32(buffer.writerIndex - lengthIndex - 4), at: lengthIndex)
        }
        if hasNulls { buffer.setInteger(Int32(1), at: hasNullsIndex) }
    }
}

/// A report's `stack` or `fingerprint` (an array of strings) or `context` (an object of
/// strings) as a `text` element holding its JSON, written by ``JSONWriter`` straight into the
/// bind: no JSON `String` per report. The columns are `text`, not `jsonb`: nothing queries
/// inside them (the API reads them back as text), the reader has checked the body's JSON,
/// and PostgreSQL would parse it again to build `jsonb` (docs/performance.md).
enum JSONColumn {
    /// Writes `values` as a JSON array; false (NULL) when nil.
    static func strings(_ values: [String]?, into buffer: inout ByteBuffer) -> Bool {
        guard let values else { return false }
        JSONWriter.strings(values, into: &buffer)
        return true
    }

    /// Writes `values` as a JSON object; false (NULL) when nil.
    static func object(_ values: [String: String]?, into buffer: inout ByteBuffer) -> Bool {
        guard let values else { return false }
        JSONWriter.object(values, into: &buffer)
        return true
    }

    /// Writes JSON text already written (``IngestItem/stack``); false (NULL) when nil.
    static func written(_ text: [UInt8]?, into buffer: inout ByteBuffer) -> Bool {
        guard let text else { return false }
        buffer.writeBytes(text)
        return true
    }
}
