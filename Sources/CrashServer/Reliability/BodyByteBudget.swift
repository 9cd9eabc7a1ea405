import Synchronization

/// The server-wide budget of body bytes in flight (`CRASHGUARD_MAX_INFLIGHT_BODY_BYTES`): what
/// every request that takes a body holds while it is read, decoded and stored (bytes received
/// plus bytes decoded), on every door, debug-file uploads included. A request that would take
/// more than it may gets 503 with `Retry-After` (429 on the Sentry routes), lets go of what it
/// held and stores nothing, so no sequence of requests can exhaust memory.
///
/// **Shared fairly, by halves.** No single request and no single project holds more than half
/// of the budget, and the total never goes past the whole of it. So whatever one project's
/// clients do (a flood of large bodies, uploads that stall until the read timeout cuts them
/// off), the other half stays for every other project: a valid report of another project is
/// read and stored at once, without a retry. And a request is refused only for what it asks
/// itself: a stalled request holds its bytes, never a right that closes the budget to others.
///
/// Bytes read before a request's key is known (the first line of an envelope that carries its
/// key in its `dsn`) belong to no project yet: together they may hold at most a quarter of the
/// budget, and move to the project once the key is checked (``Reservation/assign(to:)``).
///
/// The configuration keeps one largest request (compressed plus decompressed limit) within
/// half of the budget, so a request alone is never refused.
final class BodyByteBudget: Sendable {
    /// Whose bytes a reservation holds.
    enum Owner: Hashable, Sendable {
        /// A project, by database id.
        case project(Int64)
        /// Not known yet: bytes read to find the request's key.
        case unidentified
    }

    let limit: Int

    private struct State {
        var used = 0
        /// What each live reservation holds, by ticket.
        var held: [Int: Int] = [:]
        /// What each owner's live reservations hold together.
        var owners: [Owner: Int] = [:]
        var nextTicket = 0
    }

    private let state = Mutex(State())

    init(limit: Int) {
        self.limit = limit
    }

    /// The most one request, and one project's requests together, may hold.
    var half: Int { limit / 2 }

    /// The most the requests whose key is not known yet may hold together.
    var unidentifiedShare: Int { limit / 4 }

    private func cap(of owner: Owner) -> Int {
        switch owner {
        case .project: half
        case .unidentified: unidentifiedShare
        }
    }

    /// Bytes held by requests now.
    var inUse: Int { state.withLock { $0.used } }

    /// Bytes held now by `owner`'s requests.
    func inUse(by owner: Owner) -> Int { state.withLock { $0.owners[owner] ?? 0 } }

    /// Reservations opened since the start: a change tells that a request has come.
    var opened: Int { state.withLock { $0.nextTicket } }

    /// Reservations open now: requests being read or stored.
    var openNow: Int { state.withLock { $0.held.count } }

    private func open() -> Int {
        state.withLock { state in
            defer { state.nextTicket += 1 }
            state.held[state.nextTicket] = 0
            return state.nextTicket
        }
    }

    /// Why a reservation could not grow.
    enum Refusal {
        case request, owner, budget
    }

    /// Sets reservation `ticket` of `owner` to `total` bytes; a refusal (and nothing taken)
    /// when growing would take the request, its owner or the budget past its share.
    private func set(_ ticket: Int, of owner: Owner, to total: Int) -> Refusal? {
        state.withLock { state in
            let held = state.held[ticket] ?? 0
            let more = total - held
            if more > 0 {
                if total > half { return .request }
                if (state.owners[owner] ?? 0) + more > cap(of: owner) { return .owner }
                if state.used + more > limit { return .budget }
            }
            state.used += more
            state.owners[owner, default: 0] += more
            if state.owners[owner] == 0 { state.owners[owner] = nil }
            state.held[ticket] = total
            return nil
        }
    }

    /// Moves what reservation `ticket` holds from `old` to `new`; a refusal (and nothing
    /// moved) when `new` has no room for it.
    private func move(_ ticket: Int, from old: Owner, to new: Owner) -> Refusal? {
        state.withLock { state in
            let held = state.held[ticket] ?? 0
            guard old != new, held > 0 else { return nil }
            if (state.owners[new] ?? 0) + held > cap(of: new) { return .owner }
            state.owners[old, default: 0] -= held
            if state.owners[old] == 0 { state.owners[old] = nil }
            state.owners[new, default: 0] += held
            return nil
        }
    }

    private func close(_ ticket: Int, of owner: Owner) {
        state.withLock { state in
            let held = state.held.removeValue(forKey: ticket) ?? 0
            state.used -= held
            state.owners[owner, default: 0] -= held
            if state.owners[owner] == 0 { state.owners[owner] = nil }
        }
    }

    /// One request's share: grows as the body is read (and may shrink, for bytes written
    /// elsewhere), given back whole when the request ends (the reservation is released) or
    /// at ``release()``.
    ///
    ///     let share = BodyByteBudget.Reservation(budget, project: project.id)
    ///     try share.grow(to: share.held + chunk.readableBytes)   // 503 past a share
    ///     share.shrink(to: 0)                                     // once written to disk
    final class Reservation {
        private let budget: BodyByteBudget
        let ticket: Int
        private(set) var owner: Owner
        private(set) var held = 0

        /// A reservation of `project`'s requests (its database id), or of a request whose
        /// project is not known yet (`nil`: see ``assign(to:)``).
        init(_ budget: BodyByteBudget, project: Int64?) {
            self.budget = budget
            owner = project.map(Owner.project) ?? .unidentified
            ticket = budget.open()
        }

        deinit { budget.close(ticket, of: owner) }

        /// Grows the share to `total` bytes; throws 503 when that would take the request or
        /// its project past half of the budget, or the budget past its limit. Keeps what it
        /// held when refused.
        func grow(to total: Int) throws {
            guard total > held else { return }
            if let refusal = budget.set(ticket, of: owner, to: total) { throw refused(refusal, owner) }
            held = total
        }

        /// Gives back all but `total` bytes (bytes no longer in memory: written to disk).
        func shrink(to total: Int) {
            let total = max(0, total)
            guard total < held else { return }
            _ = budget.set(ticket, of: owner, to: total)
            held = total
        }

        /// Gives back everything held now; the reservation may grow again.
        func release() { shrink(to: 0) }

        /// Makes the share `project`'s, once the request's key is known; throws 503 when the
        /// project's half has no room for what the share holds.
        func assign(to project: Int64) throws {
            let new = Owner.project(project)
            guard new != owner else { return }
            if let refusal = budget.move(ticket, from: owner, to: new) { throw refused(refusal, new) }
            owner = new
        }

        private func refused(_ refusal: Refusal, _ owner: Owner) -> APIError {
            let limit = budget.limit
            let message =
                switch refusal {
                case .request: "the request would hold more than half of the server's \(limit) body bytes in flight"
                case .owner where owner == .unidentified:
                    "requests without a key in their headers hold their share of the server's \(limit) body bytes in flight"
                case .owner: "the project's requests hold half of the server's \(limit) body bytes in flight"
                case .budget: "server is over its budget of \(limit) body bytes in flight"
                }
            return APIError.unavailable(message + "; retry later", retryAfter: 1)
        }
    }
}
