// A C interface to the few parts of RE2 (a C++ library) the scrubber's project patterns use:
// compile one pattern, find its next match. RE2 runs in time linear in the text.
#ifndef CRASHGUARD_CRE2_H
#define CRASHGUARD_CRE2_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/// A compiled pattern, or NULL when `pattern` (`length` bytes of UTF-8, RE2 syntax) does not
/// compile; then `error` holds RE2's reason, NUL-terminated and cut at `error_capacity`.
/// Case-sensitive unless the pattern says `(?i)`; never logs.
void *crashguard_re2_new(const char *pattern, size_t length, char *error, size_t error_capacity);

/// Frees what `crashguard_re2_new` returned (NULL is fine).
void crashguard_re2_delete(void *re);

/// Finds the leftmost match in `text[start..<length]`; 1 with its bounds (offsets in `text`)
/// in `match_start` and `match_end`, 0 when there is none.
int crashguard_re2_find(
    const void *re, const char *text, size_t length, size_t start, size_t *match_start, size_t *match_end);

#ifdef __cplusplus
}
#endif

#endif
