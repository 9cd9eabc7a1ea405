import CrashIngest
import Logging
import Synchronization

/// Each project's settings and the scrubber built from them, as ingest reads them: one
/// database read per project per ``ttl`` at most, so a `PATCH` answered by another server
/// applies here within ``ttl`` plus one read (the contract's 2 s), and at once on the server
/// that answered it (``replace(project:with:)``).
///
/// A scrubber is rebuilt (its patterns compiled) only when the settings changed. When the
/// database cannot be read, an expired entry is used rather than refusing the report; a
/// project never read is refused (the caller's 503).
final class ProjectSettingsCache: Sendable {
    /// The settings in force for a project, and their scrubber.
    struct Entry: Sendable {
        var settings: ProjectSettings
        var scrubber: ReportScrubber
    }

    let store: any ProjectSettingsStore
    let ttl: Duration
    let logger: Logger
    /// The time, injectable for tests.
    let now: @Sendable () -> ContinuousClock.Instant

    private struct Cached {
        var entry: Entry
        var expires: ContinuousClock.Instant
    }

    private struct State {
        var entries: [Int64: Cached] = [:]
        /// Bumped by every ``replace(project:with:)``: a read begun before it never stores its answer.
        var generation: UInt64 = 0
    }

    private let state = Mutex(State())

    /// Most projects kept; past it the cache starts over (a server has a few hundred projects).
    static let capacity = 10_000

    init(
        store: any ProjectSettingsStore, ttl: Duration = .seconds(1), logger: Logger,
        now: @escaping @Sendable () -> ContinuousClock.Instant = { ContinuousClock.now }
    ) {
        self.store = store
        self.ttl = ttl
        self.logger = logger
        self.now = now
    }

    /// The project's settings and scrubber, from the cache while fresh, else from the store.
    func entry(project: Int64) async throws -> Entry {
        let at = now()
        let (cached, generation) = state.withLock { ($0.entries[project], $0.generation) }
        if let cached, cached.expires > at { return cached.entry }
        let settings: ProjectSettings
        do {
            settings = try await store.settings(project: project)
        } catch {
            guard let cached else { throw error }
            logger.warning(
                "project settings unreadable; using the last ones read",
                metadata: ["project.id": "\(project)", "error.message": "\(error)"])
            return cached.entry
        }
        let entry: Entry
        if let cached, cached.entry.settings == settings {
            entry = cached.entry
        } else {
            entry = Self.entry(settings, logger: logger)
        }
        state.withLock { state in
            guard state.generation == generation else { return }
            if state.entries.count >= Self.capacity { state.entries.removeAll() }
            state.entries[project] = Cached(entry: entry, expires: at + ttl)
        }
        return entry
    }

    /// The scrubber of the project's reports.
    func scrubber(project: Int64) async throws -> ReportScrubber { try await entry(project: project).scrubber }

    /// The project's settings as in force.
    func settings(project: Int64) async throws -> ProjectSettings { try await entry(project: project).settings }

    /// Puts settings just written into the cache: they apply to this server's next report.
    func replace(project: Int64, with settings: ProjectSettings) {
        let entry = Self.entry(settings, logger: logger)
        let at = now()
        state.withLock { state in
            state.generation &+= 1
            state.entries[project] = Cached(entry: entry, expires: at + ttl)
        }
    }

    /// A scrubber for `settings`. A stored pattern RE2 refuses (every one was checked when set)
    /// is left out and logged.
    static func entry(_ settings: ProjectSettings, logger: Logger) -> Entry {
        var patterns: ScrubPatterns?
        if !settings.patterns.isEmpty {
            let valid = settings.patterns.filter { pattern in
                guard let problem = ScrubPatterns.problem(with: pattern) else { return true }
                logger.error("a stored scrub pattern does not compile", metadata: ["error.message": "\(problem)"])
                return false
            }
            patterns = try? ScrubPatterns(valid)
        }
        return Entry(settings: settings, scrubber: ReportScrubber(settings: settings.scrub, patterns: patterns))
    }
}
