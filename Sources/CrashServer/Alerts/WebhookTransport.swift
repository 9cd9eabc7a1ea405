import AsyncHTTPClient
import Logging
import NIOCore
import NIOHTTP1

/// Why a delivery attempt failed: `lastDelivery.error`, one of a fixed set of short texts.
///
/// Never a resolver, TLS or socket message and never a byte of the receiver's answer: the
/// list of webhooks is read with a read token, and a webhook's URL is chosen by whoever holds
/// it, so the error must not tell what answered at an address they could not reach otherwise.
struct WebhookDeliveryError: Error, Sendable, Equatable, CustomStringConvertible {
    private enum Code: Sendable, Equatable {
        case timeout
        case connectionFailed
        case addressNotAllowed
        case answerTooLarge
        case status(Int)
    }

    private let code: Code

    /// The attempt's deadline passed: no connection, no complete answer, or a body still
    /// short of the read limit.
    static let timeout = WebhookDeliveryError(code: .timeout)
    /// No connection, or it broke, or the answer was not HTTP (TLS failures included).
    static let connectionFailed = WebhookDeliveryError(code: .connectionFailed)
    /// The host, or an address its name resolves to, is in a refused range.
    static let addressNotAllowed = WebhookDeliveryError(code: .addressNotAllowed)
    /// The answer's head did not fit the limit.
    static let answerTooLarge = WebhookDeliveryError(code: .answerTooLarge)
    /// The receiver answered with a status other than 2xx (redirects included).
    static func httpStatus(_ status: Int) -> WebhookDeliveryError { WebhookDeliveryError(code: .status(status)) }

    var description: String {
        switch code {
        case .timeout: "timeout"
        case .connectionFailed: "connection failed"
        case .addressNotAllowed: "address not allowed"
        case .answerTooLarge: "answer too large"
        case .status(let status): "HTTP \(status)"
        }
    }
}

/// One attempt's outcome: the receiver's status when it answered, and why it failed (nil
/// when delivered).
struct WebhookAttempt: Sendable, Equatable {
    var httpStatus: Int?
    var error: WebhookDeliveryError?
}

/// POSTs one delivery to a receiver, bounded whatever the receiver does (hardening.md,
/// "Webhooks: where deliveries may go" and "hostile receivers"):
///
/// - Where: a host on the allow list is connected to as written. Any other host is checked
///   by ``WebhookTarget/parse(_:)``; a name is resolved here, at each attempt, every address
///   checked, and the connection goes to the first one through AsyncHTTPClient's DNS
///   override (the `Host` header, SNI and certificate check keep the name): no second lookup
///   that could answer differently. Redirects are never followed.
/// - How long: one deadline from the lookup to the last byte read, enforced from outside the
///   HTTP client (whose own deadline ends at the answer's head), so a receiver that sends its
///   headers and then nothing, or trickles its body, is cut off.
/// - How much: at most ``maxAnswerBytes`` of the body are read, then the connection is
///   closed; the status decides.
///
/// Each attempt has its own client, and so its own connection, closed at the end: the
/// webhook's sending slots (``WebhookSettings/slotsPerWebhook``) are its connections, and
/// no connection outlives the attempt that checked its address.
struct WebhookTransport: Sendable {
    /// Most bytes of an answer's body read.
    static let maxAnswerBytes = 64 * 1024

    /// The deadline of one attempt (`CRASHGUARD_WEBHOOK_TIMEOUT`).
    var timeout: Duration
    var allowList: WebhookAllowList
    var resolver: WebhookResolver
    var eventLoopGroup: any EventLoopGroup
    /// Whether a resolved address is refused: ``IPAddress/isRefused``; tests that must
    /// connect to a receiver on loopback through a name replace it.
    var refuses: @Sendable (IPAddress) -> Bool = { $0.isRefused }

    /// Sends `body` to `url` with `headers`; never throws: every failure is an outcome.
    func post(url: String, headers: HTTPHeaders, body: [UInt8]) async -> WebhookAttempt {
        do {
            return try await Self.withDeadline(timeout) {
                try await exchange(url: url, headers: headers, body: body)
            }
        } catch {
            return WebhookAttempt(httpStatus: nil, error: Self.classify(error))
        }
    }

    /// The DNS override for the HTTP client: empty when it connects to the URL's host as
    /// written (allow-listed, or an allowed IP literal), else the name mapped to its first
    /// address once every address passed. Throws ``WebhookDeliveryError/addressNotAllowed``
    /// or, when the name has no address, ``WebhookDeliveryError/connectionFailed``.
    func route(_ url: String) async throws -> [String: String] {
        if allowList.allows(url) { return [:] }
        let target: WebhookTarget
        do { target = try WebhookTarget.parse(url) } catch { throw WebhookDeliveryError.addressNotAllowed }
        if target.literal != nil { return [:] }
        let addresses: [IPAddress]
        do {
            addresses = try await resolver.lookup(target.host)
        } catch let error as CancellationError {
            throw error
        } catch {
            throw WebhookDeliveryError.connectionFailed
        }
        guard let first = addresses.first else { throw WebhookDeliveryError.connectionFailed }
        guard !addresses.contains(where: refuses) else { throw WebhookDeliveryError.addressNotAllowed }
        return [target.host: first.description]
    }

    private func exchange(url: String, headers: HTTPHeaders, body: [UInt8]) async throws -> WebhookAttempt {
        var configuration = HTTPClient.Configuration(
            redirectConfiguration: .disallow, timeout: .init(connect: TimeAmount(timeout)))
        configuration.httpVersion = .http1Only
        configuration.dnsOverride = try await route(url)
        // A refused connection is an outcome at once, not retried within the attempt.
        configuration.connectionPool.retryConnectionEstablishment = false
        let client = HTTPClient(eventLoopGroup: eventLoopGroup, configuration: configuration)
        let result: Result<WebhookAttempt, any Error>
        do {
            var request = HTTPClientRequest(url: url)
            request.method = .POST
            request.headers = headers
            request.body = .bytes(ByteBuffer(bytes: body))
            let response = try await client.execute(request, timeout: TimeAmount(timeout))
            // Read to the end or to the limit; leaving the loop early closes the connection.
            var read = 0
            for try await chunk in response.body {
                read += chunk.readableBytes
                if read >= Self.maxAnswerBytes { break }
            }
            let status = Int(response.status.code)
            result = .success(WebhookAttempt(httpStatus: status, error: (200..<300).contains(status) ? nil : .httpStatus(status)))
        } catch {
            result = .failure(error)
        }
        try? await client.shutdown()
        return try result.get()
    }

    /// Runs `operation`, or throws ``WebhookDeliveryError/timeout`` once `deadline` has passed
    /// (the operation is cancelled then, which closes its connection).
    static func withDeadline<T: Sendable>(
        _ deadline: Duration, _ operation: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        try await withThrowingTaskGroup(of: T.self) { group in
            group.addTask { try await operation() }
            group.addTask {
                try await Task.sleep(for: deadline)
                throw WebhookDeliveryError.timeout
            }
            defer { group.cancelAll() }
            return try await group.next()!
        }
    }

    /// The fixed text for an error of the lookup, the connection or the HTTP client.
    static func classify(_ error: any Error) -> WebhookDeliveryError {
        if let error = error as? WebhookDeliveryError { return error }
        if let error = error as? HTTPClientError {
            switch error {
            case .connectTimeout, .deadlineExceeded, .readTimeout, .writeTimeout, .getConnectionFromPoolTimeout:
                return .timeout
            default: return .connectionFailed
            }
        }
        if let error = error as? HTTPParserError, error == .headerOverflow { return .answerTooLarge }
        if let error = error as? ChannelError, case .connectTimeout = error { return .timeout }
        return .connectionFailed
    }
}
