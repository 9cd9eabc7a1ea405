import CrashGuard
import CrashWire
import Foundation
import Testing

private final class Screen: @unchecked Sendable {
    var received = 0
}

extension Notification.Name {
    static let guardTestPing = Notification.Name("GuardTestPing")
}

@Suite("notification guard")
struct NotificationGuardTests {
    @Test func unguardedUnownedObserverDies() async {
        await #expect(processExitsWith: .signal(SIGABRT)) {
            final class Owner: @unchecked Sendable { var count = 0 }
            let center = NotificationCenter()
            var owner: Owner? = Owner()
            _ = center.addObserver(forName: Notification.Name("ping"), object: nil, queue: nil) { [unowned owner = owner!] _ in
                owner.count += 1
            }
            owner = nil
            center.post(name: Notification.Name("ping"), object: nil)
        }
    }

    @Test func deliversToALiveOwner() {
        let registry = GuardedNotifications(center: NotificationCenter())
        let screen = Screen()
        let events = recording {
            #expect(registry.addObserver(screen, name: .guardTestPing) { me, _ in me.received += 1 })
            registry.center.post(name: .guardTestPing, object: nil)
            registry.center.post(name: .guardTestPing, object: nil)
        }.events
        #expect(screen.received == 2 && events.isEmpty)
        #expect(registry.isRegistered(screen, name: .guardTestPing))
    }

    @Test func ownerGoneIsRemovedAutomatically() {
        let registry = GuardedNotifications(center: NotificationCenter())
        let events = recording {
            var screen: Screen? = Screen()
            registry.addObserver(screen!, name: .guardTestPing) { me, _ in me.received += 1 }
            #expect(registry.count == 1)
            screen = nil
            registry.center.post(name: .guardTestPing, object: nil)  // must not crash
            #expect(registry.count == 0)
            registry.purge()
        }.events
        #expect(events.isEmpty)
    }

    @Test func duplicateAddIsRecorded() {
        let registry = GuardedNotifications(center: NotificationCenter())
        let screen = Screen()
        let (added, events) = recording { () -> (Bool, Bool) in
            (
                registry.addObserver(screen, name: .guardTestPing) { me, _ in me.received += 1 },
                registry.addObserver(screen, name: .guardTestPing) { me, _ in me.received += 1 }
            )
        }
        #expect(added == (true, false))
        expectOne(
            events, .notification, "Repeated additions of the observer <Screen \(objectAddress(screen))> for the notification \"GuardTestPing\"")
        registry.center.post(name: .guardTestPing, object: nil)
        #expect(screen.received == 1)
    }

    @Test func unmatchedRemoveIsRecorded() {
        let registry = GuardedNotifications(center: NotificationCenter())
        let screen = Screen()
        let (removed, events) = recording { () -> (Bool, Bool) in
            registry.addObserver(screen, name: .guardTestPing) { me, _ in me.received += 1 }
            return (registry.removeObserver(screen, name: .guardTestPing), registry.removeObserver(screen, name: .guardTestPing))
        }
        #expect(removed == (true, false))
        expectOne(
            events, .notification,
            "Cannot remove an observer <Screen \(objectAddress(screen))> for the notification \"GuardTestPing\" because it is not registered as an observer."
        )
        registry.center.post(name: .guardTestPing, object: nil)
        #expect(screen.received == 0)
    }

    @Test func objectFilterAndRemoveAll() {
        let registry = GuardedNotifications(center: NotificationCenter())
        let screen = Screen()
        let sender = NSObject()
        let events = recording {
            registry.addObserver(screen, name: .guardTestPing, object: sender) { me, _ in me.received += 1 }
            registry.addObserver(screen, name: .guardTestPing) { me, _ in me.received += 10 }
            registry.center.post(name: .guardTestPing, object: sender)
            registry.center.post(name: .guardTestPing, object: nil)
            registry.removeObserver(screen)
            registry.center.post(name: .guardTestPing, object: sender)
        }.events
        #expect(screen.received == 21 && events.isEmpty && registry.count == 0)
    }

    @Test func registryIsThreadSafe() {
        let registry = GuardedNotifications(center: NotificationCenter())
        let events = recording {
            DispatchQueue.concurrentPerform(iterations: 300) { i in
                let owner = Screen()
                registry.addObserver(owner, name: .guardTestPing) { me, _ in me.received += 1 }
                registry.center.post(name: .guardTestPing, object: nil)
                registry.removeObserver(owner, name: .guardTestPing)
                registry.purge()
            }
        }.events
        #expect(events.isEmpty)
        #expect(registry.count == 0)
    }
}
