import CCrashCapture

extension CrashGuard {
    /// Tests only: makes the crash handler fault while it walks the crashing thread's stack,
    /// to prove that a fault inside the handler still ends the record cleanly.
    @_spi(Testing) public static func injectCrashHandlerFault() { ccrash_test_fault_in_handler(1) }
}
