import CrashGuardObjC
import CrashWire
import Foundation
import Testing

@testable import CrashGuard

/// The Swift side of the Objective-C guards' reports: the C report's site (the app's frame
/// that made the call) is the rate-limit site, its function the guarded method. The guards
/// themselves are tested on GNUstep (`scripts/objc-test`).
@Suite struct ObjCRuntimeGuardsTests {
    /// Records one C report as the guards' callback would pass it.
    private func record(site: String, function: String = "-[GSInlineArray objectAtIndex:]") {
        site.withCString { site in
            function.withCString { function in
                "container".withCString { kind in
                    "-[GSInlineArray objectAtIndex:]: index 5 beyond bounds [0 .. 2]".withCString { reason in
                        "returned nil".withCString { action in
                            let addresses: [UInt] = [0x1000, 0x2000]
                            addresses.withUnsafeBufferPointer { raw in
                                let report = crashguard_objc_report(
                                    kind: kind, reason: reason, stack: nil, stack_count: 0, site: site, action: action,
                                    function: function, site_address: 0x2000, addresses: raw.baseAddress,
                                    address_count: raw.count)
                                ObjCRuntimeGuards.record(report)
                            }
                        }
                    }
                }
            }
        }
    }

    @Test func eachCallSiteInTheAppHasItsOwnRateLimit() {
        let (_, events) = recording(rateLimit: .init(maxEvents: 1, interval: 60)) {
            record(site: "MyApp+0x4a2f")
            record(site: "MyApp+0x4a2f")  // the same call site again: limited
            record(site: "MyApp+0x51c0")  // another call site of the same method: its own limit
        }
        #expect(events.count == 2)
        #expect(events.map { $0.context["file"] } == ["MyApp+0x4a2f", "MyApp+0x51c0"])
        #expect(events.allSatisfy { $0.context["function"] == "-[GSInlineArray objectAtIndex:]" })
        #expect(events.allSatisfy { $0.kind == .container && $0.context["runtime"] == "objc" })
    }
}
