// The C++ side of exception capture: a `std::terminate` hook that notes the uncaught
// exception (its type, `what()` and the throw site's stack) for the crash record, then runs
// the previous terminate handler; and Itanium demangling for the symbolicator. Not called
// from the signal handler: terminate runs before the abort that raises the signal.
#include "ccrash_capture.h"

#include <cxxabi.h>
#include <execinfo.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <typeinfo>

namespace {

std::terminate_handler previous_terminate = nullptr;
std::atomic<int> installed{0};

constexpr int kMaxFrames = CCRASH_MAX_FRAMES;
void *raw_frames[kMaxFrames + 1];
uintptr_t frames[kMaxFrames];
char type_name[256];
char reason[4096];

void copy_cut(char *out, size_t size, const char *text) {
    size_t n = text == nullptr ? 0 : std::strlen(text);
    if (n >= size) n = size - 1;
    if (n > 0) std::memcpy(out, text, n);
    out[n] = 0;
}

/// The current exception's type (demangled) and `what()` when it is a `std::exception`.
void describe_current_exception() {
    type_name[0] = 0;
    reason[0] = 0;
    std::type_info *type = abi::__cxa_current_exception_type();
    if (type == nullptr) {
        copy_cut(type_name, sizeof(type_name), "std::terminate");
        copy_cut(reason, sizeof(reason), "terminate called without an active exception");
        return;
    }
    const char *mangled = type->name();
    int status = 0;
    char *readable = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
    copy_cut(type_name, sizeof(type_name), status == 0 && readable != nullptr ? readable : mangled);
    std::free(readable);
    std::exception_ptr current = std::current_exception();
    if (!current) return;
    try {
        std::rethrow_exception(current);
    } catch (const std::exception &error) {
        copy_cut(reason, sizeof(reason), error.what());
    } catch (...) {
    }
}

[[noreturn]] void terminate_hook() {
    // The stack is still the throw site's: an uncaught exception reaches terminate from
    // `__cxa_throw` before anything is unwound. raw_frames[0] is this function.
    int n = backtrace(raw_frames, kMaxFrames + 1);
    int count = 0;
    for (int i = 1; i < n; i++) frames[count++] = reinterpret_cast<uintptr_t>(raw_frames[i]);
    describe_current_exception();
    ccrash_note_exception("cxx", type_name, reason, frames, static_cast<size_t>(count));
    if (previous_terminate != nullptr && previous_terminate != terminate_hook) previous_terminate();
    std::abort();
}

}  // namespace

extern "C" void ccrash_install_terminate_handler(void) {
    int expected = 0;
    if (!installed.compare_exchange_strong(expected, 1)) return;
    previous_terminate = std::set_terminate(terminate_hook);
}

extern "C" size_t ccrash_demangle_cxx(const char *mangled, char *buffer, size_t size) {
    if (mangled == nullptr || buffer == nullptr || size == 0 || std::strncmp(mangled, "_Z", 2) != 0) return 0;
    int status = 0;
    char *readable = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
    if (status != 0 || readable == nullptr) {
        std::free(readable);
        return 0;
    }
    copy_cut(buffer, size, readable);
    std::free(readable);
    return std::strlen(buffer);
}

extern "C" void crashguard_test_throw_runtime_error(const char *what) {
    throw std::runtime_error(what == nullptr ? "" : what);
}
