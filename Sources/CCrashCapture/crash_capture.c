// The signal handler and its helpers. Everything reachable from `ccrash_handler` is
// async-signal-safe: no malloc, no locks, no stdio; only write, fsync, sigaction, raise,
// clock_gettime, nanosleep and the unwinder (warmed up at install time so its first use
// does not load libgcc from inside the handler).
#if defined(__linux__)
#define _GNU_SOURCE
#endif

#include "ccrash_capture.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#if __has_include(<execinfo.h>)
#include <execinfo.h>
#define CCRASH_HAVE_BACKTRACE 1
#endif

#if defined(__APPLE__)
#include <sys/ucontext.h>
#elif defined(__linux__)
#include <ucontext.h>
#endif

static const int kSignals[] = {SIGSEGV, SIGBUS, SIGILL, SIGTRAP, SIGABRT, SIGFPE};
#define CCRASH_SIGNAL_COUNT ((int)(sizeof(kSignals) / sizeof(kSignals[0])))

static struct sigaction g_previous[CCRASH_SIGNAL_COUNT];
static atomic_int g_fd = -1;
static atomic_int g_installed = 0;
/// 0: idle, 1: a thread is writing the record, 2: written.
static atomic_int g_state = 0;
/// `std::atomic<const char *> *` from the Swift runtime, or NULL.
static void *g_fatal_message_slot = NULL;
static void *g_frames[CCRASH_MAX_FRAMES + 8];

// MARK: - Async-signal-safe writing

typedef struct {
    int fd;
    size_t length;
    char buffer[512];
} ccrash_writer;

static void w_flush(ccrash_writer *w) {
    size_t done = 0;
    while (done < w->length) {
        ssize_t n = write(w->fd, w->buffer + done, w->length - done);
        if (n < 0) {
            if (errno == EINTR) continue;
            break;
        }
        done += (size_t)n;
    }
    w->length = 0;
}

static void w_bytes(ccrash_writer *w, const char *bytes, size_t length) {
    for (size_t i = 0; i < length; i++) {
        if (w->length == sizeof(w->buffer)) w_flush(w);
        w->buffer[w->length++] = bytes[i];
    }
}

static size_t c_strlen(const char *s, size_t max) {
    size_t n = 0;
    while (n < max && s[n] != 0) n++;
    return n;
}

static void w_str(ccrash_writer *w, const char *s) { w_bytes(w, s, c_strlen(s, 4096)); }

static void w_hex(ccrash_writer *w, uintptr_t value) {
    char digits[2 + sizeof(uintptr_t) * 2];
    int i = (int)sizeof(digits);
    do {
        digits[--i] = "0123456789abcdef"[value & 0xf];
        value >>= 4;
    } while (value != 0 && i > 2);
    digits[--i] = 'x';
    digits[--i] = '0';
    w_bytes(w, digits + i, sizeof(digits) - (size_t)i);
}

static void w_dec(ccrash_writer *w, long long value) {
    char digits[24];
    int i = (int)sizeof(digits);
    unsigned long long v = value < 0 ? (unsigned long long)(-(value + 1)) + 1 : (unsigned long long)value;
    do {
        digits[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    if (value < 0) digits[--i] = '-';
    w_bytes(w, digits + i, sizeof(digits) - (size_t)i);
}

// MARK: - The handler

static uintptr_t program_counter(void *context) {
    if (context == NULL) return 0;
    ucontext_t *uc = (ucontext_t *)context;
#if defined(__linux__) && defined(__x86_64__)
    return (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
#elif defined(__linux__) && defined(__aarch64__)
    return (uintptr_t)uc->uc_mcontext.pc;
#elif defined(__APPLE__) && defined(__x86_64__)
    return (uintptr_t)uc->uc_mcontext->__ss.__rip;
#elif defined(__APPLE__) && defined(__arm64__)
#if defined(__darwin_arm_thread_state64_get_pc)
    return (uintptr_t)__darwin_arm_thread_state64_get_pc(uc->uc_mcontext->__ss);
#else
    return (uintptr_t)uc->uc_mcontext->__ss.__pc;
#endif
#else
    (void)uc;
    return 0;
#endif
}

static int signal_index(int sig) {
    for (int i = 0; i < CCRASH_SIGNAL_COUNT; i++)
        if (kSignals[i] == sig) return i;
    return -1;
}

static void write_record(int sig, siginfo_t *info, void *context) {
    int fd = atomic_load(&g_fd);
    if (fd < 0) return;
    ccrash_writer w;
    w.fd = fd;
    w.length = 0;
    uintptr_t pc = program_counter(context);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);

    w_str(&w, "CGCRASH 1\ntime ");
    w_dec(&w, (long long)now.tv_sec);
    w_str(&w, " ");
    w_dec(&w, (long long)(now.tv_nsec / 1000000));
    w_str(&w, "\nsignal ");
    w_dec(&w, sig);
    w_str(&w, "\ncode ");
    w_dec(&w, info ? info->si_code : 0);
    w_str(&w, "\naddress ");
    w_hex(&w, info ? (uintptr_t)info->si_addr : 0);
    w_str(&w, "\npc ");
    w_hex(&w, pc);
    w_str(&w, "\n");

    int written = 0;
#if CCRASH_HAVE_BACKTRACE
    int count = backtrace(g_frames, CCRASH_MAX_FRAMES + 8);
    int start = -1;
    for (int i = 0; i < count && i < 16; i++) {
        if ((uintptr_t)g_frames[i] == pc) {
            start = i;
            break;
        }
    }
    if (start < 0 && pc != 0) {
        // The unwinder did not step through the signal frame onto the faulting PC (a frame
        // pointer walk, as on Darwin): lead with the PC, then skip this handler's own frame.
        w_str(&w, "frame ");
        w_hex(&w, pc);
        w_str(&w, "\n");
        written = 1;
        start = 1;
    }
    for (int i = start < 0 ? 0 : start; i < count && written < CCRASH_MAX_FRAMES; i++, written++) {
        w_str(&w, "frame ");
        w_hex(&w, (uintptr_t)g_frames[i]);
        w_str(&w, "\n");
    }
#endif
    if (written == 0 && pc != 0) {
        w_str(&w, "frame ");
        w_hex(&w, pc);
        w_str(&w, "\n");
    }

    if (g_fatal_message_slot != NULL) {
        const char *message = __atomic_load_n((const char *const *)g_fatal_message_slot, __ATOMIC_ACQUIRE);
        if (message != NULL && message[0] != 0) {
            w_str(&w, "message\n");
            w_bytes(&w, message, c_strlen(message, 16384));
            w_str(&w, "\n");
        }
    }
    w_str(&w, "end\n");
    w_flush(&w);
    fsync(fd);
}

/// Restores the previous disposition and makes sure the signal reaches it: a fault
/// re-executes its instruction when the handler returns; a sent signal (abort, kill) and an
/// x86 breakpoint (which does not re-execute) are raised again, pending until we return.
static void hand_on(int sig, siginfo_t *info) {
    int index = signal_index(sig);
    struct sigaction previous;
    if (index >= 0) {
        previous = g_previous[index];
    } else {
        memset(&previous, 0, sizeof(previous));
        previous.sa_handler = SIG_DFL;
    }
    if (!(previous.sa_flags & SA_SIGINFO) && previous.sa_handler == SIG_IGN) {
        memset(&previous, 0, sizeof(previous));
        previous.sa_handler = SIG_DFL;
    }
    sigaction(sig, &previous, NULL);
    int resend = info == NULL || info->si_code <= 0;
#if defined(__x86_64__) || defined(__i386__)
    if (sig == SIGTRAP) resend = 1;
#endif
    if (resend) raise(sig);
}

static void ccrash_handler(int sig, siginfo_t *info, void *context) {
    int saved_errno = errno;
    int expected = 0;
    if (atomic_compare_exchange_strong(&g_state, &expected, 1)) {
        write_record(sig, info, context);
        atomic_store(&g_state, 2);
    } else {
        // Another thread is writing the record: let it finish (at most ~2 s) before this
        // thread's signal kills the process.
        struct timespec pause = {0, 10 * 1000 * 1000};
        for (int i = 0; i < 200 && atomic_load(&g_state) == 1; i++) nanosleep(&pause, NULL);
    }
    hand_on(sig, info);
    errno = saved_errno;
}

// MARK: - Installation

int ccrash_prepare_thread(void) {
    const size_t wanted = 128 * 1024;
    stack_t current;
    if (sigaltstack(NULL, &current) == 0 && !(current.ss_flags & SS_DISABLE) && current.ss_size >= 32 * 1024)
        return 0;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    // One guard page below the stack, so an overflow of the alternate stack faults cleanly.
    char *memory = mmap(NULL, wanted + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANON, -1, 0);
    if (memory == MAP_FAILED) return errno;
    mprotect(memory, page, PROT_NONE);
    stack_t stack;
    memset(&stack, 0, sizeof(stack));
    stack.ss_sp = memory + page;
    stack.ss_size = wanted;
    stack.ss_flags = 0;
    if (sigaltstack(&stack, NULL) != 0) {
        int error = errno;
        munmap(memory, wanted + page);
        return error;
    }
    return 0;
}

int ccrash_has_fatal_message_buffer(void) {
    return dlsym(RTLD_DEFAULT, "swift_getFatalErrorMessageBuffer") != NULL;
}

int ccrash_install(const char *record_path) {
    int fd = open(record_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return errno;
    int old = atomic_exchange(&g_fd, fd);
    if (old >= 0) close(old);

    if (g_fatal_message_slot == NULL) {
        void *(*get)(void) = (void *(*)(void))dlsym(RTLD_DEFAULT, "swift_getFatalErrorMessageBuffer");
        if (get != NULL) g_fatal_message_slot = get();
    }
#if CCRASH_HAVE_BACKTRACE
    backtrace(g_frames, 2);  // loads the unwinder now, not inside the handler
#endif
    int error = ccrash_prepare_thread();
    if (error != 0) return error;

    int expected = 0;
    if (!atomic_compare_exchange_strong(&g_installed, &expected, 1)) return 0;
    atomic_store(&g_state, 0);
    for (int i = 0; i < CCRASH_SIGNAL_COUNT; i++) {
        struct sigaction action;
        memset(&action, 0, sizeof(action));
        action.sa_sigaction = ccrash_handler;
        action.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&action.sa_mask);
        if (sigaction(kSignals[i], &action, &g_previous[i]) != 0) return errno;
    }
    return 0;
}

void ccrash_uninstall(void) {
    int expected = 1;
    if (atomic_compare_exchange_strong(&g_installed, &expected, 0)) {
        for (int i = 0; i < CCRASH_SIGNAL_COUNT; i++) sigaction(kSignals[i], &g_previous[i], NULL);
    }
    int old = atomic_exchange(&g_fd, -1);
    if (old >= 0) close(old);
}

int ccrash_is_installed(void) { return atomic_load(&g_installed); }

// MARK: - Symbols

int ccrash_dladdr(uintptr_t address, const char **symbol, uintptr_t *symbol_address, const char **image,
                  uintptr_t *image_base) {
    Dl_info info;
    memset(&info, 0, sizeof(info));
    if (dladdr((const void *)address, &info) == 0) return 0;
    *symbol = info.dli_sname;
    *symbol_address = (uintptr_t)info.dli_saddr;
    *image = info.dli_fname;
    *image_base = (uintptr_t)info.dli_fbase;
    return 1;
}

typedef char *(*swift_demangle_fn)(const char *, size_t, char *, size_t *, uint32_t);

size_t ccrash_demangle(const char *mangled, char *buffer, size_t size) {
    static swift_demangle_fn demangle = NULL;
    static atomic_int looked_up = 0;
    if (!atomic_load(&looked_up)) {
        demangle = (swift_demangle_fn)dlsym(RTLD_DEFAULT, "swift_demangle");
        atomic_store(&looked_up, 1);
    }
    if (demangle == NULL || mangled == NULL || buffer == NULL || size == 0) return 0;
    size_t length = strlen(mangled);
    if (length < 2) return 0;
    char *result = demangle(mangled, length, NULL, NULL, 0);
    if (result == NULL) return 0;
    size_t n = strlen(result);
    if (n >= size) n = size - 1;
    memcpy(buffer, result, n);
    buffer[n] = 0;
    free(result);
    return n;
}

// MARK: - Durable files

int ccrash_write_file_atomically(const char *directory, const char *temporary_path, const char *path,
                                 const void *bytes, size_t length) {
    int fd = open(temporary_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return errno;
    const char *p = bytes;
    size_t done = 0;
    while (done < length) {
        ssize_t n = write(fd, p + done, length - done);
        if (n < 0) {
            if (errno == EINTR) continue;
            int error = errno;
            close(fd);
            unlink(temporary_path);
            return error;
        }
        done += (size_t)n;
    }
    if (fsync(fd) != 0) {
        int error = errno;
        close(fd);
        unlink(temporary_path);
        return error;
    }
    close(fd);
    if (rename(temporary_path, path) != 0) {
        int error = errno;
        unlink(temporary_path);
        return error;
    }
    int dir = open(directory, O_RDONLY | O_CLOEXEC);
    if (dir >= 0) {
        fsync(dir);
        close(dir);
    }
    return 0;
}

void ccrash_machine(char *buffer, size_t size) {
    if (size == 0) return;
    buffer[0] = 0;
    struct utsname name;
    if (uname(&name) != 0) return;
    strncpy(buffer, name.machine, size - 1);
    buffer[size - 1] = 0;
}

const char *ccrash_signal_name(int sig) {
    switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGILL: return "SIGILL";
    case SIGTRAP: return "SIGTRAP";
    case SIGABRT: return "SIGABRT";
    case SIGFPE: return "SIGFPE";
    default: return NULL;
    }
}

int ccrash_signal_number(const char *name) {
    if (name == NULL) return 0;
    if (strcmp(name, "SEGV") == 0) return SIGSEGV;
    if (strcmp(name, "BUS") == 0) return SIGBUS;
    if (strcmp(name, "ILL") == 0) return SIGILL;
    if (strcmp(name, "TRAP") == 0) return SIGTRAP;
    if (strcmp(name, "ABRT") == 0) return SIGABRT;
    if (strcmp(name, "FPE") == 0) return SIGFPE;
    return 0;
}

#define CODE(name) \
    if (code == name) return #name;

const char *ccrash_code_name(int sig, int code) {
    if (code <= 0) {
        CODE(SI_USER)
#ifdef SI_TKILL
        CODE(SI_TKILL)
#endif
#ifdef SI_QUEUE
        CODE(SI_QUEUE)
#endif
        return NULL;
    }
    switch (sig) {
    case SIGSEGV:
        CODE(SEGV_MAPERR)
        CODE(SEGV_ACCERR)
        break;
    case SIGBUS:
        CODE(BUS_ADRALN)
        CODE(BUS_ADRERR)
        CODE(BUS_OBJERR)
        break;
    case SIGILL:
        CODE(ILL_ILLOPC)
        CODE(ILL_ILLOPN)
        CODE(ILL_ILLADR)
        CODE(ILL_ILLTRP)
        CODE(ILL_PRVOPC)
        CODE(ILL_PRVREG)
        CODE(ILL_COPROC)
        CODE(ILL_BADSTK)
        break;
    case SIGFPE:
        CODE(FPE_INTDIV)
        CODE(FPE_INTOVF)
        CODE(FPE_FLTDIV)
        CODE(FPE_FLTOVF)
        CODE(FPE_FLTUND)
        CODE(FPE_FLTRES)
        CODE(FPE_FLTINV)
        CODE(FPE_FLTSUB)
        break;
    case SIGTRAP:
        CODE(TRAP_BRKPT)
        CODE(TRAP_TRACE)
        break;
    default:
        break;
    }
    return NULL;
}
