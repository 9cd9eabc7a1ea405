import CrashWire
import Foundation

/// Wild-pointer guard (kind `wildPointer`) for object references: an `unowned` reference
/// that answers `nil` instead of dying.
///
/// Reading an `unowned` reference after its object is gone aborts the process ("Fatal
/// error: Attempted to read an unowned reference but object 0x... was already
/// deallocated"). A guarded one answers `nil` and records
/// `Attempted to read an unowned reference but object <Delegate 0x...> was already deallocated`.
///
/// ```swift
/// let delegate = GuardedUnowned(controller)
/// delegate.get()?.refresh()   // nil once the controller is gone
/// ```
///
/// It holds the object weakly underneath, so it never keeps it alive; use it where the
/// code believes the object must outlive the reference (where it would write `unowned`).
public struct GuardedUnowned<Object: AnyObject> {
    private weak var object: Object?
    private let description: String

    /// A guarded reference to `object`.
    public init(_ object: Object) {
        self.object = object
        self.description = Describe.object(object)
    }

    /// The object, or `nil` (recorded) when it was already deallocated.
    public func get(fileID: String = #fileID, line: Int = #line, function: String = #function) -> Object? {
        if let object { return object }
        GuardRecorder.record(
            .wildPointer, site: CallSite(fileID: fileID, line: line, function: function), in: nil,
            reason: "Attempted to read an unowned reference but object \(description) was already destroyed",
            context: ["action": "returned nil"]
        )
        return nil
    }

    /// Whether the object is still alive (not recorded).
    public var isAlive: Bool { object != nil }
}
