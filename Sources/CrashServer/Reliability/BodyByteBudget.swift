import Synchronization

/// The server-wide budget of ingest body bytes in flight: what every request holds while
/// it is read, decoded and stored (bytes received plus bytes decoded). A request that
/// would take the total past the budget gets 503 with `Retry-After` and lets go of what it
/// held, so no sequence of requests within the size limits can exhaust memory.
///
/// **One request always gets through.** Refusing whichever request happens to grow when the
/// budget is full lets a flood of large bodies starve itself: sixty-four of them each read a
/// slice, fill the budget together, and are refused one after another, so that none is ever
/// stored (measured: one largest valid body stored in 14 s at 64 connections, the other 141
/// refused after 3.7 s each). So when the budget is full, the request holding the most of
/// it (the one closest to done) may go past it, alone: until it ends, every other request
/// that needs more is refused at once, even where the budget has room (so that no request
/// reads, inflates and scans a slice only to be refused at the next one). The bytes held stay
/// under the budget plus one largest request, and some request always progresses.
///
/// The budget is at least one largest request (compressed plus decompressed limit), so a
/// lone request is never refused.
final class BodyByteBudget: Sendable {
    let limit: Int

    private struct State {
        var used = 0
        /// What each live reservation holds, by ticket.
        var held: [Int: Int] = [:]
        var nextTicket = 0
        /// The reservation that may hold more than the budget, until it ends.
        var privileged: Int?
    }

    private let state = Mutex(State())

    init(limit: Int) {
        self.limit = limit
    }

    /// Bytes held by requests now.
    var inUse: Int { state.withLock { $0.used } }

    /// Reservations opened since the start: a change tells that a request has come.
    var opened: Int { state.withLock { $0.nextTicket } }

    /// Reservations open now: ingest requests being read or stored.
    var openNow: Int { state.withLock { $0.held.count } }

    /// The reservation allowed past the budget now, if any (for tests).
    var privilegedTicket: Int? { state.withLock { $0.privileged } }

    private func open() -> Int {
        state.withLock { state in
            defer { state.nextTicket += 1 }
            state.held[state.nextTicket] = 0
            return state.nextTicket
        }
    }

    /// Grows reservation `ticket` to `total` bytes; false (and nothing taken) when refused.
    private func grow(_ ticket: Int, to total: Int) -> Bool {
        state.withLock { state in
            let held = state.held[ticket] ?? 0
            let more = total - held
            guard more > 0 else { return true }
            // Closed to everyone else until the privileged request ends: a request that read a
            // slice now would only be refused later, its work thrown away.
            if let privileged = state.privileged, privileged != ticket { return false }
            if state.used + more > limit && state.privileged != ticket {
                // Past the budget: only the largest holder, and only if nobody else is past it.
                guard state.privileged == nil, state.held.values.allSatisfy({ $0 <= held }) else { return false }
                state.privileged = ticket
            }
            state.used += more
            state.held[ticket] = total
            return true
        }
    }

    private func close(_ ticket: Int) {
        state.withLock { state in
            state.used -= state.held.removeValue(forKey: ticket) ?? 0
            if state.privileged == ticket { state.privileged = nil }
        }
    }

    /// One request's share: grows as the body is read, given back once when the request ends.
    final class Reservation {
        private let budget: BodyByteBudget
        let ticket: Int
        private(set) var held = 0

        init(_ budget: BodyByteBudget) {
            self.budget = budget
            ticket = budget.open()
        }

        deinit { budget.close(ticket) }

        /// Grows the share to `total` bytes; throws 503 when the budget cannot give it.
        func grow(to total: Int) throws {
            guard total > held else { return }
            guard budget.grow(ticket, to: total) else {
                throw APIError.unavailable(
                    "server is over its budget of \(budget.limit) request body bytes in flight; retry later", retryAfter: 1)
            }
            held = total
        }
    }
}
