/*
 * executor-launcher: the native launcher server, for plain commands and, with sandbox.c, for
 * commands under the Linux backend's sandbox.
 *
 * The daemon starts it as `executor-launcher <control-fd> <daemon-pid>` and sends one
 * request per command on the control socket (a Unix stream socket):
 *
 *   4-byte big-endian length, then the payload: NUL-terminated fields
 *     tty ("0" or "1"), cwd, executable, argc (decimal), argv[0..argc), env ("KEY=VALUE")...
 *   and, as SCM_RIGHTS on the first byte, the descriptors status, stdin, stdout, stderr.
 *
 *   A plain launch for a kept supervisor puts "K\0\0\0" and the slot's number (one byte)
 *   first (the daemon sends it only to a launcher whose usage text offers "supervisor-slots").
 *
 *   A sandboxed launch puts its spec first: "S\0\0\0\0", the spec's 4-byte big-endian
 *   length, the spec (sandbox.c; encoded by plugins/executor_linux/native_spec.py), then the
 *   fields above. (A launcher that predates specs reads an empty argc there and refuses the
 *   request; the daemon sends specs only to a launcher whose usage text names the version.)
 *
 * For each request it forks a supervisor and forgets it (SIGCHLD is ignored, so the kernel
 * reaps supervisors), or hands a plain request that names a slot to that slot's kept
 * supervisor ("supervisors kept for reuse" below). The supervisor speaks the status-line
 * protocol of zygote.py on the status pipe: "S <pid> <supervisor>", "E <stage> <errno>
 * <detail>", "O <observed layers>" (sandboxed launches, before "S"), "X <wait status>", then
 * EOF once the command and every descendant are gone (it is their child subreaper).
 *
 * A plain command is started with command_spawn (vfork). A sandboxed one is forked with an
 * error pipe (close-on-exec): the child applies the layers (sandbox.c, the same stages as
 * plugins/executor_linux/launcher.py) and reports a failed stage, or what it observed, there;
 * the supervisor relays that and reports the start when the pipe closes. An exit pipe brings
 * the exit early, before the child's own exit tears its namespaces down (sandbox.h). After a
 * sandboxed launch with the usual namespaces (network off, no user namespace) the next one's
 * supervisor and child are prepared ahead, namespaces made, for a while ("a sandboxed launch
 * prepared ahead" below).
 *
 * Why native: this machine's kind of VM makes fork() cost ~0.1 ms for a small C process but
 * ~0.7 ms for the Python launcher server (page tables and copy-on-write faults of a 13 MB
 * interpreter), and a forked Python supervisor adds ~1 ms more. For bursts of plain commands
 * that is most of the daemon's cost; a sandboxed launch forks three times (supervisor, child,
 * PID 1 of its namespaces). Commands of other backends' Python setup hooks, and sandboxed
 * ones when EXECUTOR_SANDBOX_LAUNCH=python, still go through zygote.py.
 */

#define _GNU_SOURCE /* POSIX_SPAWN_SETSID, MSG_CMSG_CLOEXEC */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "command_spawn.h"
#include "sandbox.h"

#ifndef PR_SET_CHILD_SUBREAPER
#define PR_SET_CHILD_SUBREAPER 36
#endif

static void report(int fd, const char *format, ...) {
    char line[512];
    va_list args;
    va_start(args, format);
    int length = vsnprintf(line, sizeof line, format, args);
    va_end(args);
    if (length < 0) {
        return;
    }
    if ((size_t)length >= sizeof line) {
        length = (int)sizeof line - 1;
        line[length - 1] = '\n';
    }
    write_all(fd, line, (size_t)length);
}

/* One process as /proc/<pid>/stat shows it. */
struct process {
    long pid;
    long parent;
    unsigned long long started; /* clock ticks since boot */
    long parent_index;          /* where the parent is in the table; -1 if it is not there */
    int in_tree;
};

/* Fill `process` from /proc/<pid>/stat; -1 when it is gone. The command name may hold
 * spaces and parentheses, so the fields start after the *last* ')': the state, the parent,
 * 17 more, then the start time. */
static int read_process(const char *pid, struct process *process) {
    char path[300];
    char stat[1024];
    snprintf(path, sizeof path, "/proc/%s/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return -1;
    }
    ssize_t size = read(fd, stat, sizeof stat - 1);
    close(fd);
    if (size <= 0) {
        return -1;
    }
    stat[size] = '\0';
    char *close_paren = strrchr(stat, ')');
    if (close_paren == NULL || close_paren[1] == '\0') {
        return -1;
    }
    char state;
    if (sscanf(close_paren + 2,
               "%c %ld %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %llu",
               &state, &process->parent, &process->started) != 3) {
        return -1;
    }
    process->pid = strtol(pid, NULL, 10);
    process->parent_index = -1;
    process->in_tree = 0;
    return 0;
}

static int by_pid(const void *left, const void *right) {
    long a = ((const struct process *)left)->pid;
    long b = ((const struct process *)right)->pid;
    return (a > b) - (a < b);
}

/* Every process, sorted by pid; NULL when /proc cannot be read. */
static struct process *read_table(size_t *count) {
    size_t capacity = 256;
    *count = 0;
    struct process *table = malloc(capacity * sizeof *table);
    DIR *proc = opendir("/proc");
    if (table == NULL || proc == NULL) {
        free(table);
        if (proc != NULL) {
            closedir(proc);
        }
        return NULL;
    }
    struct dirent *entry;
    while ((entry = readdir(proc)) != NULL) {
        if (entry->d_name[0] < '0' || entry->d_name[0] > '9') {
            continue;
        }
        if (*count == capacity) {
            struct process *grown = realloc(table, 2 * capacity * sizeof *table);
            if (grown == NULL) {
                break;
            }
            table = grown;
            capacity *= 2;
        }
        if (read_process(entry->d_name, &table[*count]) == 0) {
            (*count)++;
        }
    }
    closedir(proc);
    qsort(table, *count, sizeof *table, by_pid);
    return table;
}

/* Pids already killed, across the walks of one kill_subtree. */
struct pid_set {
    long *pids;
    size_t count;
    size_t capacity;
};

static int pid_set_has(const struct pid_set *set, long pid) {
    for (size_t i = 0; i < set->count; i++) {
        if (set->pids[i] == pid) {
            return 1;
        }
    }
    return 0;
}

static void pid_set_add(struct pid_set *set, long pid) {
    if (set->count == set->capacity) {
        size_t capacity = set->capacity ? 2 * set->capacity : 64;
        long *grown = realloc(set->pids, capacity * sizeof *grown);
        if (grown == NULL) {
            return; /* it is killed again next walk: harmless */
        }
        set->pids = grown;
        set->capacity = capacity;
    }
    set->pids[set->count++] = pid;
}

/* One walk of /proc: SIGKILL every descendant of this process not in `killed` yet, and add
 * it there. Returns how many were new, -1 when /proc cannot be read. */
static long kill_new_descendants(struct pid_set *killed) {
    size_t count;
    struct process *table = read_table(&count);
    if (table == NULL) {
        return -1;
    }
    struct process self = {.pid = (long)getpid()};
    struct process *me = bsearch(&self, table, count, sizeof *table, by_pid);
    for (size_t i = 0; me != NULL && i < count; i++) {
        struct process parent = {.pid = table[i].parent};
        struct process *found = bsearch(&parent, table, count, sizeof *table, by_pid);
        table[i].parent_index = found == NULL ? -1 : (long)(found - table);
    }
    /* A process is in the tree when its parent is, unless it started before this one: then
     * its parent's pid was reused while /proc was read (which can also make a cycle, hence
     * never this process itself). Marked pass by pass, parents first. */
    long fresh = 0;
    int changed = me != NULL;
    while (changed) {
        changed = 0;
        for (size_t i = 0; i < count; i++) {
            struct process *process = &table[i];
            if (process->in_tree || process == me || process->parent_index < 0 ||
                process->started < me->started ||
                (process->parent != me->pid && !table[process->parent_index].in_tree)) {
                continue;
            }
            process->in_tree = 1;
            changed = 1;
            if (!pid_set_has(killed, process->pid)) {
                kill((pid_t)process->pid, SIGKILL);
                pid_set_add(killed, process->pid);
                fresh++;
            }
        }
    }
    free(table);
    return fresh;
}

enum { KILL_ROUNDS = 8 }; /* walks after the first, at most (treekill.py: _ROUNDS) */

/* SIGKILL every descendant of this process (the subreaper keeps escapees below it); the
 * algorithm of treekill.py. The first walk reads the whole table before anything is
 * signalled (a walk of a dying tree can miss a child read under a parent already gone);
 * further walks catch children forked meanwhile, until two in a row find nothing new. */
static void kill_subtree(void) {
    struct pid_set killed = {0};
    int quiet = 0;
    for (int round = 0; round <= KILL_ROUNDS && quiet < 2; round++) {
        long fresh = kill_new_descendants(&killed);
        if (fresh < 0) {
            break;
        }
        quiet = round > 0 && fresh == 0 ? quiet + 1 : 0;
    }
    free(killed.pids);
}

struct launch {
    int control_fd;
    int fds[4]; /* status, stdin, stdout, stderr */
    pid_t launcher;
    int tty;
    const char *executable;
    const char *cwd;
    char **argv;
    char **envp;
    int sandboxed;
    struct sandbox sandbox;
    int slot; /* the kept supervisor the daemon asks for; -1: a supervisor for this launch only */
};

/* Read the early exit report of a sandboxed command's child (sandbox.h: sandbox_launch) from
 * `exit_fd` and close it; 0 with the wait status in `status` when it arrived whole. */
static int early_exit(int exit_fd, int *status) {
    int reported;
    ssize_t got;
    do {
        got = read(exit_fd, &reported, sizeof reported);
    } while (got < 0 && errno == EINTR);
    close(exit_fd);
    if (got != (ssize_t)sizeof reported) {
        return -1; /* ended without one (killed, or no namespaces): its wait status is used */
    }
    *status = reported;
    return 0;
}

/* Report the command's exit, reap every descendant, return when none is left. SIGCHLD and
 * SIGTERM are blocked and taken with sigwaitinfo (or, while `exit_fd` may still bring the
 * exit early, read from a signalfd polled beside it), so a SIGTERM can never slip in between
 * a check and a blocking wait. The exit is reported once: from `exit_fd` if it comes whole,
 * else from the command's wait status. Returns 1 if a SIGTERM killed the tree. */
static int reap(pid_t command, int status_fd, int report_exit, int exit_fd) {
    int terminated = 0;
    sigset_t wanted;
    sigemptyset(&wanted);
    sigaddset(&wanted, SIGCHLD);
    sigaddset(&wanted, SIGTERM);
    int signals = exit_fd >= 0 ? signalfd(-1, &wanted, SFD_CLOEXEC) : -1;
    if (signals < 0 && exit_fd >= 0) {
        close(exit_fd);
        exit_fd = -1;
    }
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid > 0) {
            if (pid == command && report_exit) {
                report(status_fd, "X %d\n", status);
                report_exit = 0;
            }
            continue;
        }
        if (pid < 0) {
            if (errno == EINTR) {
                continue;
            }
            break; /* ECHILD: the command and every descendant are gone */
        }
        if (exit_fd < 0) {
            if (sigwaitinfo(&wanted, NULL) == SIGTERM) {
                kill_subtree();
                terminated = 1;
            }
            continue;
        }
        struct pollfd polled[2] = {{.fd = exit_fd, .events = POLLIN},
                                   {.fd = signals, .events = POLLIN}};
        if (poll(polled, 2, -1) < 0) {
            continue; /* EINTR */
        }
        if (polled[0].revents != 0) {
            if (early_exit(exit_fd, &status) == 0 && report_exit) {
                report(status_fd, "X %d\n", status);
                report_exit = 0;
            }
            exit_fd = -1;
        }
        struct signalfd_siginfo taken;
        if (polled[1].revents != 0 && read(signals, &taken, sizeof taken) == sizeof taken &&
            taken.ssi_signo == SIGTERM) {
            kill_subtree();
            terminated = 1;
        }
    }
    if (exit_fd >= 0) {
        close(exit_fd);
    }
    if (signals >= 0) {
        close(signals);
    }
    return terminated;
}

static void fail(const struct launch *launch, const char *stage, int error) {
    report(launch->fds[0], "E %s %d %s\n", stage, error, strerror(error));
}

/* The sandboxed command's child: stdio at 0..2, the error pipe at 3 and the exit pipe at 4 the
 * only other descriptors, then sandbox.c applies the layers. Never returns. */
static void __attribute__((noreturn)) sandboxed_child(const struct launch *launch, int error_fd,
                                                      int exit_fd,
                                                      const unsigned long long *prepared) {
    int high[5];
    const int sources[5] = {launch->fds[1], launch->fds[2], launch->fds[3], error_fd, exit_fd};
    for (int i = 0; i < 5; i++) {
        high[i] = fcntl(sources[i], F_DUPFD_CLOEXEC, 10);
        if (high[i] < 0) {
            report(error_fd, "launcher %d %s\n", errno, strerror(errno));
            _exit(127);
        }
    }
    for (int target = 0; target < 3; target++) {
        if (dup2(high[target], target) < 0) { /* clears close-on-exec */
            report(high[3], "launcher %d %s\n", errno, strerror(errno));
            _exit(127);
        }
    }
    if (dup3(high[3], 3, O_CLOEXEC) < 0 || dup3(high[4], 4, O_CLOEXEC) < 0) {
        report(high[3], "launcher %d %s\n", errno, strerror(errno));
        _exit(127);
    }
    /* Nothing else of the launcher's reaches the command: the status pipe, the control socket
     * and every descriptor received for other launches are closed. */
    if (syscall(SYS_close_range, 5U, ~0U, 0U) < 0) {
        long limit = sysconf(_SC_OPEN_MAX);
        for (long fd = 5; fd < (limit > 0 ? limit : 65536); fd++) {
            close((int)fd);
        }
    }
    struct sandbox_command command = {
        .executable = launch->executable,
        .cwd = launch->cwd,
        .argv = launch->argv,
        .envp = launch->envp,
        .tty = launch->tty,
    };
    sandbox_launch(&launch->sandbox, &command, 3, 4, prepared);
}

static void __attribute__((noreturn)) relay_sandboxed(const struct launch *launch, pid_t child,
                                                      int error_read, int exit_fds[2]);

/* The supervisor of a sandboxed command (zygote.py: _supervise with a setup hook): fork the
 * child, relay what it reports on the error pipe until that closes (its execve, or PID 1's
 * spawn of the command), then the start, the exit (early, from the exit pipe, when the child
 * reports it there) and the end. */
static void __attribute__((noreturn)) supervise_sandboxed(const struct launch *launch) {
    int pipe_fds[2];
    int exit_fds[2];
    if (pipe2(pipe_fds, O_CLOEXEC) < 0) {
        fail(launch, "fork", errno);
        _exit(0);
    }
    if (pipe2(exit_fds, O_CLOEXEC) < 0) {
        fail(launch, "fork", errno);
        _exit(0);
    }
    pid_t child = fork();
    if (child == 0) {
        close(pipe_fds[0]);
        close(exit_fds[0]);
        sandboxed_child(launch, pipe_fds[1], exit_fds[1], NULL);
    }
    int fork_error = errno;
    close(pipe_fds[1]);
    close(exit_fds[1]);
    if (child < 0) {
        for (int i = 1; i < 4; i++) {
            close(launch->fds[i]);
        }
        fail(launch, "fork", fork_error);
        _exit(0);
    }
    relay_sandboxed(launch, child, pipe_fds[0], exit_fds);
}

/* The rest of a sandboxed launch's supervision, once its child runs: relay what the child
 * reports on the error pipe until that closes, then the start, the exit and the end.
 * `exit_fds[0]` is the exit pipe's read end. */
static void __attribute__((noreturn)) relay_sandboxed(const struct launch *launch, pid_t child,
                                                      int error_read, int exit_fds[2]) {
    int status_fd = launch->fds[0];
    int pipe_fds[2] = {error_read, -1};
    for (int i = 1; i < 4; i++) {
        close(launch->fds[i]);
    }
    size_t capacity = 4096;
    size_t used = 0;
    char *received = malloc(capacity);
    for (;;) {
        if (received != NULL && capacity - used < 1024) {
            char *grown = realloc(received, capacity * 2);
            if (grown == NULL) {
                free(received);
                received = NULL;
            } else {
                received = grown;
                capacity *= 2;
            }
        }
        char scratch[1024];
        char *into = received != NULL ? received + used : scratch;
        size_t room = received != NULL ? capacity - used - 1 : sizeof scratch;
        ssize_t got = read(pipe_fds[0], into, room);
        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got <= 0) {
            break;
        }
        if (received != NULL) {
            used += (size_t)got;
        }
    }
    close(pipe_fds[0]);
    if (received == NULL) {
        /* Out of memory: what the child said is lost, so it is not known to have started. */
        report(status_fd, "E launcher %d %s\n", ENOMEM, strerror(ENOMEM));
        close(exit_fds[0]);
        reap(-1, status_fd, 0, -1);
        _exit(0);
    }
    received[used] = '\0';
    /* "+..." lines: what the child observed of its layers; any other line: the failure. The
     * child reports its observations right before the command starts: a child that ended
     * without either (killed, crashed) did not start it. */
    const char *failure = NULL;
    int observed = 0;
    for (char *line = received; *line;) {
        char *end = strchr(line, '\n');
        if (end != NULL) {
            *end = '\0';
        }
        if (line[0] != '+' && failure == NULL) {
            failure = line;
        }
        observed |= line[0] == '+';
        line = end != NULL ? end + 1 : line + strlen(line);
    }
    if (failure == NULL && !observed) {
        failure = "launcher 0 the sandboxed child ended before the command started";
    }
    if (failure != NULL) {
        report(status_fd, "E %s\n", failure);
    } else {
        for (const char *line = received; line < received + used; line += strlen(line) + 1) {
            if (line[0] == '+') {
                report(status_fd, "O %s\n", line + 1);
            }
        }
        report(status_fd, "S %d %d\n", (int)child, (int)getpid());
    }
    free(received);
    if (failure != NULL) {
        close(exit_fds[0]);
        exit_fds[0] = -1;
    }
    reap(child, status_fd, failure == NULL, exit_fds[0]);
    _exit(0);
}

/* One plain launch, from the working directory to the end of its tree: returns once the
 * command and every descendant are gone, its descriptors and the status pipe closed (the
 * daemon's end of the launch). Returns 1 if a SIGTERM killed the tree. */
static int run_plain(const struct launch *launch) {
    int status_fd = launch->fds[0];
    int terminated = 0;
    pid_t command = -1;
    int error = chdir(launch->cwd) != 0 ? errno : 0;
    const char *stage = "chdir";
    char terminal[256];
    if (error == 0 && launch->tty) {
        stage = "exec";
        error = ttyname_r(launch->fds[1], terminal, sizeof terminal);
    }
    if (error == 0) {
        stage = "exec";
        error = command_spawn(launch->executable, launch->argv, launch->envp, launch->fds + 1,
                              launch->tty ? terminal : NULL, &command);
    }
    for (int i = 1; i < 4; i++) {
        close(launch->fds[i]);
    }
    if (error != 0) {
        fail(launch, stage, error);
        terminated = reap(-1, status_fd, 0, -1);
    } else {
        report(status_fd, "S %d %d\n", (int)command, (int)getpid());
        terminated = reap(command, status_fd, 1, -1);
    }
    close(status_fd);
    return terminated;
}

static void __attribute__((noreturn)) serve_slot(int sock, pid_t launcher);

/* The supervisor: runs in the forked child and never returns. With `slot_sock` (>= 0) it is
 * kept for reuse after this launch ("supervisors kept for reuse" below). */
static void __attribute__((noreturn)) supervise(const struct launch *launch, int slot_sock) {
    close(launch->control_fd);

    /* Both are taken synchronously in reap(); the launcher ignores SIGCHLD, and an ignored
     * SIGCHLD would make the kernel reap the command before its status is read. */
    sigset_t blocked;
    sigemptyset(&blocked);
    sigaddset(&blocked, SIGCHLD);
    sigaddset(&blocked, SIGTERM);
    sigprocmask(SIG_BLOCK, &blocked, NULL);
    signal(SIGCHLD, SIG_DFL);

    prctl(PR_SET_NAME, (unsigned long)"executor-sup", 0, 0, 0); /* what ps and top show */
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM, 0, 0, 0);
    if (getppid() != launch->launcher) { /* the launcher died before the signal was armed */
        _exit(0);
    }
    if (launch->sandboxed) {
        supervise_sandboxed(launch);
    }
    if (run_plain(launch) || slot_sock < 0) {
        _exit(0);
    }
    serve_slot(slot_sock, launch->launcher);
}


enum { MAX_REQUEST = 64 << 20, MAX_FDS = 8 };

/* Read exactly `size` bytes; 0 on success, -1 on EOF or error. */
static int read_exact(int fd, char *buffer, size_t size) {
    while (size > 0) {
        ssize_t got = read(fd, buffer, size);
        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got <= 0) {
            return -1;
        }
        buffer += got;
        size -= (size_t)got;
    }
    return 0;
}

/* One request: its payload (malloc'd) and the descriptors that rode on its first byte.
 * Returns -1 when the control socket is closed (the daemon is gone). */
static int receive(int control, char **payload, uint32_t *length, int *fds, int *fd_count) {
    unsigned char header[4];
    union {
        char buffer[CMSG_SPACE(MAX_FDS * sizeof(int))];
        struct cmsghdr align;
    } ancillary;
    struct iovec vector = {.iov_base = header, .iov_len = sizeof header};
    struct msghdr message = {
        .msg_iov = &vector,
        .msg_iovlen = 1,
        .msg_control = ancillary.buffer,
        .msg_controllen = sizeof ancillary.buffer,
    };
    ssize_t got;
    do {
        got = recvmsg(control, &message, MSG_CMSG_CLOEXEC);
    } while (got < 0 && errno == EINTR);
    if (got <= 0) {
        return -1;
    }
    *fd_count = 0;
    for (struct cmsghdr *part = CMSG_FIRSTHDR(&message); part != NULL;
         part = CMSG_NXTHDR(&message, part)) {
        if (part->cmsg_level == SOL_SOCKET && part->cmsg_type == SCM_RIGHTS) {
            int count = (int)((part->cmsg_len - CMSG_LEN(0)) / sizeof(int));
            for (int i = 0; i < count && *fd_count < MAX_FDS; i++) {
                memcpy(&fds[(*fd_count)++], CMSG_DATA(part) + i * sizeof(int), sizeof(int));
            }
        }
    }
    if (read_exact(control, (char *)header + got, sizeof header - (size_t)got) < 0) {
        return -1;
    }
    *length = (uint32_t)header[0] << 24 | (uint32_t)header[1] << 16 | (uint32_t)header[2] << 8 |
              (uint32_t)header[3];
    if (*length > MAX_REQUEST) {
        return -1; /* the daemon never sends this: the stream is out of step, give up */
    }
    *payload = malloc(*length + 1);
    if (*payload == NULL || read_exact(control, *payload, *length) < 0) {
        free(*payload);
        return -1;
    }
    (*payload)[*length] = '\0';
    return 0;
}

static const char SANDBOX_PREFIX[5] = {'S', 0, 0, 0, 0};
/* A plain launch for a kept supervisor: these four bytes, then the slot's number (one byte). */
static const char SLOT_PREFIX[4] = {'K', 0, 0, 0};
enum { MAX_SLOTS = 64 };

/* Split the payload into the launch fields (and the sandbox spec, if it has one); the arrays
 * point into `payload`. */
static int parse(char *payload, uint32_t length, struct launch *launch, const char **why) {
    *why = "malformed launch request";
    launch->slot = -1;
    if (length >= 5 && memcmp(payload, SLOT_PREFIX, sizeof SLOT_PREFIX) == 0) {
        launch->slot = (unsigned char)payload[4];
        if (launch->slot >= MAX_SLOTS) {
            return -1;
        }
        payload += 5;
        length -= 5;
    } else if (length >= 9 && memcmp(payload, SANDBOX_PREFIX, sizeof SANDBOX_PREFIX) == 0) {
        const unsigned char *size_bytes = (const unsigned char *)payload + 5;
        uint32_t size = (uint32_t)size_bytes[0] << 24 | (uint32_t)size_bytes[1] << 16 |
                        (uint32_t)size_bytes[2] << 8 | (uint32_t)size_bytes[3];
        if (size > length - 9) {
            return -1;
        }
        if (sandbox_decode((const unsigned char *)payload + 9, size, &launch->sandbox, why) < 0) {
            return -1;
        }
        launch->sandboxed = 1;
        payload += 9 + size;
        length -= 9 + size;
        *why = "malformed launch request";
    }
    if (length == 0 || payload[length - 1] != '\0') {
        return -1;
    }
    size_t fields = 0;
    for (uint32_t i = 0; i < length; i++) {
        fields += payload[i] == '\0';
    }
    char **field = malloc((fields + 2) * sizeof *field);
    if (field == NULL) {
        return -1;
    }
    char *cursor = payload;
    for (size_t i = 0; i < fields; i++) {
        field[i] = cursor;
        cursor += strlen(cursor) + 1;
    }
    char *end;
    long argc = fields >= 4 ? strtol(field[3], &end, 10) : 0;
    if (fields < 4 || *end != '\0' || argc < 1 || (size_t)argc > fields - 4) {
        free(field);
        if (launch->sandboxed) {
            sandbox_free(&launch->sandbox);
            launch->sandboxed = 0;
        }
        return -1;
    }
    launch->tty = field[0][0] == '1';
    launch->cwd = field[1];
    launch->executable = field[2];
    /* argv and envp share the pointer array: argv ends where envp starts. */
    memmove(field, field + 4, (fields - 4) * sizeof *field);
    size_t env_count = fields - 4 - (size_t)argc;
    memmove(field + argc + 1, field + argc, env_count * sizeof *field);
    field[argc] = NULL;
    field[argc + 1 + env_count] = NULL;
    launch->argv = field;
    launch->envp = field + argc + 1;
    return 0;
}

/* The launch a request holds (`fds`: the descriptors that came with it, status first): 0 when
 * it is whole; else -1, after saying why on its status pipe if it came with one. */
static int launch_from(struct launch *launch, char *payload, uint32_t length, const int *fds,
                       int fd_count, int control_fd, pid_t launcher) {
    memset(launch, 0, sizeof *launch);
    launch->control_fd = control_fd;
    launch->launcher = launcher;
    memcpy(launch->fds, fds, sizeof launch->fds);
    const char *why = "malformed launch request";
    if (fd_count == 4 && parse(payload, length, launch, &why) == 0) {
        return 0;
    }
    if (fd_count > 0) {
        report(fds[0], "E launcher 0 %s\n", why);
    }
    return -1;
}

/* --- supervisors kept for reuse -------------------------------------------------------------
 *
 * On this kind of VM a supervisor's fork and, after the launch, its exit cost ~0.3 ms each
 * after a short idle (page tables copied, then torn down; the teardown comes before the
 * status pipe's last holder is gone, on the CPU the daemon is woken on, so the daemon waits
 * for it): together about a fifth of an isolated /bin/true. So a plain request may name a
 * slot (SLOT_PREFIX): the slot's supervisor is forked on its first use and, once that launch
 * has ended, takes the slot's next request from the launcher on a socket pair instead of
 * exiting. Between launches a kept supervisor is as a fresh one: no child (the end of a
 * launch is reported only when none is left), no descriptor but the launcher's stdio and its
 * socket, "/" as its working directory (not the last command's, which it must not hold busy).
 *
 * Only the daemon reuses a slot, and only once it has read the end of the slot's previous
 * launch (spawner.py): until then it may still signal the supervisor's descendants as that
 * launch's tree, which must never be the next command's. A slot whose supervisor is gone
 * (killed) gets a new one. A supervisor whose tree a SIGTERM ended (the launcher's death)
 * exits instead of waiting for more. */

struct slot {
    pid_t supervisor; /* 0: none yet, or gone */
    int sock;         /* the launcher's end of its socket pair */
};

static struct slot slots[MAX_SLOTS];

static int send_request(int sock, const char *payload, uint32_t length, const int *fds,
                        int count);

/* In a kept supervisor between launches: wait for the next one on `sock` and run it; SIGTERM
 * is unblocked while it waits (its default action ends it, as the launcher's death should). */
static void __attribute__((noreturn)) serve_slot(int sock, pid_t launcher) {
    sigset_t waiting;
    sigprocmask(SIG_SETMASK, NULL, &waiting);
    sigdelset(&waiting, SIGTERM);
    for (;;) {
        (void)!chdir("/");
        struct pollfd polled = {.fd = sock, .events = POLLIN};
        if ((ppoll(&polled, 1, NULL, &waiting) < 0 && errno != EINTR) ||
            getppid() != launcher) {
            _exit(0);
        }
        char *payload = NULL;
        uint32_t length = 0;
        int fds[MAX_FDS];
        int fd_count = 0;
        if (receive(sock, &payload, &length, fds, &fd_count) < 0) {
            _exit(0); /* the launcher is gone */
        }
        struct launch launch;
        int parsed = launch_from(&launch, payload, length, fds, fd_count, -1, launcher) == 0;
        if (parsed && launch.sandboxed) {
            report(fds[0], "E launcher 0 a kept supervisor takes plain launches only\n");
            sandbox_free(&launch.sandbox);
            free(launch.argv);
            parsed = 0;
        }
        if (!parsed) {
            for (int i = 0; i < fd_count; i++) {
                close(fds[i]);
            }
        } else {
            int terminated = run_plain(&launch);
            free(launch.argv);
            if (terminated) {
                _exit(0);
            }
        }
        free(payload);
    }
}

/* In the launcher: hand a request to its slot's supervisor; 0 if there is none (or it is
 * gone: the slot is emptied), and the caller forks one. */
static int hand_to_slot(int slot, const char *payload, uint32_t length, const int *fds) {
    struct slot *kept = &slots[slot];
    if (kept->supervisor > 0 && send_request(kept->sock, payload, length, fds, 4) == 0) {
        return 1;
    }
    if (kept->supervisor > 0) {
        close(kept->sock);
    }
    kept->supervisor = 0;
    kept->sock = -1;
    return 0;
}

/* --- a sandboxed launch prepared ahead ---------------------------------------------------------
 *
 * For a while after a sandboxed launch whose namespaces sandbox_prepare can make (mount, PID,
 * IPC, a new network namespace; no user namespace), the launcher keeps the next one's
 * supervisor, outer child and PID 1 forked, the namespaces already unshared (sandbox.c: "a
 * launch prepared ahead"); a matching request is handed to them (the launcher's
 * control-socket format: length, payload, the four descriptors on its first bytes), saving
 * three forks and the unshare. It is dropped (killed) when it has
 * waited PREPARED_KEEP_MS (its mount namespace is a copy of the host's: it must not pin the
 * host's mounts while idle) and as soon as the host's mount table changes (a copy made before
 * a mount or unmount is stale), which /proc/self/mountinfo signals with POLLPRI. Anything
 * going wrong on the way (the prepared processes gone) falls back to the usual launch. */

enum { PREPARE_AFTER_MS = 10, PREPARED_KEEP_MS = 2000 };

struct prepared {
    pid_t supervisor; /* 0: none */
    int sock;         /* the launcher's end of the supervisor's socket */
    long long since;
};

static long long now_ms(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

/* One request on `sock`, in the control socket's format, `fds` riding on its first bytes. */
static int send_request(int sock, const char *payload, uint32_t length, const int *fds,
                        int count) {
    unsigned char header[4] = {(unsigned char)(length >> 24), (unsigned char)(length >> 16),
                               (unsigned char)(length >> 8), (unsigned char)length};
    union {
        char buffer[CMSG_SPACE(MAX_FDS * sizeof(int))];
        struct cmsghdr align;
    } ancillary;
    memset(&ancillary, 0, sizeof ancillary);
    struct iovec vector = {.iov_base = header, .iov_len = sizeof header};
    struct msghdr message = {
        .msg_iov = &vector,
        .msg_iovlen = 1,
        .msg_control = ancillary.buffer,
        .msg_controllen = CMSG_SPACE((size_t)count * sizeof(int)),
    };
    struct cmsghdr *part = CMSG_FIRSTHDR(&message);
    part->cmsg_level = SOL_SOCKET;
    part->cmsg_type = SCM_RIGHTS;
    part->cmsg_len = CMSG_LEN((size_t)count * sizeof(int));
    memcpy(CMSG_DATA(part), fds, (size_t)count * sizeof(int));
    ssize_t sent;
    do {
        sent = sendmsg(sock, &message, MSG_NOSIGNAL);
    } while (sent < 0 && errno == EINTR);
    if (sent != (ssize_t)sizeof header) {
        return -1;
    }
    while (length > 0) {
        ssize_t written = send(sock, payload, length, MSG_NOSIGNAL);
        if (written < 0 && errno == EINTR) {
            continue;
        }
        if (written <= 0) {
            return -1;
        }
        payload += written;
        length -= (uint32_t)written;
    }
    return 0;
}

/* The prepared launch's child: make the namespaces and fork PID 1 of them (sandbox_prepare;
 * the outer child stays in there and relays PID 1's exit), then, in PID 1, wait for its launch
 * (the payload, and stdin, stdout, stderr, the error and the exit pipes' write ends). Until it
 * has one it dies with the supervisor (the outer child) and PID 1 with the outer child. */
static void __attribute__((noreturn)) prepared_child(int sock, pid_t supervisor) {
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (getppid() != supervisor) {
        _exit(0);
    }
    unsigned long long before[SANDBOX_NS_COUNT];
    if (sandbox_prepare(before) < 0) {
        _exit(127); /* the supervisor's hand-over fails: it launches as usual */
    }
    char *payload = NULL;
    uint32_t length = 0;
    int fds[MAX_FDS];
    int fd_count = 0;
    if (receive(sock, &payload, &length, fds, &fd_count) < 0) {
        _exit(0);
    }
    if (fd_count != 5) {
        _exit(127);
    }
    prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0); /* from here a launch's child like any other */
    struct launch launch;
    memset(&launch, 0, sizeof launch);
    launch.fds[0] = -1;
    memcpy(launch.fds + 1, fds, 3 * sizeof(int));
    const char *why = "malformed launch request";
    if (parse(payload, length, &launch, &why) < 0 || !launch.sandboxed) {
        report(fds[3], "launcher 0 %s\n", why);
        _exit(127);
    }
    sandboxed_child(&launch, fds[3], fds[4], before);
}

/* The prepared supervisor: fork the prepared child, wait for a launch from the launcher, hand
 * it over and supervise it as supervise_sandboxed does. Dies with the launcher until then. */
static void __attribute__((noreturn)) prepared_supervisor(int sock, pid_t launcher) {
    prctl(PR_SET_NAME, (unsigned long)"executor-sup", 0, 0, 0);
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (getppid() != launcher) {
        _exit(0);
    }
    sigset_t blocked;
    sigemptyset(&blocked);
    sigaddset(&blocked, SIGCHLD);
    sigaddset(&blocked, SIGTERM);
    sigprocmask(SIG_BLOCK, &blocked, NULL);
    signal(SIGCHLD, SIG_DFL);
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) < 0) {
        _exit(0);
    }
    pid_t self = getpid();
    pid_t child = fork();
    if (child == 0) {
        close(pair[0]);
        close(sock);
        prepared_child(pair[1], self);
    }
    close(pair[1]);
    char *payload = NULL;
    uint32_t length = 0;
    int fds[MAX_FDS];
    int fd_count = 0;
    if (child < 0 || receive(sock, &payload, &length, fds, &fd_count) < 0) {
        _exit(0); /* dropped: the prepared child dies with this process */
    }
    close(sock);
    struct launch launch;
    if (launch_from(&launch, payload, length, fds, fd_count, -1, launcher) < 0) {
        _exit(0);
    }
    prctl(PR_SET_PDEATHSIG, SIGTERM, 0, 0, 0); /* from here as supervise() */
    if (getppid() != launcher) {
        _exit(0);
    }
    int pipe_fds[2];
    int exit_fds[2];
    if (pipe2(pipe_fds, O_CLOEXEC) < 0) {
        fail(&launch, "fork", errno);
        _exit(0);
    }
    if (pipe2(exit_fds, O_CLOEXEC) < 0) {
        fail(&launch, "fork", errno);
        _exit(0);
    }
    const int handed[5] = {fds[1], fds[2], fds[3], pipe_fds[1], exit_fds[1]};
    if (child > 0 && send_request(pair[0], payload, length, handed, 5) == 0) {
        close(pair[0]);
        close(pipe_fds[1]);
        close(exit_fds[1]);
        relay_sandboxed(&launch, child, pipe_fds[0], exit_fds);
    }
    /* The prepared child is gone (its namespaces could not be made): launch as usual. */
    kill(child, SIGKILL);
    close(pair[0]);
    for (int i = 0; i < 2; i++) {
        close(pipe_fds[i]);
        close(exit_fds[i]);
    }
    supervise_sandboxed(&launch);
}

/* In a supervisor forked by the launcher: what only the launcher uses. */
static void close_launcher_fds(int mountinfo, const struct prepared *ready) {
    for (int i = 0; i < MAX_SLOTS; i++) {
        if (slots[i].supervisor > 0) {
            close(slots[i].sock);
        }
    }
    if (mountinfo >= 0) {
        close(mountinfo);
    }
    if (ready->sock >= 0) {
        close(ready->sock);
    }
}

static void drop_prepared(struct prepared *ready) {
    if (ready->supervisor > 0) {
        kill(ready->supervisor, SIGKILL);
        close(ready->sock);
    }
    ready->supervisor = 0;
    ready->sock = -1;
}

static void prepare_launch(struct prepared *ready, int control, int mountinfo) {
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) < 0) {
        return;
    }
    pid_t launcher = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        close(control);
        if (mountinfo >= 0) {
            close(mountinfo);
        }
        close(pair[0]);
        prepared_supervisor(pair[1], launcher);
    }
    close(pair[1]);
    if (pid < 0) {
        close(pair[0]);
        return;
    }
    ready->supervisor = pid;
    ready->sock = pair[0];
    ready->since = now_ms();
}

/* Whether the host's mount table changed since the last look (POLLPRI on mountinfo). */
static int mounts_changed(int mountinfo) {
    struct pollfd polled = {.fd = mountinfo, .events = POLLPRI};
    return mountinfo >= 0 && poll(&polled, 1, 0) > 0 && polled.revents != 0;
}

/* Wait until the control socket is readable, preparing a launch when it is due and dropping
 * it when it has waited too long or the mounts changed. */
static void wait_for_request(int control, int mountinfo, struct prepared *ready,
                             long long *prepare_at) {
    for (;;) {
        long long now = now_ms();
        if (ready->supervisor > 0 && now - ready->since >= PREPARED_KEEP_MS) {
            drop_prepared(ready);
        }
        if (ready->supervisor == 0 && *prepare_at >= 0 && now >= *prepare_at) {
            *prepare_at = -1;
            (void)mounts_changed(mountinfo); /* a change before the copy is in it */
            prepare_launch(ready, control, mountinfo);
        }
        int timeout = -1;
        if (ready->supervisor > 0) {
            timeout = (int)(ready->since + PREPARED_KEEP_MS - now);
        } else if (*prepare_at >= 0) {
            timeout = (int)(*prepare_at - now);
        }
        struct pollfd polled[2] = {{.fd = control, .events = POLLIN},
                                   {.fd = mountinfo, .events = POLLPRI}};
        int count = poll(polled, mountinfo >= 0 ? 2 : 1, timeout < 0 ? -1 : timeout);
        if (count < 0 && errno != EINTR) {
            return; /* the read reports what is wrong */
        }
        if (count > 0 && mountinfo >= 0 && polled[1].revents != 0) {
            drop_prepared(ready); /* its copy of the mount table is stale */
        }
        if (count > 0 && polled[0].revents != 0) {
            return;
        }
    }
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: executor-launcher CONTROL-FD DAEMON-PID (started by the daemon; "
                        "supervisor-slots %d; sandbox-spec %d)\n",
                MAX_SLOTS,
                SANDBOX_SPEC_VERSION);
        return 2;
    }
    int control = atoi(argv[1]);
    pid_t daemon = (pid_t)atol(argv[2]);
    setsid(); /* keep the daemon's terminal (and its ^C) away from every command */
    /* Whatever the daemon ignored (nohup's SIGHUP) is not passed on: command_spawn resets only
     * the dispositions the launcher's own processes set. */
    reset_signals();
    signal(SIGCHLD, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    signal(SIGPIPE, SIG_IGN); /* a status pipe whose reader is gone must not kill anyone */
    prctl(PR_SET_PDEATHSIG, SIGTERM, 0, 0, 0);
    if (getppid() != daemon) { /* the daemon died before the death signal was armed */
        return 0;
    }
    int mountinfo = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
    struct prepared ready = {.supervisor = 0, .sock = -1, .since = 0};
    long long prepare_at = -1;
    for (;;) {
        wait_for_request(control, mountinfo, &ready, &prepare_at);
        char *payload = NULL;
        uint32_t length = 0;
        int fds[MAX_FDS];
        int fd_count = 0;
        if (receive(control, &payload, &length, fds, &fd_count) < 0) {
            return 0;
        }
        struct launch launch;
        if (launch_from(&launch, payload, length, fds, fd_count, control, getpid()) == 0) {
            int handed = 0;
            if (launch.sandboxed && sandbox_preparable(&launch.sandbox)) {
                if (ready.supervisor > 0 && !mounts_changed(mountinfo) &&
                    send_request(ready.sock, payload, length, fds, 4) == 0) {
                    handed = 1;
                    close(ready.sock);
                    ready.supervisor = 0;
                    ready.sock = -1;
                }
                drop_prepared(&ready);
                prepare_at = now_ms() + PREPARE_AFTER_MS;
            }
            if (!handed && launch.slot >= 0) {
                handed = hand_to_slot(launch.slot, payload, length, fds);
            }
            int pair[2] = {-1, -1};
            if (!handed && launch.slot >= 0 &&
                socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) < 0) {
                pair[0] = pair[1] = -1; /* this launch's supervisor is not kept */
            }
            pid_t pid = handed ? 0 : fork();
            if (!handed && pid == 0) {
                close_launcher_fds(mountinfo, &ready);
                if (pair[0] >= 0) {
                    close(pair[0]);
                }
                supervise(&launch, pair[1]); /* never returns */
            }
            if (pair[1] >= 0) {
                close(pair[1]);
            }
            if (pid > 0 && pair[0] >= 0) {
                slots[launch.slot].supervisor = pid;
                slots[launch.slot].sock = pair[0];
            } else if (pair[0] >= 0) {
                close(pair[0]);
            }
            if (pid < 0) {
                fail(&launch, "fork", errno);
            }
            free(launch.argv);
            if (launch.sandboxed) {
                sandbox_free(&launch.sandbox);
            }
        }
        for (int i = 0; i < fd_count; i++) {
            close(fds[i]);
        }
        free(payload);
    }
}
