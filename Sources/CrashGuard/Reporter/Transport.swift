import CrashWire
import Foundation

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// One upload: the ingest URL, headers and the (compressed) body.
public struct UploadRequest: Sendable {
    /// `<server>/v1/reports`.
    public var url: URL
    /// `X-Crash-Key`, `Content-Type`, `Content-Encoding`.
    public var headers: [String: String]
    /// The gzip-compressed `{"reports": [...]}`.
    public var body: Data

    /// Creates a request.
    public init(url: URL, headers: [String: String], body: Data) {
        self.url = url
        self.headers = headers
        self.body = body
    }
}

/// The server's answer to an upload.
public struct UploadResponse: Sendable {
    /// HTTP status.
    public var status: Int
    /// Response headers, names lowercased.
    public var headers: [String: String]
    /// Response body.
    public var body: Data

    /// Creates a response; header names are lowercased.
    public init(status: Int, headers: [String: String] = [:], body: Data = Data()) {
        self.status = status
        self.headers = Dictionary(headers.map { ($0.key.lowercased(), $0.value) }, uniquingKeysWith: { a, _ in a })
        self.body = body
    }
}

/// Sends one upload and returns the HTTP answer; throws only when there was none (network
/// error, timeout). The reporter's seam: tests inject a fake, apps may bring their own.
public protocol ReportTransport: Sendable {
    /// Sends `request` and waits for the response.
    func send(_ request: UploadRequest) async throws -> UploadResponse
}

/// The default transport: a `POST` through `URLSession` (FoundationNetworking on Linux).
public struct URLSessionTransport: ReportTransport {
    private let session: URLSession

    /// Creates a transport over an ephemeral session with a request timeout (default 30 s).
    public init(timeout: TimeInterval = 30) {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = timeout
        configuration.timeoutIntervalForResource = timeout * 2
        configuration.httpCookieStorage = nil
        configuration.urlCache = nil
        self.session = URLSession(configuration: configuration)
    }

    /// Creates a transport over the given session.
    public init(session: URLSession) { self.session = session }

    public func send(_ request: UploadRequest) async throws -> UploadResponse {
        var urlRequest = URLRequest(url: request.url)
        urlRequest.httpMethod = "POST"
        for (name, value) in request.headers { urlRequest.setValue(value, forHTTPHeaderField: name) }
        urlRequest.httpBody = request.body
        let session = self.session
        return try await withCheckedThrowingContinuation { continuation in
            let task = session.dataTask(with: urlRequest) { data, response, error in
                if let error {
                    continuation.resume(throwing: error)
                } else if let http = response as? HTTPURLResponse {
                    var headers: [String: String] = [:]
                    for (key, value) in http.allHeaderFields {
                        headers[String(describing: key).lowercased()] = String(describing: value)
                    }
                    continuation.resume(
                        returning: UploadResponse(status: http.statusCode, headers: headers, body: data ?? Data()))
                } else {
                    continuation.resume(throwing: URLError(.badServerResponse))
                }
            }
            task.resume()
        }
    }
}
