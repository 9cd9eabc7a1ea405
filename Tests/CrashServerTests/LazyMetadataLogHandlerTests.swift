import Logging
import Synchronization
import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

@Suite struct LazyMetadataLogHandlerTests {
    /// Collects what a handler writes.
    final class Lines: TextOutputStream, @unchecked Sendable {
        private let text = Mutex("")
        func write(_ string: String) { text.withLock { $0 += string } }
        /// The lines without their timestamps (the first word).
        var withoutTimestamps: [String] {
            text.withLock { $0 }.split(separator: "\n").map { $0.split(separator: " ", maxSplits: 1).last.map(String.init) ?? "" }
        }
    }

    /// Counts how often its text is made.
    final class Counted: CustomStringConvertible, Sendable {
        let made = Mutex(0)
        var description: String {
            made.withLock { $0 += 1 }
            return "7"
        }
    }

    /// Metadata set on a logger whose level writes nothing is never formatted (the plain
    /// `StreamLogHandler` formats it on every set: one `description` per request).
    @Test func metadataIsFormattedOnlyWhenWritten() {
        let lines = Lines()
        let value = Counted()
        var logger = Logger(label: "test") { LazyMetadataLogHandler(StreamLogHandler(label: $0, stream: lines)) }
        logger.logLevel = .warning
        for _ in 0..<3 { logger[metadataKey: "hb.request.id"] = .stringConvertible(value) }
        logger.info("not written")
        #expect(value.made.withLock { $0 } == 0)
        logger.warning("written")
        #expect(value.made.withLock { $0 } == 1)
        #expect(lines.withoutTimestamps == ["warning test: hb.request.id=7 [CrashServerTests] written"])
    }

    /// The same lines as the wrapped handler, metadata of the logger, of the call and of the
    /// provider, and the level, included.
    @Test func writesWhatStreamLogHandlerWrites() {
        let plain = Lines()
        let lazy = Lines()
        let provider = Logger.MetadataProvider { ["provided": "p"] }
        var loggers = [
            Logger(label: "crash-server") { StreamLogHandler(label: $0, stream: plain, metadataProvider: provider) },
            Logger(label: "crash-server") {
                LazyMetadataLogHandler(StreamLogHandler(label: $0, stream: lazy, metadataProvider: provider))
            },
        ]
        for i in loggers.indices {
            loggers[i].logLevel = .debug
            loggers[i][metadataKey: "b"] = "2"
            loggers[i][metadataKey: "a"] = ["x", "y"]
            loggers[i].debug("first", metadata: ["c": "3"])
            loggers[i][metadataKey: "b"] = nil
            loggers[i].trace("dropped")
            loggers[i].error("second")
            #expect(loggers[i].logLevel == .debug)
            #expect(loggers[i][metadataKey: "a"] == ["x", "y"])
        }
        #expect(lazy.withoutTimestamps.count == 2)
        #expect(lazy.withoutTimestamps == plain.withoutTimestamps)
    }
}
