#include "CRE2.h"

#include <re2/re2.h>

#include <cstring>
#include <new>

extern "C" void *crashguard_re2_new(const char *pattern, size_t length, char *error, size_t error_capacity) {
    RE2::Options options;
    options.set_log_errors(false);
    options.set_encoding(RE2::Options::EncodingUTF8);
    RE2 *re = new (std::nothrow) RE2(re2::StringPiece(pattern, length), options);
    if (re == nullptr) {
        if (error_capacity > 0) std::strncpy(error, "out of memory", error_capacity - 1), error[error_capacity - 1] = 0;
        return nullptr;
    }
    if (!re->ok()) {
        if (error_capacity > 0) {
            std::strncpy(error, re->error().c_str(), error_capacity - 1);
            error[error_capacity - 1] = 0;
        }
        delete re;
        return nullptr;
    }
    return re;
}

extern "C" void crashguard_re2_delete(void *re) { delete static_cast<RE2 *>(re); }

extern "C" int crashguard_re2_find(
    const void *re, const char *text, size_t length, size_t start, size_t *match_start, size_t *match_end) {
    const RE2 *pattern = static_cast<const RE2 *>(re);
    re2::StringPiece whole(text, length);
    re2::StringPiece match;
    if (!pattern->Match(whole, start, length, RE2::UNANCHORED, &match, 1)) return 0;
    *match_start = static_cast<size_t>(match.data() - text);
    *match_end = *match_start + match.size();
    return 1;
}
