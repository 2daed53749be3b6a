/* Out-of-memory tests in a child process: cap the child's address space
 * just above what it uses, run the check there, and assert in the parent
 * that it exited 0.  Under AddressSanitizer (whose shadow memory a capped
 * address space starves) the test says it is skipped. */
#ifndef PT_TEST_CHILDCAP_H
#define PT_TEST_CHILDCAP_H

#include <check.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define PT_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PT_UNDER_ASAN 1
#endif
#endif

/* Cap this process's address space at what it maps now plus `extra`
 * bytes; 0, or -1 when /proc/self/statm or setrlimit failed. */
static inline int tu_cap_address_space(unsigned long extra)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long pages = 0;
    int ok = f && fscanf(f, "%lu", &pages) == 1;
    if (f)
        fclose(f);
    if (!ok)
        return -1;
    struct rlimit r = { (rlim_t)(pages * (unsigned long)sysconf(_SC_PAGESIZE) + extra), RLIM_INFINITY };
    return setrlimit(RLIMIT_AS, &r) ? -1 : 0;
}

/* Run child() in a forked process and assert that it exits 0 (its exit
 * code names the check that failed); `name` is the test's, for the skip. */
static inline void tu_run_in_child(int (*child)(void), const char *name)
{
#ifdef PT_UNDER_ASAN
    printf("%s: skipped under AddressSanitizer (a capped address space starves its shadow memory)\n",
           name);
    (void)child;
#else
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0)
        _exit(child());
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s: child status %d (exit %d)", name,
                  status, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
#endif
}

#endif
