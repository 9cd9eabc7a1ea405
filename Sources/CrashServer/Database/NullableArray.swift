import NIOCore
import PostgresNIO

/// A one-dimensional PostgreSQL array bound in binary whose elements may be NULL: a column of
/// the ingest statements' `unnest(...)` that is nullable. PostgresNIO's `[Element]` binds
/// cannot carry a NULL element, and the nullable columns must keep NULL apart from `""` (a
/// device field may be an empty string, an absent one is NULL).
struct NullableArray<Element: NullableArrayElement>: PostgresNonThrowingEncodable {
    var elements: [Element?]

    init(_ elements: [Element?]) { self.elements = elements }

    static var psqlType: PostgresDataType { Element.psqlArrayType }
    static var psqlFormat: PostgresFormat { .binary }

    /// The binary array format of PostgreSQL's `array_recv`: dimensions (0 for an empty
    /// array), a has-NULLs flag, the element type; per dimension its length and lower bound;
    /// then each element as a length (-1 for NULL) and its bytes.
    func encode<JSONEncoder: PostgresJSONEncoder>(into buffer: inout ByteBuffer, context: PostgresEncodingContext<JSONEncoder>) {
        buffer.writeInteger(Int32(elements.isEmpty ? 0 : 1))
        buffer.writeInteger(Int32(elements.contains { $0 == nil } ? 1 : 0))
        buffer.writeInteger(Element.psqlElementType.rawValue)
        guard !elements.isEmpty else { return }
        buffer.writeInteger(Int32(elements.count))
        buffer.writeInteger(Int32(1))
        for element in elements {
            guard let element else {
                buffer.writeInteger(Int32(-1))
                continue
            }
            let lengthIndex = buffer.writerIndex
            buffer.writeInteger(Int32(0))
            element.encodeElement(into: &buffer)
            buffer.setInteger(Int32(buffer.writerIndex - lengthIndex - 4), at: lengthIndex)
        }
    }
}

/// An element type of a ``NullableArray``: its PostgreSQL types and binary form.
protocol NullableArrayElement {
    static var psqlElementType: PostgresDataType { get }
    static var psqlArrayType: PostgresDataType { get }
    /// Writes the element's binary form (the receive format of its type).
    func encodeElement(into buffer: inout ByteBuffer)
}

extension String: NullableArrayElement {
    static var psqlElementType: PostgresDataType { .text }
    static var psqlArrayType: PostgresDataType { .textArray }
    func encodeElement(into buffer: inout ByteBuffer) { buffer.writeString(self) }
}

extension Bool: NullableArrayElement {
    static var psqlElementType: PostgresDataType { .bool }
    static var psqlArrayType: PostgresDataType { .boolArray }
    func encodeElement(into buffer: inout ByteBuffer) { buffer.writeInteger(UInt8(self ? 1 : 0)) }
}

/// A report's `stack` or `fingerprint` (an array of strings) or `context` (an object of
/// strings) as a `text` element holding its JSON, written by ``JSONWriter`` straight into the
/// bind: no JSON `String` per report. The columns are `text`, not `jsonb`: nothing queries
/// inside them (the API reads them back as text), the reader has checked the body's JSON,
/// and PostgreSQL would parse it again to build `jsonb` (docs/performance.md).
enum JSONColumn: NullableArrayElement {
    case strings([String])
    case object([String: String])
    /// JSON text already written by ``JSONWriter`` (``IngestItem/stack``).
    case written([UInt8])

    static var psqlElementType: PostgresDataType { .text }
    static var psqlArrayType: PostgresDataType { .textArray }

    func encodeElement(into buffer: inout ByteBuffer) {
        switch self {
        case .strings(let values): JSONWriter.strings(values, into: &buffer)
        case .object(let values): JSONWriter.object(values, into: &buffer)
        case .written(let text): buffer.writeBytes(text)
        }
    }
}
