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
/// *settled* (``Reservation/settle(holding:received:)``): what it holds comes back when the
/// server is done with it (its reports committed or refused within the ingest deadline),
/// without waiting on any client. A request that would pass its project's half or the whole
/// waits for room, up to ``maxWait`` from its first wait, when the settled requests in its way
/// hold enough to make room (``Reservation/growWaiting(to:)``): a busy fleet of one project
/// (64 SDKs sending batches of 100, about 370 KB each received plus decoded) queues behind its
/// own commits instead of being refused. A request that already holds bytes is refused at
/// once when the bytes in its way belong to requests still being received: a stalled sender
/// may hold them for the whole read timeout, and a request that waited for it would keep its
/// own bytes from everyone as long. A request that holds nothing yet may wait for those too:
/// it keeps nothing from anyone, and holds back no one meanwhile; but it is refused once a whole
/// ``patience`` passed in which settled requests never held the bytes it lacks (a stalled
/// sender's half), not when requests let in a moment ago are still being read.
///
/// **Served in order.** Waiters form one line in arrival order, and bytes that come back go
/// to the oldest waiter that fits. A waiter that waits for settled bytes holds back the later
/// requests of its project (and, when only the whole budget is short, every later request):
/// a stream of small requests cannot starve a large one, and what holds the later ones back
/// is a commit, which ends, never a client. A waiter that waits for bytes of requests still
/// being received holds back no one: requests that fit go first, so a stalled sender makes
/// no one wait. Waiters wait on settled requests, which wait on nothing here, or on earlier
/// waiters that do, so no set of waiters can wait on each other.
///
/// **Room before the body.** A request whose size is declared takes, before it reads a byte,
/// the room its body is expected to hold (``Reservation/admit(declaredBytes:compressed:atMost:)``):
/// the declared bytes times the ratio of held to received bytes of its project's settled
/// bodies (of every project's, before its first; before any, ``firstRatio(compressed:)``),
/// and gives back what it did not use once its body is read. So the requests let in are those
/// whose bodies fit whole, and the others wait before they hold anything: 64 SDKs sending
/// batches of 1,000 (3.7 MB each, received plus decoded) into a 17 MiB half read four bodies
/// at a time, instead of reading all at once and refusing most halfway. Every refusal is
/// counted and logged at a bounded rate (``refusals``).
final class BodyByteBudget: Sendable {
    /// Whose bytes a reservation holds.
    enum Owner: Hashable, Sendable {
        /// A project, by database id.
        case project(Int64)
        /// Not known yet: bytes read to find the request's key.
        case unidentified
    }

    let limit: Int
    /// The longest a request waits for room, counted from its first wait, before it is refused.
    let maxWait: Duration
    /// The longest a request that holds nothing waits while all the bytes it lacks are held by
    /// requests still being received (a stalled sender's, perhaps, until the read timeout).
    let patience: Duration
    /// Every refusal, by reason (`request`, `project`, `unidentified`, `budget`, `wait`).
    let refusals: RefusalLog
    /// Sleeps for a duration: `Task.sleep`, or a clock a test moves.
    private let sleep: @Sendable (Duration) async -> Void

    /// What became of a request to grow.
    fileprivate enum Growth {
        /// The reservation holds `total` bytes now.
        case granted(total: Int)
        case refused(Refusal)
        /// In line, as waiter `id` (``BodyByteBudget/wait(_:for:)``).
        case waiting(id: Int)
    }

    /// A body's size before it is read: its declared bytes, and whether they are compressed.
    fileprivate struct Expected {
        let declared: Int
        let compressed: Bool
        /// The most the body may hold, received plus decoded (at most half of the budget).
        let atMost: Int
    }

    /// A request in line for room.
    private struct Waiter {
        let id: Int
        let ticket: Int
        let owner: Owner
        /// What it asks to hold: recomputed from `expected`, when it has one, as ratios are learned.
        var total: Int
        let expected: Expected?
        /// It held nothing when it came: it may wait for bytes of requests being received.
        let fresh: Bool
        /// False once a whole ``BodyByteBudget/patience`` passed in which settled requests never
        /// held the bytes it lacks.
        var patient = true
        /// Settled requests held the bytes it lacked, or it fitted, since the last patience passed.
        var sawRoom = false
        /// Its task, once it sleeps.
        var continuation: CheckedContinuation<Growth, Never>?
        /// What became of it before it slept.
        var outcome: Growth?
    }

    /// Whose settled bodies a ratio was learned from: a project's, or every project's (nil).
    private struct RatioKey: Hashable {
        let owner: Owner?
        let compressed: Bool
    }

    /// Why `more` bytes do not fit now.
    private struct Shortfall {
        let refusal: Refusal
        /// Settled requests hold the bytes missing: they come back without a client.
        let comesBack: Bool
        /// The owner's share has room: only the whole budget is short.
        let wholeOnly: Bool
    }

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
        /// Requests waiting for room (and those decided before they slept), in arrival order.
        var line: [Waiter] = []
        var nextWaiter = 0
        /// Bytes held per byte received by settled bodies (a moving average).
        var ratios: [RatioKey: Double] = [:]

        /// Adds `bytes` (negative: gives back) to what `ticket` of `owner` holds, and to the
        /// settled sums when it is settled.
        mutating func add(_ bytes: Int, ticket: Int, owner: Owner) {
            used += bytes
            owners[owner, default: 0] += bytes
            if owners[owner] == 0 { owners[owner] = nil }
            if settledTickets.contains(ticket) { addSettled(bytes, owner: owner) }
        }

        /// Adds `bytes` to the settled sums of `owner`.
        mutating func addSettled(_ bytes: Int, owner: Owner) {
            settled[owner, default: 0] += bytes
            if settled[owner] == 0 { settled[owner] = nil }
            settledTotal += bytes
        }

        /// What a body of `expected` size will hold, by the ratios learned so far; before any,
        /// by ``BodyByteBudget/firstRatio(compressed:)``.
        func bytes(_ expected: Expected, of owner: Owner) -> Int {
            let ratio =
                ratios[RatioKey(owner: owner, compressed: expected.compressed)]
                ?? ratios[RatioKey(owner: nil, compressed: expected.compressed)]
                ?? BodyByteBudget.firstRatio(compressed: expected.compressed)
            return min(expected.atMost, Int((Double(expected.declared) * ratio).rounded(.up)))
        }

        /// Learns that a settled body of `owner` held `held` bytes for `received`.
        mutating func learn(held: Int, received: Int, compressed: Bool, owner: Owner) {
            guard received > 0 else { return }
            let ratio = Double(held) / Double(received)
            for key in [RatioKey(owner: owner, compressed: compressed), RatioKey(owner: nil, compressed: compressed)] {
                let old = ratios[key] ?? ratio
                ratios[key] = old + (ratio - old) / 4
            }
        }
    }

    private let state = Mutex(State())

    init(
        limit: Int, maxWait: Duration = .seconds(10), patience: Duration = .seconds(1),
        logger: Logger = Logger(label: "crashguard.body-budget"),
        sleep: @escaping @Sendable (Duration) async -> Void = { try? await Task.sleep(for: $0) }
    ) {
        self.limit = limit
        self.maxWait = maxWait
        self.patience = patience
        self.sleep = sleep
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

    /// Requests waiting now for room.
    var waitingNow: Int { state.withLock { $0.line.count { $0.outcome == nil } } }

    private func open() -> Int {
        state.withLock { state in
            defer { state.nextTicket += 1 }
            state.held[state.nextTicket] = 0
            return state.nextTicket
        }
    }

    /// Bytes held per byte received that a body is expected to hold before any body of its
    /// coding was read: an uncompressed body keeps at most what it received, and JSON under
    /// gzip decodes to 5 to 12 times its size (batches of 100 and 1,000 reports).
    static func firstRatio(compressed: Bool) -> Double { compressed ? 8 : 2 }

    /// Why a reservation could not grow.
    enum Refusal {
        case request, owner, budget
        /// It waited ``BodyByteBudget/maxWait`` for room.
        case wait
    }

    /// What keeps `owner` from taking `more` bytes now; nil when they fit.
    private func shortfall(_ more: Int, of owner: Owner, in state: State) -> Shortfall? {
        let ownerMissing = (state.owners[owner] ?? 0) + more - cap(of: owner)
        let budgetMissing = state.used + more - limit
        guard ownerMissing > 0 || budgetMissing > 0 else { return nil }
        return Shortfall(
            refusal: ownerMissing > 0 ? .owner : .budget,
            comesBack: ownerMissing <= (state.settled[owner] ?? 0) && budgetMissing <= state.settledTotal,
            wholeOnly: ownerMissing <= 0)
    }

    /// Goes down the line in order: grants each waiter that fits and that no earlier waiter
    /// holds back, refuses each that may wait no longer, and returns the sleeping ones decided.
    private func serve(_ state: inout State) -> [(CheckedContinuation<Growth, Never>, Growth)] {
        var decided: [(CheckedContinuation<Growth, Never>, Growth)] = []
        var heldBack: Set<Owner> = []
        var allHeldBack = false
        var index = 0
        while index < state.line.count {
            let waiter = state.line[index]
            guard waiter.outcome == nil else {
                index += 1
                continue
            }
            let held = state.held[waiter.ticket] ?? 0
            let total =
                waiter.expected.map { max(held + 1, state.bytes($0, of: waiter.owner)) }
                ?? waiter.total
            state.line[index].total = total
            let more = total - held
            var decision: Growth?
            let shortfall = shortfall(more, of: waiter.owner, in: state)
            state.line[index].sawRoom = waiter.sawRoom || shortfall?.comesBack ?? true
            if let shortfall {
                if shortfall.comesBack {
                    heldBack.insert(waiter.owner)
                    allHeldBack = allHeldBack || shortfall.wholeOnly
                } else if !waiter.fresh || !waiter.patient {
                    decision = .refused(shortfall.refusal)
                }
            } else if !heldBack.contains(waiter.owner) && !allHeldBack {
                state.add(more, ticket: waiter.ticket, owner: waiter.owner)
                state.held[waiter.ticket] = total
                decision = .granted(total: total)
            }
            guard let decision else {
                index += 1
                continue
            }
            if let continuation = waiter.continuation {
                state.line.remove(at: index)
                decided.append((continuation, decision))
            } else {
                state.line[index].outcome = decision
                index += 1
            }
        }
        return decided
    }

    /// Runs `change` on the state and then serves the line (bytes may have come back, or a
    /// waiter left it or changed); resumes the waiters decided, outside the lock.
    private func changing<T>(_ change: (inout State) -> T) -> T {
        let (result, decided) = state.withLock { state in
            let result = change(&state)
            return (result, serve(&state))
        }
        for (waiter, growth) in decided { waiter.resume(returning: growth) }
        return result
    }

    /// Sets reservation `ticket` of `owner` to `total` bytes (with `expected`, to at least what
    /// that body will hold). Growing past the request's, its owner's or the budget's share takes
    /// nothing: a refusal, or (with `mayWait`) a place in line, which may be decided at once.
    private func set(
        _ ticket: Int, of owner: Owner, to total: Int, mayWait: Bool = false, expected: Expected? = nil
    ) -> Growth {
        let growth = changing { state -> Growth in
            let held = state.held[ticket] ?? 0
            let total = expected.map { max(total, state.bytes($0, of: owner)) } ?? total
            let more = total - held
            guard more > 0 else {
                state.add(more, ticket: ticket, owner: owner)
                state.held[ticket] = total
                return .granted(total: total)
            }
            if total > half { return .refused(.request) }
            let shortfall = shortfall(more, of: owner, in: state)
            guard mayWait && (shortfall != nil || state.line.contains { $0.outcome == nil }) else {
                if let shortfall { return .refused(shortfall.refusal) }
                state.add(more, ticket: ticket, owner: owner)
                state.held[ticket] = total
                return .granted(total: total)
            }
            let id = state.nextWaiter
            state.nextWaiter += 1
            state.line.append(Waiter(id: id, ticket: ticket, owner: owner, total: total, expected: expected, fresh: held == 0))
            return .waiting(id: id)
        }
        // Decided as it took its place in line (most are: room, or a refusal): no wait.
        guard case .waiting(let id) = growth else { return growth }
        return state.withLock { state in
            guard let index = state.line.firstIndex(where: { $0.id == id }), let outcome = state.line[index].outcome else {
                return growth
            }
            state.line.remove(at: index)
            return outcome
        }
    }

    /// Waits for waiter `id` to be decided: granted room, refused, or out of time after
    /// `wait` (its patience ends first), or cancelled.
    private func wait(_ id: Int, for wait: Duration) async -> Growth {
        let timer = Task { [sleep, patience] in
            var left = wait
            while left > patience {
                await sleep(patience)
                left -= patience
                guard !Task.isCancelled else { return }
                // Patient for the next stretch only if room could have come in this one.
                self.changing { state in
                    guard let index = state.line.firstIndex(where: { $0.id == id }) else { return }
                    state.line[index].patient = state.line[index].sawRoom
                    state.line[index].sawRoom = false
                }
            }
            await sleep(left)
            guard !Task.isCancelled else { return }
            self.expire(id)
        }
        defer { timer.cancel() }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Growth, Never>) in
                let outcome = state.withLock { state -> Growth? in
                    guard let index = state.line.firstIndex(where: { $0.id == id }) else { return .refused(.wait) }
                    guard let outcome = state.line[index].outcome else {
                        state.line[index].continuation = continuation
                        return nil
                    }
                    state.line.remove(at: index)
                    return outcome
                }
                if let outcome { continuation.resume(returning: outcome) }
            }
        } onCancel: {
            expire(id)
        }
    }

    /// Refuses waiter `id` for want of time, unless it was decided; it leaves the line.
    private func expire(_ id: Int) {
        let continuation = changing { state -> CheckedContinuation<Growth, Never>? in
            guard let index = state.line.firstIndex(where: { $0.id == id }), state.line[index].outcome == nil else { return nil }
            guard let continuation = state.line[index].continuation else {
                state.line[index].outcome = .refused(.wait)
                return nil
            }
            state.line.remove(at: index)
            return continuation
        }
        continuation?.resume(returning: .refused(.wait))
    }

    /// Moves what reservation `ticket` holds from `old` to `new`; a refusal (and nothing
    /// moved) when `new` has no room for it.
    private func move(_ ticket: Int, from old: Owner, to new: Owner) -> Refusal? {
        changing { state -> Refusal? in
            let held = state.held[ticket] ?? 0
            guard old != new, held > 0 else { return nil }
            if (state.owners[new] ?? 0) + held > cap(of: new) { return .owner }
            state.add(-held, ticket: ticket, owner: old)
            state.add(held, ticket: ticket, owner: new)
            return nil
        }
    }

    private func close(_ ticket: Int, of owner: Owner) {
        changing { state in
            let held = state.held.removeValue(forKey: ticket) ?? 0
            state.add(-held, ticket: ticket, owner: owner)
            state.settledTickets.remove(ticket)
        }
    }

    /// Marks reservation `ticket` of `owner` settled: what it holds comes back without a client.
    /// With `learning`, its body held `held` bytes for `received`, which the ratios learn.
    private func settle(_ ticket: Int, of owner: Owner, learning: (held: Int, received: Int, compressed: Bool)?) {
        // Served: waiters for bytes it holds now wait for bytes that come back.
        changing { state in
            if let learning {
                state.learn(held: learning.held, received: learning.received, compressed: learning.compressed, owner: owner)
            }
            guard state.settledTickets.insert(ticket).inserted else { return }
            state.addSettled(state.held[ticket] ?? 0, owner: owner)
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
        /// When the request's waits for room end, from its first.
        private var deadline: ContinuousClock.Instant?
        /// Whether its body is compressed, when it was let in by its declared size.
        private var compressed: Bool?

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
            switch budget.set(ticket, of: owner, to: total) {
            case .granted(let total): held = total
            case .refused(let refusal): throw refused(refusal, owner)
            case .waiting: preconditionFailure("a request that may not wait is never in line")
            }
        }

        /// Grows the share to `total` bytes as ``grow(to:)`` does, but waits in line for room
        /// (``BodyByteBudget``: served in order, for at most the budget's `maxWait` from the
        /// request's first wait) while the bytes missing are held by settled requests, which give
        /// them back when the server is done with them, or, while the share holds nothing, for
        /// bytes of requests still being received until a whole `patience` of the budget passed in
        /// which settled requests never held them. Throws 503 otherwise, or when the wait ends
        /// without room.
        func growWaiting(to total: Int) async throws {
            guard total > held else { return }
            try await growWaiting(to: total, expected: nil)
        }

        private func growWaiting(to total: Int, expected: Expected?) async throws {
            var growth = budget.set(ticket, of: owner, to: total, mayWait: true, expected: expected)
            if case .waiting(let id) = growth {
                let now = ContinuousClock.now
                let deadline = self.deadline ?? now + budget.maxWait
                self.deadline = deadline
                growth = await budget.wait(id, for: now < deadline ? now.duration(to: deadline) : .zero)
            }
            switch growth {
            case .granted(let total): held = total
            case .refused(let refusal): throw refused(refusal, owner)
            case .waiting: preconditionFailure("a wait ends decided")
            }
        }

        /// Before the body is read: takes (waiting in line, as ``growWaiting(to:)``) the room a
        /// body of `declaredBytes` (as received: `compressed` or not) is expected to hold, by the
        /// ratio of held to received bytes of its project's settled bodies, at most `atMost`
        /// (what the body may hold by the limits); ``settle(holding:received:)`` gives back what
        /// it did not use. Nothing for a request whose project is not known yet.
        func admit(declaredBytes: Int, compressed: Bool, atMost: Int) async throws {
            guard case .project = owner, held == 0, declaredBytes > 0 else { return }
            self.compressed = compressed
            let expected = Expected(declared: declaredBytes, compressed: compressed, atMost: min(atMost, budget.half))
            try await growWaiting(to: 1, expected: expected)
        }

        /// The body is read whole, and holds `total` bytes of which it received `received`:
        /// what the share holds beyond `total` (room taken for it before it was read) comes
        /// back now, and the rest when the server is done with the request, without waiting on
        /// its client, so other requests may wait for it.
        func settle(holding total: Int, received: Int) {
            budget.settle(ticket, of: owner, learning: compressed.map { (total, received, $0) })
            shrink(to: total)
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
