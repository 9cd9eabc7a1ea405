import CrashGuard
import CrashWire
import Foundation
import Testing

private final class Student: @unchecked Sendable {
    lazy var observers = KeyValueObservers(self, keyPathNames: [\.name: "name", \.age: "age"])
    var name = "" { didSet { observers.didChange(\.name, from: oldValue, to: name) } }
    var age = 0 { didSet { observers.didChange(\.age, from: oldValue, to: age) } }
}

private final class Watcher: @unchecked Sendable {
    var seen: [String] = []
}

/// Registers without implementing the callback (seed 004, mode 3).
private final class LazyObserver: KeyValueObserver {}

/// Implements the callback.
private final class PoliteObserver: KeyValueObserver {
    var changes: [String] = []
    func observeValue(forKeyPath keyPath: String, change: KeyValueChange<AnyObject, Any>) throws {
        changes.append("\(keyPath)=\(change.newValue)")
    }
}

@Suite("kvo guard")
struct KVOGuardTests {
    @Test func unguardedObserverReleasedDies() async {
        // The Swift shape of a KVO observer released while registered: an unowned capture.
        await #expect(processExitsWith: .signal(SIGABRT)) {
            final class Box { var value = 0 }
            var callbacks: [() -> Int] = []
            var observer: Box? = Box()
            callbacks.append { [unowned observer = observer!] in observer.value }
            observer = nil
            _ = runtimeOpaque(callbacks)[0]()
        }
    }

    @Test func observesChanges() {
        let student = Student()
        let watcher = Watcher()
        let events = recording {
            #expect(student.observers.addObserver(watcher, for: \.name) { me, change in me.seen.append("\(change.oldValue)->\(change.newValue)") })
            student.name = "Ann"
            student.name = "Bo"
        }.events
        #expect(watcher.seen == ["->Ann", "Ann->Bo"])
        #expect(events.isEmpty)
        #expect(student.observers.observedKeyPaths == ["name"])
    }

    /// Mode 1.1: removing an observer that was never added.
    @Test func removeUnregisteredObserver() {
        let student = Student()
        let watcher = Watcher()
        let (removed, events) = recording { student.observers.removeObserver(watcher, for: \.name) }
        #expect(!removed)
        expectOne(
            events, .kvo,
            "Cannot remove an observer <Watcher \(objectAddress(watcher))> for the key path \"name\" from <Student \(objectAddress(student))> because it is not registered as an observer."
        )
    }

    /// Mode 1.2: removing twice.
    @Test func removeTwice() {
        let student = Student()
        let watcher = Watcher()
        let (result, events) = recording { () -> (Bool, Bool) in
            student.observers.addObserver(watcher, for: \.name) { _, _ in }
            student.name = "0"
            return (student.observers.removeObserver(watcher, for: \.name), student.observers.removeObserver(watcher, for: \.name))
        }
        #expect(result == (true, false))
        expectOne(
            events, .kvo,
            "Cannot remove an observer <Watcher \(objectAddress(watcher))> for the key path \"name\" from <Student \(objectAddress(student))> because it is not registered as an observer."
        )
    }

    /// Mode 1.3: adding twice would observe each change twice.
    @Test func addTwice() {
        let student = Student()
        let watcher = Watcher()
        let (added, events) = recording { () -> (Bool, Bool) in
            let first = student.observers.addObserver(watcher, for: \.name) { me, _ in me.seen.append("x") }
            let second = student.observers.addObserver(watcher, for: \.name) { me, _ in me.seen.append("x") }
            return (first, second)
        }
        #expect(added == (true, false))
        expectOne(
            events, .kvo,
            "Repeated additions to the observer <Watcher \(objectAddress(watcher))> for the key path \"name\" from <Student \(objectAddress(student))>"
        )
        student.name = "0"
        #expect(watcher.seen == ["x"])
    }

    /// Mode 2: the observed object is released while observers are registered.
    @Test func observedObjectReleased() {
        let watcher = Watcher()
        var addressText = ""
        let events = recording {
            var student: Student? = Student()
            addressText = objectAddress(student!)
            student!.observers.addObserver(watcher, for: \.name) { _, _ in }
            student!.observers.addObserver(watcher, for: \.age) { _, _ in }
            student = nil
        }.events
        let event = expectOne(
            events, .kvo,
            "An instance \(addressText) of class Student was deallocated while key value observers were still registered with it. Key paths: age, name"
        )
        #expect(event?.context["action"] == "removed the remaining observers")
    }

    @Test func observedObjectReleasedWithoutObserversIsQuiet() {
        let events = recording {
            var student: Student? = Student()
            let watcher = Watcher()
            student!.observers.addObserver(watcher, for: \.name) { _, _ in }
            student!.observers.removeObserver(watcher, for: \.name)
            student = nil
        }.events
        #expect(events.isEmpty)
    }

    /// Mode 3: an observer without a callback.
    @Test func unhandledCallback() {
        let student = Student()
        let lazy = LazyObserver()
        let polite = PoliteObserver()
        let events = recording {
            student.observers.addObserver(lazy, for: \.name)
            student.observers.addObserver(polite, for: \.name)
            student.name = "Ann"
        }.events
        expectOne(
            events, .kvo,
            "<LazyObserver \(objectAddress(lazy))>: An -observeValueForKeyPath:ofObject:change:context: message was received but not handled.\nKey path: name\nObserved object: <Student \(objectAddress(student))>"
        )
        #expect(polite.changes == ["name=Ann"])
    }

    @Test func throwingCallbackIsCaught() {
        struct Boom: Error {}
        let student = Student()
        let watcher = Watcher()
        let events = recording {
            student.observers.addObserver(watcher, for: \.age) { _, _ in throw Boom() }
            student.age = 3
        }.events
        #expect(events.count == 1 && events.first?.reason.hasPrefix("KVO exception in observer <Watcher") == true)
    }

    /// Mode 4: an empty key path.
    @Test func emptyKeyPathIsRefused() {
        let student = Student()
        let watcher = Watcher()
        let (added, events) = recording { student.observers.addObserver(watcher, for: \.self) { _, _ in } }
        #expect(!added)
        expectOne(
            events, .kvo, "Cannot add an observer <Watcher \(objectAddress(watcher))> for an empty key path to <Student \(objectAddress(student))>")
        let lazy = LazyObserver()
        let named = recording { student.observers.addObserver(lazy, forKeyPath: "") }
        #expect(!named.value && named.events.count == 1)
        let removal = recording { student.observers.removeObserver(watcher, forKeyPath: "") }
        expectOne(
            removal.events, .kvo,
            "Cannot remove an observer <Watcher \(objectAddress(watcher))> for an empty key path from <Student \(objectAddress(student))>")
        #expect(student.observers.observedKeyPaths.isEmpty)
    }

    /// Observer released: dropped, not called, not recorded.
    @Test func releasedObserverIsDropped() {
        let student = Student()
        let events = recording {
            var watcher: Watcher? = Watcher()
            student.observers.addObserver(watcher!, for: \.name) { me, _ in me.seen.append("x") }
            watcher = nil
            student.name = "Ann"
        }.events
        #expect(events.isEmpty)
        #expect(student.observers.observers(for: \.name).isEmpty)
        #expect(student.observers.observedKeyPaths.isEmpty)
    }

    @Test func unnamedComputedKeyPathsStayDistinct() {
        final class Plain {
            lazy var observers = KeyValueObservers(self)
            var a = 0 { didSet {} }
            var b = 0 { didSet {} }
        }
        let plain = Plain()
        let watcher = Watcher()
        let events = recording {
            plain.observers.addObserver(watcher, for: \.a) { me, _ in me.seen.append("a") }
            plain.observers.addObserver(watcher, for: \.b) { me, _ in me.seen.append("b") }
            plain.observers.didChange(\.b, from: 0, to: 1)
        }.events
        #expect(events.isEmpty && watcher.seen == ["b"])
        #expect(plain.observers.observedKeyPaths.count == 2)
    }

    @Test func registryIsThreadSafe() {
        let student = Student()
        let observers = (0..<16).map { _ in Watcher() }
        let events = recording {
            DispatchQueue.concurrentPerform(iterations: 400) { i in
                let watcher = observers[i % observers.count]
                let keyPath: KeyPath<Student, Int> = \.age
                if i % 2 == 0 {
                    student.observers.addObserver(watcher, for: keyPath) { _, _ in }
                } else {
                    student.observers.removeObserver(watcher, for: keyPath)
                }
                student.observers.didChange(\.age, from: i, to: i + 1)
                _ = student.observers.observers(for: keyPath)
            }
            for watcher in observers { student.observers.removeObserver(watcher) }
        }.events
        #expect(events.allSatisfy { $0.kind == .kvo })
        #expect(student.observers.observedKeyPaths.isEmpty)
    }
}
