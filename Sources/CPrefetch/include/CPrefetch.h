#ifndef CPREFETCH_H
#define CPREFETCH_H

/// Asks the processor to start loading the cache line at `address` for a read. A hint only:
/// it never faults, whatever the address, and changes no result. Swift has no prefetch of
/// its own; this header is inlined where it is called.
static inline __attribute__((always_inline)) void cg_prefetch(const void *address) {
    __builtin_prefetch(address, 0, 3);
}

#endif
