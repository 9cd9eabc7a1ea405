import CoreMetrics
import Hummingbird
import Metrics
import Prometheus
import Synchronization

/// The server's metrics, through swift-metrics over a Prometheus registry owned by
/// this server (not the process-wide `MetricsSystem`, so tests can run many servers).
struct ServerMetrics: Sendable {
    /// The registry `/metrics` renders.
    let registry: PrometheusCollectorRegistry
    let factory: PrometheusMetricsFactory
    /// Reports newly stored.
    let reportsAccepted: Metrics.Counter
    /// Reports whose id was already stored.
    let reportsDuplicate: Metrics.Counter
    /// Reports refused by validation.
    let reportsRejected: Metrics.Counter
    /// Reports per ingest request.
    let requestReports: Recorder
    /// Reports per group-commit transaction.
    let batchSize: Recorder
    /// Time from BEGIN to COMMIT of a group-commit transaction.
    let commitLatency: Metrics.Timer
    /// Reports waiting for a commit.
    let queueDepth: Metrics.Gauge
    /// Reads the current queue depth when `/metrics` is rendered (see `observeQueue(of:)`).
    private let queueDepthSource = QueueDepthSource()
    /// Run at every render, before the registry is emitted (see `addRenderHook(_:)`).
    private let renderHooks = RenderHooks()
    /// `crashguard_http_requests_total` of each method, route and status seen.
    private let requestCounters = RequestCounters()

    init() {
        registry = PrometheusCollectorRegistry()
        var factory = PrometheusMetricsFactory(registry: registry)
        let sizes: [Double] = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000]
        factory.valueHistogramBuckets["crashguard_ingest_request_reports"] = sizes
        factory.valueHistogramBuckets["crashguard_ingest_batch_reports"] = sizes
        factory.durationHistogramBuckets["crashguard_ingest_commit_seconds"] = [
            .milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10), .milliseconds(20),
            .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .seconds(5),
        ]
        self.factory = factory
        reportsAccepted = Metrics.Counter(label: "crashguard_reports_total", dimensions: [("outcome", "accepted")], factory: factory)
        reportsDuplicate = Metrics.Counter(label: "crashguard_reports_total", dimensions: [("outcome", "duplicate")], factory: factory)
        reportsRejected = Metrics.Counter(label: "crashguard_reports_total", dimensions: [("outcome", "rejected")], factory: factory)
        requestReports = Recorder(label: "crashguard_ingest_request_reports", factory: factory)
        batchSize = Recorder(label: "crashguard_ingest_batch_reports", factory: factory)
        commitLatency = Metrics.Timer(label: "crashguard_ingest_commit_seconds", factory: factory)
        queueDepth = Metrics.Gauge(label: "crashguard_ingest_queue_reports", factory: factory)
    }

    /// Records one ingest request's outcome.
    func recordIngest(reports: Int, accepted: Int, duplicates: Int, rejected: Int) {
        requestReports.record(reports)
        reportsAccepted.increment(by: accepted)
        reportsDuplicate.increment(by: duplicates)
        reportsRejected.increment(by: rejected)
    }

    /// Records one committed group-commit transaction.
    func recordCommit(reports: Int, duration: Duration) {
        batchSize.record(reports)
        let (seconds, attoseconds) = duration.components
        commitLatency.recordNanoseconds(seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
    }

    /// Samples `batcher`'s queue depth into `crashguard_ingest_queue_reports` at every
    /// render: the gauge's only source, read live, so it falls as batches are taken for commit.
    func observeQueue(of batcher: IngestBatcher) {
        queueDepthSource.read.withLock { $0 = { [weak batcher] in batcher?.queuedReports ?? 0 } }
    }

    /// Runs `hook` at every render: for gauges sampled from another component.
    func addRenderHook(_ hook: @escaping @Sendable () -> Void) {
        renderHooks.hooks.withLock { $0.append(hook) }
    }

    /// Counts one HTTP request by route pattern, method and status. Each combination's counter
    /// is made once: making it per request (the registry's lookup under its lock, the name and
    /// label checks) was 0.6 % of the server's CPU per single-report request
    /// (docs/performance.md).
    func countRequest(method: String, route: String, status: Int) {
        let key = RequestCounters.Key(method: method, route: route, status: status)
        let counter = requestCounters.counters.withLock { counters in
            if let counter = counters[key] { return counter }
            let counter = Metrics.Counter(
                label: "crashguard_http_requests_total",
                dimensions: [("method", method), ("route", route), ("status", String(status))],
                factory: factory)
            counters[key] = counter
            return counter
        }
        counter.increment()
    }

    /// The Prometheus text exposition of every metric.
    func render() -> [UInt8] {
        if let read = queueDepthSource.read.withLock({ $0 }) { queueDepth.record(read()) }
        for hook in renderHooks.hooks.withLock({ $0 }) { hook() }
        var buffer: [UInt8] = []
        registry.emit(into: &buffer)
        return buffer
    }
}

/// Counts every request in ``ServerMetrics``, by route pattern so ids don't explode labels.
struct MetricsMiddleware<Context: RequestContext>: RouterMiddleware {
    let metrics: ServerMetrics

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            let response = try await next(request, context)
            metrics.countRequest(method: request.method.rawValue, route: context.endpointPath ?? "unmatched", status: response.status.code)
            return response
        } catch let error as any HTTPResponseError {
            metrics.countRequest(method: request.method.rawValue, route: context.endpointPath ?? "unmatched", status: error.status.code)
            throw error
        } catch {
            metrics.countRequest(method: request.method.rawValue, route: context.endpointPath ?? "unmatched", status: 500)
            throw error
        }
    }
}

/// Where the queue depth is read from; a reference so every copy of `ServerMetrics` shares it.
private final class RenderHooks: Sendable {
    let hooks = Mutex<[@Sendable () -> Void]>([])
}

/// The request counters made so far; a reference so every copy of `ServerMetrics` shares them.
/// As many as the registry holds: routes are patterns, methods and statuses few.
private final class RequestCounters: Sendable {
    struct Key: Hashable {
        var method: String
        var route: String
        var status: Int
    }

    let counters = Mutex<[Key: Metrics.Counter]>([:])
}

private final class QueueDepthSource: Sendable {
    let read = Mutex<(@Sendable () -> Int)?>(nil)
}
