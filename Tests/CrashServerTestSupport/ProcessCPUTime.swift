#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The CPU time this process has used so far, user and system, all threads: what a request
/// cost a server running in the test process. Unlike its wall-clock time, other processes on
/// a loaded machine do not change it, so a test of bounded work compares this with the
/// contract's bound and keeps only a loose wall-clock bound, against waits.
func processCPUTime() -> Duration {
    var usage = rusage()
    #if canImport(Glibc)
    getrusage(RUSAGE_SELF.rawValue, &usage)
    #else
    getrusage(RUSAGE_SELF, &usage)
    #endif
    func duration(_ time: timeval) -> Duration { .seconds(Int64(time.tv_sec)) + .microseconds(Int64(time.tv_usec)) }
    return duration(usage.ru_utime) + duration(usage.ru_stime)
}
