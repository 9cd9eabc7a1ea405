import NIOCore
import PostgresNIO
import Testing

@testable import CrashServer

@Suite struct NullableArrayTests {
    /// The column in `array_recv`'s binary form: NULL apart from `""`, the has-NULLs flag set
    /// only when an element is NULL, and an empty column as an array of no dimension.
    @Test func columnsWriteArrayRecvsBinaryFormFromTheirRows() {
        let rows: [String?] = ["a", nil, ""]
        var buffer = ByteBuffer()
        NullableArray(rows) { $0 }.encode(into: &buffer, context: .default)
        #expect(ints(&buffer, 5) == [1, 1, Int32(PostgresDataType.text.rawValue), 3, 1])
        #expect(buffer.readInteger(as: Int32.self) == 1)
        #expect(buffer.readString(length: 1) == "a")
        #expect(buffer.readInteger(as: Int32.self) == -1)
        #expect(buffer.readInteger(as: Int32.self) == 0)
        #expect(buffer.readableBytes == 0)

        buffer.clear()
        NullableArray([Int64(7)]) { $0 }.encode(into: &buffer, context: .default)
        #expect(ints(&buffer, 6) == [1, 0, Int32(PostgresDataType.int8.rawValue), 1, 1, 8])
        #expect(buffer.readInteger(as: Int64.self) == 7)

        buffer.clear()
        NullableArray.json([[UInt8]]()) { JSONColumn.written($0, into: &$1) }.encode(into: &buffer, context: .default)
        #expect(ints(&buffer, 3) == [0, 0, Int32(PostgresDataType.text.rawValue)])
        #expect(buffer.readableBytes == 0)
    }

    private func ints(_ buffer: inout ByteBuffer, _ count: Int) -> [Int32] {
        (0..<count).compactMap { _ in buffer.readInteger(as: Int32.self) }
    }
}
