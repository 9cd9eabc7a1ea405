import Logging
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
///
/// **Waiting for bytes that come back.** A request whose body has been read whole is
/// *settled* (``Reservation/settle()``): what it holds comes back when the server is done with
/// it (its reports committed or refused within the ingest deadline), without waiting on any
/// client. A request still being read that would pass its project's half or the whole waits
/// for room, up to ``maxWait``, when the settled requests in its way hold enough to make room
/// (``Reservation/growWaiting(to:)``): a busy fleet of one project (64 SDKs sending batches of
/// 100, about 370 KB each received plus decoded) queues behind its own commits instead of
/// being refused. It is refused at once when the bytes in its way belong to requests still
/// being received: a stalled sender may hold them for the whole read timeout, and a request
/// that waited for it would keep its own bytes from everyone as long. Waiters wait only on
/// settled requests, which wait on nothing here, so no set of waiters can wait on each other.
/// Every refusal is counted and logged at a bounded rate (``refusals``).
final class BodyByteBudget: Sendable {
    /// Whose bytes a reservation holds.
    enum Owner: Hashable, Sendable {
        /// A project, by database id.
        case project(Int64)
        /// Not known yet: bytes read to find the request's key.
        case unidentified
    }

    let limit: Int
    /// The longest a request waits for settled requests to give bytes back
    /// (``Reservation/growWaiting(to:)``) before it is refused.
    let maxWait: Duration
    /// Every refusal, by reason (`request`, `project`, `unidentified`, `budget`, `wait`).
    let refusals: RefusalLog

    private struct State {
        var used = 0
        /// What each live reservation holds, by ticket.
        var held: [Int: Int] = [:]
        /// What each owner's live reservations hold together.
        var owners: [Owner: Int] = [:]
        /// The settled reservations (bodies read whole), and what they hold by owner and in all.
        var settledTickets: Set<Int> = []
        var settled: [Owner: Int] = [:]
        var settledTotal = 0
        var nextTicket = 0
        /// Counts the times bytes came back: a waiter sleeps only while it is unchanged.
        var returns = 0
        /// Requests waiting for bytes to come back, by waiter id.
        var waiters: [Int: CheckedContinuation<Void, Never>] = [:]
        /// Waiters cancelled before they slept: they do not sleep.
        var cancelledWaiters: Set<Int> = []
        var nextWaiter = 0

        /// Adds `bytes` (negative: gives back) to what `ticket` of `owner` holds, and to the
        /// settled sums when it is settled.
        mutating func add(_ bytes: Int, ticket: Int, owner: Owner) {
            used += bytes
            owners[owner, default: 0] += bytes
            if owners[owner] == 0 { owners[owner] = nil }
            if settledTickets.contains(ticket) {
                settled[owner, default: 0] += bytes
                if settled[owner] == 0 { settled[owner] = nil }
                settledTotal += bytes
            }
        }

        /// Bytes came back: every waiter looks again.
        mutating func wakeWaiters() -> [CheckedContinuation<Void, Never>] {
            returns += 1
            defer { waiters.removeAll() }
            return Array(waiters.values)
        }
    }

    private let state = Mutex(State())

    init(limit: Int, maxWait: Duration = .seconds(10), logger: Logger = Logger(label: "crashguard.body-budget")) {
        self.limit = limit
        self.maxWait = maxWait
        refusals = RefusalLog(subject: "ingest body budget", logger: logger)
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

    /// Requests waiting now for settled requests to give bytes back.
    var waitingNow: Int { state.withLock { $0.waiters.count } }

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
        /// It waited ``BodyByteBudget/maxWait`` for settled requests to give bytes back.
        case wait
    }

    /// What became of a request to grow.
    private enum Growth {
        case granted
        case refused(Refusal)
        /// No room now, but settled requests hold enough to make it: look again once bytes
        /// came back after `returns`.
        case wait(returns: Int)
    }

    /// Sets reservation `ticket` of `owner` to `total` bytes. Growing past the request's, its
    /// owner's or the budget's share takes nothing: a refusal, or (with `mayWait`) a wait when
    /// settled requests hold the bytes missing from the owner's share and from the whole.
    private func set(_ ticket: Int, of owner: Owner, to total: Int, mayWait: Bool = false) -> Growth {
        let (growth, woken) = state.withLock { state -> (Growth, [CheckedContinuation<Void, Never>]) in
            let held = state.held[ticket] ?? 0
            let more = total - held
            if more > 0 {
                if total > half { return (.refused(.request), []) }
                let ownerMissing = (state.owners[owner] ?? 0) + more - cap(of: owner)
                let budgetMissing = state.used + more - limit
                if ownerMissing > 0 || budgetMissing > 0 {
                    let comesBack = ownerMissing <= (state.settled[owner] ?? 0) && budgetMissing <= state.settledTotal
                    if mayWait && comesBack { return (.wait(returns: state.returns), []) }
                    return (.refused(ownerMissing > 0 ? .owner : .budget), [])
                }
            }
            state.add(more, ticket: ticket, owner: owner)
            state.held[ticket] = total
            return (.granted, more < 0 ? state.wakeWaiters() : [])
        }
        for waiter in woken { waiter.resume() }
        return growth
    }

    /// Moves what reservation `ticket` holds from `old` to `new`; a refusal (and nothing
    /// moved) when `new` has no room for it.
    private func move(_ ticket: Int, from old: Owner, to new: Owner) -> Refusal? {
        let (refusal, woken) = state.withLock { state -> (Refusal?, [CheckedContinuation<Void, Never>]) in
            let held = state.held[ticket] ?? 0
            guard old != new, held > 0 else { return (nil, []) }
            if (state.owners[new] ?? 0) + held > cap(of: new) { return (.owner, []) }
            state.add(-held, ticket: ticket, owner: old)
            state.add(held, ticket: ticket, owner: new)
            return (nil, state.wakeWaiters())
        }
        for waiter in woken { waiter.resume() }
        return refusal
    }

    private func close(_ ticket: Int, of owner: Owner) {
        let woken = state.withLock { state in
            let held = state.held.removeValue(forKey: ticket) ?? 0
            state.add(-held, ticket: ticket, owner: owner)
            state.settledTickets.remove(ticket)
            return held > 0 ? state.wakeWaiters() : []
        }
        for waiter in woken { waiter.resume() }
    }

    /// Marks reservation `ticket` of `owner` settled: what it holds comes back without a client.
    private func settle(_ ticket: Int, of owner: Owner) {
        state.withLock { state in
            guard state.settledTickets.insert(ticket).inserted else { return }
            let held = state.held[ticket] ?? 0
            state.settled[owner, default: 0] += held
            if state.settled[owner] == 0 { state.settled[owner] = nil }
            state.settledTotal += held
        }
    }

    /// Returns once bytes came back after `returns`, the task is cancelled or `deadline` passes.
    private func awaitReturn(after returns: Int, until deadline: ContinuousClock.Instant) async {
        let id = state.withLock { state in
            defer { state.nextWaiter += 1 }
            return state.nextWaiter
        }
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                await withTaskCancellationHandler {
                    await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
                        let now = self.state.withLock { state in
                            if state.cancelledWaiters.remove(id) != nil || state.returns != returns { return true }
                            state.waiters[id] = waiter
                            return false
                        }
                        if now { waiter.resume() }
                    }
                } onCancel: {
                    let waiter = self.state.withLock { state in
                        let waiter = state.waiters.removeValue(forKey: id)
                        if waiter == nil { state.cancelledWaiters.insert(id) }
                        return waiter
                    }
                    waiter?.resume()
                }
            }
            group.addTask { try? await Task.sleep(until: deadline) }
            await group.next()
            group.cancelAll()
        }
        // A waiter woken by bytes coming back has left `waiters` and is not in `cancelledWaiters`;
        // one whose cancellation came first left its id there, removed here.
        state.withLock { _ = $0.cancelledWaiters.remove(id) }
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
            if case .refused(let refusal) = budget.set(ticket, of: owner, to: total) { throw refused(refusal, owner) }
            held = total
        }

        /// Grows the share to `total` bytes as ``grow(to:)`` does, but waits (up to the budget's
        /// `maxWait`) while the bytes missing are held by settled requests, which give them
        /// back when the server is done with them; throws 503 when they are held by requests
        /// still being received, or when the wait ends without room.
        func growWaiting(to total: Int) async throws {
            guard total > held else { return }
            var deadline: ContinuousClock.Instant?
            while true {
                switch budget.set(ticket, of: owner, to: total, mayWait: true) {
                case .granted:
                    held = total
                    return
                case .refused(let refusal):
                    throw refused(refusal, owner)
                case .wait(let returns):
                    let now = ContinuousClock.now
                    let until = deadline ?? now + budget.maxWait
                    deadline = until
                    guard now < until, !Task.isCancelled else { throw refused(.wait, owner) }
                    await budget.awaitReturn(after: returns, until: until)
                }
            }
        }

        /// The body is read whole: what the share holds now comes back when the server is done
        /// with the request, without waiting on its client, so other requests may wait for it.
        func settle() { budget.settle(ticket, of: owner) }

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
            let (reason, message) =
                switch refusal {
                case .request: ("request", "the request would hold more than half of the server's \(limit) body bytes in flight")
                case .owner where owner == .unidentified:
                    (
                        "unidentified",
                        "requests without a key in their headers hold their share of the server's \(limit) body bytes in flight"
                    )
                case .owner: ("project", "the project's requests hold half of the server's \(limit) body bytes in flight")
                case .budget: ("budget", "server is over its budget of \(limit) body bytes in flight")
                case .wait:
                    (
                        "wait",
                        "no room in the server's \(limit) body bytes in flight after waiting \(budget.maxWait)"
                    )
                }
            budget.refusals.record(reason, message)
            return APIError.unavailable(message + "; retry later", retryAfter: 1)
        }
    }
}
