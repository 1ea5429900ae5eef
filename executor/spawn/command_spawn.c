/*
 * command_spawn (command_spawn.h): vfork, a few system calls, execve.
 *
 * Why not posix_spawn: glibc's runs its child on a fresh 36 KiB stack (an mmap, and a page
 * fault on first touch, then an munmap) and calls sigaction for all 64 signals. On the
 * kind of VM this runs on (page-table changes are expensive; worse after a short idle) that
 * was ~0.25 ms of every launch, all of it on the way to the command's execve, measured
 * with tracefs on an isolated /bin/true: mmap 24 us, the stack's first fault 130 us, the
 * signals 80 us. Here the child borrows the caller's stack (already faulted in), as vfork
 * children do, and resets the three dispositions that can differ from the default.
 */

#define _GNU_SOURCE
#include "command_spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* What may be ignored where this is called: launcher.c main resets every disposition
 * (reset_signals), then ignores SIGCHLD, SIGINT and SIGPIPE (a supervisor sets SIGCHLD back); sandbox.c's
 * outer child ignores the signals it forwards, after PID 1's fork (reset here too, should
 * that order ever change). An ignored disposition survives execve: the command would inherit
 * it. Eight system calls instead of 64. */
static const int NOT_DEFAULT[] = {SIGCHLD, SIGINT,  SIGPIPE, SIGTERM,
                                  SIGHUP,  SIGQUIT, SIGUSR1, SIGUSR2};

void reset_signals(void) {
    for (int signal_number = 1; signal_number < NSIG; signal_number++) {
        if (signal_number != SIGKILL && signal_number != SIGSTOP) {
            signal(signal_number, SIG_DFL); /* glibc's own (32, 33) refuse: harmless */
        }
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
}

int command_spawn(const char *executable, char *const argv[], char *const envp[],
                  const int *stdio, const char *terminal, pid_t *pid) {
    /* Written by the child, which shares this memory until its execve or _exit. */
    volatile int failure = 0;
    pid_t child = vfork();
    if (child == 0) {
        /* The caller is suspended until execve: only system calls from here, and no return. */
        if (setsid() < 0) {
            goto failed;
        }
        if (terminal != NULL) {
            /* A session leader without a controlling terminal acquires the one it opens. */
            int fd = open(terminal, O_RDWR);
            if (fd < 0 || (fd != 0 && dup2(fd, 0) < 0)) {
                goto failed;
            }
            if (fd != 0) {
                close(fd);
            }
            if (dup2(0, 1) < 0 || dup2(0, 2) < 0) {
                goto failed;
            }
        } else if (stdio != NULL) {
            for (int target = 0; target < 3; target++) {
                if (dup2(stdio[target], target) < 0) { /* clears close-on-exec */
                    goto failed;
                }
            }
        }
        struct sigaction default_action;
        memset(&default_action, 0, sizeof default_action);
        default_action.sa_handler = SIG_DFL;
        for (size_t i = 0; i < sizeof NOT_DEFAULT / sizeof NOT_DEFAULT[0]; i++) {
            if (sigaction(NOT_DEFAULT[i], &default_action, NULL) < 0) {
                goto failed;
            }
        }
        sigset_t none;
        sigemptyset(&none);
        if (sigprocmask(SIG_SETMASK, &none, NULL) < 0) {
            goto failed;
        }
        execve(executable, argv, envp);
    failed:
        failure = errno;
        _exit(127);
    }
    if (child < 0) {
        return errno;
    }
    if (failure != 0) {
        int error = failure;
        while (waitpid(child, NULL, 0) < 0 && errno == EINTR) {
        }
        return error;
    }
    *pid = child;
    return 0;
}
