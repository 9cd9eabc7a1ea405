// A command-line app that uses CrashGuard the way an app would: start, scope and
// breadcrumbs, a few guards, and (on request) a crash of one kind. Built with `-O`, so its
// crashes look like a shipped app's. The crash-capture tests and scripts/test.d/40-example
// run it; see docs/sdk.md.
//
//     crashguard-example crash KIND DIRECTORY        start with uploads off, then crash
//     crashguard-example report URL KEY DIRECTORY    start (queuing the last crash), use guards, flush
//     crashguard-example session URL KEY DIRECTORY END
//         one run with a session, uploads on: it starts (ending the previous run's session),
//         uploads, then ends by END: `crash` (fatalError), `kill` (prints "ready" and waits
//         for SIGKILL) or `exit` (CrashGuard.closeAndWait, then exit 0)
//
// KIND: index, unwrap, overflow, fatal, abort, abort2, segv, cast, stack, handler-fault.
@_spi(Testing) import CrashGuard
import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

let arguments = CommandLine.arguments
guard arguments.count >= 4 else {
    FileHandle.standardError.write(
        Data("usage: crashguard-example crash KIND DIR | report URL KEY DIR | session URL KEY DIR crash|kill|exit\n".utf8))
    exit(2)
}

/// A value the optimizer cannot see through (never set).
enum Opaque {
    static var value: String? { ProcessInfo.processInfo.environment["CRASHGUARD_EXAMPLE_NEVER"] }
}

func configuration(server: URL, key: String, directory: URL, upload: Bool) -> CrashGuard.Configuration {
    CrashGuard.Configuration(
        serverURL: server, ingestKey: key,
        appID: "com.example.crashguard-example", appVersion: "1.0.0", appBuild: "1",
        device: DeviceInfo(os: "Linux", osVersion: "1", model: "example", id: "example-device"),
        directory: directory,
        flushInterval: .seconds(1),
        uploadEnabled: upload
    )
}

@inline(never) func crashIndexOutOfRange() {
    let numbers = [1, 2, 3]
    print(numbers[Int(Opaque.value ?? "5")!])
}

@inline(never) func crashForceUnwrap() {
    let value: String? = Opaque.value
    print(value!)
}

@inline(never) func crashOverflow() {
    let big = Int.max - (Opaque.value?.count ?? 0)
    print(big + 1)
}

@inline(never) func crashFatalError() {
    fatalError("example fatal error")
}

@inline(never) func crashAbortInParser() {
    FileHandle.standardError.write(Data("parser: unrecoverable input\n".utf8))
    if Opaque.value == nil { abort() }
}

@inline(never) func crashAbortInLoader() {
    FileHandle.standardError.write(Data("loader: missing resource, giving up after \(Opaque.value?.count ?? 3) tries\n".utf8))
    if Opaque.value == nil { abort() }
}

@inline(never) func crashBadPointer() {
    let pointer = UnsafeMutablePointer<Int>(bitPattern: 0x10 + (Opaque.value?.count ?? 0))!
    pointer.pointee = 42
}

@inline(never) func crashFailedCast() {
    let value: Any = Int(ProcessInfo.processInfo.processIdentifier)
    print(value as! String)
}

@inline(never) func crashStackOverflow(_ depth: Int) -> Int {
    var frame = (depth, depth, depth, depth, depth, depth, depth, depth)
    return withUnsafeMutablePointer(to: &frame) { $0.pointee.0 + crashStackOverflow(depth + 1) }
}

/// Two threads that wait, so the crash record has other threads to show.
func startWorkers() {
    for name in ["example-worker1", "example-worker2"] {
        let ready = DispatchSemaphore(value: 0)
        let thread = Thread {
            CrashGuard.prepareCurrentThread(name: name)  // alternate stack, stack bounds, OS thread name
            ready.signal()
            while true { sleep(60) }
        }
        thread.name = name
        thread.start()
        ready.wait()
    }
}

switch arguments[1] {
case "crash":
    let directory = URL(fileURLWithPath: arguments[3])
    do {
        try CrashGuard.start(configuration(server: URL(string: "http://127.0.0.1:9")!, key: "ik_none", directory: directory, upload: false))
    } catch {
        print("start failed: \(error)")
        exit(3)
    }
    CrashGuard.setUser(id: "user-42")
    CrashGuard.setTag("example.kind", arguments[2])
    CrashGuard.addBreadcrumb("about to crash: \(arguments[2])", category: "example")
    startWorkers()
    switch arguments[2] {
    case "index": crashIndexOutOfRange()
    case "unwrap": crashForceUnwrap()
    case "overflow": crashOverflow()
    case "fatal": crashFatalError()
    case "abort": crashAbortInParser()
    case "abort2": crashAbortInLoader()
    case "segv": crashBadPointer()
    case "cast": crashFailedCast()
    case "stack": print(crashStackOverflow(0))
    case "handler-fault":
        // The crash handler's own fault path (tests): the record must still end cleanly.
        CrashGuard.injectCrashHandlerFault()
        crashBadPointer()
    default:
        print("unknown crash kind \(arguments[2])")
        exit(2)
    }
    exit(4)  // did not crash

case "report":
    guard arguments.count >= 5, let server = URL(string: arguments[2]) else { exit(2) }
    let directory = URL(fileURLWithPath: arguments[4])
    do {
        try CrashGuard.start(configuration(server: server, key: arguments[3], directory: directory, upload: true))
    } catch {
        print("start failed: \(error)")
        exit(3)
    }
    CrashGuard.setUser(id: "user-42")
    CrashGuard.addBreadcrumb("report run", category: "example")
    // Guards: each does the safe thing and reports.
    let numbers = [1, 2, 3]
    let missing = numbers[guarded: 7]
    let quotient = 10.guardedDivided(by: Opaque.value?.count ?? 0)
    CrashGuard.record("example custom report", context: ["missing": String(describing: missing), "quotient": String(quotient)])
    let flushed = CrashGuard.flushAndWait(timeout: .seconds(20))
    print(flushed ? "flushed" : "not flushed")
    exit(flushed ? 0 : 1)

case "session":
    guard arguments.count >= 6, let server = URL(string: arguments[2]) else { exit(2) }
    do {
        try CrashGuard.start(configuration(server: server, key: arguments[3], directory: URL(fileURLWithPath: arguments[4]), upload: true))
    } catch {
        print("start failed: \(error)")
        exit(3)
    }
    switch arguments[5] {
    case "crash":
        // The session's start (and the previous run's end) reach the server, then the crash.
        guard CrashGuard.flushAndWait(timeout: .seconds(20)) else { exit(1) }
        crashFatalError()
    case "kill":
        guard CrashGuard.flushAndWait(timeout: .seconds(20)) else { exit(1) }
        FileHandle.standardOutput.write(Data("ready\n".utf8))  // unbuffered: the test waits for it
        while true { sleep(60) }
    case "exit":
        let closed = CrashGuard.closeAndWait(timeout: .seconds(20))
        print(closed ? "closed" : "not closed")
        exit(closed ? 0 : 1)
    default:
        exit(2)
    }

default:
    exit(2)
}
