import Crypto
import Foundation
import Synchronization

/// Ingest keys already looked up: SHA-256 of the key -> the project (id, slug, grouping
/// version, `sentryId`), so a warm key costs no database round trip. Keyed by the digest
/// itself (32 bytes inline): an array and a `Data` made for every lookup were most of the
/// cache's 0.7 to 1 % of the server's CPU per single-report request (docs/performance.md).
///
/// Trusted only while ``IngestKeyListener`` is listening on ``channel``: every change to
/// `projects` notifies it (a trigger in schema.sql), and a notification drops every entry.
/// While the listener is not connected (at start, after a PostgreSQL restart, until its
/// `LISTEN` succeeded again) the cache is bypassed and empty, so a key is never accepted on
/// the strength of an entry older than what the listener could have heard about. Entries
/// also expire after ``ttl`` (a backstop for a connection that died without anyone noticing);
/// unknown keys are never cached (a key only becomes valid by a change to `projects`, but a
/// flood of random keys must not evict the real ones). At most ``capacity`` entries.
///
/// A lookup that started before an invalidation never stores its answer: each store names
/// the generation its lookup began in, and any invalidation starts a new one. So a reply read
/// before a rotation committed cannot land in the cache after the rotation's notification.
final class IngestKeyCache: Sendable {
    /// The project an ingest key belongs to.
    struct Owner: Sendable, Equatable {
        var project: ProjectRef
        var sentryID: Int64
    }

    /// How a lookup was answered: from the cache, from the database with the answer cached
    /// (or not: unknown), or from the database because the listener is down.
    enum Outcome: String, CaseIterable, Sendable {
        case hit, miss, bypass
    }

    /// Lookups by outcome since the start, and the state now (for `/metrics`).
    struct Statistics: Sendable, Equatable {
        var hits = 0
        var misses = 0
        var bypasses = 0
        var entries = 0
        var listening = false
    }

    /// The channel `projects`' trigger notifies on (schema.sql).
    static let channel = "crashguard_keys"
    /// Where each listener confirms, with the notification's payload, that it dropped its
    /// entries (see `PostgresProjectStore.changingProjects`).
    static let confirmationChannel = "crashguard_keys_dropped"
    /// The `application_name` of a listening connection, once its `LISTEN` succeeded.
    static let listenerName = "crash-server keys"

    let ttl: Duration
    let capacity: Int

    /// A key's SHA-256 as four words (the digest type is not `Sendable`).
    private struct KeyHash: Hashable, Sendable {
        var a: UInt64, b: UInt64, c: UInt64, d: UInt64

        init(_ digest: SHA256Digest) {
            (a, b, c, d) = digest.withUnsafeBytes { raw in
                (
                    raw.loadUnaligned(fromByteOffset: 0, as: UInt64.self), raw.loadUnaligned(fromByteOffset: 8, as: UInt64.self),
                    raw.loadUnaligned(fromByteOffset: 16, as: UInt64.self), raw.loadUnaligned(fromByteOffset: 24, as: UInt64.self)
                )
            }
        }
    }

    private struct Entry {
        var owner: Owner
        var expires: ContinuousClock.Instant
    }

    private struct State {
        var entries: [KeyHash: Entry] = [:]
        var generation: UInt64 = 0
        /// The id of the connection whose `LISTEN` is in place, if any.
        var listener: Int?
        var statistics = Statistics()

        mutating func drop() {
            entries.removeAll()
            generation &+= 1
        }
    }

    private let state = Mutex(State())

    init(ttl: Duration = .seconds(30), capacity: Int = 10_000) {
        self.ttl = ttl
        self.capacity = max(1, capacity)
    }

    /// The owner of `key`: from the cache when it is trusted and holds it, else from `load`
    /// (given the key's SHA-256), whose known answers are cached.
    func owner(
        of key: String, now: ContinuousClock.Instant = .now, load: (Data) async throws -> Owner?
    ) async throws -> Owner? {
        let digest = ProjectKeys.digest(key)
        let hash = KeyHash(digest)
        // The generation to store the answer under; nil: bypassed, store nothing.
        let found: (owner: Owner?, generation: UInt64?) = state.withLock { state in
            guard state.listener != nil else {
                state.statistics.bypasses += 1
                return (nil, nil)
            }
            if let entry = state.entries[hash] {
                if entry.expires > now {
                    state.statistics.hits += 1
                    return (entry.owner, nil)
                }
                state.entries[hash] = nil
            }
            state.statistics.misses += 1
            return (nil, state.generation)
        }
        if let owner = found.owner { return owner }
        let owner = try await load(Data(digest))
        if let owner, let generation = found.generation {
            state.withLock { state in
                guard state.listener != nil, state.generation == generation else { return }
                if state.entries.count >= capacity, state.entries[hash] == nil {
                    state.entries.remove(at: state.entries.startIndex)
                }
                state.entries[hash] = Entry(owner: owner, expires: now + ttl)
            }
        }
        return owner
    }

    /// The listener on connection `id` is in place: start trusting (an empty) cache.
    func listening(_ id: Int) {
        state.withLock { state in
            state.drop()
            state.listener = id
        }
    }

    /// The listener on connection `id` is gone: bypass and empty the cache until the next one.
    func lost(_ id: Int) {
        state.withLock { state in
            guard state.listener == id else { return }
            state.drop()
            state.listener = nil
        }
    }

    /// `projects` changed: drop every entry.
    func invalidate() {
        state.withLock { $0.drop() }
    }

    var statistics: Statistics {
        state.withLock { state in
            var statistics = state.statistics
            statistics.entries = state.entries.count
            statistics.listening = state.listener != nil
            return statistics
        }
    }
}
