import Crypto
import Foundation

/// What the server keeps of one session while it can change (`session_states`).
struct SessionState: Sendable, Equatable {
    /// Fixed by the first update kept.
    var release: SessionRelease
    var didHash: Int64?
    var started: Date
    /// `ok` while open, else the final state it was counted in.
    var status: SessionStatus
    var seq: Int64
    /// The largest `errors` of the updates applied.
    var errors: Int64
    var duration: Double?
}

/// How an update was answered.
enum SessionOutcome: Sendable, Equatable {
    case accepted, duplicate
}

/// The counting table of release-health.md, applied to one session: each update moves the
/// state and says what to count. Pure, so every row of the table is tested without a database.
enum SessionCounting {
    /// What applying one update counts: `started` once per session, `final` once.
    struct Effect: Sendable, Equatable {
        var outcome: SessionOutcome
        var started = false
        var final: SessionStatus?
    }

    /// The final state of a session that ends with `status` having carried `errors` at most.
    static func finalState(_ status: SessionStatus, errors: Int64) -> SessionStatus {
        status == .exited && errors > 0 ? .errored : status
    }

    /// Applies `update` to the session's `state` (nil: unknown to the server).
    static func apply(_ update: SessionUpdate, to state: inout SessionState?) -> Effect {
        guard var current = state else {
            let final = update.status.isFinal ? finalState(update.status, errors: update.errors) : nil
            state = SessionState(
                release: update.release, didHash: update.did.map(userHash), started: update.started,
                status: final ?? .ok, seq: update.seq, errors: update.errors, duration: update.duration)
            return Effect(outcome: .accepted, started: true, final: final)
        }
        guard current.status == .ok else { return Effect(outcome: .duplicate) }
        if update.status.isFinal {
            current.errors = max(current.errors, update.errors)
            let final = finalState(update.status, errors: current.errors)
            current.status = final
            current.seq = max(current.seq, update.seq)
            if let duration = update.duration { current.duration = duration }
            state = current
            return Effect(outcome: .accepted, final: final)
        }
        guard update.seq > current.seq else { return Effect(outcome: .duplicate) }
        current.seq = update.seq
        current.errors = max(current.errors, update.errors)
        if let duration = update.duration { current.duration = duration }
        state = current
        return Effect(outcome: .accepted)
    }

    /// The stored hash of a `did`: the first 64 bits of its SHA-256, as a signed integer.
    static func userHash(_ did: String) -> Int64 {
        let digest = SHA256.hash(data: Array(did.utf8))
        var hash: UInt64 = 0
        for (i, byte) in digest.enumerated() where i < 8 { hash = hash << 8 | UInt64(byte) }
        return Int64(bitPattern: hash)
    }
}

/// A HyperLogLog sketch of user hashes with 16,384 registers (standard error about 0.8 %, and
/// near exact while most registers are empty): the `users` of a release past 250 distinct ids.
struct UserSketch: Sendable, Equatable {
    static let precision = 14
    static let registerCount = 1 << precision

    var registers = [UInt8](repeating: 0, count: registerCount)

    /// The register and rank of a user hash: the top 14 bits choose the register, the rank is
    /// one more than the leading zeros of the other 50 (51 when they are all zero).
    static func register(of hash: Int64) -> (index: Int, rank: Int) {
        let bits = UInt64(bitPattern: hash)
        let index = Int(bits >> UInt64(64 - precision))
        let rest = bits << UInt64(precision)
        return (index, rest == 0 ? 64 - precision + 1 : rest.leadingZeroBitCount + 1)
    }

    mutating func insert(_ hash: Int64) {
        let (index, rank) = Self.register(of: hash)
        merge(index: index, rank: rank)
    }

    mutating func merge(index: Int, rank: Int) {
        guard index >= 0, index < Self.registerCount, rank > 0 else { return }
        if Int(registers[index]) < rank { registers[index] = UInt8(min(rank, 255)) }
    }

    /// HyperLogLog with linear counting while registers are still empty.
    var estimate: Int64 { HyperLogLog.estimate(registers) }
}
