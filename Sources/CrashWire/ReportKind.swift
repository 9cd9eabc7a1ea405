/// What kind of failure a report describes: one of the contract's fifteen kinds.
///
/// Guards report the kind of the error they prevented; the crash handler reports `signal`,
/// an uncaught Swift error `exception`, and app code `custom`.
public enum ReportKind: String, Codable, Sendable, CaseIterable, Hashable {
    case unrecognizedSelector
    case kvo
    case container
    case notification
    case null
    case timer
    case wildPointer
    case mainThread
    case kvc
    case string
    case cast
    case arithmetic
    case signal
    case exception
    case custom
}
