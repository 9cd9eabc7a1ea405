import CrashGuard
import CrashWire
import Foundation
import Testing

@Suite("cast guard")
struct CastGuardTests {
    @Test func unguardedForcedCastDies() async {
        await #expect(processExitsWith: .signal(SIGABRT)) {
            let value: Any = runtimeOpaque(5)
            _ = value as! String
        }
    }

    @Test func unguardedUnknownSelectorDies() async {
        await #expect(processExitsWith: .signal(SIGILL)) {
            let handlers: [String: (Int) -> Int] = runtimeOpaque(["double:": { $0 * 2 }])
            _ = handlers["triple:"]!(3)
        }
    }

    @Test func castWithDefault() {
        let value: Any = 5
        let (result, events) = recording { guardedCast(value, to: String.self, default: "none") }
        #expect(result == "none")
        let event = expectOne(events, .cast, "Could not cast value of type 'Int' to 'String'")
        #expect(event?.context["value"] == "5")
        let ok = recording { guardedCast("x" as Any, to: String.self, default: "none") }
        #expect(ok.value == "x" && ok.events.isEmpty)
    }

    @Test func castToOptional() {
        let null: Any = NSNull()
        let (result, events) = recording { guardedCast(null, to: [String: Any].self) }
        #expect(result == nil)
        expectOne(events, .cast, "Could not cast value of type 'NSNull' to 'Dictionary<String, Any>'")
    }

    @Test func unknownSelectorAnswersTheDefault() {
        let router = SelectorTable<Int, Int>("Router")
        router.register("double:") { $0 * 2 }
        let (value, events) = recording { (router.perform("double:", with: 4, default: -1), router.perform("triple:", with: 4, default: -1)) }
        #expect(value.0 == 8 && value.1 == -1)
        let event = expectOne(events, .unrecognizedSelector, "-[Router triple:]: unrecognized selector sent to instance \(objectAddress(router))")
        #expect(event?.context["selector"] == "triple:")
        #expect(router.responds(to: "double:") && !router.responds(to: "triple:"))
        #expect(router.unregister("double:") && router.selectors.isEmpty)
    }

    @Test func voidInput() {
        let commands = SelectorTable<Void, String>("Plugin")
        commands.register("version") { "1.0" }
        let (value, events) = recording { (commands.perform("version", default: ""), commands.perform("reload", default: "")) }
        #expect(value == ("1.0", ""))
        #expect(events.count == 1 && events.first?.kind == .unrecognizedSelector)
    }

    @Test func tableIsThreadSafe() {
        let table = SelectorTable<Int, Int>("Bridge")
        let events = recording {
            DispatchQueue.concurrentPerform(iterations: 200) { i in
                let name = "op\(i % 10):"
                table.register(name) { $0 + i }
                _ = table.perform(name, with: 1, default: 0)
                _ = table.unregister(name)
                _ = table.responds(to: name)
            }
        }.events
        #expect(events.allSatisfy { $0.kind == .unrecognizedSelector })
        #expect(table.selectors.isEmpty)
    }
}
