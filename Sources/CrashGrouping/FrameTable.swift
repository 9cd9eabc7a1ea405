/// The lists grouping v2 reads to tell a stack's app frames from the system's and from the
/// crash machinery. This file is data: extend a list by adding a line (a list change is a
/// grouping rule change, so it ships as a new grouping version; see `docs/grouping.md`,
/// which documents every list).
///
/// Patterns are matched against the whole name, with `*` standing for any text: `abc`
/// (exactly), `abc*` (starts with), `*abc` (ends with), `*abc*` (contains), `a*b` (starts
/// with `a` and ends with `b`).
public enum FrameTable {
    /// Frames of the crash and exception machinery: they say how the process died, not
    /// where the bug is, and are skipped whatever image they are in (the SDK may be linked
    /// into the app's own binary). Matched against the frame's symbol.
    public static let machinerySymbols: [String] = [
        // Objective-C and C++ exceptions (Apple).
        "__exceptionPreprocess", "objc_exception_throw", "objc_exception_rethrow", "_objc_terminate*",
        "+[NSException raise*", "-[NSException raise*", "_CFThrowFormattedException", "__CFThrowFormattedException",
        "-[NSAssertionHandler *", "_userInfoForFileAndLine*", "___forwarding___", "_CF_forwarding_prep_*",
        "-[NSObject(NSObject) doesNotRecognizeSelector:]", "+[NSObject(NSObject) doesNotRecognizeSelector:]",
        "__cxa_throw", "__cxa_rethrow", "std::terminate*", "std::__terminate*", "__cxxabiv1::*", "demangling_terminate_handler*",
        // The same on Linux: libstdc++'s terminate handler, GNUstep's uncaught-exception handler.
        "__cxa_call_terminate*", "__gnu_cxx::__verbose_terminate_handler*", "_NSFoundationUncaughtExceptionHandler*",
        "_Unwind_RaiseException*", "CGExceptionUncaught*",
        // Signals, abort and assertions (libc on Darwin and Linux).
        "abort", "__abort", "raise", "gsignal", "__GI_raise", "__GI_abort", "pthread_kill", "__pthread_kill",
        "__pthread_kill_implementation*", "__pthread_kill_internal*", "__assert_rtn", "__assert_fail", "__assert_fail_base*",
        "__libc_message*", "__stack_chk_fail", "__fortify_fail*", "__chk_fail", "_os_crash*", "__os_crash*",
        "_dispatch_assert_queue_fail", "dispatch_assert_queue*", "__dispatch_assert_queue*", "_dispatch_queue_assert*",
        // The Swift runtime's traps (`fatalError`, `precondition`, failed casts, `try!`).
        "swift_*Failure", "*_assertionFailure*", "*fatalErrorMessage*", "Swift.fatalError*", "Swift.preconditionFailure*",
        "Swift.assertionFailure*", "swift::fatalError*", "swift::warningv*", "swift_unexpectedError*", "swift_errorInMain*",
        "_swift_stdlib_reportFatalError*", "swift_reportError*", "_swift_runtime_on_report*", "$ss17_assertionFailure*",
        "$ss18_fatalErrorMessage*", "$ss10fatalError*",
        // CrashGuard's own frames: the guard that caught the error and its recorder.
        "*CrashGuard.*", "*10CrashGuard*", "*GuardRecorder*", "*callStackSymbols*", "ccrash_*",
    ]

    /// Images that are crash machinery as a whole (the SDK built as its own framework).
    public static let machineryImages: [String] = ["CrashGuard", "CrashGuard.framework*", "libCrashGuard*"]

    /// Images of the system: Apple's frameworks and libraries, the C library, the Swift
    /// runtime and Foundation on Linux, and language runtimes' standard libraries and
    /// common frameworks (Python modules and Node modules, as Sentry's SDKs name them).
    /// Matched against the image's file name (the part after the last `/`), and, for a
    /// dotted or path-like module name, against its first component (`django` of
    /// `django.core.handlers.base`, `node` of `node:internal/timers`).
    public static let systemImages: [String] = [
        // Apple: libraries.
        "libsystem_*", "libdispatch*", "libobjc*", "libswift*", "libc++*", "libdyld*", "dyld", "libxpc*",
        "???", "libSystem*", "libcompiler_rt*", "libsqlite3*", "libz*", "libicucore*", "libnetwork*", "libboringssl*",
        // Apple: frameworks.
        "CoreFoundation", "Foundation", "UIKit", "UIKitCore", "AppKit", "GraphicsServices", "FrontBoardServices",
        "BaseBoard", "QuartzCore", "CoreGraphics", "CoreText", "CoreData", "CoreAnimation", "CoreLocation", "CoreMedia",
        "CoreImage", "CoreML", "CoreServices", "CoreTelephony", "CFNetwork", "Security", "SwiftUI", "SwiftUICore",
        "AttributeGraph", "Combine", "WebKit", "WebCore", "JavaScriptCore", "AVFoundation", "AVFCore", "AudioToolbox",
        "MapKit", "Metal", "MetalKit", "StoreKit", "UserNotifications", "PhotosUI", "Photos", "ImageIO", "IOKit",
        "libswiftCore", "RunningBoardServices", "UIFoundation", "CollectionViewCore", "Network", "os_log",
        // Linux: the C library, the dynamic loader, and the Swift toolchain's libraries.
        "libc.so*", "libc-*", "ld-linux*", "ld-musl*", "libpthread*", "libm.so*", "libdl.so*", "libgcc_s*", "libstdc++*",
        "libFoundation*", "libFoundationEssentials*", "libFoundationInternationalization*", "lib_FoundationICU*",
        "libBlocksRuntime*", "libicu*", "libxml2*", "libcurl*", "libssl*", "libcrypto*", "libgnustep-base*", "libffi*",
        // Python (Sentry maps a frame to `function (module)`).
        "threading", "asyncio", "concurrent", "multiprocessing", "selectors", "socketserver", "socket", "ssl",
        "http", "urllib", "email", "json", "logging", "contextlib", "functools", "importlib", "runpy", "site",
        "django", "flask", "werkzeug", "gunicorn", "uvicorn", "starlette", "fastapi", "celery", "kombu", "billiard",
        "sqlalchemy", "psycopg2", "psycopg", "requests", "urllib3", "httpx", "anyio", "aiohttp", "jinja2", "pydantic",
        "sentry_sdk", "rest_framework", "grpc",
        // JavaScript (Node and browsers).
        "node", "internal", "node_modules", "events", "timers", "process", "express", "react-dom", "react",
        "scheduler", "zone.js", "rxjs", "next", "vue", "webpack", "regenerator-runtime", "core-js", "tslib",
    ]

    /// Paths that are the system wherever they occur in an image or module path.
    public static let systemPaths: [String] = [
        "*/node_modules/*", "*/site-packages/*", "*/dist-packages/*", "/usr/lib/*", "/lib/*", "/lib64/*",
        "/System/Library/*", "/usr/share/swift/*", "*/usr/lib/swift/*", "*/lib/python3*",
    ]
}
