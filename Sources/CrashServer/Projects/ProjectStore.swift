import CrashGrouping
import Foundation

/// A project as the request path knows it after authentication.
public struct ProjectRef: Sendable, Hashable {
    /// Database id.
    public var id: Int64
    /// Slug.
    public var slug: String
    /// The grouping version the project's new reports are grouped with.
    public var groupingVersion: GroupingVersion = .newProjectDefault
}

/// Why a project command failed; the message is printed to the operator.
public struct ProjectError: Error, CustomStringConvertible {
    /// What went wrong.
    public let description: String
    /// Whether a create found the project already there (and kept its keys).
    public var alreadyExists: Bool { code == .alreadyExists }
    private let code: Code

    private enum Code { case alreadyExists, other }

    /// An error printed as `description`.
    public init(description: String) {
        self.init(description, .other)
    }

    private init(_ description: String, _ code: Code) {
        self.description = description
        self.code = code
    }

    /// A create of `slug`, which exists: its keys are unchanged.
    static func alreadyExists(_ slug: String) -> ProjectError {
        ProjectError("project '\(slug)' already exists (its keys are unchanged; use `project rotate` for new ones)", .alreadyExists)
    }

    /// Throws unless `slug` is a valid project name, so a command can refuse it before
    /// touching the database.
    public static func validate(slug: String) throws {
        guard ProjectKeys.isValidSlug(slug) else {
            throw ProjectError(description: "invalid project name '\(slug)': use [a-z0-9][a-z0-9-]{0,63}")
        }
    }
}

/// The project aggregate: projects (table `projects`), their keys (stored as hashes) and
/// grouping version, and the dashboard sessions a new read token ends.
///
/// Used by the `crash-server project` commands, ingest authentication (``owner(ingestKeyHash:)``)
/// and read authentication (``ReadTokenLookup``); ``PostgresProjectStore`` is the implementation.
protocol ProjectStore: ReadTokenLookup {
    /// Creates a project with new keys. Fails, keeping the old keys, if it exists.
    func create(slug: String, grouping: GroupingVersion) async throws -> ProjectCredentials
    /// Replaces both of a project's keys (`project rotate NAME`).
    func rotate(slug: String) async throws -> ProjectCredentials
    /// Replaces one or both of a project's keys; returns once no server accepts the old ones.
    func rotateKeys(slug: String, _ keys: KeyRotation) async throws -> RotatedCredentials
    /// Every project as the JSON array `project list` prints.
    func listJSON(publicURL: String) async throws -> String
    /// The project whose ingest key has the SHA-256 `hash`, with its Sentry id; or nil.
    func owner(ingestKeyHash hash: Data) async throws -> IngestKeyCache.Owner?
    /// The project named `slug`, or nil.
    func project(slug: String) async throws -> ProjectRef?
    /// Switches the grouping version of a project's new reports; returns the previous one.
    @discardableResult
    func setGroupingVersion(slug: String, to version: GroupingVersion) async throws -> GroupingVersion
    /// The grouping version a project's new reports get.
    func groupingVersion(slug: String) async throws -> GroupingVersion
    /// A dry run of a grouping version over the project's reports of the last `days` days.
    func groupingPreview(slug: String, target: GroupingVersion, days: Int, now: Date) async throws -> GroupingPreview
}

extension ProjectStore {
    /// Creates a project grouped with the default version of new projects.
    func create(slug: String) async throws -> ProjectCredentials {
        try await create(slug: slug, grouping: .newProjectDefault)
    }

    /// `project list` with the default public URL.
    func listJSON() async throws -> String {
        try await listJSON(publicURL: ServerConfiguration.defaultPublicURL)
    }

    /// A dry run as of now.
    func groupingPreview(slug: String, target: GroupingVersion, days: Int) async throws -> GroupingPreview {
        try await groupingPreview(slug: slug, target: target, days: days, now: Date())
    }
}
