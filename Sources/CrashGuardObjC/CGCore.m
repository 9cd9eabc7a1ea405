// Reporting, switches, swizzling and side tables shared by every guard family.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1  // dladdr on glibc
#endif
#include "CGCompat.h"

#if CRASHGUARD_OBJC_ENABLED

#include <dlfcn.h>
#include <execinfo.h>
#include <stdlib.h>
#include <string.h>

CG_GUARD_CODE_BEGIN

// ---- Switches and callback ----

static pthread_mutex_t installLock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t installedFamilies;                 // under installLock
static uint32_t enabledFamilies;           // atomic (__atomic builtins)
static crashguard_objc_report_fn reportCallback;  // atomic
static int raiseAfterRecording;             // atomic

BOOL CGEnabled(uint32_t family) {
    return (__atomic_load_n(&enabledFamilies, __ATOMIC_ACQUIRE) & family) != 0;
}

uint32_t crashguard_objc_install(uint32_t categories, crashguard_objc_report_fn callback) {
    pthread_mutex_lock(&installLock);
    __atomic_store_n(&reportCallback, callback, __ATOMIC_RELEASE);
    uint32_t fresh = categories & ~installedFamilies & CRASHGUARD_OBJC_ALL;
    @autoreleasepool {
    if (fresh & CRASHGUARD_OBJC_CONTAINER) CGInstallContainerGuards();
    if (fresh & CRASHGUARD_OBJC_STRING) CGInstallStringGuards();
    if (fresh & CRASHGUARD_OBJC_SELECTOR) CGInstallSelectorGuard();
    if (fresh & CRASHGUARD_OBJC_NULL) CGInstallNullGuard();
    if (fresh & CRASHGUARD_OBJC_KVC) CGInstallKVCGuard();
    if (fresh & CRASHGUARD_OBJC_KVO) CGInstallKVOGuard();
    if (fresh & CRASHGUARD_OBJC_NOTIFICATION) CGInstallNotificationGuard();
    if (fresh & CRASHGUARD_OBJC_TIMER) CGInstallTimerGuard();
    if (fresh & CRASHGUARD_OBJC_ZOMBIE) CGInstallZombieGuard();
    if (fresh & (CRASHGUARD_OBJC_KVO | CRASHGUARD_OBJC_NOTIFICATION | CRASHGUARD_OBJC_TIMER | CRASHGUARD_OBJC_ZOMBIE)) {
        CGInstallDeallocHook();
    }
    }
    installedFamilies |= fresh;
    __atomic_fetch_or(&enabledFamilies, categories & CRASHGUARD_OBJC_ALL, __ATOMIC_RELEASE);
    uint32_t result = installedFamilies;
    pthread_mutex_unlock(&installLock);
    return result;
}

void crashguard_objc_set_enabled(uint32_t categories) {
    pthread_mutex_lock(&installLock);
    __atomic_store_n(&enabledFamilies, categories & installedFamilies, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&installLock);
}

uint32_t crashguard_objc_enabled(void) { return __atomic_load_n(&enabledFamilies, __ATOMIC_ACQUIRE); }

void crashguard_objc_set_raise_after_recording(int raise) { __atomic_store_n(&raiseAfterRecording, raise ? 1 : 0, __ATOMIC_RELEASE); }

NSString *CGAddress(CG_UNSAFE id object) { return [NSString stringWithFormat:@"%p", (__bridge const void *)object]; }

NSString *CGClassName(CG_UNSAFE id object) {
    if (object == nil) return @"nil";
    return [NSString stringWithUTF8String:class_getName(object_getClass(object))];
}

// A guard must never recurse into itself: building a reason or a stack messages the very
// classes it guards. Per thread, a guard that fires while a report is being built only
// does the safe thing.
static pthread_key_t reentryKey;
static pthread_once_t reentryOnce = PTHREAD_ONCE_INIT;
static void makeReentryKey(void) { pthread_key_create(&reentryKey, NULL); }

// ---- The app's frame ----

#if defined(__APPLE__)
extern char cgGuardCodeStart[] __asm("section$start$__TEXT$__cg_guards");
extern char cgGuardCodeEnd[] __asm("section$end$__TEXT$__cg_guards");
#else
extern char __start_crashguard_objc_text[], __stop_crashguard_objc_text[];
#define cgGuardCodeStart __start_crashguard_objc_text
#define cgGuardCodeEnd __stop_crashguard_objc_text
#endif

BOOL CGIsGuardCode(uintptr_t address) {
    return address >= (uintptr_t)cgGuardCodeStart && address < (uintptr_t)cgGuardCodeEnd;
}

/// The images whose frames lie between the app and a guard: Foundation (GNUstep Base,
/// with libffi behind its forwarding) and the Objective-C runtime.
static BOOL isSystemImage(const char *path) {
    const char *name = strrchr(path, '/');
    name = name != NULL ? name + 1 : path;
    static const char *const prefixes[] = {"libobjc", "libgnustep-base", "libffi", "Foundation", "CoreFoundation",
                                           "libswiftFoundation", "libFoundation"};
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        if (strncmp(name, prefixes[i], strlen(prefixes[i])) == 0) return YES;
    }
    return NO;
}

uintptr_t CGAppFrame(const uintptr_t *addresses, size_t count) {
    if (cgGuardCodeStart == cgGuardCodeEnd) return 0;  // no section: the guards cannot tell their frames apart
    for (size_t i = 0; i < count; i++) {
        // A return address points after the call: the call itself is one byte before.
        uintptr_t address = addresses[i];
        if (address == 0 || CGIsGuardCode(address - 1)) continue;
        Dl_info info;
        if (dladdr((void *)(address - 1), &info) != 0 && info.dli_fname != NULL && isSystemImage(info.dli_fname)) continue;
        return address;
    }
    return 0;
}

/// "image`symbol+0x1f" when the image exports the symbol, else "image+0x4a2f": stable for
/// one build, so it names the call site across launches.
static NSString *describeFrame(uintptr_t address) {
    Dl_info info;
    if (dladdr((void *)(address - 1), &info) == 0 || info.dli_fname == NULL) {
        return [NSString stringWithFormat:@"0x%lx", (unsigned long)address];
    }
    const char *image = strrchr(info.dli_fname, '/');
    image = image != NULL ? image + 1 : info.dli_fname;
    if (info.dli_sname != NULL && info.dli_saddr != NULL) {
        return [NSString stringWithFormat:@"%s`%s+0x%lx", image, info.dli_sname, (unsigned long)(address - (uintptr_t)info.dli_saddr)];
    }
    return [NSString stringWithFormat:@"%s+0x%lx", image, (unsigned long)(address - (uintptr_t)info.dli_fbase)];
}

void CGReport(uint32_t family, const char *kind, NSString *function, NSString *action, NSString *reason,
              NSString *exceptionName) {
    pthread_once(&reentryOnce, makeReentryKey);
    if (pthread_getspecific(reentryKey) != NULL) return;
    pthread_setspecific(reentryKey, (void *)1);
    crashguard_objc_report_fn callback = __atomic_load_n(&reportCallback, __ATOMIC_ACQUIRE);
    if (callback != NULL) {
        @autoreleasepool {
        void *raw[128];
        int depth = backtrace(raw, 128);
        uintptr_t addresses[128];
        for (int i = 0; i < depth; i++) addresses[i] = (uintptr_t)raw[i];
        uintptr_t appFrame = CGAppFrame(addresses, depth > 0 ? (size_t)depth : 0);
        // The site is the app's call: two calls of one method from two places are two sites
        // (two rate limits); without an app frame, the guarded method.
        NSString *site = appFrame != 0 ? describeFrame(appFrame) : function;
        NSArray *symbols = [NSThread callStackSymbols];
        NSUInteger count = [symbols count];
        if (count > 256) count = 256;
        const char **frames = calloc(count ? count : 1, sizeof(char *));
        for (NSUInteger i = 0; i < count; i++) frames[i] = [[[symbols objectAtIndex:i] description] UTF8String];
        crashguard_objc_report report = {
            .kind = kind,
            .reason = [reason UTF8String],
            .stack = frames,
            .stack_count = count,
            .site = [site UTF8String],
            .action = [action UTF8String],
            .function = [function UTF8String],
            .site_address = appFrame,
            .addresses = addresses,
            .address_count = depth > 0 ? (size_t)depth : 0,
        };
        callback(&report);
        free(frames);
        }
    }
    pthread_setspecific(reentryKey, NULL);
    (void)family;
    if (exceptionName != nil && __atomic_load_n(&raiseAfterRecording, __ATOMIC_ACQUIRE)) {
        [NSException raise:exceptionName format:@"%@", reason];
    }
}

// ---- Swizzling ----

typedef struct {
    CG_UNSAFE Class cls;
    SEL sel;
    IMP original;
} CGOriginalEntry;

static CGOriginalEntry *originals;        // append-only, published by originalCount
static unsigned originalCount;            // atomic: readers scan entries below it
static unsigned originalCapacity;

// A direct-mapped cache of CGOriginal's answers per (receiver class, selector): the scan
// below walks the class chain over every swizzled method, about ten times the cost of
// the guarded call itself. Slots are filled once (compare-and-swap from NULL) with
// immutable entries; a swizzle empties the cache (the old entries are leaked: a reader
// may hold one; their number is bounded by the classes times the guarded selectors).
#define CG_CACHE_SLOTS 1024
static CGOriginalEntry *originalCache[CG_CACHE_SLOTS];

static unsigned cacheSlot(Class cls, SEL sel) {
    uintptr_t h = ((uintptr_t)cls >> 4) * 31u + ((uintptr_t)(const void *)sel >> 3);
    return (unsigned)((h ^ (h >> 11)) & (CG_CACHE_SLOTS - 1));
}

static BOOL inheritsFrom(Class cls, Class base) {
    for (Class c = cls; c != Nil; c = class_getSuperclass(c)) {
        if (c == base) return YES;
    }
    return NO;
}

static BOOL definesOwn(Class cls, SEL sel) {
    unsigned count = 0;
    Method *methods = class_copyMethodList(cls, &count);
    BOOL found = NO;
    for (unsigned i = 0; i < count && !found; i++) found = sel_isEqual(method_getName(methods[i]), sel);
    free(methods);
    return found;
}

static Method ownMethod(Class cls, SEL sel) {
    unsigned count = 0;
    Method *methods = class_copyMethodList(cls, &count);
    Method found = NULL;
    for (unsigned i = 0; i < count && found == NULL; i++) {
        if (sel_isEqual(method_getName(methods[i]), sel)) found = methods[i];
    }
    free(methods);
    return found;
}

CG_UNSAFE Class *CGClassesDefining(Class base, SEL sel, BOOL meta, unsigned *count) {
    int total = objc_getClassList(NULL, 0);
    CG_UNSAFE Class *all = (CG_UNSAFE Class *)calloc((size_t)total + 1, sizeof(Class));
    total = objc_getClassList(all, total);
    CG_UNSAFE Class *result = (CG_UNSAFE Class *)calloc((size_t)total + 1, sizeof(Class));
    unsigned n = 0;
    for (int i = 0; i < total; i++) {
        Class cls = all[i];
        if (!inheritsFrom(cls, base)) continue;
        Class target = meta ? object_getClass((id)cls) : cls;
        if (definesOwn(target, sel)) result[n++] = target;
    }
    free(all);
    *count = n;
    return result;
}

IMP CGSwizzleOwn(Class cls, SEL sel, IMP imp) {
    Method method = ownMethod(cls, sel);
    if (method == NULL) return NULL;
    IMP original = method_getImplementation(method);
    if (original == imp) return NULL;
    if (originalCount == originalCapacity) {
        // Grown before publishing: readers only read entries below the published count.
        unsigned capacity = originalCapacity ? originalCapacity * 2 : 64;
        CGOriginalEntry *grown = calloc(capacity, sizeof(CGOriginalEntry));
        if (originals != NULL) memcpy(grown, originals, originalCount * sizeof(CGOriginalEntry));
        // The old array is leaked on purpose: a reader may still be scanning it.
        __atomic_store_n(&originals, grown, __ATOMIC_RELEASE);
        originalCapacity = capacity;
    }
    originals[originalCount] = (CGOriginalEntry){cls, sel, original};
    __atomic_fetch_add(&originalCount, 1, __ATOMIC_RELEASE);
    method_setImplementation(method, imp);
    CGRebuildDispatch(cls);
    for (unsigned i = 0; i < CG_CACHE_SLOTS; i++) __atomic_store_n(&originalCache[i], NULL, __ATOMIC_RELEASE);
    return original;
}

static IMP scanOriginal(Class cls, SEL sel) {
    unsigned count = __atomic_load_n(&originalCount, __ATOMIC_ACQUIRE);
    CGOriginalEntry *entries = __atomic_load_n(&originals, __ATOMIC_ACQUIRE);
    for (Class c = cls; c != Nil; c = class_getSuperclass(c)) {
        for (unsigned i = 0; i < count; i++) {
            if (entries[i].cls == c && sel_isEqual(entries[i].sel, sel)) return entries[i].original;
        }
    }
    return NULL;
}

IMP CGOriginal(CG_UNSAFE id object, SEL sel) {
    Class cls = object_getClass(object);
    unsigned slot = cacheSlot(cls, sel);
    CGOriginalEntry *cached = __atomic_load_n(&originalCache[slot], __ATOMIC_ACQUIRE);
    if (cached != NULL && cached->cls == cls && cached->sel == sel) return cached->original;
    IMP found = scanOriginal(cls, sel);
    if (found != NULL && cached == NULL) {
        CGOriginalEntry *entry = malloc(sizeof(CGOriginalEntry));
        *entry = (CGOriginalEntry){cls, sel, found};
        CGOriginalEntry *expected = NULL;
        if (!__atomic_compare_exchange_n(&originalCache[slot], &expected, entry, NO, __ATOMIC_RELEASE, __ATOMIC_RELAXED)) {
            free(entry);
        }
    }
    return found;
}

unsigned CGSwizzleCluster(Class base, SEL sel, IMP imp, BOOL meta) {
    unsigned count = 0, changed = 0;
    CG_UNSAFE Class *classes = CGClassesDefining(base, sel, meta, &count);
    for (unsigned i = 0; i < count; i++) {
        if (CGSwizzleOwn(classes[i], sel, imp) != NULL) changed++;
    }
    free(classes);
    return changed;
}

void CGSwizzleClusterMethods(const CGClusterMethod *methods, size_t count) {
    for (size_t i = 0; i < count; i++) CGSwizzleCluster(methods[i].base, methods[i].sel, methods[i].imp, NO);
}

#if CG_GNU_RUNTIME
static void cgDispatchMarker(id self, SEL _cmd) { (void)self; (void)_cmd; }
#endif

void CGRebuildDispatch(Class cls) {
#if CG_GNU_RUNTIME
    // GCC's runtime copies implementations into each class's dispatch table; adding a
    // method rebuilds the tables of the class and its subclasses, so the new IMP is seen.
    static unsigned serial;
    char name[64];
    snprintf(name, sizeof name, "__crashguard_rebuild_%u", __atomic_fetch_add(&serial, 1, __ATOMIC_RELAXED));
    class_addMethod(cls, sel_registerName(name), (IMP)cgDispatchMarker, "v@:");
#else
    (void)cls;  // Apple's runtime flushes the method caches in method_setImplementation.
#endif
}

// ---- Side tables ----

typedef struct {
    const void *key;  // NULL: empty; tombstone: deleted
    void *value;      // a retained object (CG_BRIDGE_RETAINED)
} CGSlot;

static const char tombstoneMark;
#define CG_TOMBSTONE ((const void *)&tombstoneMark)

struct CGSideTable {
    pthread_mutex_t lock;
    CGSlot *slots;
    size_t capacity, used, live;  // used counts live entries and tombstones
};

CGSideTable *CGSideTableCreate(void) {
    CGSideTable *table = calloc(1, sizeof(CGSideTable));
    pthread_mutex_init(&table->lock, NULL);
    table->capacity = 64;
    table->slots = calloc(table->capacity, sizeof(CGSlot));
    return table;
}

static size_t slotIndex(const CGSideTable *table, const void *key) {
    uintptr_t h = (uintptr_t)key;
    h ^= h >> 17;
    h *= 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 7) & (table->capacity - 1);
}

/// The slot holding `key`, or NULL.
static CGSlot *findSlot(CGSideTable *table, const void *key) {
    for (size_t i = slotIndex(table, key), n = 0; n < table->capacity; i = (i + 1) & (table->capacity - 1), n++) {
        CGSlot *slot = &table->slots[i];
        if (slot->key == NULL) return NULL;
        if (slot->key == key) return slot;
    }
    return NULL;
}

static void insertSlot(CGSideTable *table, const void *key, void *value) {
    for (size_t i = slotIndex(table, key);; i = (i + 1) & (table->capacity - 1)) {
        CGSlot *slot = &table->slots[i];
        if (slot->key == NULL || slot->key == CG_TOMBSTONE) {
            if (slot->key == NULL) table->used++;
            slot->key = key;
            slot->value = value;
            table->live++;
            return;
        }
    }
}

static void growIfNeeded(CGSideTable *table) {
    if ((table->used + 1) * 4 < table->capacity * 3) return;
    CGSlot *old = table->slots;
    size_t oldCapacity = table->capacity;
    if (table->live * 2 >= oldCapacity) table->capacity *= 2;
    table->slots = calloc(table->capacity, sizeof(CGSlot));
    table->used = 0;
    table->live = 0;
    for (size_t i = 0; i < oldCapacity; i++) {
        if (old[i].key != NULL && old[i].key != CG_TOMBSTONE) insertSlot(table, old[i].key, old[i].value);
    }
    free(old);
}

/// Empties `slot` (a tombstone, so later probes go on) and returns its retained value.
static void *removeSlot(CGSideTable *table, CGSlot *slot) {
    void *value = slot->value;
    slot->key = CG_TOMBSTONE;
    slot->value = NULL;
    table->live--;
    return value;
}

id CGSideTableGet(CGSideTable *table, CG_UNSAFE id object) {
    const void *key = (__bridge const void *)object;
    pthread_mutex_lock(&table->lock);
    CGSlot *slot = findSlot(table, key);
    id value = slot != NULL ? CG_RETAIN(CG_BRIDGE(slot->value)) : nil;
    pthread_mutex_unlock(&table->lock);
    return CG_AUTORELEASE(value);
}

void CGSideTableSet(CGSideTable *table, CG_UNSAFE id object, id value) {
    const void *key = (__bridge const void *)object;
    void *old = NULL;
    pthread_mutex_lock(&table->lock);
    CGSlot *slot = findSlot(table, key);
    if (slot != NULL) {
        if (value != nil) {
            old = slot->value;
            slot->value = CG_BRIDGE_RETAINED(value);
        } else {
            old = removeSlot(table, slot);
        }
    } else if (value != nil) {
        growIfNeeded(table);
        insertSlot(table, key, CG_BRIDGE_RETAINED(value));
    }
    pthread_mutex_unlock(&table->lock);
    if (old != NULL) (void)CG_BRIDGE_TRANSFER(old);  // released outside the lock
}

id CGSideTableTake(CGSideTable *table, CG_UNSAFE id object) {
    const void *key = (__bridge const void *)object;
    void *taken = NULL;
    pthread_mutex_lock(&table->lock);
    CGSlot *slot = findSlot(table, key);
    if (slot != NULL) taken = removeSlot(table, slot);
    pthread_mutex_unlock(&table->lock);
    return taken != NULL ? CG_BRIDGE_TRANSFER(taken) : nil;
}

NSArray *CGSideTableValues(CGSideTable *table) {
    NSMutableArray *values = [NSMutableArray array];
    pthread_mutex_lock(&table->lock);
    for (size_t i = 0; i < table->capacity; i++) {
        CGSlot *slot = &table->slots[i];
        if (slot->key != NULL && slot->key != CG_TOMBSTONE) [values addObject:CG_BRIDGE(slot->value)];
    }
    pthread_mutex_unlock(&table->lock);
    return values;
}

// ---- The shared -dealloc hook ----

static IMP originalDealloc;

/// Set while this thread runs the hooks: the objects they create and free themselves go
/// straight through (they are never observed, timed or protected), else every hook's
/// temporary would run the hooks again.
static __thread int inDeallocHooks;

static void cgDealloc(CG_UNSAFE id self, SEL _cmd) {
    if (!inDeallocHooks) {
        inDeallocHooks = 1;
        BOOL kept = NO;
        if (CGEnabled(CRASHGUARD_OBJC_KVO)) CGKVODeallocHook(self);
        if (CGEnabled(CRASHGUARD_OBJC_NOTIFICATION)) CGNotificationDeallocHook(self);
        if (CGEnabled(CRASHGUARD_OBJC_TIMER)) CGTimerDeallocHook(self);
        if (CGEnabled(CRASHGUARD_OBJC_ZOMBIE)) kept = CGZombieDeallocHook(self);
        inDeallocHooks = 0;
        if (kept) return;
    }
    ((void (*)(CG_UNSAFE id, SEL))originalDealloc)(self, _cmd);
}

void CGRealDealloc(CG_UNSAFE id object) { ((void (*)(CG_UNSAFE id, SEL))originalDealloc)(object, CG_SEL_DEALLOC); }

void CGInstallDeallocHook(void) {
    if (originalDealloc != NULL) return;
    // NSObject's own -dealloc, reached by every [super dealloc] chain: by then the
    // subclasses have released their ivars, and only the root frees the memory.
    originalDealloc = CGSwizzleOwn([NSObject class], CG_SEL_DEALLOC, (IMP)cgDealloc);
}

CG_GUARD_CODE_END

#endif  // CRASHGUARD_OBJC_ENABLED
