import CrashWire
import Foundation
import Testing

@testable import CrashGuard

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The record survives what goes wrong around a crash: a bad pointer behind the runtime's
/// message, the scope changing while the handler copies it, a restart while a thread may be
/// writing, and a record whose processing crashes the next launches.
@Suite("Crash record integrity")
struct CrashRecordIntegrityTests {
    #if os(Linux)
    @Test("a bad fatal-message pointer loses only the message: header, signal and stack are in the record")
    func badMessagePointer() async throws {
        let directory = CrashChild.prepare("bad-message")
        await #expect(processExitsWith: .signal(SIGABRT)) {
            // The slot holds 0x10: reading the message through it faults unless read safely.
            let slot = UnsafeMutablePointer<UInt>.allocate(capacity: 1)
            slot.pointee = 0x10
            CrashChild.run("bad-message") {
                CrashCapture.testFatalMessageSlot(UnsafeRawPointer(slot))
                abort()
            }
        }
        let report = try CrashChild.report(directory)
        #expect(report.reason == "SIGABRT (SI_TKILL)")
        #expect(report.context?["runtime.message"] == nil)
        #expect(report.context?["crash.truncated"] == nil)
        #expect(report.context?["thread.crashing"] != nil)
    }

    @Test("two scope changes while the handler copies the scope: the record holds one whole scope, never a torn one")
    func scopeChangingDuringTheCrash() async throws {
        let directory = CrashChild.prepare("scope-tear")
        await #expect(processExitsWith: .signal(SIGABRT)) {
            CrashChild.run("scope-tear") {
                CrashCapture.publishScope(ScopeTear.scope("a"))
                // In the handler, after its first copy: two changes, the second rewriting the
                // very slot that was copied (as another thread could during the crash).
                CrashCapture.testScopeHook {
                    CrashCapture.publishScope(ScopeTear.scope("b"))
                    CrashCapture.publishScope(ScopeTear.scope("c"))
                }
                abort()
            }
        }
        let data = try Data(contentsOf: CrashCapture.recordURL(directory))
        let record = try #require(CrashRecord(parsing: data))
        #expect(record.scope.count == 400)
        let values = Set(record.scope.map(\.value))
        #expect(values.count == 1, "scope mixes \(values.count) generations")
        #expect(values.first == String(repeating: "c", count: 90))
    }

    @Test("a restart points the record descriptor a crashing thread may hold at the new record file")
    func restartKeepsTheDescriptorValid() async throws {
        _ = CrashChild.prepare("restart-one")
        let second = CrashChild.prepare("restart-two")
        await #expect(processExitsWith: .signal(SIGSEGV)) {
            let app = CrashChild.app
            let first = CrashChild.directory("restart-one")
            let second = CrashChild.directory("restart-two")
            for folder in [first, second] {
                try? FileManager.default.createDirectory(at: folder.appendingPathComponent("crash"), withIntermediateDirectories: true)
            }
            do { try CrashCapture.install(directory: first, app: app, device: DeviceInfo()) } catch { exit(90) }
            let descriptor = CrashCapture.recordDescriptor
            do { try CrashCapture.install(directory: second, app: app, device: DeviceInfo()) } catch { exit(91) }
            // What a thread that loaded the descriptor before the restart writes to.
            var path = [CChar](repeating: 0, count: 4096)
            let length = readlink("/proc/self/fd/\(descriptor)", &path, path.count - 1)
            guard length > 0 else { exit(92) }
            let target = String(decoding: path.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
            guard target == CrashCapture.recordURL(second).path, CrashCapture.recordDescriptor == descriptor else { exit(93) }
            CrashChild.writeBadPointer()
        }
        let record = try #require(CrashRecord(parsing: try Data(contentsOf: CrashCapture.recordURL(second))))
        #expect(record.signal == SIGSEGV)
    }

    @Test("a record that crashes its own processing twice is set aside; the next launch goes on")
    func crashLoopGuard() async throws {
        let directory = CrashChild.prepare("crash-loop")
        // The record left by a crash...
        await #expect(processExitsWith: .signal(SIGSEGV)) {
            CrashChild.run("crash-loop") { CrashChild.writeBadPointer() }
        }
        let poisoned = try #require(CrashRecord(parsing: try Data(contentsOf: CrashCapture.recordURL(directory)))).id
        // ... crashes the two launches that process it (a parser bug, simulated).
        for _ in 0..<2 {
            await #expect(processExitsWith: .signal(SIGABRT)) {
                CrashCapture.crashWhileProcessing = true
                CrashChild.run("crash-loop") { sleep(20) }
            }
        }
        // The third launch sets it aside instead of processing it a third time.
        var log: [String] = []
        let taken = CrashCapture.takePrevious(directory: directory) { log.append($0) }
        let aside = try FileManager.default.contentsOfDirectory(
            at: CrashCapture.setAsideFolder(directory), includingPropertiesForKeys: nil)
        #expect(aside.count == 1)
        let setAside = try #require(aside.first)
        #expect(CrashRecord(parsing: try Data(contentsOf: setAside.appendingPathComponent("record")))?.id == poisoned)
        #expect(CrashCapture.attempts(setAside) == 2)
        #expect(log.count == 1)
        // The crashes of the two processing runs are still reports to send.
        #expect(taken.pending.count == 2)
        #expect(taken.crashed)
        let reports = taken.pending.compactMap {
            CrashCapture.report(
                record: $0.appendingPathComponent("record"), session: $0.appendingPathComponent("session.json"),
                app: CrashChild.app, device: DeviceInfo(), now: Date())
        }
        #expect(reports.count == 2)
        #expect(reports.allSatisfy { $0.reason.hasPrefix("SIGABRT") && $0.id != poisoned })
    }

    @Test("sent by kill: si_code <= 0 on Linux (Darwin's SI_USER is positive, see ccrash_code_is_sent)")
    func sentSignals() {
        #expect(CrashCapture.isSent(code: Int32(SI_USER)))
        #expect(CrashCapture.isSent(code: Int32(SI_TKILL)))
        #expect(CrashCapture.isSent(code: Int32(SI_QUEUE)))
        #expect(!CrashCapture.isSent(code: Int32(SEGV_MAPERR)))
        #expect(!CrashCapture.isSent(code: Int32(ILL_ILLOPN)))
    }
    #endif
}

/// The scopes of the scope-tear test: 400 lines `k<i>\t<generation × 90>`.
enum ScopeTear {
    static func scope(_ generation: String) -> String {
        (0..<400).map { "k\($0)\t\(String(repeating: generation, count: 90))\n" }.joined()
    }
}
