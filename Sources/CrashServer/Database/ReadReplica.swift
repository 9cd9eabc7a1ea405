import Foundation
import Hummingbird
import Logging
import PostgresNIO
import ServiceLifecycle
import Synchronization

/// A position in PostgreSQL's write-ahead log (`pg_lsn`, written `X/Y` in hex).
struct WALPosition: Comparable, Sendable, CustomStringConvertible {
    var value: UInt64

    init(value: UInt64) { self.value = value }

    /// Parses `16/B374D848`; nil for anything else.
    init?(_ text: some StringProtocol) {
        let parts = text.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2, (1...8).contains(parts[0].count), (1...8).contains(parts[1].count),
            let hi = UInt64(parts[0], radix: 16), let lo = UInt64(parts[1], radix: 16)
        else { return nil }
        value = hi << 32 | lo
    }

    var description: String { String(value >> 32, radix: 16, uppercase: true) + "/" + String(value & 0xFFFF_FFFF, radix: 16, uppercase: true) }

    static func < (a: Self, b: Self) -> Bool { a.value < b.value }
}

/// Read-your-writes across requests: the WAL position a read must see, and the position
/// a write in this request reached (see ``ReadAfterMiddleware``).
enum ReadAfter {
    /// Reads in this task go to the primary unless the standby has replayed this position.
    @TaskLocal static var position: WALPosition?
    /// Where a write in this request records the primary's WAL position after its commit.
    @TaskLocal static var written: WrittenPosition?
}

/// The WAL position a request's write reached (set by ``CrashDatabase/noteWrite()`` after a triage change).
final class WrittenPosition: Sendable {
    private let box = Mutex<WALPosition?>(nil)
    var value: WALPosition? { box.withLock { $0 } }
    func record(_ position: WALPosition) { box.withLock { $0 = max($0 ?? position, position) } }
}

/// The optional hot standby that queries and dashboard reads go to (`DATABASE_READ_URL`):
/// its own pool, its health and replay lag as last polled by ``ReadReplicaMonitor``, and
/// the counts `/metrics` shows.
///
/// A read goes to the standby only while the standby answered the last poll, lags at most
/// `maxLag`, and has replayed the WAL position the read must see (a triage just made by
/// this client or on this server); otherwise, or when the standby fails mid-read, it runs
/// on the primary. Nothing is ever refused because the standby is gone.
final class ReadReplica: Sendable {
    /// The standby's pool; run it as a service.
    let client: PostgresClient
    /// Lag past which reads go to the primary.
    let maxLag: Duration
    /// How often the monitor polls.
    let interval: Duration
    private let state = Mutex(State())
    private let logger: Logger

    /// Why a read ran on the primary although a standby is configured.
    enum FallbackReason: String, CaseIterable, Sendable {
        /// The standby did not answer (down, restarting, refusing connections).
        case unreachable
        /// Its replay lag was over the bound.
        case lagging
        /// It had not yet replayed a write the reader must see (read-your-writes).
        case readAfterWrite = "read_after_write"
        /// It had not yet replayed what a list cursor's snapshot holds.
        case cursorAhead = "cursor_ahead"
        /// It cancelled the read in a conflict with WAL replay.
        case recoveryConflict = "recovery_conflict"
    }

    struct State {
        var up = false
        var inRecovery = false
        var replay: WALPosition?
        var lagSeconds: Double = 0
        var lagBytes: UInt64 = 0
        /// The last write this server made, and until when it forces reads to the primary.
        var lastWrite: (position: WALPosition, until: ContinuousClock.Instant)?
        /// Primary WAL positions by the time they were sampled, for the lag in seconds.
        var samples: [(at: ContinuousClock.Instant, position: WALPosition)] = []
        var standbyReads = 0
        var primaryReads = 0
        var fallbacks: [FallbackReason: Int] = [:]
        var lastWarning: ContinuousClock.Instant?

        /// Keeps the primary's position at `now`; ten minutes of polls at most.
        mutating func sample(_ position: WALPosition, at now: ContinuousClock.Instant) {
            samples.append((now, position))
            if samples.count > 2400 { samples.removeFirst(samples.count - 2400) }
        }
    }

    init(
        url: String, poolSize: Int, maxLag: Duration, interval: Duration = .milliseconds(250),
        queryTimeouts: QueryTimeouts = QueryTimeouts(statementTimeout: .seconds(10)), logger: Logger
    ) throws {
        var config: PostgresClient.Configuration
        do { config = try PostgresClient.Configuration(url: url) } catch let error as ConfigurationError {
            throw ConfigurationError(error.description.replacingOccurrences(of: "DATABASE_URL", with: "DATABASE_READ_URL"))
        }
        config.options.maximumConnections = poolSize
        // Kept as the primary's pools keep them: a read queued when the standby closes its
        // connections gets a new one at once.
        config.options.minimumConnections = CrashDatabase.keptConnections
        config.options.connectTimeout = .seconds(2)
        let session = [("TimeZone", "UTC"), ("application_name", "crash-server-reader"), ("jit", "off")]
        config.options.additionalStartupParameters = session + queryTimeouts.startupParameters
        var backgroundLogger = logger
        backgroundLogger[metadataKey: "db"] = "postgres-standby"
        client = PostgresClient(configuration: config, backgroundLogger: backgroundLogger)
        self.maxLag = maxLag
        self.interval = interval
        self.logger = logger
    }

    /// A snapshot of the state, for metrics and `/healthz`.
    var current: State { state.withLock { $0 } }

    /// Why the next read should not go to the standby; nil when it may.
    func reasonToAvoid(mustSee required: WALPosition?) -> FallbackReason? {
        let now = ContinuousClock.now
        return state.withLock { s -> FallbackReason? in
            guard s.up else { return .unreachable }
            guard s.lagSeconds <= maxLag.inSeconds else { return .lagging }
            var mustSee = required
            if let write = s.lastWrite {
                if write.until > now { mustSee = max(mustSee ?? write.position, write.position) } else { s.lastWrite = nil }
            }
            if let mustSee, s.inRecovery, (s.replay ?? WALPosition(value: 0)) < mustSee { return .readAfterWrite }
            return nil
        }
    }

    /// Counts a read by where it ran; for a fallback, logs why (at most every 10 s).
    func count(standby: Bool, fallback: FallbackReason? = nil, error: (any Error)? = nil) {
        let now = ContinuousClock.now
        let warn = state.withLock { s -> Bool in
            if standby { s.standbyReads += 1 } else { s.primaryReads += 1 }
            guard let fallback else { return false }
            s.fallbacks[fallback, default: 0] += 1
            if fallback == .readAfterWrite || fallback == .cursorAhead { return false }
            if let last = s.lastWarning, now - last < .seconds(10) { return false }
            s.lastWarning = now
            return true
        }
        if warn, let fallback {
            var metadata: Logger.Metadata = ["read.fallback": "\(fallback.rawValue)"]
            if let error { metadata["error.message"] = "\(error)" }
            logger.warning("reads fall back to the primary", metadata: metadata)
        }
    }

    /// The standby failed a read: route to the primary until the next poll succeeds.
    func markDown() { state.withLock { $0.up = false } }

    /// This server wrote up to `position` on the primary: its reads wait for the standby
    /// to replay it (for at most a minute; past that the standby is `lagging` anyway).
    func noteWrite(_ position: WALPosition) {
        let until = ContinuousClock.now + .seconds(60)
        state.withLock { s in
            if let write = s.lastWrite, write.position > position { return }
            s.lastWrite = (position, until)
        }
    }

    /// One poll's result (see ``ReadReplicaMonitor``).
    func record(primary: WALPosition?, inRecovery: Bool, replay: WALPosition?, lastReplayAge: Double?) {
        let now = ContinuousClock.now
        let wasUp = state.withLock { s -> Bool in
            let wasUp = s.up
            s.up = true
            s.inRecovery = inRecovery
            s.replay = replay
            if let primary { s.sample(primary, at: now) }
            guard inRecovery, let replay, let primary, replay < primary else {
                s.lagSeconds = 0
                s.lagBytes = 0
                return wasUp
            }
            s.lagBytes = primary.value - replay.value
            // An upper bound from the samples: the standby has replayed what the primary had
            // written at the newest sample at or below its replay position.
            let caughtUpAt = s.samples.last(where: { $0.position <= replay })?.at
            var lag = (now - (caughtUpAt ?? s.samples.first?.at ?? now)).inSeconds
            // Another bound: the age of the last transaction it replayed, when older ones wait.
            if let lastReplayAge { lag = min(lag, max(0, lastReplayAge)) }
            s.lagSeconds = lag
            return wasUp
        }
        if !wasUp { logger.info("reads go to the standby", metadata: ["read.lag_seconds": "\(current.lagSeconds)"]) }
    }

    /// The standby did not answer a poll; `primary` is where the primary was meanwhile (kept,
    /// so the lag after the standby's return counts from the positions it missed).
    func recordDown(_ error: any Error, primary: WALPosition? = nil) {
        let now = ContinuousClock.now
        let wasUp = state.withLock { s -> Bool in
            if let primary { s.sample(primary, at: now) }
            defer { s.up = false }
            return s.up
        }
        if wasUp { logger.warning("standby unreachable; reads go to the primary", metadata: ["error.message": "\(error)"]) }
    }
}

/// Polls the standby (`pg_last_wal_replay_lsn()`) and the primary (`pg_current_wal_lsn()`)
/// every `interval`: the reader's health and lag (``ReadReplica``).
struct ReadReplicaMonitor: Service {
    let database: CrashDatabase
    let reader: ReadReplica

    func run() async throws {
        while !Task.isShuttingDownGracefully, !Task.isCancelled {
            await pollOnce()
            try? await Task.sleep(for: reader.interval)
        }
    }

    func pollOnce() async {
        let client = database.client, standby = reader.client, logger = database.logger
        let primary = try? await withDeadline(.seconds(1)) { () -> String? in
            let rows = try await client.query("SELECT pg_current_wal_lsn()::text", logger: logger)
            for try await text in rows.decode(String.self) { return text }
            return nil
        }
        do {
            let (inRecovery, replay, age) = try await withDeadline(.seconds(1)) { () -> (Bool, String?, Double?) in
                let rows = try await standby.query(
                    """
                    SELECT pg_is_in_recovery(), pg_last_wal_replay_lsn()::text,
                           extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8
                    """, logger: logger)
                for try await row in rows.decode((Bool, String?, Double?).self) { return row }
                throw ReaderBehind()
            }
            reader.record(
                primary: primary.flatMap { $0 }.flatMap { WALPosition($0) }, inRecovery: inRecovery,
                replay: replay.flatMap { WALPosition($0) }, lastReplayAge: age)
        } catch {
            reader.recordDown(error, primary: primary.flatMap { $0 }.flatMap { WALPosition($0) })
        }
    }
}

/// The standby has not replayed what a read needs; the read runs on the primary instead.
struct ReaderBehind: Error {}

extension Duration {
    /// This duration in seconds.
    var inSeconds: Double {
        let (s, atto) = components
        return Double(s) + Double(atto) / 1e18
    }
}

extension CrashDatabase {
    /// Runs `body` with the pool a read should use: the standby's when one is configured and
    /// usable (``ReadReplica/reasonToAvoid(mustSee:)``), else the primary's query pool
    /// (``queryClient``); both run under ``QueryTimeouts``. A read that fails on the standby
    /// because it is unreachable, in a recovery conflict, or behind a cursor's snapshot runs
    /// again on the primary; other errors (a statement timeout among them) are the read's own.
    func withReader<T: Sendable>(_ body: (PostgresClient) async throws -> T) async throws -> T {
        guard let reader else { return try await body(queryClient) }
        if let reason = reader.reasonToAvoid(mustSee: ReadAfter.position) {
            reader.count(standby: false, fallback: reason)
            return try await body(queryClient)
        }
        do {
            // A lease from a pool that cannot connect waits for the pool's circuit breaker
            // (a minute): a round trip under a deadline first, so a standby that died since
            // the last poll costs at most this, and the read then takes the same connection.
            let standby = reader.client, logger = logger
            try await withDeadline(.seconds(1)) { _ = try await standby.query("SELECT 1", logger: logger) }
            let result = try await body(reader.client)
            reader.count(standby: true)
            return result
        } catch is ReaderBehind {
            reader.count(standby: false, fallback: .cursorAhead)
        } catch  where sqlState(error) == "40001" {
            // canceling statement due to conflict with recovery
            reader.count(standby: false, fallback: .recoveryConflict, error: error)
        } catch let error as PSQLError where !isConnectionError(error) {
            throw error  // the query's own error: the primary would refuse it too
        } catch  where error is APIError || error is HTTPError || error is PostgresDecodingError || error is CancellationError {
            throw error
        } catch {
            // Connection refused or lost, the pool's circuit breaker, a standby shutting down.
            reader.markDown()
            reader.count(standby: false, fallback: .unreachable, error: error)
        }
        return try await body(queryClient)
    }

    /// After a write on the primary: the WAL position past its commit, which the standby
    /// must replay before this server (and the client, through ``ReadAfterMiddleware``)
    /// reads from it again.
    func noteWrite() async throws {
        guard let reader else { return }
        let rows = try await client.query("SELECT pg_current_wal_insert_lsn()::text", logger: logger)
        for try await text in rows.decode(String.self) {
            guard let position = WALPosition(text) else { continue }
            reader.noteWrite(position)
            ReadAfter.written?.record(position)
        }
    }
}
