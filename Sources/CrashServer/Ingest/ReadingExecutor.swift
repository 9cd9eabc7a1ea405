import NIOPosix

/// NIO's shared thread pool as a task executor: where the bodies too large to read on Swift's
/// cooperative threads are read (``IngestBody/read(_:into:holding:)``,
/// ``IngestBody/reading(_:_:)``). The operating system shares the cores between these threads
/// and the cooperative ones, so `/healthz`, queries and small ingests go on while a large body
/// is read.
final class ReadingExecutor: TaskExecutor {
    static let shared = ReadingExecutor(pool: .singleton)

    private let pool: NIOThreadPool

    init(pool: NIOThreadPool) {
        self.pool = pool
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let executor = asUnownedTaskExecutor()
        pool.submit { _ in job.runSynchronously(on: executor) }
    }
}
