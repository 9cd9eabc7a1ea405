import Synchronization

/// The server-wide budget of ingest body bytes in flight: what every request holds while
/// it is read, decoded and stored (bytes received plus bytes decoded). A request that
/// would take the total past the budget gets 503 with `Retry-After` and lets go of what it
/// held, so no sequence of requests within the size limits can exhaust memory.
///
/// The budget is at least one largest request (compressed plus decompressed limit), so a
/// lone request is never refused.
final class BodyByteBudget: Sendable {
    let limit: Int
    private let used = Atomic<Int>(0)

    init(limit: Int) {
        self.limit = limit
    }

    /// Bytes held by requests now.
    var inUse: Int { used.load(ordering: .relaxed) }

    /// Takes `bytes` from the budget; false (and nothing taken) when that would pass it.
    func reserve(_ bytes: Int) -> Bool {
        guard bytes > 0 else { return true }
        let total = used.add(bytes, ordering: .relaxed).newValue
        if total > limit {
            used.subtract(bytes, ordering: .relaxed)
            return false
        }
        return true
    }

    /// Gives `bytes` back.
    func release(_ bytes: Int) {
        guard bytes > 0 else { return }
        used.subtract(bytes, ordering: .relaxed)
    }

    /// One request's share: grows as the body is read, given back once when the request ends.
    final class Reservation {
        private let budget: BodyByteBudget
        private(set) var held = 0

        init(_ budget: BodyByteBudget) { self.budget = budget }

        deinit { budget.release(held) }

        /// Grows the share to `total` bytes; throws 503 when the budget cannot give it.
        func grow(to total: Int) throws {
            guard total > held else { return }
            guard budget.reserve(total - held) else {
                throw APIError.unavailable(
                    "server is over its budget of \(budget.limit) request body bytes in flight; retry later", retryAfter: 1)
            }
            held = total
        }
    }
}
