import CCrashCapture

extension CrashGuard {
    /// Tests only: makes the crash handler fault while it walks the crashing thread's stack,
    /// to prove that a fault inside the handler still ends the record cleanly.
    @_spi(Testing) public static func injectCrashHandlerFault() { ccrash_test_fault_in_handler(1) }
}

extension CrashCapture {
    /// Tests only: the handler reads the runtime's fatal message through `slot` (a pointer
    /// to a `const char *`).
    static func testFatalMessageSlot(_ slot: UnsafeRawPointer?) { ccrash_test_fatal_message_slot(slot) }

    /// The record's descriptor, or -1.
    static var recordDescriptor: Int32 { ccrash_record_fd() }

    /// Publishes `text` as the scope the handler writes (`key\tvalue` lines).
    static func publishScope(_ text: String) {
        text.utf8CString.withUnsafeBufferPointer { ccrash_set_scope($0.baseAddress, $0.count - 1) }
    }

    /// Tests only: `hook` runs in the crash handler between its first copy of the scope and
    /// the check that the copy is whole.
    static func testScopeHook(_ hook: (@convention(c) () -> Void)?) { ccrash_test_scope_hook(hook) }

    /// Whether `code` says the signal was sent rather than raised by a fault.
    static func isSent(code: Int32) -> Bool { ccrash_code_is_sent(code) != 0 }

    /// Tests only: throws a C++ `std::runtime_error(what)` that nothing catches.
    static func throwUncaughtCxxException(_ what: String) { crashguard_test_throw_runtime_error(what) }
}
