import CrashGrouping
import Testing

/// Uncaught exceptions as the SDK reports them (`kind: exception`, the throw site's stack):
/// the throw and terminate frames of Apple's runtimes, libstdc++ and GNUstep are machinery,
/// so the signature starts at the app's function that threw.
@Suite("Exception machinery")
struct ExceptionMachineryTests {
    @Test(
        "throw and terminate frames are machinery on every runtime",
        arguments: [
            "0 libobjc.A.dylib 0x1a0b2c3d4 objc_exception_throw + 60",
            "1 libobjc.A.dylib 0x1a0b2c3d4 _objc_terminate() + 112",
            "2 libc++abi.dylib 0x1a0b2c3d4 std::__terminate(void (*)()) + 16",
            "3 libc++abi.dylib 0x1a0b2c3d4 __cxa_throw + 132",
            "0 libstdc++.so.6 0x7f0f0a2a8e85 std::terminate() + 21",
            "1 libstdc++.so.6 0x7f0f0a2a90d8 __cxa_throw + 72",
            "2 libstdc++.so.6 0x7f0f0a2a8e1a __cxxabiv1::__terminate(void (*)()) + 10",
            "3 libstdc++.so.6 0x7f0f0a2a8e1a __gnu_cxx::__verbose_terminate_handler() + 10",
            "4 libgnustep-base.so.1.28 0x7f0f0a2a8e1a _NSFoundationUncaughtExceptionHandler + 10",
        ])
    func machinery(_ frame: String) {
        #expect(FrameClassifier.classify(frame).role == .machinery, "\(frame)")
    }

    @Test("an uncaught C++ exception and an uncaught NSRangeException on GNUstep group by the thrower")
    func selectsTheThrower() {
        let cxx = [
            "0 libstdc++.so.6 0x7f0f0a2a8e1a libstdc++.so.6 + 691738",
            "1 libstdc++.so.6 0x7f0f0a2a8e85 std::terminate() + 21",
            "2 libstdc++.so.6 0x7f0f0a2a90d8 __cxa_throw + 72",
            "3 Shop 0x555f049ba79c Shop.Loader.parse() + 92",
            "4 Shop 0x555f049ba79c Shop.Loader.load() + 92",
            "5 Shop 0x555f049ba79c main + 12",
        ]
        #expect(Grouping.signatureFrames(cxx).map(\.index) == [3, 4, 5])
        let objc = [
            "0 libgnustep-base.so.1.28 0x7f68b0dc0000 libgnustep-base.so.1.28 + 4242",
            "1 Shop 0x7f68b0dc425d -[Feed reload] + 77",
            "2 Shop 0x5578097fe2ef main + 31",
            "3 libc.so.6 0x7f68b0e1924a libc.so.6 + 561653",
        ]
        #expect(Grouping.signatureFrames(objc).map(\.index) == [1, 2])
    }
}
