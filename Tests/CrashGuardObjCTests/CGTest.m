#import "CGTest.h"
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

typedef struct {
    const char *name;
    CGTestFunction function;
} CGEntry;

static CGEntry tests[256], scenarios[256];
static int testCount, scenarioCount, failures;
static const char *executable;
static NSMutableArray *reports;
static pthread_mutex_t reportsLock = PTHREAD_MUTEX_INITIALIZER;

void CGRegisterTest(const char *name, CGTestFunction function) { tests[testCount++] = (CGEntry){name, function}; }
void CGRegisterScenario(const char *name, CGTestFunction function) { scenarios[scenarioCount++] = (CGEntry){name, function}; }

void CGFail(const char *file, int line, NSString *message) {
    failures++;
    fprintf(stderr, "%s:%d: error: %s\n", file, line, [message UTF8String]);
}

NSString *CGDescribe(id object) {
    return [NSString stringWithFormat:@"<%s %p>", class_getName([object class]), (void *)object];
}

static void record(const crashguard_objc_report *report) {
    NSAutoreleasePool *pool = [[NSAutoreleasePool alloc] init];
    NSDictionary *entry = [NSDictionary dictionaryWithObjectsAndKeys:
        [NSString stringWithUTF8String:report->kind], @"kind",
        [NSString stringWithUTF8String:report->reason], @"reason",
        [NSString stringWithUTF8String:report->site], @"site",
        [NSString stringWithUTF8String:report->action], @"action",
        [NSString stringWithUTF8String:report->function], @"function",
        [NSNumber numberWithUnsignedLong:(unsigned long)report->site_address], @"siteAddress",
        [NSNumber numberWithUnsignedLong:report->address_count], @"addresses",
        [NSNumber numberWithUnsignedLong:report->stack_count], @"frames", nil];
    pthread_mutex_lock(&reportsLock);
    [reports addObject:entry];
    pthread_mutex_unlock(&reportsLock);
    [pool release];
}

NSArray *CGReports(void) {
    pthread_mutex_lock(&reportsLock);
    NSArray *copy = [[reports copy] autorelease];
    pthread_mutex_unlock(&reportsLock);
    return copy;
}

void CGResetReports(void) {
    pthread_mutex_lock(&reportsLock);
    [reports removeAllObjects];
    pthread_mutex_unlock(&reportsLock);
}

void CGExpectOneReport(const char *file, int line, NSString *kind, NSString *reason) {
    NSArray *seen = CGReports();
    CGResetReports();
    if ([seen count] != 1) {
        CGFail(file, line, [NSString stringWithFormat:@"expected one report (%@: %@), got %lu: %@", kind, reason, (unsigned long)[seen count], seen]);
        return;
    }
    NSDictionary *report = [seen objectAtIndex:0];
    if (![[report objectForKey:@"kind"] isEqual:kind]) CGFail(file, line, [NSString stringWithFormat:@"kind %@ != %@", [report objectForKey:@"kind"], kind]);
    if (![[report objectForKey:@"reason"] isEqual:reason])
        CGFail(file, line, [NSString stringWithFormat:@"reason\n  got      %@\n  expected %@", [report objectForKey:@"reason"], reason]);
    if ([[report objectForKey:@"frames"] unsignedLongValue] == 0) CGFail(file, line, @"empty stack");
}

CGChildResult CGRunScenario(const char *name) {
    int pipefd[2];
    pipe(pipefd);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, pipefd[1], 1);
    posix_spawn_file_actions_adddup2(&actions, pipefd[1], 2);
    posix_spawn_file_actions_addclose(&actions, pipefd[0]);
    char *argv[] = {(char *)executable, "--unguarded", (char *)name, NULL};
    pid_t pid;
    CGChildResult result = {0, 0, 0, nil};
    if (posix_spawn(&pid, executable, &actions, NULL, argv, environ) != 0) {
        result.output = @"spawn failed";
        close(pipefd[0]);
        close(pipefd[1]);
        return result;
    }
    close(pipefd[1]);
    NSMutableData *data = [NSMutableData data];
    char buffer[4096];
    ssize_t n;
    while ((n = read(pipefd[0], buffer, sizeof buffer)) > 0) [data appendBytes:buffer length:(NSUInteger)n];
    close(pipefd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    posix_spawn_file_actions_destroy(&actions);
    result.exited = WIFEXITED(status);
    result.status = WIFEXITED(status) ? WEXITSTATUS(status) : 0;
    result.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    result.output = [[[NSString alloc] initWithData:data encoding:NSUTF8StringEncoding] autorelease];
    return result;
}

void CGExpectUncaughtException(const char *file, int line, const char *scenario, NSString *exceptionName, NSString *reasonPart) {
    CGChildResult r = CGRunScenario(scenario);
    BOOL abnormal = !r.exited || r.status != 0;
    if (!abnormal) CGFail(file, line, [NSString stringWithFormat:@"%s: expected a crash, exited 0: %@", scenario, r.output]);
    if ([r.output rangeOfString:exceptionName].location == NSNotFound || [r.output rangeOfString:reasonPart].location == NSNotFound)
        CGFail(file, line, [NSString stringWithFormat:@"%s: expected %@ '%@' in:\n%@", scenario, exceptionName, reasonPart, r.output]);
}

void CGExpectSignal(const char *file, int line, const char *scenario, int signal) {
    CGChildResult r = CGRunScenario(scenario);
    if (r.exited || r.signal != signal)
        CGFail(file, line, [NSString stringWithFormat:@"%s: expected signal %d, got exited=%d status=%d signal=%d: %@", scenario, signal, r.exited, r.status, r.signal, r.output]);
}

void CGExpectClean(const char *file, int line, const char *scenario) {
    CGChildResult r = CGRunScenario(scenario);
    if (!r.exited || r.status != 0)
        CGFail(file, line, [NSString stringWithFormat:@"%s: expected a normal exit, got exited=%d status=%d signal=%d: %@", scenario, r.exited, r.status, r.signal, r.output]);
}

int main(int argc, char **argv) {
    NSAutoreleasePool *pool = [[NSAutoreleasePool alloc] init];
    executable = argv[0];
    if (argc == 3 && strcmp(argv[1], "--unguarded") == 0) {
        for (int i = 0; i < scenarioCount; i++) {
            if (strcmp(scenarios[i].name, argv[2]) == 0) {
                scenarios[i].function();  // an uncaught exception or a signal ends the child
                [pool release];
                return 0;
            }
        }
        fprintf(stderr, "no scenario %s\n", argv[2]);
        return 2;
    }
    const char *filter = argc >= 2 ? argv[1] : NULL;
    reports = [[NSMutableArray alloc] init];
    // Every family is installed once; tests switch families with crashguard_objc_set_enabled.
    crashguard_objc_install(CRASHGUARD_OBJC_ALL, record);
    int ran = 0;
    for (int i = 0; i < testCount; i++) {
        if (filter != NULL && strstr(tests[i].name, filter) == NULL) continue;
        int before = failures;
        NSAutoreleasePool *inner = [[NSAutoreleasePool alloc] init];
        crashguard_objc_set_enabled(CRASHGUARD_OBJC_ALL);
        crashguard_objc_set_raise_after_recording(0);
        CGResetReports();
        tests[i].function();
        [inner release];
        ran++;
        printf("%s %s\n", failures == before ? "PASS" : "FAIL", tests[i].name);
        fflush(stdout);
    }
    printf("%d tests, %d failures\n", ran, failures);
    [pool release];
    return failures == 0 && ran > 0 ? 0 : 1;
}
