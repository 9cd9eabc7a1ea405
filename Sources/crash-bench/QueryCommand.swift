import ArgumentParser
import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix

/// `crash-bench query`: latency of the query API over HTTP against a running server.
///
/// Requests, each run `runs` times one after another on one connection after a few warm-up
/// calls: top-50 over the default 7 days; the same filtered by an app version (the top group's
/// newest, or `--version`), by search terms, by `environment=` (production, staging, and
/// production with the version); top-25 with the per-row trend (hourly over 7 days, daily over
/// 30 days); one group's detail (the top group), also under `environment=`; stats, hourly over 7
/// days, also split into fatal and not; and the dashboard's pages, signed in with the read token:
/// the project's overview (7 and 30 days), top crashes (7 days, 25 rows with hourly sparklines;
/// 30 days with daily ones; 7 days of production) and the top group's crash page. Prints
/// p50/p95/max per request and a ROW line each.
///
/// With `--releases`, the release-health requests instead (release-health.md): the releases
/// list over the default window and over 30 days, the latter also filtered by app; the most
/// adopted release's detail (hourly over the default window, daily over 30 days); and the
/// dashboard's Releases pages for both windows.
struct QueryCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "query",
        abstract: "Query API and dashboard latency: top-50, filtered top-50, per-row trends, crash detail, stats, dashboard pages (p50/p95/max)."
    )

    @Option(help: "Server base URL.") var url = "http://127.0.0.1:8080"
    @Option(help: "Project slug.") var project: String
    @Option(help: "The project's read token.") var readToken: String
    @Option(help: "Timed runs per request.") var runs = 50
    @Option(help: "Warm-up runs per request (not timed).") var warmup = 3
    @Option(help: "Stop timing a request after this many seconds (at least 3 runs).") var caseSeconds = 120.0
    @Option(help: "App version for the filtered top-50 (default: the top group's newest).") var version: String?
    @Option(help: "Server process id: sample its RSS and CPU.") var serverPid: Int32?
    @Flag(help: "Measure the releases list and detail instead of the crash queries.") var releases = false
    @Option(help: "App id for the filtered releases list.") var app = "com.example.demo"

    func run() async throws {
        // No redirects followed: the dashboard's sign-in answers 303 with the session cookie.
        var configuration = HTTPClient.Configuration()
        configuration.redirectConfiguration = .disallow
        let client = HTTPClient(eventLoopGroup: MultiThreadedEventLoopGroup.singleton, configuration: configuration)
        do {
            if releases { try await measureReleases(client) } else { try await measureAll(client) }
        } catch {
            try? await client.shutdown()
            throw error
        }
        try await client.shutdown()
    }

    private func measureAll(_ client: HTTPClient) async throws {
        let base = url + "/v1/projects/\(project)"
        let top = try await get(client, base + "/crashes?limit=50")
        guard let groups = top.json["groups"] as? [[String: Any]], let first = groups.first else {
            throw BenchError("no crash groups in the last 7 days of \(project): seed or load first")
        }
        let id = first["id"].map { "\($0)" } ?? ""
        let filterVersion = version ?? (first["versions"] as? [String])?.first ?? "1.0.0"
        let versionQuery = filterVersion.addingPercentEncoding(withAllowedCharacters: .urlQueryAllowed) ?? filterVersion
        let session = try await signIn(client)
        let monthAgo = ISO8601DateFormatter().string(from: Date().addingTimeInterval(-30 * 86_400))
            .replacingOccurrences(of: ":", with: "%3A")
        // Three search terms (triage.md): a group status, a report term on the rollups and a
        // word of the top group's title.
        let word = (first["title"] as? String)?.split(separator: " ").first.map(String.init) ?? "index"
        let search = "is:open release:\(filterVersion) \"\(word)\""
        let searchQuery = search.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? search
        let cases: [(String, String, String?)] = [
            ("top-50 (7 days)", base + "/crashes?limit=50", nil),
            ("top-50 version=\(filterVersion)", base + "/crashes?limit=50&version=\(versionQuery)", nil),
            ("top-50 q=<3 terms> (7 days)", base + "/crashes?limit=50&q=\(searchQuery)", nil),
            ("top-50 environment= (7 days)", base + "/crashes?limit=50&environment=production", nil),
            ("top-50 environment=staging (7 days)", base + "/crashes?limit=50&environment=staging", nil),
            ("top-50 environment= version=", base + "/crashes?limit=50&environment=production&version=\(versionQuery)", nil),
            ("top-25 trend=hour (7 days)", base + "/crashes?limit=25&trend=hour", nil),
            ("top-25 trend=hour environment= (7 days)", base + "/crashes?limit=25&trend=hour&environment=production", nil),
            ("top-25 trend=day (30 days)", base + "/crashes?limit=25&trend=day&from=\(monthAgo)", nil),
            ("crash detail (7 days)", base + "/crashes/\(id)", nil),
            ("crash detail environment= (7 days)", base + "/crashes/\(id)?environment=production", nil),
            ("stats hourly (7 days)", base + "/stats?interval=hour", nil),
            ("stats hourly groupBy=fatal (7 days)", base + "/stats?interval=hour&groupBy=fatal", nil),
            ("dashboard overview (7 days)", url + "/projects/\(project)", session),
            ("dashboard overview (30 days)", url + "/projects/\(project)?window=30d", session),
            ("dashboard top crashes (7 days)", url + "/projects/\(project)/crashes", session),
            ("dashboard top crashes (30 days)", url + "/projects/\(project)/crashes?window=30d", session),
            ("dashboard top crashes environment=", url + "/projects/\(project)/crashes?environment=production", session),
            ("dashboard crash page (7 days)", url + "/projects/\(project)/crashes/\(id)", session),
        ]
        print("query: \(project), \(groups.count) groups on the first page, top group \(id) with \(first["count"] ?? "?") reports; q=\(search)")
        try await measure(client, cases)
    }

    private func measureReleases(_ client: HTTPClient) async throws {
        let base = url + "/v1/projects/\(project)/releases"
        let monthAgo = ISO8601DateFormatter().string(from: Date().addingTimeInterval(-30 * 86_400))
            .replacingOccurrences(of: ":", with: "%3A")
        let list = try await get(client, base + "?limit=1")
        guard let rows = list.json["releases"] as? [[String: Any]], !rows.isEmpty else {
            throw BenchError("no releases in the last 7 days of \(project): seed with --sessions first")
        }
        let top = rows[0]  // most sessions first
        let version = self.version ?? (top["version"] as? String ?? "")
        let path = version.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? version
        let appQuery = app.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? app
        let session = try await signIn(client)
        let dashboard = url + "/projects/\(project)/releases"
        let cases: [(String, String, String?)] = [
            ("releases (default window)", base, nil),
            ("releases (30 days)", base + "?from=\(monthAgo)", nil),
            ("releases app= (30 days)", base + "?from=\(monthAgo)&app=\(appQuery)", nil),
            ("release hourly (default window)", base + "/\(path)?interval=hour", nil),
            ("release daily (30 days)", base + "/\(path)?interval=day&from=\(monthAgo)", nil),
            ("dashboard releases (default)", dashboard, session),
            ("dashboard releases (30 days)", dashboard + "?window=30d", session),
            ("dashboard release (default)", dashboard + "/\(path)", session),
            ("dashboard release (30 days)", dashboard + "/\(path)?window=30d", session),
        ]
        print(
            "query: \(project), detail of \(version) (the most sessions in the last 7 days: \(top["sessions"] ?? "?"))")
        try await measure(client, cases)
    }

    /// Times each case `runs` times after `warmup` calls; p50/p95/max and a ROW line each.
    private func measure(_ client: HTTPClient, _ cases: [(String, String, String?)]) async throws {
        let sampler = ProcessSampler(pid: serverPid)
        for (name, target, cookie) in cases {
            // A slow request gets fewer runs: warm-up stops after one call over a second, timing
            // after --case-seconds (at least 3 runs).
            let caseStart = ContinuousClock.now
            for _ in 0..<warmup {
                let start = ContinuousClock.now
                guard (try? await get(client, target, cookie: cookie)) != nil, ContinuousClock.now - start < .seconds(1) else { break }
            }
            var samples: [Double] = []
            do {
                for i in 0..<runs {
                    if i >= 3 && Bench.seconds(ContinuousClock.now - caseStart) > caseSeconds { break }
                    let start = ContinuousClock.now
                    _ = try await get(client, target, cookie: cookie)
                    samples.append(Bench.seconds(ContinuousClock.now - start))
                }
            } catch {
                // A request that fails (e.g. past the server's query deadline) is reported; the others still run.
                print(name.padding(toLength: 32, withPad: " ", startingAt: 0) + " FAILED after \(samples.count) runs: \(error)")
                print("ROW|\(name)|failed|||\(samples.count)")
                continue
            }
            let l = Bench.Latency(samples)
            print(
                name.padding(toLength: 32, withPad: " ", startingAt: 0)
                    + String(format: " p50 %7.1f ms  p95 %7.1f ms  max %7.1f ms  (%d runs)", l.p50, l.p95, l.max, samples.count))
            print("ROW|\(name)|" + String(format: "%.1f|%.1f|%.1f", l.p50, l.p95, l.max) + "|\(samples.count)")
        }
        if let usage = sampler?.finish() {
            print(String(format: "server during queries: peak RSS %.1f MB", Double(usage.peakRSS) / 1_048_576))
        }
    }

    /// Signs in to the dashboard through its form; the session cookie (`name=value`). The names
    /// carry the `__Host-` prefix unless the server's public URL is plain http on loopback.
    private func signIn(_ client: HTTPClient) async throws -> String {
        let form = try await client.execute(HTTPClientRequest(url: url + "/"), timeout: .seconds(60))
        let html = String(buffer: try await form.body.collect(upTo: 1 << 20))
        let pre = form.headers["set-cookie"].first { $0.hasPrefix("cg_signin=") || $0.hasPrefix("__Host-cg_signin=") }?.split(separator: ";").first
            .map(String.init)
        guard let pre, let csrf = html.firstMatch(of: /name="csrf" value="([^"]+)"/)?.1 else {
            throw BenchError("dashboard: no sign-in form at \(url)/")
        }
        var request = HTTPClientRequest(url: url + "/signin")
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded")
        request.headers.add(name: "Cookie", value: pre)
        let token = readToken.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? readToken
        request.body = .bytes(ByteBuffer(string: "csrf=\(csrf)&token=\(token)"))
        let response = try await client.execute(request, timeout: .seconds(60))
        guard response.status.code == 303,
            let session = response.headers["set-cookie"].first(where: { $0.hasPrefix("cg_session=") || $0.hasPrefix("__Host-cg_session=") })?.split(
                separator: ";"
            ).first
        else { throw BenchError("dashboard sign-in: \(response.status.code)") }
        return String(session)
    }

    private func get(_ client: HTTPClient, _ target: String, cookie: String? = nil) async throws -> (status: UInt, json: [String: Any]) {
        var request = HTTPClientRequest(url: target)
        request.headers.add(name: "Authorization", value: "Bearer \(readToken)")
        if let cookie { request.headers.add(name: "Cookie", value: cookie) }
        let response = try await client.execute(request, timeout: .seconds(60))
        let body = try await response.body.collect(upTo: 64 << 20)
        guard response.status.code == 200 else {
            throw BenchError("GET \(target): \(response.status.code) \(String(buffer: body).prefix(300))")
        }
        let json = (try? JSONSerialization.jsonObject(with: Data(body.readableBytesView))) as? [String: Any] ?? [:]
        return (response.status.code, json)
    }
}
