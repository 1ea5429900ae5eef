/*
 * The native sandboxed launch (sandbox.c): a Linux backend's LaunchSpec, decoded from the
 * encoding of plugins/executor_linux/native_spec.py, applied in the forked child.
 */
#ifndef EXECUTOR_SANDBOX_H
#define EXECUTOR_SANDBOX_H

#include <stddef.h>
#include <stdint.h>

/* The version of the spec encoding this launcher reads; the daemon checks it in the usage
 * text ("sandbox-spec N") before it sends any spec. */
#define SANDBOX_SPEC_VERSION 1

struct sandbox_string_list {
    const char **items;
    size_t count;
};

struct sandbox_rlimit {
    uint32_t resource;
    uint64_t value;
};

struct sandbox_mount_op {
    char op; /* 'w' rw, 'r' ro, 'p' pin, 'd' mask_dir, 'f' mask_file, 's' mask_socket */
    const char *path;
};

struct sandbox_grant {
    uint64_t rights;
    const char *path;
};

struct sandbox {
    /* limits */
    struct sandbox_string_list cgroups;
    struct sandbox_rlimit *rlimits;
    size_t rlimit_count;
    int has_nproc_in_user_namespace;
    uint64_t nproc_in_user_namespace;
    int has_oom_score_adj;
    int64_t oom_score_adj;
    /* namespaces (has_namespaces: the launch has the layer) */
    int has_namespaces;
    int user, net, proc;
    uint32_t uid, gid;
    const char *join_net_path; /* NULL: no network namespace to join */
    uint64_t join_net_inode;
    /* mounts */
    const char *staging;
    int readonly_root, private_shm, private_dev, mask_proc;
    struct sandbox_mount_op *ops;
    size_t op_count;
    /* landlock (has_landlock: the launch has the layer) */
    int has_landlock;
    uint64_t landlock_fs, landlock_net, landlock_scoped;
    struct sandbox_grant *grants;
    size_t grant_count;
    /* seccomp: the raw classic-BPF program (an array of 8-byte sock_filter); none if 0 */
    const unsigned char *seccomp;
    size_t seccomp_size;
};

/* What the command is, once the layers are in place. */
struct sandbox_command {
    const char *executable;
    const char *cwd;
    char **argv;
    char **envp;
    int tty;
};

/* Decode `data` (which must outlive `out`); 0 on success, -1 (with `why` set) when the
 * spec is malformed or asks for something this launcher does not know. */
int sandbox_decode(const unsigned char *data, size_t size, struct sandbox *out, const char **why);

/* Release what sandbox_decode allocated. */
void sandbox_free(struct sandbox *sandbox);

/* Write all of `text` to `fd`, retrying after signals; gives up silently on an error (the
 * reader is gone). Used by the launcher's status lines too. */
void write_all(int fd, const char *text, size_t size);

/* The namespaces sandbox_prepare makes, by inode before it: user, mount, PID, IPC, network. */
#define SANDBOX_NS_COUNT 5

/* In the freshly forked child, with stdio at 0..2 and `error_fd` and `exit_fd` (close-on-exec
 * both) the only other descriptors: apply the layers, verify them, run the command. Never
 * returns; failures are written to `error_fd` as "<stage> <errno> <detail>\n", observations
 * as "+<observed>\n". Once PID 1 of the namespaces is reaped (the command's whole tree is
 * gone), its wait status (an int, native byte order) is written to `exit_fd` before this
 * process exits, when it can be (sandbox.c); `exit_fd` otherwise just closes. -1: none.
 * `prepared`: this process is PID 1 made by sandbox_prepare (the inodes seen before), whose
 * namespaces must be the ones the launch asks for; NULL: make them now. */
void sandbox_launch(const struct sandbox *sandbox, const struct sandbox_command *command,
                    int error_fd, int exit_fd, const unsigned long long *prepared)
    __attribute__((noreturn));

/* Whether a launch asks for exactly the namespaces sandbox_prepare makes: mount, PID, IPC
 * and a new network namespace (the network off), no user namespace, none to join. */
int sandbox_preparable(const struct sandbox *sandbox);

/* Ahead of a launch, in the process that will be its outer child: note the namespaces'
 * inodes in `before`, unshare mount, PID, IPC and network namespaces, take a process group of
 * its own and fork PID 1 of the new PID namespace, which makes its mounts private and reads
 * its mount table. Returns 0 in PID 1, which then takes the launch (sandbox_launch with
 * `prepared`); the outer child never returns: it waits for PID 1
 * to hand it the exit pipe, relays the exit like any outer child, and ends (with PID 1) when
 * PID 1 ends first. PID 1 dies with the outer child until then (launcher.c clears that once
 * it has a launch). -1 with errno: nothing was forked. */
int sandbox_prepare(unsigned long long before[SANDBOX_NS_COUNT]);

#endif
