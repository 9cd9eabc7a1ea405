import Foundation
import Synchronization

/// The decoded user sets of rollup rows, kept between release queries (docs/release-health.md,
/// "Reading users").
///
/// A 30-day releases list merges the users of every weekly, daily and hourly row of its window
/// and versions: at 10 M sessions about 6 MB of sketches per request, most of its time. Those
/// rows rarely change (a week's row changes only when the compactor folds a late update into
/// it), so a query first reads each row's key and `xmin` (the transaction that wrote this
/// version of the row: any change gives it a new one) and merges only the rows it has not seen
/// in that version; it reuses the union of a piece's rows when every stamp is unchanged.
///
/// Exact by construction: an entry is used only when the rows of its piece are the same rows
/// in the same versions as when it was stored. Entries older than ``maxAge`` are dropped, so a
/// transaction id cannot wrap around (2^32 transactions) under an entry; the whole cache keeps
/// to ``budget`` bytes, the least recently used entries going first.
final class RollupUserSets: Sendable {
    /// Which rows: a piece of a read plan (a table and one of its ranges), for one version and
    /// filters.
    struct Key: Hashable, Sendable {
        var piece: Int64
        var from: Date
        var to: Date
        var project: Int64
        var version: String
        var filters: SessionFilters
    }

    /// The rows of a piece in the versions read: PostgreSQL's text of the array of their keys
    /// and `xmin` in key order (one value per piece and version, ``PostgresSessionStore``'s
    /// stamp read), equal exactly when the rows and their versions are.
    typealias Stamps = String

    /// The union of a piece's rows.
    struct Sets: Sendable {
        var users = SessionUsers()
        var crashedUsers = SessionUsers()
    }

    private struct Entry {
        var stamps: Stamps
        var sets: Sets
        var bytes: Int
        var stored: ContinuousClock.Instant
        var used: UInt64
    }

    private struct State {
        var entries: [Key: Entry] = [:]
        var bytes = 0
        var tick: UInt64 = 0
    }

    let budget: Int
    let maxAge: Duration
    private let now: @Sendable () -> ContinuousClock.Instant
    private let state = Mutex(State())

    /// `now` is the clock the ages are read from (tests move it).
    init(
        budget: Int = 16 << 20, maxAge: Duration = .seconds(600),
        now: @escaping @Sendable () -> ContinuousClock.Instant = { .now }
    ) {
        self.budget = budget
        self.maxAge = maxAge
        self.now = now
    }

    /// The union stored for `key` when its rows are exactly `stamps`, else nil.
    func sets(_ key: Key, stamps: Stamps) -> Sets? {
        let instant = self.now()
        return state.withLock { state in
            guard var entry = state.entries[key] else { return nil }
            guard entry.stamps == stamps, entry.stored.duration(to: instant) < maxAge else {
                state.entries[key] = nil
                state.bytes -= entry.bytes
                return nil
            }
            state.tick += 1
            entry.used = state.tick
            state.entries[key] = entry
            return entry.sets
        }
    }

    /// Stores the union of the rows `stamps` for `key`, then drops the least recently used
    /// entries while over the budget.
    func store(_ key: Key, stamps: Stamps, sets: Sets) {
        let bytes = sets.users.storedBytes + sets.crashedUsers.storedBytes + stamps.utf8.count + key.version.utf8.count + 96
        guard bytes <= budget else { return }
        let instant = self.now()
        state.withLock { state in
            if let old = state.entries[key] { state.bytes -= old.bytes }
            state.tick += 1
            state.entries[key] = Entry(stamps: stamps, sets: sets, bytes: bytes, stored: instant, used: state.tick)
            state.bytes += bytes
            guard state.bytes > budget else { return }
            for (oldKey, old) in state.entries.sorted(by: { $0.value.used < $1.value.used }) {
                guard state.bytes > budget * 3 / 4 else { break }
                state.entries[oldKey] = nil
                state.bytes -= old.bytes
            }
        }
    }

    /// Bytes held (for tests and the metric of the cache's size).
    var bytes: Int { state.withLock { $0.bytes } }
}
