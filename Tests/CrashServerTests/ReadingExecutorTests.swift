import CrashIngest
import Foundation
import Hummingbird
import NIOCore
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

/// Bodies that decode to more than ``IngestBody/readingInPlaceBytes`` are read on NIO's thread
/// pool (``ReadingExecutor``), small ones where they arrived: a body that takes long to read
/// must not hold one of the cooperative threads that `/healthz` and queries wait for.
@Suite struct ReadingExecutorTests {
    /// The calling thread's name (Linux). NIO names its pool's threads `...TP-#n`.
    static func threadName() -> String {
        ((try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)) ?? "?")
            .trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// A body whose every byte decodes to 1 KiB, like a gzip bomb; notes where each slice is fed.
    final class Bomb: IngestBodySink {
        var receivedBytes = 0
        var decodedBytes = 0
        var outputBytes = 0
        var slices: [(bytes: Int, thread: String)] = []

        func feed(_ chunk: UnsafeRawBufferPointer) throws(IngestError) {
            receivedBytes += chunk.count
            outputBytes += chunk.count * 1024
            slices.append((chunk.count, ReadingExecutorTests.threadName()))
        }
    }

    @Test func aBodyMovesToThePoolOnceItHasDecodedPastTheLimit() async throws {
        // 16 KB in two chunks, as a 16 KB gzip bomb arrives.
        let (chunks, sender) = AsyncStream.makeStream(of: ByteBuffer.self)
        sender.yield(ByteBuffer(repeating: 0, count: 10_000))
        sender.yield(ByteBuffer(repeating: 0, count: 6_000))
        sender.finish()
        let body = RequestBody(asyncSequence: chunks)
        let sink = Bomb()
        let ingest = IngestBody(maxBodyBytes: 1 << 20, maxDecompressedBytes: 16 << 20, budget: BodyByteBudget(limit: 1 << 20))
        try await ingest.read(body, into: sink, holding: BodyByteBudget.Reservation(ingest.budget, project: 1))
        #expect(sink.receivedBytes == 16_000)
        #expect(sink.slices.allSatisfy { $0.bytes <= IngestBody.sliceBytes })
        // A slice of 1 KiB decodes to 1 MiB: slices are read in place until one passes the
        // limit, and every later one is read on the pool.
        let inPlace = IngestBody.readingInPlaceBytes / (IngestBody.sliceBytes * 1024) + 1
        #expect(sink.slices.count == 16 && inPlace < 16)
        #expect(sink.slices.prefix(inPlace).allSatisfy { !$0.thread.contains("TP-#") }, "\(sink.slices)")
        #expect(sink.slices.dropFirst(inPlace).allSatisfy { $0.thread.contains("TP-#") }, "\(sink.slices)")
        let after = Self.threadName()
        #expect(!after.contains("TP-#"), "back on the cooperative threads: \(after)")
    }

    @Test func aSmallBodyIsReadInPlace() async throws {
        let body = RequestBody(buffer: ByteBuffer(repeating: 0, count: 1000))
        let sink = Bomb()
        let ingest = IngestBody(maxBodyBytes: 1 << 20, maxDecompressedBytes: 16 << 20, budget: BodyByteBudget(limit: 1 << 20))
        try await ingest.read(body, into: sink, holding: BodyByteBudget.Reservation(ingest.budget, project: 1))
        #expect(sink.slices.count == 1 && !sink.slices[0].thread.contains("TP-#"), "\(sink.slices)")
    }

    @Test func largeBodiesAreParsedOnThePool() async throws {
        let small = try await IngestBody.reading(IngestBody.readingInPlaceBytes) { Self.threadName() }
        let large = try await IngestBody.reading(IngestBody.readingInPlaceBytes + 1) { Self.threadName() }
        #expect(!small.contains("TP-#"), "\(small)")
        #expect(large.contains("TP-#"), "\(large)")
        await #expect(throws: APIError.self) {
            try await IngestBody.reading(1 << 30) { throw APIError.badRequest("refused on the pool") }
        }
    }
}
