#ifndef CZLIB_SHIM_H
#define CZLIB_SHIM_H
#include <zlib.h>

/* zlib's init entry points are macros, which Swift cannot call: wrap them. */
static inline int czlib_inflate_init(z_stream *stream, int window_bits) {
    return inflateInit2(stream, window_bits);
}

static inline int czlib_deflate_init(z_stream *stream, int level, int window_bits) {
    return deflateInit2(stream, level, Z_DEFLATED, window_bits, 8, Z_DEFAULT_STRATEGY);
}
#endif
