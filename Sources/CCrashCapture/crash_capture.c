// The signal handler and its helpers. Everything reachable from `ccrash_handler` and
// `dump_handler` is async-signal-safe: no malloc, no locks, no stdio, no unwinder library;
// only write, read, open, fsync, sigaction, raise, tgkill, getdents64, clock_gettime and
// nanosleep. Stacks are walked by frame pointers, every load through `safe_read` (a
// `write` into a pipe, which fails with EFAULT instead of faulting), bounded by the
// thread's stack as measured before the crash (see ``ccrash_prepare_thread``).
#if defined(__linux__)
#define _GNU_SOURCE
#endif

#include "ccrash_capture.h"

#include <dirent.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <stddef.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#if defined(__APPLE__)
#include <mach-o/dyld.h>
#include <mach-o/loader.h>
#include <sys/ucontext.h>
#elif defined(__linux__)
#include <link.h>
#include <sys/syscall.h>
#include <ucontext.h>
#endif

static const int kSignals[] = {SIGSEGV, SIGBUS, SIGILL, SIGTRAP, SIGABRT, SIGFPE};
#define CCRASH_SIGNAL_COUNT ((int)(sizeof(kSignals) / sizeof(kSignals[0])))

static struct sigaction g_previous[CCRASH_SIGNAL_COUNT];
/// The record's descriptor. Its number never changes once opened: a restart points it at
/// the new file with `dup2` (atomic), so a thread that loaded it before the restart writes
/// to a valid file, never to a closed or reused descriptor.
static atomic_int g_fd = -1;
static atomic_int g_installed = 0;
/// 0: idle, 1: a thread is writing the record, 2: written.
static atomic_int g_state = 0;
/// The thread writing the record (a fault on it while `g_state` is 1 is a fault in the handler).
static atomic_long g_writer = 0;
/// The signal the record is about.
static atomic_int g_crash_signal = 0;
/// `std::atomic<const char *> *` from the Swift runtime, or NULL.
static void *g_fatal_message_slot = NULL;
/// The report id, fixed at install time so a record re-sent after a crash is a duplicate;
/// two buffers and a pointer swap, so a restart never tears the id a crashing thread reads.
static char g_report_ids[2][40];
static _Atomic(const char *) g_report_id = "";
/// A pipe `safe_read` writes through.
static int g_probe[2] = {-1, -1};
/// Test hook: 1 makes the handler fault while it walks the crashing thread's stack.
static atomic_int g_test_fault = 0;

// MARK: - Async-signal-safe writing

typedef struct {
    int fd;
    size_t length;
    char buffer[1024];
} ccrash_writer;

static void write_all(int fd, const char *bytes, size_t length) {
    size_t done = 0;
    while (done < length) {
        ssize_t n = write(fd, bytes + done, length - done);
        if (n < 0) {
            if (errno == EINTR) continue;
            break;
        }
        done += (size_t)n;
    }
}

/// Writes everything buffered.
static void w_flush(ccrash_writer *w) {
    write_all(w->fd, w->buffer, w->length);
    w->length = 0;
}

/// Writes the buffered whole lines only, so a fault in the handler never leaves half a line
/// (a cut `frame 0x7f12` would read as another address).
static void w_flush_lines(ccrash_writer *w) {
    size_t end = w->length;
    while (end > 0 && w->buffer[end - 1] != '\n') end--;
    if (end == 0) end = w->length;  // one line longer than the buffer: write it as it is
    write_all(w->fd, w->buffer, end);
    memmove(w->buffer, w->buffer + end, w->length - end);
    w->length -= end;
}

static void w_bytes(ccrash_writer *w, const char *bytes, size_t length) {
    for (size_t i = 0; i < length; i++) {
        if (w->length == sizeof(w->buffer)) w_flush_lines(w);
        w->buffer[w->length++] = bytes[i];
    }
}

static size_t c_strlen(const char *s, size_t max) {
    size_t n = 0;
    while (n < max && s[n] != 0) n++;
    return n;
}

static void w_str(ccrash_writer *w, const char *s) { w_bytes(w, s, c_strlen(s, 4096)); }

static size_t format_hex(char *out, uintptr_t value) {
    char digits[2 + sizeof(uintptr_t) * 2];
    int i = (int)sizeof(digits);
    do {
        digits[--i] = "0123456789abcdef"[value & 0xf];
        value >>= 4;
    } while (value != 0 && i > 2);
    digits[--i] = 'x';
    digits[--i] = '0';
    size_t n = sizeof(digits) - (size_t)i;
    memcpy(out, digits + i, n);
    return n;
}

static void w_hex(ccrash_writer *w, uintptr_t value) {
    char text[24];
    w_bytes(w, text, format_hex(text, value));
}

static size_t format_dec(char *out, long long value) {
    char digits[24];
    int i = (int)sizeof(digits);
    unsigned long long v = value < 0 ? (unsigned long long)(-(value + 1)) + 1 : (unsigned long long)value;
    do {
        digits[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    if (value < 0) digits[--i] = '-';
    size_t n = sizeof(digits) - (size_t)i;
    memcpy(out, digits + i, n);
    return n;
}

static void w_dec(ccrash_writer *w, long long value) {
    char text[24];
    w_bytes(w, text, format_dec(text, value));
}

// MARK: - Threads, stack bounds and memory

static long current_tid(void) {
#if defined(__linux__)
    return (long)syscall(SYS_gettid);
#elif defined(__APPLE__)
    uint64_t id = 0;
    pthread_threadid_np(NULL, &id);
    return (long)id;
#else
    return 1;
#endif
}

/// Stack bounds of the threads that called ``ccrash_prepare_thread`` (or ``ccrash_install``).
typedef struct {
    atomic_long tid;
    uintptr_t low;
    uintptr_t high;
} thread_bounds;
#define CCRASH_REGISTRY 256
static thread_bounds g_registry[CCRASH_REGISTRY];

/// The bounds of `tid`'s stack when it registered and `sp` lies in them; otherwise a
/// window above `sp` (loads stay safe either way, see `safe_read`).
static void stack_bounds(long tid, uintptr_t sp, uintptr_t *low, uintptr_t *high) {
    for (int i = 0; i < CCRASH_REGISTRY; i++) {
        if (atomic_load(&g_registry[i].tid) == tid && sp >= g_registry[i].low && sp < g_registry[i].high) {
            *low = g_registry[i].low;
            *high = g_registry[i].high;
            return;
        }
    }
    *low = sp;
    *high = sp + (8u << 20);
}

static void register_thread(void) {
    uintptr_t low = 0, high = 0;
#if defined(__linux__)
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) != 0) return;
    void *address = NULL;
    size_t size = 0;
    int ok = pthread_attr_getstack(&attr, &address, &size) == 0;
    pthread_attr_destroy(&attr);
    if (!ok) return;
    low = (uintptr_t)address;
    high = low + size;
#elif defined(__APPLE__)
    high = (uintptr_t)pthread_get_stackaddr_np(pthread_self());
    low = high - pthread_get_stacksize_np(pthread_self());
#endif
    if (high <= low) return;
    long tid = current_tid();
    int free_slot = -1;
    for (int i = 0; i < CCRASH_REGISTRY; i++) {
        long slot = atomic_load(&g_registry[i].tid);
        if (slot == tid) {
            free_slot = i;
            break;
        }
    }
    if (free_slot < 0) {
        for (int i = 0; i < CCRASH_REGISTRY; i++) {
            long expected = 0;
            if (atomic_compare_exchange_strong(&g_registry[i].tid, &expected, -1)) {
                free_slot = i;
                break;
            }
        }
    }
    if (free_slot < 0) return;  // full: this thread's walk uses the window above its SP
    atomic_store(&g_registry[free_slot].tid, -1);
    g_registry[free_slot].low = low;
    g_registry[free_slot].high = high;
    atomic_store(&g_registry[free_slot].tid, tid);
}

/// Copies `length` (at most 64) bytes at `address` into `out` without faulting: the kernel
/// reads them for `write`, and answers EFAULT when they are not mapped.
static int safe_read(uintptr_t address, void *out, size_t length) {
    if (g_probe[1] < 0 || address == 0 || length > 64) return 0;
    ssize_t n = write(g_probe[1], (const void *)address, length);
    if (n <= 0) return 0;
    char sink[64];
    ssize_t got = read(g_probe[0], n == (ssize_t)length ? out : sink, (size_t)n);
    return n == (ssize_t)length && got == n;
}

static int read_word(uintptr_t address, uintptr_t *out) { return safe_read(address, out, sizeof(*out)); }

/// Executable ranges of the images loaded when the handlers were installed (or last
/// refreshed): a stack word in them that follows a call instruction is a return address.
typedef struct {
    uintptr_t low;
    uintptr_t high;
} text_range;
#define CCRASH_TEXT_RANGES 1024
static text_range g_text[CCRASH_TEXT_RANGES];
static atomic_int g_text_count = 0;

#if defined(__linux__)
static int collect_text(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    int *count = data;
    for (int i = 0; i < info->dlpi_phnum && *count < CCRASH_TEXT_RANGES; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
            g_text[*count].low = info->dlpi_addr + ph->p_vaddr;
            g_text[*count].high = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
            (*count)++;
        }
    }
    return 0;
}
#endif

void ccrash_refresh_images(void) {
#if defined(__linux__)
    atomic_store(&g_text_count, 0);
    int count = 0;
    dl_iterate_phdr(collect_text, &count);
    atomic_store(&g_text_count, count);
#elif defined(__APPLE__)
    // Each image's __TEXT segment only (the whole image would take data for code).
    atomic_store(&g_text_count, 0);
    int count = 0;
    uint32_t images = _dyld_image_count();
    for (uint32_t i = 0; i < images && count < CCRASH_TEXT_RANGES; i++) {
        const struct mach_header *header = _dyld_get_image_header(i);
        if (header == NULL || header->magic != MH_MAGIC_64) continue;
        uintptr_t slide = (uintptr_t)_dyld_get_image_vmaddr_slide(i);
        const struct load_command *command =
            (const struct load_command *)((const char *)header + sizeof(struct mach_header_64));
        for (uint32_t c = 0; c < header->ncmds && count < CCRASH_TEXT_RANGES; c++) {
            if (command->cmd == LC_SEGMENT_64) {
                const struct segment_command_64 *segment = (const struct segment_command_64 *)command;
                if (strcmp(segment->segname, SEG_TEXT) == 0) {
                    g_text[count].low = (uintptr_t)segment->vmaddr + slide;
                    g_text[count].high = g_text[count].low + (uintptr_t)segment->vmsize;
                    count++;
                }
            }
            command = (const struct load_command *)((const char *)command + command->cmdsize);
        }
    }
    atomic_store(&g_text_count, count);
#endif
}

#if defined(__linux__)
static int read_generation(struct dl_phdr_info *info, size_t size, void *data) {
    if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs))
        *(uint64_t *)data = (uint64_t)info->dlpi_adds + (uint64_t)info->dlpi_subs;
    return 1;  // the counters are the same in every entry: one is enough
}
#elif defined(__APPLE__)
static atomic_ullong g_dyld_generation = 0;
static void dyld_changed(const struct mach_header *header, intptr_t slide) {
    (void)header;
    (void)slide;
    atomic_fetch_add(&g_dyld_generation, 1);
}
#endif

uint64_t ccrash_image_generation(void) {
#if defined(__linux__)
    uint64_t generation = 0;
    dl_iterate_phdr(read_generation, &generation);
    return generation;
#elif defined(__APPLE__)
    static atomic_int registered = 0;
    int expected = 0;
    if (atomic_compare_exchange_strong(&registered, &expected, 1)) {
        _dyld_register_func_for_add_image(dyld_changed);
        _dyld_register_func_for_remove_image(dyld_changed);
    }
    return atomic_load(&g_dyld_generation);
#else
    return 0;
#endif
}

int ccrash_backtrace(uintptr_t *frames, int max) {
    enum { capacity = 258 };
    void *raw[capacity];
    if (max <= 0) return 0;
    int wanted = max + 1 < capacity ? max + 1 : capacity;
    int n = backtrace(raw, wanted);
    // raw[0] is this function.
    int count = 0;
    for (int i = 1; i < n && count < max; i++) frames[count++] = (uintptr_t)raw[i];
    return count;
}

static int is_text(uintptr_t address) {
    int count = atomic_load(&g_text_count);
    for (int i = 0; i < count; i++)
        if (address >= g_text[i].low && address < g_text[i].high) return 1;
    return 0;
}

/// Whether the instruction before `address` is a call (so `address` is a return address).
static int follows_call(uintptr_t address) {
#if defined(__x86_64__)
    uint8_t b[8];  // b[7] is the byte at address - 1
    if (address < 8 || !safe_read(address - 8, b, 8)) return 0;
    if (b[3] == 0xE8) return 1;  // call rel32
    // call r/m64 (FF /2) in its lengths: register, disp8, SIB + disp8, disp32/RIP, SIB + disp32
    for (int length = 2; length <= 7; length++) {
        int at = 8 - length;
        if (b[at] == 0xFF && (b[at + 1] & 0x38) == 0x10) return 1;
    }
    return 0;
#elif defined(__aarch64__) || defined(__arm64__)
    uint32_t insn;
    if (address < 4 || !safe_read(address - 4, &insn, 4)) return 0;
    if ((insn & 0xFC000000u) == 0x94000000u) return 1;  // BL
    if ((insn & 0xFFFFFC1Fu) == 0xD63F0000u) return 1;  // BLR
    if ((insn & 0xFEFFF800u) == 0xD63F0800u) return 1;  // BLRAA/BLRAB (pointer auth)
    return 0;
#else
    (void)address;
    return 1;
#endif
}

static uintptr_t strip_pointer_auth(uintptr_t address) {
#if defined(__aarch64__) || defined(__arm64__)
    return address & 0x0000FFFFFFFFFFFFull;
#else
    return address;
#endif
}

#if defined(__x86_64__)
/// For a return address after a direct `call rel32`, whether the called function can hold
/// `callee_pc` (the frame found just inside it): the target, followed through a PLT stub
/// to its GOT slot, lies at or below `callee_pc` and within 1 MiB of it. Stale return
/// addresses left in uninitialized stack slots (common in libc's `abort`) fail this.
/// Indirect calls cannot be checked and are refused (a ghost chain of an earlier call,
/// still in an uninitialized buffer, is self-consistent except where it meets the real
/// one); a PLT slot not yet bound passes.
static int call_reaches(uintptr_t ret, uintptr_t callee_pc) {
    uint8_t call[5];
    if (!safe_read(ret - 5, call, 5) || call[0] != 0xE8) return 0;
    int32_t relative;
    memcpy(&relative, call + 1, 4);
    uintptr_t target = ret + (uintptr_t)(intptr_t)relative;
    uint8_t stub[16];
    if (safe_read(target, stub, sizeof(stub))) {
        int o = 0;
        if (stub[0] == 0xF3 && stub[1] == 0x0F && stub[2] == 0x1E && stub[3] == 0xFA) o = 4;  // endbr64
        if (stub[o] == 0xF2) o++;                                                             // bnd
        if (stub[o] == 0xFF && stub[o + 1] == 0x25) {                                         // jmp *GOT(%rip)
            int32_t displacement;
            memcpy(&displacement, stub + o + 2, 4);
            uintptr_t resolved = 0;
            if (!read_word(target + (uintptr_t)o + 6 + (uintptr_t)(intptr_t)displacement, &resolved)) return 1;
            if (resolved >= target - (1u << 20) && resolved <= target + (1u << 20)) return 1;  // lazy: not bound yet
            target = resolved;
        }
    }
    return target <= callee_pc && callee_pc - target < (1u << 20);
}
#endif

/// A thread's state at the signal: what the walk starts from.
typedef struct {
    uintptr_t pc, sp, fp, lr;
} machine_state;

static machine_state state_of(void *context) {
    machine_state s = {0, 0, 0, 0};
    if (context == NULL) return s;
    ucontext_t *uc = (ucontext_t *)context;
#if defined(__linux__) && defined(__x86_64__)
    s.pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
    s.sp = (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
    s.fp = (uintptr_t)uc->uc_mcontext.gregs[REG_RBP];
#elif defined(__linux__) && defined(__aarch64__)
    s.pc = (uintptr_t)uc->uc_mcontext.pc;
    s.sp = (uintptr_t)uc->uc_mcontext.sp;
    s.fp = (uintptr_t)uc->uc_mcontext.regs[29];
    s.lr = (uintptr_t)uc->uc_mcontext.regs[30];
#elif defined(__APPLE__) && defined(__x86_64__)
    s.pc = (uintptr_t)uc->uc_mcontext->__ss.__rip;
    s.sp = (uintptr_t)uc->uc_mcontext->__ss.__rsp;
    s.fp = (uintptr_t)uc->uc_mcontext->__ss.__rbp;
#elif defined(__APPLE__) && defined(__arm64__)
    s.pc = (uintptr_t)__darwin_arm_thread_state64_get_pc(uc->uc_mcontext->__ss);
    s.sp = (uintptr_t)__darwin_arm_thread_state64_get_sp(uc->uc_mcontext->__ss);
    s.fp = (uintptr_t)__darwin_arm_thread_state64_get_fp(uc->uc_mcontext->__ss);
    s.lr = (uintptr_t)__darwin_arm_thread_state64_get_lr(uc->uc_mcontext->__ss);
#else
    (void)uc;
#endif
    s.pc = strip_pointer_auth(s.pc);
    s.lr = strip_pointer_auth(s.lr);
    return s;
}

/// Walks one stack into `out` (innermost first): the PC; then return addresses found by
/// scanning the words between SP and the first frame record (the frames of functions that
/// keep no frame pointer, such as libc's `raise`/`abort` or a leaf, whose callers the frame
/// chain alone would skip), until a word is the return address of a proper frame record;
/// then the frame-pointer chain. Every step stays inside [low, high) and moves outwards.
static int walk_stack(machine_state s, uintptr_t low, uintptr_t high, uintptr_t *out, int max, int check_fault) {
    int n = 0;
    if (s.pc != 0 && n < max) out[n++] = s.pc;
    if (check_fault && atomic_load(&g_test_fault) == 1) *(volatile int *)(uintptr_t)8 = 1;
    uintptr_t fp = s.fp;
    int fp_valid = fp > s.sp && fp >= low && fp + 2 * sizeof(uintptr_t) <= high && (fp % sizeof(uintptr_t)) == 0;
#if defined(__aarch64__) || defined(__arm64__)
    // The link register holds the caller of a leaf; a non-leaf saved it in its frame record.
    uintptr_t first_saved = 0;
    if (fp_valid) read_word(fp + sizeof(uintptr_t), &first_saved);
    if (s.lr != 0 && is_text(s.lr) && strip_pointer_auth(first_saved) != s.lr && n < max) out[n++] = s.lr;
#else
    uintptr_t end = fp_valid ? fp : s.sp + 4096;
    if (end > high) end = high;
    if (end > s.sp + 16384) end = s.sp + 16384;
    int scanned = 0;
    for (uintptr_t at = s.sp; at + sizeof(uintptr_t) <= end && n < max && scanned < 32; at += sizeof(uintptr_t)) {
        uintptr_t word;
        if (!read_word(at, &word)) break;
        if (!is_text(word) || !follows_call(word) || (n > 0 && !call_reaches(word, out[n - 1]))) continue;
        out[n++] = word;
        scanned++;
        // A frame record (saved FP, then this return address) continues as a chain.
        uintptr_t saved;
        if (at >= low + sizeof(uintptr_t) && read_word(at - sizeof(uintptr_t), &saved) && saved > at && saved < high &&
            (saved % sizeof(uintptr_t)) == 0)
        {
            fp = saved;
            fp_valid = 1;
            break;
        }
    }
#endif
    while (fp_valid && n < max) {
        uintptr_t next, ret;
        if (!read_word(fp, &next) || !read_word(fp + sizeof(uintptr_t), &ret)) break;
        ret = strip_pointer_auth(ret);
        if (ret == 0) break;
        out[n++] = ret;
        if (next <= fp || next < low || next + 2 * sizeof(uintptr_t) > high || (next % sizeof(uintptr_t)) != 0) break;
        fp = next;
    }
    return n;
}

// MARK: - Other threads

/// What another thread saw when the reserved signal reached it.
typedef struct {
    atomic_int ready;
    long tid;
    machine_state state;
} thread_snapshot;
#define CCRASH_MAX_THREADS 64
static thread_snapshot g_snapshots[CCRASH_MAX_THREADS];
static atomic_int g_snapshot_count = 0;
/// 1 while the crashing thread collects snapshots.
static atomic_int g_collecting = 0;
static int g_dump_signal = 0;
static struct sigaction g_previous_dump;
static uintptr_t g_walk[CCRASH_MAX_FRAMES];

/// The reserved signal's handler on every other thread: leaves its registers for the
/// crashing thread and keeps its stack still until the record is written.
static void dump_handler(int sig, siginfo_t *info, void *context) {
    int saved_errno = errno;
    if (atomic_load(&g_collecting) != 1 || info == NULL || info->si_pid != getpid()) {
        // Not ours: hand it to whoever had the signal before.
        if ((g_previous_dump.sa_flags & SA_SIGINFO) && g_previous_dump.sa_sigaction != NULL)
            g_previous_dump.sa_sigaction(sig, info, context);
        else if (g_previous_dump.sa_handler != SIG_DFL && g_previous_dump.sa_handler != SIG_IGN &&
                 g_previous_dump.sa_handler != NULL)
            g_previous_dump.sa_handler(sig);
        errno = saved_errno;
        return;
    }
    int index = atomic_fetch_add(&g_snapshot_count, 1);
    if (index < CCRASH_MAX_THREADS) {
        g_snapshots[index].tid = current_tid();
        g_snapshots[index].state = state_of(context);
        atomic_store(&g_snapshots[index].ready, 1);
    }
    struct timespec pause = {0, 5 * 1000 * 1000};
    for (int i = 0; i < 1000 && atomic_load(&g_state) == 1; i++) nanosleep(&pause, NULL);
    errno = saved_errno;
}

/// The thread's name from `/proc/self/task/<tid>/comm`.
static void w_thread_name(ccrash_writer *w, long tid) {
#if defined(__linux__)
    char path[64] = "/proc/self/task/";
    size_t n = c_strlen(path, sizeof(path));
    n += format_dec(path + n, tid);
    memcpy(path + n, "/comm", 6);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    char name[32];
    ssize_t got = read(fd, name, sizeof(name));
    close(fd);
    while (got > 0 && (name[got - 1] == '\n' || name[got - 1] == 0)) got--;
    for (ssize_t i = 0; i < got; i++)
        if (name[i] == '\n') name[i] = ' ';
    if (got > 0) w_bytes(w, name, (size_t)got);
#else
    (void)w;
    (void)tid;
#endif
}

static void w_frames(ccrash_writer *w, const uintptr_t *frames, int count) {
    for (int i = 0; i < count; i++) {
        w_str(w, "frame ");
        w_hex(w, frames[i]);
        w_str(w, "\n");
    }
}

/// Sends the reserved signal to every other thread (listed from `/proc/self/task`), waits
/// at most ~1 s for them to answer (a busy machine may not schedule them at once), then
/// writes each answering thread's stack.
static void write_other_threads(ccrash_writer *w, long self) {
#if defined(__linux__)
    if (g_dump_signal == 0) return;
    int dir = open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0) return;
    atomic_store(&g_snapshot_count, 0);
    for (int i = 0; i < CCRASH_MAX_THREADS; i++) atomic_store(&g_snapshots[i].ready, 0);
    atomic_store(&g_collecting, 1);
    pid_t pid = getpid();
    int sent = 0;
    char entries[2048];
    for (;;) {
        long got = syscall(SYS_getdents64, dir, entries, sizeof(entries));
        if (got <= 0) break;
        for (long at = 0; at < got;) {
            unsigned short length;
            memcpy(&length, entries + at + 16, sizeof(length));
            const char *name = entries + at + 19;
            long tid = 0;
            for (const char *c = name; *c >= '0' && *c <= '9'; c++) tid = tid * 10 + (*c - '0');
            if (tid > 0 && tid != self && sent < CCRASH_MAX_THREADS) {
                if (syscall(SYS_tgkill, pid, tid, g_dump_signal) == 0) sent++;
            }
            at += length;
        }
    }
    close(dir);
    struct timespec pause = {0, 2 * 1000 * 1000};
    for (int i = 0; i < 500 && atomic_load(&g_snapshot_count) < sent; i++) nanosleep(&pause, NULL);
    atomic_store(&g_collecting, 0);
    int count = atomic_load(&g_snapshot_count);
    if (count > CCRASH_MAX_THREADS) count = CCRASH_MAX_THREADS;
    for (int i = 0; i < count; i++) {
        if (!atomic_load(&g_snapshots[i].ready)) continue;
        thread_snapshot *t = &g_snapshots[i];
        uintptr_t low, high;
        stack_bounds(t->tid, t->state.sp, &low, &high);
        int n = walk_stack(t->state, low, high, g_walk, 48, 0);
        w_str(w, "thread ");
        w_dec(w, t->tid);
        w_str(w, " other ");
        w_thread_name(w, t->tid);
        w_str(w, "\n");
        w_frames(w, g_walk, n);
        w_flush_lines(w);
    }
    if (sent > count) {
        w_str(w, "unanswered ");
        w_dec(w, sent - count);
        w_str(w, "\n");
    }
#else
    (void)w;
    (void)self;
#endif
}

// MARK: - Scope

/// The scope (user, tags, context, breadcrumbs) as `key\tvalue\n` lines in two slots. The
/// setter (under a lock) rewrites the slot that is not published, then publishes it; each
/// slot carries a sequence number, odd while it is being rewritten. The handler copies the
/// published slot and keeps the copy only when the slot's number is the same, even value
/// before and after: two changes during a crash (the second rewriting the slot being read)
/// are detected and the copy retried, never written torn.
#define CCRASH_SCOPE_BYTES (80 * 1024)
typedef struct {
    atomic_uint sequence;
    atomic_size_t length;
    char bytes[CCRASH_SCOPE_BYTES];
} scope_slot;
static scope_slot g_scope[2];
static atomic_int g_scope_active = -1;
static pthread_mutex_t g_scope_lock = PTHREAD_MUTEX_INITIALIZER;
/// Tests only: called by the handler between its first copy of the scope and the check.
static void (*g_test_scope_hook)(void) = NULL;
/// The handler's consistent copy of the scope (only the thread writing the record uses it).
static char g_scope_copy[CCRASH_SCOPE_BYTES];

void ccrash_set_scope(const char *bytes, size_t length) {
    pthread_mutex_lock(&g_scope_lock);
    int next = atomic_load(&g_scope_active) == 0 ? 1 : 0;
    scope_slot *slot = &g_scope[next];
    if (length > CCRASH_SCOPE_BYTES) length = CCRASH_SCOPE_BYTES;
    atomic_fetch_add_explicit(&slot->sequence, 1, memory_order_acq_rel);  // odd: being written
    atomic_thread_fence(memory_order_release);
    if (length > 0) memcpy(slot->bytes, bytes, length);
    atomic_store_explicit(&slot->length, length, memory_order_relaxed);
    atomic_fetch_add_explicit(&slot->sequence, 1, memory_order_release);  // even: whole
    atomic_store_explicit(&g_scope_active, next, memory_order_release);
    pthread_mutex_unlock(&g_scope_lock);
}

/// Copies the published scope into `g_scope_copy`; returns its length, 0 when there is
/// none or no whole copy could be taken (a setter rewrote it on every try).
static size_t copy_scope(void) {
    // At most ~256 tries of a copy and a 20 µs pause (a few milliseconds): a thread that
    // changes the scope without pause, or this thread preempted mid-copy, only delays it.
    struct timespec pause = {0, 20 * 1000};
    for (int attempt = 0; attempt < 256; attempt++) {
        if (attempt > 0) nanosleep(&pause, NULL);
        int active = atomic_load_explicit(&g_scope_active, memory_order_acquire);
        if (active < 0) return 0;
        scope_slot *slot = &g_scope[active];
        unsigned before = atomic_load_explicit(&slot->sequence, memory_order_acquire);
        if (before & 1u) continue;
        size_t length = atomic_load_explicit(&slot->length, memory_order_relaxed);
        if (length > CCRASH_SCOPE_BYTES) continue;
        memcpy(g_scope_copy, slot->bytes, length);
        if (attempt == 0 && g_test_scope_hook != NULL) g_test_scope_hook();
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&slot->sequence, memory_order_relaxed) == before) return length;
    }
    return 0;
}

// MARK: - Exceptions

/// The uncaught exception noted by the Objective-C handler or the C++ terminate hook, in
/// preallocated memory: the handler writes it into the record after the header.
#define CCRASH_EXCEPTION_NAME 256
#define CCRASH_EXCEPTION_REASON 4096
static char g_exception_kind[8];
static char g_exception_name[CCRASH_EXCEPTION_NAME];
static char g_exception_reason[CCRASH_EXCEPTION_REASON];
static uintptr_t g_exception_frames[CCRASH_MAX_FRAMES];
static size_t g_exception_frame_count;
/// 0: none, 1: being written, 2: whole.
static atomic_int g_exception_state = 0;

static void copy_text(char *out, size_t size, const char *text) {
    size_t n = text == NULL ? 0 : c_strlen(text, size - 1);
    if (n > 0) memcpy(out, text, n);
    out[n] = 0;
}

void ccrash_note_exception(const char *kind, const char *name, const char *reason, const uintptr_t *frames,
                           size_t count) {
    int expected = atomic_load(&g_exception_state);
    if (expected == 1 || !atomic_compare_exchange_strong(&g_exception_state, &expected, 1)) return;  // another thread
    copy_text(g_exception_kind, sizeof(g_exception_kind), kind);
    copy_text(g_exception_name, sizeof(g_exception_name), name);
    copy_text(g_exception_reason, sizeof(g_exception_reason), reason);
    if (count > CCRASH_MAX_FRAMES) count = CCRASH_MAX_FRAMES;
    for (size_t i = 0; i < count; i++) g_exception_frames[i] = frames[i];
    g_exception_frame_count = frames == NULL ? 0 : count;
    atomic_store(&g_exception_state, 2);
}

void ccrash_clear_exception(void) {
    int expected = 2;
    atomic_compare_exchange_strong(&g_exception_state, &expected, 0);
}

static void w_block(ccrash_writer *w, const char *label, const char *bytes, size_t length) {
    w_str(w, label);
    w_str(w, " ");
    w_dec(w, (long long)length);
    w_str(w, "\n");
    w_bytes(w, bytes, length);
    w_str(w, "\n");
}

/// The noted exception: `exception <kind>`, its name and reason as length-prefixed blocks,
/// then the throw site's frames.
static void w_exception(ccrash_writer *w) {
    if (atomic_load(&g_exception_state) != 2) return;
    w_str(w, "exception ");
    w_str(w, g_exception_kind[0] ? g_exception_kind : "unknown");
    w_str(w, "\n");
    w_block(w, "exception.name", g_exception_name, c_strlen(g_exception_name, sizeof(g_exception_name)));
    w_block(w, "exception.reason", g_exception_reason, c_strlen(g_exception_reason, sizeof(g_exception_reason)));
    for (size_t i = 0; i < g_exception_frame_count; i++) {
        w_str(w, "exception.frame ");
        w_hex(w, g_exception_frames[i]);
        w_str(w, "\n");
    }
}

/// The Swift runtime's fatal error message, read through `safe_read` (the pointer is the
/// runtime's: a bad one must not fault the handler): `message <length>` and the bytes.
static void w_fatal_message(ccrash_writer *w) {
    if (g_fatal_message_slot == NULL) return;
    uintptr_t message = 0;
    if (!read_word((uintptr_t)g_fatal_message_slot, &message) || message == 0) return;
    enum { limit = 16384, chunk = 64 };
    size_t length = 0;
    char bytes[chunk];
    while (length < limit) {
        size_t want = chunk;
        if (!safe_read(message + length, bytes, want)) {
            // The end of a mapping: read byte by byte to the NUL.
            want = 1;
            if (!safe_read(message + length, bytes, 1)) break;
        }
        size_t n = c_strlen(bytes, want);
        length += n;
        if (n < want) break;
    }
    if (length > limit) length = limit;
    if (length == 0) return;
    w_str(w, "message ");
    w_dec(w, (long long)length);
    w_str(w, "\n");
    for (size_t at = 0; at < length; at += chunk) {
        size_t want = length - at < chunk ? length - at : chunk;
        if (!safe_read(message + at, bytes, want)) {
            // Changed or unmapped since it was measured: pad, so the length stays right.
            memset(bytes, ' ', want);
        }
        w_bytes(w, bytes, want);
    }
    w_str(w, "\n");
}

// MARK: - The handler

static void w_registers(ccrash_writer *w, void *context) {
    if (context == NULL) return;
    ucontext_t *uc = (ucontext_t *)context;
#if defined(__linux__) && defined(__x86_64__)
    static const char *names[] = {"r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "rdi", "rsi", "rbp",
                                  "rbx", "rdx", "rax", "rcx", "rsp", "rip", "eflags"};
    for (int i = 0; i <= REG_EFL; i++) {
        w_str(w, "register ");
        w_str(w, names[i]);
        w_str(w, " ");
        w_hex(w, (uintptr_t)uc->uc_mcontext.gregs[i]);
        w_str(w, "\n");
    }
#elif defined(__linux__) && defined(__aarch64__)
    for (int i = 0; i < 31; i++) {
        char name[4] = {'x', 0, 0, 0};
        if (i >= 10) {
            name[1] = (char)('0' + i / 10);
            name[2] = (char)('0' + i % 10);
        } else {
            name[1] = (char)('0' + i);
        }
        w_str(w, "register ");
        w_str(w, i == 29 ? "fp" : i == 30 ? "lr" : name);
        w_str(w, " ");
        w_hex(w, (uintptr_t)uc->uc_mcontext.regs[i]);
        w_str(w, "\n");
    }
    w_str(w, "register sp ");
    w_hex(w, (uintptr_t)uc->uc_mcontext.sp);
    w_str(w, "\nregister pc ");
    w_hex(w, (uintptr_t)uc->uc_mcontext.pc);
    w_str(w, "\n");
#else
    (void)w;
    (void)uc;
#endif
}

static void write_record(int sig, siginfo_t *info, void *context, long self) {
    int fd = atomic_load(&g_fd);
    if (fd < 0) return;
    ccrash_writer w;
    w.fd = fd;
    w.length = 0;
    machine_state state = state_of(context);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);

    // The header and the signal line first, flushed before anything is read through a
    // pointer: whatever faults later, the record has a report.
    w_str(&w, "CGCRASH 2\nid ");
    w_str(&w, atomic_load(&g_report_id));
    w_str(&w, "\ntime ");
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
    w_hex(&w, state.pc);
    w_str(&w, "\n");
    w_flush(&w);

    uint8_t insn[4];
    if (safe_read(state.pc, insn, sizeof(insn))) {
        w_str(&w, "insn ");
        for (size_t i = 0; i < sizeof(insn); i++) {
            char hex[2] = {"0123456789abcdef"[insn[i] >> 4], "0123456789abcdef"[insn[i] & 0xf]};
            w_bytes(&w, hex, 2);
        }
        w_str(&w, "\n");
    }
    w_registers(&w, context);
    w_exception(&w);
    w_flush_lines(&w);
    w_fatal_message(&w);
    size_t scope = copy_scope();
    if (scope > 0) w_block(&w, "scope", g_scope_copy, scope);
    w_flush(&w);

    // Then the crashing thread's stack, then the others'.
    uintptr_t low, high;
    stack_bounds(self, state.sp, &low, &high);
    w_str(&w, "thread ");
    w_dec(&w, self);
    w_str(&w, " crashing ");
    w_thread_name(&w, self);
    w_str(&w, "\n");
    w_flush(&w);
    int n = walk_stack(state, low, high, g_walk, CCRASH_MAX_FRAMES, 1);
    w_frames(&w, g_walk, n);
    w_flush(&w);
    write_other_threads(&w, self);
    w_str(&w, "end\n");
    w_flush(&w);
    fsync(fd);
}

/// Restores the previous disposition and makes sure the signal reaches it: a fault
/// re-executes its instruction when the handler returns; a sent signal (abort, kill) and an
/// x86 breakpoint (which does not re-execute) are raised again.
static void hand_on(int sig, siginfo_t *info) {
    int index = -1;
    for (int i = 0; i < CCRASH_SIGNAL_COUNT; i++)
        if (kSignals[i] == sig) index = i;
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
    int resend = info == NULL || ccrash_code_is_sent(info->si_code);
#if defined(__x86_64__) || defined(__i386__)
    if (sig == SIGTRAP) resend = 1;
#endif
    if (resend) raise(sig);
}

/// A fault on the thread writing the record, while it writes: the record ends here,
/// marked truncated, and the process dies by the signal it crashed with.
static void end_truncated(int fault) {
    int fd = atomic_load(&g_fd);
    if (fd >= 0) {
        ccrash_writer w;
        w.fd = fd;
        w.length = 0;
        w_str(&w, "truncated ");
        w_dec(&w, fault);
        w_str(&w, "\nend\n");
        w_flush(&w);
        fsync(fd);
    }
    atomic_store(&g_state, 2);
    int sig = atomic_load(&g_crash_signal);
    struct sigaction fallback;
    memset(&fallback, 0, sizeof(fallback));
    fallback.sa_handler = SIG_DFL;
    sigaction(sig, &fallback, NULL);
    sigaction(fault, &fallback, NULL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    sigprocmask(SIG_UNBLOCK, &set, NULL);
    raise(sig);
    _exit(128 + sig);
}

static void ccrash_handler(int sig, siginfo_t *info, void *context) {
    int saved_errno = errno;
    long self = current_tid();
    int expected = 0;
    if (atomic_compare_exchange_strong(&g_state, &expected, 1)) {
        atomic_store(&g_writer, self);
        atomic_store(&g_crash_signal, sig);
        write_record(sig, info, context, self);
        atomic_store(&g_state, 2);
    } else if (expected == 1 && atomic_load(&g_writer) == self) {
        end_truncated(sig);
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

/// Unblocks the reserved signal on the calling thread (a mask inherited from a parent
/// process or thread would keep it from answering), and so on threads it creates later.
static void unblock_dump_signal(void) {
    int dump = ccrash_dump_signal();
    if (dump == 0) return;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, dump);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
}

int ccrash_prepare_thread(void) {
    register_thread();
    unblock_dump_signal();
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

int ccrash_set_thread_name(const char *name) {
#if defined(__linux__)
    char cut[16];
    size_t n = c_strlen(name, 15);
    memcpy(cut, name, n);
    cut[n] = 0;
    return pthread_setname_np(pthread_self(), cut);
#elif defined(__APPLE__)
    return pthread_setname_np(name);
#else
    (void)name;
    return 0;
#endif
}

int ccrash_has_fatal_message_buffer(void) {
    return dlsym(RTLD_DEFAULT, "swift_getFatalErrorMessageBuffer") != NULL;
}

static int open_probe(void) {
    if (g_probe[0] >= 0) return 0;
    int fds[2];
#if defined(__linux__)
    if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return errno;
#else
    if (pipe(fds) != 0) return errno;
    for (int i = 0; i < 2; i++) {
        fcntl(fds[i], F_SETFD, FD_CLOEXEC);
        fcntl(fds[i], F_SETFL, O_NONBLOCK);
    }
#endif
    g_probe[0] = fds[0];
    g_probe[1] = fds[1];
    return 0;
}

int ccrash_dump_signal(void) {
#if defined(__linux__)
    return SIGRTMIN + 7;
#else
    return 0;
#endif
}

/// Makes the record descriptor refer to `fd`'s file and closes `fd`: the first time `fd`
/// becomes the record descriptor; later, `dup2` swaps the file behind the same number.
static int point_record_at(int fd) {
    int current = atomic_load(&g_fd);
    if (current < 0) {
        int expected = -1;
        if (atomic_compare_exchange_strong(&g_fd, &expected, fd)) return 0;
        current = expected;
    }
    int result = 0;
#if defined(__linux__)
    while (dup3(fd, current, O_CLOEXEC) < 0) {
#else
    while (dup2(fd, current) < 0) {
#endif
        if (errno != EINTR) {
            result = errno;
            break;
        }
    }
#if !defined(__linux__)
    fcntl(current, F_SETFD, FD_CLOEXEC);
#endif
    close(fd);
    return result;
}

int ccrash_install(const char *record_path, const char *report_id) {
    int error = open_probe();
    if (error != 0) return error;
    int fd = open(record_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return errno;
    error = point_record_at(fd);
    if (error != 0) return error;
    static int next_id = 0;
    char *id = g_report_ids[next_id];
    next_id = 1 - next_id;
    size_t id_length = c_strlen(report_id, sizeof(g_report_ids[0]) - 1);
    memcpy(id, report_id, id_length);
    id[id_length] = 0;
    atomic_store(&g_report_id, id);

    if (g_fatal_message_slot == NULL) {
        void *(*get)(void) = (void *(*)(void))dlsym(RTLD_DEFAULT, "swift_getFatalErrorMessageBuffer");
        if (get != NULL) g_fatal_message_slot = get();
    }
    ccrash_refresh_images();
    error = ccrash_prepare_thread();
    if (error != 0) return error;

    int expected = 0;
    if (!atomic_compare_exchange_strong(&g_installed, &expected, 1)) return 0;
    atomic_store(&g_state, 0);
    g_dump_signal = ccrash_dump_signal();
    if (g_dump_signal != 0) {
        struct sigaction action;
        memset(&action, 0, sizeof(action));
        action.sa_sigaction = dump_handler;
        action.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
        sigemptyset(&action.sa_mask);
        if (sigaction(g_dump_signal, &action, &g_previous_dump) != 0) g_dump_signal = 0;
    }
    for (int i = 0; i < CCRASH_SIGNAL_COUNT; i++) {
        struct sigaction action;
        memset(&action, 0, sizeof(action));
        action.sa_sigaction = ccrash_handler;
        // SA_NODEFER: a fault inside the handler re-enters it (and ends the record) instead
        // of the kernel killing the process with the signal blocked.
        action.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
        sigemptyset(&action.sa_mask);
        if (sigaction(kSignals[i], &action, &g_previous[i]) != 0) return errno;
    }
    return 0;
}

void ccrash_uninstall(void) {
    int expected = 1;
    if (atomic_compare_exchange_strong(&g_installed, &expected, 0)) {
        for (int i = 0; i < CCRASH_SIGNAL_COUNT; i++) sigaction(kSignals[i], &g_previous[i], NULL);
        if (g_dump_signal != 0) sigaction(g_dump_signal, &g_previous_dump, NULL);
    }
    // The descriptor stays open (on /dev/null): a thread still in the handler writes nowhere
    // instead of into whatever file would reuse its number.
    int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (null >= 0) point_record_at(null);
}

int ccrash_record_fd(void) { return atomic_load(&g_fd); }

int ccrash_is_installed(void) { return atomic_load(&g_installed); }

void ccrash_test_fault_in_handler(int enabled) { atomic_store(&g_test_fault, enabled); }

void ccrash_test_scope_hook(void (*hook)(void)) { g_test_scope_hook = hook; }

void ccrash_test_fatal_message_slot(const void *slot) { g_fatal_message_slot = (void *)(uintptr_t)slot; }

// MARK: - Symbols

int ccrash_dladdr(uintptr_t address, const char **symbol, uintptr_t *symbol_address, const char **image,
                  uintptr_t *image_base) {
    Dl_info info;
    memset(&info, 0, sizeof(info));
#if defined(__linux__)
    // With the symbol's size: dladdr alone names the nearest exported symbol below the
    // address, which for a local function is another function.
    const ElfW(Sym) *entry = NULL;
    if (dladdr1((const void *)address, &info, (void **)&entry, RTLD_DL_SYMENT) == 0) return 0;
    if (entry != NULL && info.dli_saddr != NULL && entry->st_size > 0 &&
        address - (uintptr_t)info.dli_saddr >= entry->st_size) {
        info.dli_sname = NULL;
        info.dli_saddr = NULL;
    }
#else
    if (dladdr((const void *)address, &info) == 0) return 0;
#endif
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
    int dir = directory == NULL ? -1 : open(directory, O_RDONLY | O_CLOEXEC);
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

int ccrash_code_is_sent(int code) {
#if defined(__APPLE__)
    // Darwin's SI_USER (kill, raise, abort) and SI_QUEUE are positive (0x10001...).
    return code == SI_USER || code == SI_QUEUE || code <= 0;
#else
    // Linux: SI_USER is 0, SI_QUEUE, SI_TKILL (tgkill, raise, abort) ... are negative.
    return code <= 0;
#endif
}

const char *ccrash_code_name(int sig, int code) {
    if (ccrash_code_is_sent(code)) {
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
