/*
 * Starting a command in a new session (command_spawn.c): what launcher.c's supervisor and
 * sandbox.c's PID 1 did with posix_spawn, with less work on the way to execve.
 */
#ifndef EXECUTOR_COMMAND_SPAWN_H
#define EXECUTOR_COMMAND_SPAWN_H

#include <sys/types.h>

/* Start `executable` as a new session's leader, with default signal dispositions and an empty
 * signal mask. Its stdio: `stdio`'s three descriptors at 0..2 (NULL: the caller's 0..2), or,
 * with `terminal`, that terminal opened as the controlling one at 0..2. 0 and the pid in
 * `pid`; or the errno of the step that failed (the child is reaped then).
 *
 * The child runs on the caller's memory until its execve: the caller must have no signal
 * handler installed. Of the dispositions, only those that the launcher's processes set
 * (command_spawn.c: NOT_DEFAULT) are reset; launcher.c resets every other one when it
 * starts (reset_signals). */
int command_spawn(const char *executable, char *const argv[], char *const envp[],
                  const int *stdio, const char *terminal, pid_t *pid);

/* Every signal disposition the default one and an empty signal mask, as a freshly exec'd
 * program has them. */
void reset_signals(void);

#endif
