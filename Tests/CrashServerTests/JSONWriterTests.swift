import CrashGrouping
import CrashWire
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

@Suite struct JSONWriterTests {
    /// Every control character, quotes, backslashes, non-ASCII and escapes at the ends and
    /// side by side: Foundation reads back exactly what was written.
    static let tricky = [
        "quote \" backslash \\ newline \n tab \t cr \r bell \u{7} ü 漢字 🚀 </script>",
        String((1..<0x20).map { Character(Unicode.Scalar(UInt8($0))) }) + "\u{7F}\u{85}\u{2028}\u{2029}",
        "\"", "\\", "", "\\\"\\\"\n\n", "plain",
    ]

    @Test func stringsAndObjectsReadBackExactly() throws {
        var buffer = ByteBuffer()
        JSONWriter.strings(Self.tricky, into: &buffer)
        let array = try JSONSerialization.jsonObject(with: Data(buffer.readableBytesView)) as? [String]
        #expect(array == Self.tricky)

        buffer.clear()
        let object = Dictionary(uniqueKeysWithValues: Self.tricky.enumerated().map { ("k\($0.offset)\($0.element)", $0.element) })
        JSONWriter.object(object, into: &buffer)
        #expect(try JSONSerialization.jsonObject(with: Data(buffer.readableBytesView)) as? [String: String] == object)

        buffer.clear()
        JSONWriter.strings([], into: &buffer)
        JSONWriter.object([:], into: &buffer)
        #expect(String(buffer: buffer) == "[]{}")
    }

    /// A queued report keeps its stack as the JSON text `JSONWriter` writes into a bind, in an
    /// array allocated at the text's size: a `ByteBuffer` of this stack (2,374 bytes) had 4,096.
    @Test func aQueuedReportsStackIsItsJSONAtItsSize() throws {
        let frames = (0..<40).map { "\($0)   MyApp  0x00000001000041a0 -[Checkout confirm:] + \($0 * 7)" }
        for stack in [frames, Self.tricky] {
            var report = Report(id: UUID(), kind: .signal, reason: "r", app: AppInfo(id: "a", version: "1"))
            report.stack = stack
            let item = IngestItem(project: ProjectRef(id: 1, slug: "p", groupingVersion: .v2), report: report)
            var written = ByteBuffer()
            JSONWriter.strings(stack, into: &written)
            let text = try #require(item.stack)
            #expect(text == Array(written.readableBytesView))
            #expect(try JSONSerialization.jsonObject(with: Data(text)) as? [String] == stack)
            #expect(text.capacity - text.count < 32)
            #expect(item.report.stack == nil)
        }
    }

    /// RFC 8259's escapes, and nothing else escaped.
    @Test func escapesOnlyWhatRFC8259Requires() {
        var buffer = ByteBuffer()
        JSONWriter.string("a\"b\\c\u{1}\u{1F}\n\r\t/ü\u{7F}", into: &buffer)
        #expect(String(buffer: buffer) == #""a\"b\\c\u0001\u001f\n\r\t/ü\#u{7F}""#)
    }

    /// The 202 body written byte by byte reads back as the same ``IngestResponse`` (tricky
    /// error texts, none, one and several rejections), with its media type.
    @Test func ingestResponseReadsBackExactly() throws {
        let rejections = Self.tricky.enumerated().map { IngestResponse.Rejection(index: $0.offset * 7, error: $0.element) }
        for rejected in [[], Array(rejections.prefix(1)), rejections] {
            let sent = IngestResponse(accepted: 12_345, duplicates: rejected.count, rejected: rejected)
            let response = IngestController.accepted(sent)
            #expect(response.status == .accepted)
            #expect(response.headers[.contentType] == "application/json; charset=utf-8")
            let bytes = Data(IngestController.acceptedBody(sent).readableBytesView)
            #expect(response.body.contentLength == bytes.count)
            #expect(try JSONDecoder().decode(IngestResponse.self, from: bytes) == sent)
            let object = try JSONSerialization.jsonObject(with: bytes) as? [String: Any]
            #expect(object.map { Set($0.keys) } == ["accepted", "duplicates", "rejected"])
        }
    }
}
