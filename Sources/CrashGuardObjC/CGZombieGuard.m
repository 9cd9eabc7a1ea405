// Zombies (wild pointers): instances of the listed classes are not freed at -dealloc. The
// shared dealloc hook (NSObject's -dealloc, reached after the subclasses released their
// ivars) changes the object's class to CrashGuardZombie and keeps it in a bounded
// quarantine (2 MiB by default, like Baymax); the oldest are freed for real when the
// budget is exceeded. A message to a zombie is recorded with the runtime's NSZombie text
//   *** -[Controller refresh]: message sent to deallocated instance 0x...
// and answered by the shared stub (0 / nil). Only listed classes and their subclasses are
// protected: system classes rarely dangle and would cost the quarantine for nothing (the
// seed's white list); an app's view controllers share a base class, which is listed once.
#include "CGCompat.h"

#if CRASHGUARD_OBJC_ENABLED

#include <string.h>
#if !CG_GNU_RUNTIME
#include <dlfcn.h>
#endif

CG_GUARD_CODE_BEGIN
#if !CG_GNU_RUNTIME

/// objc_destructInstance, which ARC code may not call by name: releases the instance's
/// ivars (.cxx_destruct) and associated objects without freeing it.
static void destructInstance(CG_UNSAFE id object) {
    static void *(*destruct)(void *);
    if (destruct == NULL) destruct = (void *(*)(void *))dlsym(RTLD_DEFAULT, "objc_destructInstance");
    if (destruct != NULL) destruct((__bridge void *)object);
}
#endif

typedef struct {
    CG_UNSAFE id object;
    CG_UNSAFE Class original;
    size_t bytes;
} CGZombie;

static pthread_mutex_t zombieLock = PTHREAD_MUTEX_INITIALIZER;
static Class zombieClass;
static CG_UNSAFE Class *protectedClasses;
static unsigned protectedCount, protectedCapacity;  // protectedCount also read atomically
static CGZombie *queue;          // ring buffer, oldest at head
static size_t queueHead, queueCount, queueCapacity;
static size_t quarantineBytes, quarantineLimit = 2u << 20;

void crashguard_objc_zombie_protect_class(const char *class_name) {
    Class cls = objc_getClass(class_name);
    if (cls == Nil) return;
    pthread_mutex_lock(&zombieLock);
    BOOL known = NO;
    for (unsigned i = 0; i < protectedCount; i++) known = known || protectedClasses[i] == cls;
    if (!known) {
        if (protectedCount == protectedCapacity) {
            protectedCapacity = protectedCapacity ? protectedCapacity * 2 : 8;
            protectedClasses = (CG_UNSAFE Class *)realloc(protectedClasses, protectedCapacity * sizeof(Class));
        }
        protectedClasses[protectedCount] = cls;
        __atomic_store_n(&protectedCount, protectedCount + 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&zombieLock);
}

void crashguard_objc_zombie_set_quarantine_bytes(size_t bytes) {
    pthread_mutex_lock(&zombieLock);
    quarantineLimit = bytes ? bytes : (2u << 20);
    pthread_mutex_unlock(&zombieLock);
}

/// Pops zombies until the quarantine holds at most `limit` bytes; the caller frees them
/// (outside the lock: a real dealloc may run other hooks).
static size_t evictLocked(size_t limit, CGZombie *out, size_t capacity) {
    size_t n = 0;
    while (queueCount > 0 && quarantineBytes > limit && n < capacity) {
        out[n++] = queue[queueHead];
        quarantineBytes -= queue[queueHead].bytes;
        queueHead = (queueHead + 1) % queueCapacity;
        queueCount--;
    }
    return n;
}

static void freeZombies(CGZombie *zombies, size_t count) {
    for (size_t i = 0; i < count; i++) {
        object_setClass(zombies[i].object, zombies[i].original);
        CGRealDealloc(zombies[i].object);
    }
}

void crashguard_objc_zombie_drain(void) {
    for (;;) {
        CGZombie batch[64];
        pthread_mutex_lock(&zombieLock);
        size_t n = evictLocked(0, batch, 64);
        pthread_mutex_unlock(&zombieLock);
        if (n == 0) return;
        freeZombies(batch, n);
    }
}

static Class originalClassOf(CG_UNSAFE id zombie) {
    pthread_mutex_lock(&zombieLock);
    Class found = Nil;
    for (size_t i = 0; i < queueCount && found == Nil; i++) {
        CGZombie *z = &queue[(queueHead + i) % queueCapacity];
        if (z->object == zombie) found = z->original;
    }
    pthread_mutex_unlock(&zombieLock);
    return found;
}

/// Whether `cls` is a listed class or inherits from one (under zombieLock).
static BOOL isProtectedLocked(Class cls) {
    for (Class c = cls; c != Nil; c = class_getSuperclass(c)) {
        for (unsigned i = 0; i < protectedCount; i++) {
            if (protectedClasses[i] == c) return YES;
        }
    }
    return NO;
}

BOOL CGZombieDeallocHook(CG_UNSAFE id object) {
    Class cls = object_getClass(object);
    if (cls == zombieClass) return YES;  // a zombie's -dealloc: it is freed by the quarantine only
    if (__atomic_load_n(&protectedCount, __ATOMIC_ACQUIRE) == 0) return NO;  // nothing listed
    pthread_mutex_lock(&zombieLock);
    if (!isProtectedLocked(cls)) {
        pthread_mutex_unlock(&zombieLock);
        return NO;
    }
    if (queueCount == queueCapacity) {
        size_t capacity = queueCapacity ? queueCapacity * 2 : 64;
        CGZombie *grown = calloc(capacity, sizeof(CGZombie));
        for (size_t i = 0; i < queueCount; i++) grown[i] = queue[(queueHead + i) % queueCapacity];
        free(queue);
        queue = grown;
        queueHead = 0;
        queueCapacity = capacity;
    }
    size_t bytes = class_getInstanceSize(cls);
#if !CG_GNU_RUNTIME
    destructInstance(object);  // ARC ivars and associated objects, as the real dealloc would
#endif
    object_setClass(object, zombieClass);
    queue[(queueHead + queueCount) % queueCapacity] = (CGZombie){object, cls, bytes};
    queueCount++;
    quarantineBytes += bytes;
    CGZombie evicted[16];
    size_t n = evictLocked(quarantineLimit, evicted, 16);
    pthread_mutex_unlock(&zombieLock);
    freeZombies(evicted, n);
    return YES;
}

static void reportZombie(CG_UNSAFE id self, SEL sel) {
    Class original = originalClassOf(self);
    NSString *className = original ? [NSString stringWithUTF8String:class_getName(original)] : @"?";
    NSString *site = [NSString stringWithFormat:@"-[%@ %s]", className, sel_getName(sel)];
    NSString *reason = [NSString stringWithFormat:@"*** %@: message sent to deallocated instance %@", site, CGAddress(self)];
    CGReport(CRASHGUARD_OBJC_ZOMBIE, "wildPointer", site, @"answered 0", reason, NSInvalidArgumentException);
}

// Any other message: the zombie class resolves the selector with a method that records
// the message and answers 0 (+resolveInstanceMethod:, on both runtimes). No forwarding:
// GNUstep's forwarding would retain and release the zombie on the way.
static id cgZombieMessage(CG_UNSAFE id self, SEL _cmd, ...) {
    reportZombie(self, _cmd);
    return nil;
}

static double cgZombieMessageDouble(CG_UNSAFE id self, SEL _cmd, ...) {
    reportZombie(self, _cmd);
    return 0;
}

static BOOL cgZombieResolve(id self, SEL _cmd, SEL sel) {
    char buffer[128];
    const char *types = CGTypesFor(sel, buffer, sizeof buffer);
    BOOL floating = types[0] == 'f' || types[0] == 'd';
    class_addMethod(zombieClass, sel, floating ? (IMP)cgZombieMessageDouble : (IMP)cgZombieMessage, types);
    return YES;
}

static id cgZombieRetain(CG_UNSAFE id self, SEL _cmd) {
    reportZombie(self, _cmd);
    return self;
}

static void cgZombieRelease(CG_UNSAFE id self, SEL _cmd) { reportZombie(self, _cmd); }

static void cgZombieDealloc(CG_UNSAFE id self, SEL _cmd) {
    (void)self;
    (void)_cmd;
}

void CGInstallZombieGuard(void) {
    zombieClass = objc_allocateClassPair([NSObject class], "CrashGuardZombie", 0);
    class_addMethod(object_getClass((id)zombieClass), @selector(resolveInstanceMethod:), (IMP)cgZombieResolve, "c@::");
    class_addMethod(zombieClass, CG_SEL_RETAIN, (IMP)cgZombieRetain, "@@:");
    class_addMethod(zombieClass, CG_SEL_AUTORELEASE, (IMP)cgZombieRetain, "@@:");
    class_addMethod(zombieClass, CG_SEL_RELEASE, (IMP)cgZombieRelease, "v@:");
    class_addMethod(zombieClass, CG_SEL_DEALLOC, (IMP)cgZombieDealloc, "v@:");
    objc_registerClassPair(zombieClass);
}

CG_GUARD_CODE_END

#endif  // CRASHGUARD_OBJC_ENABLED
