import Testing

@testable import CrashServer
@testable import CrashServerTestSupport

@Suite struct RequestCounterTests {
    /// Each method, route and status counts on its own line, the same counter every time, in
    /// every copy of the metrics.
    @Test func countsEachCombinationOnce() {
        let metrics = ServerMetrics()
        let copy = metrics
        for _ in 0..<3 { metrics.countRequest(method: "POST", route: "/v1/reports", status: 202) }
        copy.countRequest(method: "POST", route: "/v1/reports", status: 202)
        copy.countRequest(method: "POST", route: "/v1/reports", status: 429)
        metrics.countRequest(method: "GET", route: "/healthz", status: 202)
        let lines = String(decoding: metrics.render(), as: UTF8.self).split(separator: "\n")
            .filter { $0.hasPrefix("crashguard_http_requests_total{") }
        #expect(
            Set(lines) == [
                #"crashguard_http_requests_total{method="POST",route="/v1/reports",status="202"} 4"#,
                #"crashguard_http_requests_total{method="POST",route="/v1/reports",status="429"} 1"#,
                #"crashguard_http_requests_total{method="GET",route="/healthz",status="202"} 1"#,
            ])
    }
}
