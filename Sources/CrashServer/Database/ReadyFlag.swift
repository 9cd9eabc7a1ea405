import Synchronization

/// A flag set once and read from any task: ``CrashDatabase/schemaApplied``.
final class ReadyFlag: Sendable {
    private let value = Atomic<Bool>(false)

    func set() { value.store(true, ordering: .releasing) }

    var isSet: Bool { value.load(ordering: .acquiring) }
}
