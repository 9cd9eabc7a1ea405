import CrashCompression
import CrashWire
import Foundation

/// Drains the ``DiskQueue`` to `POST /v1/reports`, one batch at a time, oldest first.
///
/// A report leaves the queue only when the server answered 202 (accepted, duplicate or
/// rejected as invalid: a resend could never succeed), or when a single report alone is
/// refused with 400/413. 429, 503, other 5xx and network errors are retried with
/// exponential backoff and full jitter, honouring `Retry-After`; 401 (and any status the
/// contract does not name) stops uploading for this process, logged once, with the queue
/// kept for a later start. A 400 or 413 batch is split in halves until the offender is
/// alone. Drains never overlap: a second caller waits for the running one, then drains
/// whatever is left.
actor Uploader {
    /// What one upload attempt asks the drain loop to do next.
    enum Outcome: Equatable {
        case sent
        case retry(after: Duration?)
        case stop
    }

    let queue: DiskQueue
    let transport: any ReportTransport
    let clock: any ReporterClock
    let endpoint: URL
    let ingestKey: String
    let batchSize: Int
    /// Uncompressed bytes per batch, well under the server's 16 MiB decompressed cap.
    let maxBatchBytes: Int
    let backoff: Backoff
    let log: @Sendable (String) -> Void

    /// Set by a 401 (or an unexpected status): no more uploads in this process.
    private(set) var stopped = false
    private var attempt = 0
    private var running: (id: Int, task: Task<Void, Never>)?
    private var nextRunID = 0
    private var loggedStop = false

    init(
        queue: DiskQueue,
        transport: any ReportTransport,
        clock: any ReporterClock,
        endpoint: URL,
        ingestKey: String,
        batchSize: Int,
        maxBatchBytes: Int = 4 << 20,
        backoff: Backoff = Backoff(),
        log: @escaping @Sendable (String) -> Void
    ) {
        self.queue = queue
        self.transport = transport
        self.clock = clock
        self.endpoint = endpoint
        self.ingestKey = ingestKey
        self.batchSize = min(max(batchSize, 1), WireProtocol.maxReportsPerBatch)
        self.maxBatchBytes = maxBatchBytes
        self.backoff = backoff
        self.log = log
    }

    /// Uploads until the queue is empty, uploading stopped, or the drain was cancelled.
    func drain() async {
        while let current = running {
            await current.task.value
            if running?.id == current.id { running = nil }
        }
        guard !stopped, queue.count > 0 else { return }
        nextRunID += 1
        let id = nextRunID
        let task = Task { await self.drainLoop() }
        running = (id, task)
        await task.value
        if running?.id == id { running = nil }
    }

    /// Cancels a running drain (its backoff sleep ends at once).
    func cancel() { running?.task.cancel() }

    private func drainLoop() async {
        while !stopped, !Task.isCancelled {
            let batch = queue.peek(limit: batchSize, maxBytes: maxBatchBytes)
            if batch.isEmpty { return }
            switch await send(batch) {
            case .sent:
                attempt = 0
            case .stop:
                stopped = true
                return
            case .retry(let retryAfter):
                let delay = backoff.delay(attempt: attempt, retryAfter: retryAfter)
                attempt += 1
                do { try await clock.sleep(for: delay) } catch { return }
            }
        }
    }

    /// One `POST` of `batch`, splitting it on 400/413.
    func send(_ batch: [DiskQueue.Entry]) async -> Outcome {
        var entries: [DiskQueue.Entry] = []
        var reports: [Report] = []
        var unreadable: [DiskQueue.Entry] = []
        let decoder = JSONDecoder.crashWire()
        for entry in batch {
            if let data = queue.read(entry), let report = try? decoder.decode(Report.self, from: data) {
                entries.append(entry)
                reports.append(report)
            } else {
                unreadable.append(entry)
            }
        }
        if !unreadable.isEmpty {
            log("removed \(unreadable.count) unreadable queued report(s)")
            queue.remove(unreadable)
        }
        guard !reports.isEmpty else { return .sent }

        // The drop count rides in the first report's context until a 202 acknowledges it.
        let dropped = queue.dropped
        var droppedSent = 0
        if dropped > 0 {
            var context = reports[0].context ?? [:]
            if context.count < ReportLimits.maxContextEntries || context[ContextKey.dropped] != nil {
                context[ContextKey.dropped] = String(dropped)
                reports[0].context = context
                droppedSent = dropped
            }
        }

        let request: UploadRequest
        do {
            let json = try JSONEncoder.crashWire().encode(ReportBatch(reports: reports))
            let body = try Deflater.compress(Array(json), format: .gzip)
            request = UploadRequest(
                url: endpoint,
                headers: [
                    WireProtocol.ingestKeyHeader: ingestKey,
                    "Content-Type": WireProtocol.mediaType,
                    "Content-Encoding": "gzip",
                ],
                body: Data(body)
            )
        } catch {
            log("could not encode a batch: \(error)")
            return .retry(after: nil)
        }

        let response: UploadResponse
        do {
            response = try await transport.send(request)
        } catch {
            return .retry(after: nil)
        }

        switch response.status {
        case 202:
            if let result = try? JSONDecoder().decode(IngestResponse.self, from: response.body) {
                for rejection in result.rejected where reports.indices.contains(rejection.index) {
                    log("server rejected report \(reports[rejection.index].id.uuidString.lowercased()): \(rejection.error)")
                }
            }
            queue.remove(entries)
            if droppedSent > 0 { queue.acknowledgeDropped(droppedSent) }
            return .sent
        case 400, 413:
            if entries.count > 1 {
                let middle = entries.count / 2
                let first = await send(Array(entries[..<middle]))
                guard first == .sent else { return first }
                return await send(Array(entries[middle...]))
            }
            log("server refused report \(reports[0].id.uuidString.lowercased()) (\(response.status)); removed it")
            queue.remove(entries)
            return .sent
        case 401:
            logStopOnce("server answered 401: the ingest key is missing or unknown; uploads stop until the next start, reports stay queued")
            return .stop
        case 408, 429, 500...599:
            return .retry(after: Backoff.parseRetryAfter(response.headers["retry-after"], now: clock.now))
        default:
            logStopOnce("server answered \(response.status); uploads stop until the next start, reports stay queued")
            return .stop
        }
    }

    private func logStopOnce(_ message: String) {
        guard !loggedStop else { return }
        loggedStop = true
        log(message)
    }
}

/// Context keys the SDK itself writes.
enum ContextKey {
    /// Reports dropped from a full queue since the last acknowledged upload.
    static let dropped = "crashguard.dropped"
}
