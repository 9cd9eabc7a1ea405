import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Looks up a webhook's host name at delivery time: every address it has, so each can be
/// checked before one of them is connected to (``WebhookTransport``).
struct WebhookResolver: Sendable {
    /// The name's addresses, in the order to try them; empty or throwing when it has none.
    let lookup: @Sendable (_ name: String) async throws -> [IPAddress]

    /// The system resolver (`getaddrinfo`, so `/etc/hosts` counts), run on `pool`: it blocks,
    /// and a slow DNS server must hold neither a cooperative thread nor an event loop. The wait
    /// ends at once when the task is cancelled (the deadline of the attempt); the lookup then
    /// finishes on its thread and its answer is dropped.
    static func system(on pool: NIOThreadPool) -> WebhookResolver {
        WebhookResolver { name in
            let promise = NIOSingletons.posixEventLoopGroup.any().makePromise(of: [IPAddress].self)
            pool.submit { state in
                guard state == .active else { return promise.fail(CancellationError()) }
                promise.completeWith(Result { try addresses(of: name) })
            }
            return try await cancellable(promise.futureResult)
        }
    }

    struct LookupFailed: Error {}

    /// `getaddrinfo(name)` for TCP, IPv4 and IPv6 (only the families this machine has an
    /// address of), deduplicated in the resolver's order.
    static func addresses(of name: String) throws -> [IPAddress] {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        #if canImport(Darwin)
        hints.ai_socktype = SOCK_STREAM
        #else
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        #endif
        hints.ai_flags = AI_ADDRCONFIG
        var list: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(name, nil, &hints, &list) == 0, let first = list else { throw LookupFailed() }
        defer { freeaddrinfo(first) }
        var out: [IPAddress] = []
        var next: UnsafeMutablePointer<addrinfo>? = first
        while let info = next {
            next = info.pointee.ai_next
            guard let address = info.pointee.ai_addr else { continue }
            var found: IPAddress?
            switch Int32(info.pointee.ai_family) {
            case AF_INET:
                found = address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { v4 in
                    var raw = v4.pointee.sin_addr
                    return IPAddress(bytes: withUnsafeBytes(of: &raw) { Array($0) })
                }
            case AF_INET6:
                found = address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { v6 in
                    var raw = v6.pointee.sin6_addr
                    return IPAddress(bytes: withUnsafeBytes(of: &raw) { Array($0) })
                }
            default: break
            }
            if let found, !out.contains(found) { out.append(found) }
        }
        return out
    }

    private enum Waiter<T: Sendable> {
        case waiting
        case cancelled
        case suspended(CheckedContinuation<T, any Error>)
        case resumed
    }

    /// Awaits `future`, or throws `CancellationError` as soon as the task is cancelled.
    private static func cancellable<T: Sendable>(_ future: EventLoopFuture<T>) async throws -> T {
        let state = NIOLockedValueBox(Waiter<T>.waiting)
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
                let cancelled = state.withLockedValue { s -> Bool in
                    if case .cancelled = s { return true }
                    s = .suspended(continuation)
                    return false
                }
                if cancelled { return continuation.resume(throwing: CancellationError()) }
                future.whenComplete { result in
                    let waiting = state.withLockedValue { s -> CheckedContinuation<T, any Error>? in
                        guard case .suspended(let c) = s else { return nil }
                        s = .resumed
                        return c
                    }
                    waiting?.resume(with: result)
                }
            }
        } onCancel: {
            let waiting = state.withLockedValue { s -> CheckedContinuation<T, any Error>? in
                switch s {
                case .waiting:
                    s = .cancelled
                    return nil
                case .suspended(let c):
                    s = .resumed
                    return c
                case .cancelled, .resumed: return nil
                }
            }
            waiting?.resume(throwing: CancellationError())
        }
    }
}
