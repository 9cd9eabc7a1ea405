import CrashWire
import Foundation
import Testing

@testable import CrashIngest

/// The mapping of Apple's crash reports to reports (`apple.md`, "The Apple door"): every row
/// of the contract's table for `.ips` and MetricKit, the refusals (400) and the rejections,
/// on the fixtures of Tests/Fixtures/apple.
@Suite struct AppleCrashReportsTests {
    static let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fixtures/apple")

    static func fixture(_ name: String) throws -> [UInt8] {
        Array(try Data(contentsOf: fixtures.appendingPathComponent(name)))
    }

    /// A moment inside the accepted window of the fixtures' crashes.
    static let received = RFC3339.parse("2026-11-27T10:00:00Z")!

    static func read(_ bytes: [UInt8], at time: Date = received) throws -> AppleReportBatch {
        try AppleCrashReports.read(bytes, receivedAt: time)
    }

    /// `bytes`' refusal message; fails the test when they are read.
    static func refusal(_ bytes: [UInt8]) -> IngestError? {
        do {
            _ = try AppleCrashReports.read(bytes, receivedAt: received)
            return nil
        } catch {
            return error
        }
    }

    /// An `.ips` of `header` and `body` objects, one line each.
    static func ips(_ header: [String: Any], _ body: [String: Any]) -> [UInt8] {
        Array(try! JSONSerialization.data(withJSONObject: header)) + [0x0A]
            + Array(try! JSONSerialization.data(withJSONObject: body))
    }

    /// The fixture's header and body as objects, to edit.
    static func ipsParts(_ name: String) throws -> (header: [String: Any], body: [String: Any]) {
        let bytes = try fixture(name)
        let newline = bytes.firstIndex(of: 0x0A)!
        let header = try JSONSerialization.jsonObject(with: Data(bytes[..<newline])) as! [String: Any]
        let body = try JSONSerialization.jsonObject(with: Data(bytes[(newline + 1)...])) as! [String: Any]
        return (header, body)
    }

    static func hex(_ value: UInt64) -> String { "0x" + String(value, radix: 16) }

    // MARK: .ips

    @Test func ipsSignalCrashMapsEveryField() throws {
        let batch = try Self.read(try Self.fixture("crash-segv.ips"))
        #expect(batch.format == .ips)
        #expect(batch.count == 1)
        #expect(batch.rejected.isEmpty)
        let report = try #require(batch.accepted.first)
        // id: the header's incident_id.
        #expect(report.id == UUID(uuidString: "8C2B5D1A-3E4F-4A6B-9C7D-0E1F2A3B4C5D"))
        // timestamp: captureTime (09:14:06.8812 +0100), not the header's 09:14:07.
        let capture = try #require(RFC3339.parse("2026-11-27T08:14:06.8812Z"))
        #expect(abs(report.timestamp.timeIntervalSince(capture)) < 0.001)
        #expect(report.kind == .signal)
        #expect(report.fatal == true)
        #expect(
            report.reason
                == "EXC_BAD_ACCESS (SIGSEGV): KERN_INVALID_ADDRESS at 0x0000000000000010\nNamespace SIGNAL, Code 11 Segmentation fault: 11")
        // stack: the faulting thread (1, not the main thread), innermost first, Apple's form.
        let crashy: UInt64 = 4_338_040_832
        let kit: UInt64 = 4_349_870_080
        let dispatch: UInt64 = 7_456_878_592
        let pthread: UInt64 = 8_059_076_608
        #expect(
            report.stack == [
                "0 Crashy \(Self.hex(crashy + 31116)) \(Self.hex(crashy)) + 31116",
                "1 Crashy \(Self.hex(crashy + 39456)) \(Self.hex(crashy)) + 39456",
                "2 CrashyKit \(Self.hex(kit + 25464)) \(Self.hex(kit)) + 25464",
                "3 libdispatch.dylib \(Self.hex(dispatch + 6876)) _dispatch_call_block_and_release + 32",
                "4 libdispatch.dylib \(Self.hex(dispatch + 112_636)) _dispatch_client_callout + 16",
                "5 libsystem_pthread.dylib \(Self.hex(pthread + 5048)) _pthread_wqthread + 292",
                "6 libsystem_pthread.dylib \(Self.hex(pthread + 2240)) start_wqthread + 8",
            ])
        #expect(report.app == AppInfo(id: "com.example.crashy", version: "2.3.1", build: "417"))
        #expect(
            report.device
                == DeviceInfo(os: "iOS", osVersion: "17.2", model: "iPhone15,2", id: "a7c1e9f04b2d6e8f0a1b3c5d7e9f1a2b3c4d5e6f"))
        // context: incident, codes, indicator, and one entry per image of the stack's frames.
        #expect(
            report.context == [
                "incident": "8C2B5D1A-3E4F-4A6B-9C7D-0E1F2A3B4C5D",
                "exception.codes": "0x0000000000000001, 0x0000000000000010",
                "termination.indicator": "Segmentation fault: 11",
                "image.0": "\(Self.hex(crashy)) 81920 6f0a3c1e-5b2d-3c4e-9a8f-1d2e3f405162 Crashy",
                "image.1": "\(Self.hex(kit)) 557056 0d9e8f7a-6b5c-3d4e-8f1a-2b3c4d5e6f70 CrashyKit",
                "image.2": "\(Self.hex(dispatch)) 287264 904d48a3-d99e-3962-bfa9-c3dfb66bba83 libdispatch.dylib",
                "image.3": "\(Self.hex(pthread)) 50272 4f94107b-94d2-3e88-8542-f5403c581b50 libsystem_pthread.dylib",
            ])
        #expect(report.validationError(now: Self.received) == nil)
    }

    @Test func ipsExceptionCrashMapsTheExceptionAndTheFallbacks() throws {
        let batch = try Self.read(try Self.fixture("crash-exception.ips"), at: RFC3339.parse("2026-11-27T00:00:00Z")!)
        let report = try #require(batch.accepted.first)
        // id: the body's incident (the header has none).
        #expect(report.id == UUID(uuidString: "5C8F13A7-AED3-47EC-840E-97C24C0985C3"))
        #expect(report.kind == .exception)
        #expect(
            report.reason == """
                NSRangeException: *** -[__NSArrayI objectAtIndexedSubscript:]: index 5 beyond bounds [0 .. 2]
                EXC_CRASH (SIGABRT): 0x0000000000000000, 0x0000000000000000
                Namespace SIGNAL, Code 6 Abort trap: 6
                """)
        // app id from bundleInfo (no bundleID in the header).
        #expect(report.app == AppInfo(id: "com.example.notebook", version: "4.0", build: "4012"))
        #expect(report.device?.os == "macOS")
        #expect(report.device?.osVersion == "14.2.1")
        #expect(report.device?.model == "Mac14,2")
        let stack = try #require(report.stack)
        #expect(stack.count == 11)
        #expect(stack[0].hasPrefix("0 libsystem_kernel.dylib 0x") && stack[0].hasSuffix(" __pthread_kill + 8"))
        #expect(stack[8] == "8 Notebook \(Self.hex(4_364_288_000 + 18844)) \(Self.hex(4_364_288_000)) + 18844")
        #expect(report.context?["image.0"]?.hasSuffix(" libsystem_kernel.dylib") == true)
    }

    @Test func ipsExceptionFromTheApplicationSpecificInformation() throws {
        var (header, body) = try Self.ipsParts("crash-exception.ips")
        body["exceptionReason"] = nil
        body["lastExceptionBacktrace"] = nil
        body["asi"] = [
            "CoreFoundation": [
                "*** Terminating app due to uncaught exception 'NSInvalidArgumentException', reason: '-[NSNull length]: unrecognized selector sent to instance 0x1f2a3b4c0'"
            ],
            "libsystem_c.dylib": ["abort() called"],
        ]
        var report = try #require(try Self.read(Self.ips(header, body)).accepted.first)
        #expect(report.kind == .exception)
        #expect(
            report.reason.split(separator: "\n").first
                == "NSInvalidArgumentException: -[NSNull length]: unrecognized selector sent to instance 0x1f2a3b4c0")
        // A plain abort() records no exception: a signal.
        body["asi"] = ["libsystem_c.dylib": ["abort() called"]]
        report = try #require(try Self.read(Self.ips(header, body)).accepted.first)
        #expect(report.kind == .signal)
        #expect(report.reason == "EXC_CRASH (SIGABRT): 0x0000000000000000, 0x0000000000000000\nNamespace SIGNAL, Code 6 Abort trap: 6")
        // A last exception backtrace alone is an exception whose name is not known.
        body["lastExceptionBacktrace"] = [["imageOffset": 18844, "imageIndex": 0]]
        report = try #require(try Self.read(Self.ips(header, body)).accepted.first)
        #expect(report.kind == .exception)
        #expect(report.reason.hasPrefix("EXC_CRASH (SIGABRT)"))
        header["incident_id"] = "not a uuid"
        #expect(try Self.read(Self.ips(header, body)).accepted.first?.id == UUID(uuidString: "5C8F13A7-AED3-47EC-840E-97C24C0985C3"))
    }

    @Test func ipsTimestampFallsBackToTheHeaderThenToTheTimeReceived() throws {
        var (header, body) = try Self.ipsParts("crash-segv.ips")
        body["captureTime"] = nil
        var report = try #require(try Self.read(Self.ips(header, body)).accepted.first)
        #expect(report.timestamp == RFC3339.parse("2026-11-27T08:14:07Z"))
        // Outside [now - 30 days, now + 1 day]: the time received.
        let later = Self.received.addingTimeInterval(40 * 86_400)
        report = try #require(try Self.read(Self.ips(header, body), at: later).accepted.first)
        #expect(report.timestamp == later)
        header["timestamp"] = "yesterday"
        report = try #require(try Self.read(Self.ips(header, body)).accepted.first)
        #expect(report.timestamp == Self.received)
    }

    @Test func ipsWithoutIncidentIDIsNamedByItsContent() throws {
        var (header, body) = try Self.ipsParts("crash-segv.ips")
        header["incident_id"] = nil
        body["incident"] = nil
        let bytes = Self.ips(header, body)
        let first = try #require(try Self.read(bytes).accepted.first)
        let again = try #require(try Self.read(bytes, at: Self.received.addingTimeInterval(60)).accepted.first)
        #expect(first.id == again.id)
        body["pid"] = 9999
        #expect(try Self.read(Self.ips(header, body)).accepted.first?.id != first.id)
        #expect(first.context?["incident"] == nil)
    }

    @Test func ipsAppWithoutAnyIdentifierIsUnknownAndWithoutVersionRejected() throws {
        var (header, body) = try Self.ipsParts("crash-segv.ips")
        header["bundleID"] = nil
        body["bundleInfo"] = nil
        var batch = try Self.read(Self.ips(header, body))
        #expect(batch.accepted.first?.app == AppInfo(id: "unknown", version: "2.3.1", build: "417"))
        header["app_version"] = nil
        batch = try Self.read(Self.ips(header, body))
        #expect(batch.accepted.isEmpty)
        #expect(batch.count == 1)
        #expect(batch.rejected.map(\.index) == [0])
        #expect(batch.rejected.first?.error.hasPrefix("app.version:") == true)
    }

    @Test func ipsFramesPastTheLimitKeepTheInnermost256() throws {
        var (header, body) = try Self.ipsParts("crash-segv.ips")
        var threads = body["threads"] as! [[String: Any]]
        threads[1]["frames"] = (0..<300).map { ["imageOffset": 1000 + $0, "imageIndex": 0] }
        body["threads"] = threads
        let report = try #require(try Self.read(Self.ips(header, body)).accepted.first)
        #expect(report.stack?.count == 256)
        #expect(report.stack?.first?.hasSuffix(" + 1000") == true)
        #expect(report.context?.keys.filter { $0.hasPrefix("image.") }.count == 1)
    }

    @Test func ipsRefusals() throws {
        let (header, body) = try Self.ipsParts("crash-segv.ips")
        let headerLine = Array(try JSONSerialization.data(withJSONObject: header))
        let bodyText = Array(try JSONSerialization.data(withJSONObject: body))
        // The header line alone, with or without its newline.
        #expect(Self.refusal(headerLine)?.message.contains("body line") == true)
        #expect(Self.refusal(headerLine + [0x0A])?.message.contains("body line") == true)
        // A truncated body.
        let truncated = Self.refusal(headerLine + [0x0A] + bodyText.prefix(bodyText.count / 2))
        #expect(truncated?.status == 400)
        #expect(truncated?.message.contains("not a JSON object") == true)
        // Other bug types: hangs (288), jetsam (298), the old text crash report's 109.
        for type in ["288", "298", "109"] {
            var other = header
            other["bug_type"] = type
            #expect(Self.refusal(Self.ips(other, body))?.message.contains("bug_type \(type) is not a crash report") == true)
            #expect(
                Self.refusal(Array(try JSONSerialization.data(withJSONObject: other)))?.message.contains("bug_type \(type)")
                    == true)
        }
        var noType = header
        noType["bug_type"] = nil
        #expect(Self.refusal(Self.ips(noType, body))?.message.contains("bug_type") == true)
        // No threads, no usedImages, or of the wrong type.
        for key in ["threads", "usedImages"] {
            var broken = body
            broken[key] = nil
            #expect(Self.refusal(Self.ips(header, broken))?.message.contains(key) == true)
            broken[key] = "none"
            #expect(Self.refusal(Self.ips(header, broken))?.message.contains(key) == true)
        }
        // Neither format.
        for text in ["", "  \n", "not json", "[1, 2]", "{\"reports\": []}", "{\"a\": 1}\n{\"b\": 2}"] {
            let error = Self.refusal(Array(text.utf8))
            #expect(error?.status == 400, "\(text)")
        }
    }

    @Test func ipsWithoutAFaultingThreadTakesTheTriggeredOne() throws {
        var (header, body) = try Self.ipsParts("crash-segv.ips")
        body["faultingThread"] = nil
        var report = try #require(try Self.read(Self.ips(header, body)).accepted.first)
        #expect(report.stack?.first?.hasPrefix("0 Crashy ") == true)
        #expect(report.stack?.count == 7)
        body["faultingThread"] = 99
        report = try #require(try Self.read(Self.ips(header, body)).accepted.first)
        #expect(report.stack?.count == 7)
        var threads = body["threads"] as! [[String: Any]]
        threads[1]["triggered"] = nil
        body["threads"] = threads
        report = try #require(try Self.read(Self.ips(header, body)).accepted.first)
        #expect(report.stack == nil)
    }

    // MARK: MetricKit

    @Test func metricKitPayloadGivesOneReportPerCrashDiagnostic() throws {
        let batch = try Self.read(try Self.fixture("metrickit-payload.json"))
        #expect(batch.format == .metricKit)
        // Two crashes; the hang and the CPU exception are ignored.
        #expect(batch.count == 2)
        #expect(batch.rejected.isEmpty)
        #expect(batch.accepted.count == 2)
        let signal = batch.accepted[0]
        #expect(signal.kind == .signal)
        #expect(signal.fatal == true)
        #expect(signal.reason == "EXC_BAD_ACCESS (SIGSEGV)\nNamespace SIGNAL, Code 11 Segmentation fault: 11")
        #expect(signal.timestamp == RFC3339.parse("2026-11-27T08:59:00Z"))
        // The attributed call stack (the second), root frame first, then its subFrames.
        let crashy: UInt64 = 4_305_018_764 - 31116
        #expect(
            signal.stack == [
                "0 Crashy \(Self.hex(crashy + 31116)) \(Self.hex(crashy)) + 31116",
                "1 Crashy \(Self.hex(crashy + 39456)) \(Self.hex(crashy)) + 39456",
                "2 libdispatch.dylib \(Self.hex(7_456_885_468)) \(Self.hex(7_456_885_468 - 6876)) + 6876",
            ])
        #expect(signal.app == AppInfo(id: "com.example.crashy", version: "2.3.1", build: "417"))
        #expect(signal.device == DeviceInfo(os: "iOS", osVersion: "17.2", model: "iPhone15,2"))
        #expect(
            signal.context == [
                "exception.codes": "0",
                "termination.indicator": "Namespace SIGNAL, Code 11 Segmentation fault: 11",
                "image.0": "\(Self.hex(crashy)) 0 6f0a3c1e-5b2d-3c4e-9a8f-1d2e3f405162 Crashy",
                "image.1": "\(Self.hex(7_456_885_468 - 6876)) 0 904d48a3-d99e-3962-bfa9-c3dfb66bba83 libdispatch.dylib",
            ])
        let exception = batch.accepted[1]
        #expect(exception.kind == .exception)
        #expect(
            exception.reason
                == "NSInvalidArgumentException: -[NSNull length]: unrecognized selector sent to instance 0x1f2a3b4c0\nNamespace SIGNAL, Code 6 Abort trap: 6"
        )
        #expect(exception.stack?.count == 2)
        #expect(signal.id != exception.id)
    }

    @Test func metricKitIDsComeFromTheDiagnosticsContent() throws {
        let bytes = try Self.fixture("metrickit-payload.json")
        let first = try Self.read(bytes).accepted.map(\.id)
        // Resent (reformatted, keys reordered by a round trip): the same ids.
        let object = try JSONSerialization.jsonObject(with: Data(bytes)) as! [String: Any]
        let compact = Array(try JSONSerialization.data(withJSONObject: object))
        #expect(try Self.read(compact, at: Self.received.addingTimeInterval(3600)).accepted.map(\.id) == first)
        // A diagnostic on its own in another payload: its id again.
        var single = object
        single["crashDiagnostics"] = [(object["crashDiagnostics"] as! [Any])[1]]
        #expect(try Self.read(Array(try JSONSerialization.data(withJSONObject: single))).accepted.map(\.id) == [first[1]])
        // Another crash: another id.
        var changed = (object["crashDiagnostics"] as! [[String: Any]])[0]
        var meta = changed["diagnosticMetaData"] as! [String: Any]
        meta["pid"] = 1
        changed["diagnosticMetaData"] = meta
        single["crashDiagnostics"] = [changed]
        let other = try Self.read(Array(try JSONSerialization.data(withJSONObject: single))).accepted.map(\.id)
        #expect(other.count == 1 && other[0] != first[0])
        // RFC 9562 version 8.
        #expect(first[0].uuidString.dropFirst(14).first == "8")
    }

    @Test func metricKitFieldsOfTheContractsNamesAndFallbacks() throws {
        let meta: [String: Any] = [
            "appVersion": "3.0", "osVersion": "macOS 14.2 (23C64)", "deviceType": "Mac14,2", "signal": 6, "exceptionType": 10,
            "exceptionReason": ["exceptionName": "NSGenericException", "composedMessage": "boom"],
        ]
        let payload: [String: Any] = [
            "timeStampBegin": "2026-11-26 00:00:00", "timeStampEnd": "2026-11-26 23:59:00",
            "crashDiagnostics": [["diagnosticMetaData": meta, "callStackTree": ["callStacks": []]]],
        ]
        let report = try #require(try Self.read(Array(try JSONSerialization.data(withJSONObject: payload))).accepted.first)
        #expect(report.kind == .exception)
        #expect(report.reason == "NSGenericException: boom")
        #expect(report.app == AppInfo(id: "unknown", version: "3.0"))
        #expect(report.device == DeviceInfo(os: "macOS", osVersion: "14.2", model: "Mac14,2"))
        #expect(report.stack == nil)
        // A time without a zone is UTC.
        #expect(report.timestamp == RFC3339.parse("2026-11-26T23:59:00Z"))
    }

    @Test func metricKitRejectsCrashesWithoutAppVersionAndStoresTheOthers() throws {
        var payload = try JSONSerialization.jsonObject(with: Data(try Self.fixture("metrickit-payload.json"))) as! [String: Any]
        var crashes = payload["crashDiagnostics"] as! [Any]
        var first = crashes[0] as! [String: Any]
        var meta = first["diagnosticMetaData"] as! [String: Any]
        meta["appVersion"] = nil
        first["diagnosticMetaData"] = meta
        crashes[0] = first
        crashes.append("not an object")
        payload["crashDiagnostics"] = crashes
        let batch = try Self.read(Array(try JSONSerialization.data(withJSONObject: payload)))
        #expect(batch.count == 3)
        #expect(batch.accepted.count == 1)
        #expect(batch.rejected.map(\.index) == [0, 2])
        #expect(batch.rejected[0].error.hasPrefix("app.version:"))
        #expect(batch.rejected[1].error.hasPrefix("crashDiagnostics[2]"))
    }

    @Test func metricKitWithoutCrashesIsEmptyAndABadListRefused() throws {
        var payload = try JSONSerialization.jsonObject(with: Data(try Self.fixture("metrickit-payload.json"))) as! [String: Any]
        payload["crashDiagnostics"] = nil
        var batch = try Self.read(Array(try JSONSerialization.data(withJSONObject: payload)))
        #expect(batch.format == .metricKit)
        #expect(batch.count == 0 && batch.accepted.isEmpty && batch.rejected.isEmpty)
        payload["crashDiagnostics"] = []
        batch = try Self.read(Array(try JSONSerialization.data(withJSONObject: payload)))
        #expect(batch.count == 0)
        payload["crashDiagnostics"] = ["a": 1]
        let error = Self.refusal(Array(try JSONSerialization.data(withJSONObject: payload)))
        #expect(error?.status == 400)
        #expect(error?.message.contains("crashDiagnostics is not an array") == true)
    }

    @Test func metricKitDeepCallStacksAreWalkedWithoutRecursion() throws {
        // MetricKit nests two levels per frame (the frame, its subFrames), far past the 32 levels
        // of `/v1/reports`; the chain is walked without recursion.
        var frame: [String: Any] = ["binaryName": "Crashy", "offsetIntoBinaryTextSegment": 0, "address": 4_305_000_000]
        for level in 1..<200 {
            frame = [
                "binaryName": "Crashy", "offsetIntoBinaryTextSegment": level, "address": 4_305_000_000 + level,
                "subFrames": [frame],
            ]
        }
        let payload: [String: Any] = [
            "timeStampEnd": "2026-11-27 08:00:00 +0000",
            "crashDiagnostics": [
                [
                    "diagnosticMetaData": ["appVersion": "1", "signal": 11],
                    "callStackTree": ["callStacks": [["threadAttributed": true, "callStackRootFrames": [frame]]]],
                ]
            ],
        ]
        let report = try #require(try Self.read(Array(try JSONSerialization.data(withJSONObject: payload))).accepted.first)
        #expect(report.stack?.count == 200)
        #expect(report.stack?.first == "0 Crashy \(Self.hex(4_305_000_199)) \(Self.hex(4_305_000_000)) + 199")
        #expect(report.stack?.last == "199 Crashy \(Self.hex(4_305_000_000)) \(Self.hex(4_305_000_000)) + 0")
        // A hostile nesting far past that is a 400, not a crash of the server.
        let deep = Array(String(repeating: "[", count: 100_000).utf8)
        #expect(Self.refusal(deep)?.status == 400)
    }

    /// A MetricKit payload whose attributed call stack is `depth` frames (each in its caller's
    /// `subFrames`: two levels per frame), written as text: Foundation's writer cannot.
    static func deepPayload(depth: Int, spacing: String = "") -> [UInt8] {
        var frame = ""
        for level in (0..<depth).reversed() {
            let fields = #""binaryName":\#(spacing)"Crashy","offsetIntoBinaryTextSegment":\#(level),"address":\#(4_305_000_000 + level)"#
            frame = frame.isEmpty ? "{\(fields)}" : "{\(fields),\(spacing)\"subFrames\":[\(frame)]}"
        }
        let text = """
            {"timeStampEnd":"2026-11-27 08:00:00 +0000","crashDiagnostics":[{"diagnosticMetaData":{"appVersion":"1","signal":11},\
            "callStackTree":{"callStacks":[{"threadAttributed":true,"callStackRootFrames":[\(frame)]}]}}]}
            """
        return Array(text.utf8)
    }

    @Test func metricKitStacksOfAThousandFramesAreRead() throws {
        // 2,000 levels: past Foundation's nesting limit (a 400 before), read into a flat tree.
        #expect((try? JSONSerialization.jsonObject(with: Data(Self.deepPayload(depth: 1000)))) == nil)
        let batch = try Self.read(Self.deepPayload(depth: 1000))
        let report = try #require(batch.accepted.first)
        // The stack keeps the contract's frame limit, innermost (root) first.
        #expect(report.stack?.count == ReportLimits.maxFrames)
        #expect(report.stack?.first == "0 Crashy \(Self.hex(4_305_000_000)) \(Self.hex(4_305_000_000)) + 0")
        #expect(report.stack?.last == "255 Crashy \(Self.hex(4_305_000_255)) \(Self.hex(4_305_000_000)) + 255")
        #expect(report.validationError(now: Self.received) == nil)
        // The id is the diagnostic's canonical form: the same text spaced differently is the same crash.
        #expect(try Self.read(Self.deepPayload(depth: 1000, spacing: " ")).accepted.first?.id == report.id)
        #expect(try Self.read(Self.deepPayload(depth: 999)).accepted.first?.id != report.id)
        // Well-formed nesting far deeper than any stack, and its truncation: 400s, not a crash.
        let nested = Array((String(repeating: "[", count: 200_000) + String(repeating: "]", count: 200_000)).utf8)
        #expect(Self.refusal(nested)?.status == 400)
        #expect(Self.refusal(Array(Self.deepPayload(depth: 1000).dropLast(500)))?.status == 400)
    }

    @Test func jsonTreeReadsWhatFoundationReads() throws {
        // Every fixture and shape the mapping reads: the same values as JSONSerialization.
        for text in [
            #"{"a":[1,-2,3.5,1e3,true,false,null,"x\"y\\z\/\u00e9\ud83d\ude00"],"b":{},"c":[],"d":18446744073709551615}"#,
            String(decoding: try Self.fixture("metrickit-payload.json"), as: UTF8.self),
        ] {
            let tree = try #require(JSONTree(Array(text.utf8)[...]))
            let ours = try #require(tree.foundationValue(tree.root) as? [String: Any])
            let foundation = try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
            #expect(NSDictionary(dictionary: ours).isEqual(to: foundation))
        }
        for bad in ["", "{", #"{"a":}"#, "[1,]", #"{"a" 1}"#, "01", "1.", "\"\u{1}\"", "[1] [2]", "tru", #""\x""#] {
            #expect(JSONTree(Array(bad.utf8)[...]) == nil, "\(bad)")
        }
    }

    // MARK: Fields

    @Test func operatingSystemsAndTimes() throws {
        #expect(AppleCrashReports.operatingSystem("iPhone OS 17.2 (21C62)") == ("iOS", "17.2"))
        #expect(AppleCrashReports.operatingSystem("macOS 26.5 (25F71)") == ("macOS", "26.5"))
        #expect(AppleCrashReports.operatingSystem("Watch OS 10.1 (21S71)") == ("watchOS", "10.1"))
        #expect(AppleCrashReports.operatingSystem("iOS 26.0") == ("iOS", "26.0"))
        #expect(AppleCrashReports.operatingSystem("Plan 9") == ("Plan", "9"))
        #expect(AppleCrashReports.operatingSystem("") == (nil, nil))
        let fractional = try #require(AppleCrashReports.appleTime("2026-03-17 22:50:41.6409 -0700"))
        #expect(abs(fractional.timeIntervalSince(RFC3339.parse("2026-03-18T05:50:41.6409Z")!)) < 0.0001)
        #expect(AppleCrashReports.appleTime("2020-10-26 19:27:00 +0000") == RFC3339.parse("2020-10-26T19:27:00Z"))
        #expect(AppleCrashReports.appleTime("2026-11-27T08:00:00Z") == RFC3339.parse("2026-11-27T08:00:00Z"))
        #expect(AppleCrashReports.appleTime("2026-13-01 00:00:00") == nil)
        #expect(AppleCrashReports.appleTime("2026-11-27 08:00:00 +07") == nil)
        #expect(AppleCrashReports.machExceptionName(1) == "EXC_BAD_ACCESS")
        #expect(AppleCrashReports.machExceptionName(99) == "EXC_99")
        #expect(AppleCrashReports.signalName(11) == "SIGSEGV")
        #expect(AppleCrashReports.signalName(40) == "SIG40")
    }
}
