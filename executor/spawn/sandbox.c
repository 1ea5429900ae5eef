/*
 * The native sandboxed launch: what plugins/executor_linux/launcher.py does in the forked
 * child, in C, for the launcher server (launcher.c). Read that module first: this file applies
 * the same layers in the same order, fails with the same stage names, and verifies from
 * inside what observe.py verifies, with the same wording.
 *
 * Layers, in this order (each failure ends the child with "<stage> <errno> <detail>" on the
 * error pipe; nothing runs):
 *
 *   limits        join the command's cgroups, OOM score, lower rlimits (with namespaces,
 *                 PID 1 joins the cgroups as its first step, see below)
 *   network       join the session's network namespace (before a user namespace could void
 *                 the capability setns needs), checked against the planned inode
 *   namespaces    unshare user (not root), mount, PID, IPC and, network off, network; the
 *                 uid/gid maps; RLIMIT_NPROC inside the user namespace
 *   (fork)        PID 1 of the new PID namespace; the outer child relays its exit status,
 *                 early (see sandbox_launch). A launch prepared ahead has both processes
 *                 already (sandbox_prepare): PID 1 enters the limits, after the cgroups
 *   mounts        private propagation (a prepared PID 1 makes it ahead and reads the table
 *                 then), read-only root, the planned binds and masks in order, a private
 *                 /dev, /dev/shm, a fresh /proc with its masks
 *   chdir
 *   no_new_privs, landlock, capabilities (every set), seccomp (last)
 *   verify        every planned layer in force, seen from /proc/self (observe.py)
 *   exec          PID 1 spawns the command (new session, default signals, empty mask) and
 *                 forwards signals to it; without namespaces this process becomes it
 *
 * The spec arrives encoded by plugins/executor_linux/native_spec.py ("EXS" + version, then
 * tag/length/value records); a record this launcher does not know refuses the launch (the
 * daemon then never sends it: it checks the version in the usage text first).
 */

#define _GNU_SOURCE
#include "sandbox.h"
#include "command_spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>
#include <linux/filter.h>
#include <linux/seccomp.h>

/* Not every libc header has these yet. */
#define NR_OPENAT2 437
#define NR_MOUNT_SETATTR 442
#define NR_LANDLOCK_CREATE_RULESET 444
#define NR_LANDLOCK_ADD_RULE 445
#define NR_LANDLOCK_RESTRICT_SELF 446
#define NR_CLOSE_RANGE 436
#define NR_PIDFD_OPEN 434
#define ATTR_RDONLY 0x1ULL      /* MOUNT_ATTR_RDONLY */
#define AT_RECURSIVE_ 0x8000    /* AT_RECURSIVE */
#define RESOLVE_NO_SYMLINKS_ 4ULL
#define LANDLOCK_RULE_PATH_BENEATH_ 1
#define CAPABILITY_VERSION_3 0x20080522
#ifndef PR_CAP_AMBIENT
#define PR_CAP_AMBIENT 47
#define PR_CAP_AMBIENT_CLEAR_ALL 4
#endif
#ifndef CLONE_NEWCGROUP
#define CLONE_NEWCGROUP 0x02000000
#endif

/* Landlock rights that make sense on a file (others are EINVAL on a non-directory):
 * EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE (landlock.py: FILE_RIGHTS). */
#define LANDLOCK_FILE_RIGHTS ((1ULL << 0) | (1ULL << 1) | (1ULL << 2) | (1ULL << 14))

enum {
    TAG_CGROUP = 1,
    TAG_RLIMIT = 2,
    TAG_NPROC_IN_USER_NAMESPACE = 3,
    TAG_OOM_SCORE_ADJ = 4,
    TAG_NAMESPACES = 10,
    TAG_JOIN_NET = 11,
    TAG_STAGING = 12,
    TAG_MOUNT_FLAGS = 13,
    TAG_MOUNT_OP = 14,
    TAG_LANDLOCK = 20,
    TAG_GRANT = 21,
    TAG_SECCOMP = 30,
};

/* --- decoding ------------------------------------------------------------------------------ */

static uint64_t be64(const unsigned char *p) {
    uint64_t value = 0;
    for (int i = 0; i < 8; i++) {
        value = value << 8 | p[i];
    }
    return value;
}

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* A path field: non-empty, no NUL, absolute; copied NUL-terminated into the arena. */
static const char *take_path(const unsigned char *value, size_t size, char **arena) {
    if (size == 0 || value[0] != '/' || memchr(value, '\0', size) != NULL) {
        return NULL;
    }
    char *copy = *arena;
    memcpy(copy, value, size);
    copy[size] = '\0';
    *arena += size + 1;
    return copy;
}

void sandbox_free(struct sandbox *sandbox) {
    free(sandbox->cgroups.items); /* the arena: see sandbox_decode */
    free(sandbox->rlimits);
    free(sandbox->ops);
    free(sandbox->grants);
    memset(sandbox, 0, sizeof *sandbox);
}

int sandbox_decode(const unsigned char *data, size_t size, struct sandbox *out, const char **why) {
    memset(out, 0, sizeof *out);
    *why = "malformed sandbox spec";
    if (size < 4 || memcmp(data, "EXS", 3) != 0) {
        return -1;
    }
    if (data[3] != SANDBOX_SPEC_VERSION) {
        *why = "unsupported sandbox spec version";
        return -1;
    }
    /* Pass 1: every record well-formed and known; count the repeated ones. */
    size_t counts[32] = {0};
    for (size_t at = 4; at < size;) {
        if (size - at < 5) {
            return -1;
        }
        unsigned tag = data[at];
        size_t length = be32(data + at + 1);
        at += 5;
        if (length > size - at) {
            return -1;
        }
        at += length;
        if (tag >= 32) {
            *why = "unknown sandbox spec record";
            return -1;
        }
        counts[tag]++;
    }
    static const unsigned char repeatable[] = {TAG_CGROUP, TAG_RLIMIT, TAG_MOUNT_OP, TAG_GRANT};
    static const unsigned char known[] = {
        TAG_CGROUP,  TAG_RLIMIT,      TAG_NPROC_IN_USER_NAMESPACE, TAG_OOM_SCORE_ADJ,
        TAG_NAMESPACES, TAG_JOIN_NET, TAG_STAGING,  TAG_MOUNT_FLAGS, TAG_MOUNT_OP,
        TAG_LANDLOCK, TAG_GRANT,      TAG_SECCOMP};
    for (unsigned tag = 0; tag < 32; tag++) {
        if (counts[tag] == 0) {
            continue;
        }
        if (memchr(known, (int)tag, sizeof known) == NULL) {
            *why = "unknown sandbox spec record";
            return -1;
        }
        if (counts[tag] > 1 && memchr(repeatable, (int)tag, sizeof repeatable) == NULL) {
            return -1;
        }
    }
    int namespaced = counts[TAG_NAMESPACES] == 1;
    if (!namespaced && (counts[TAG_JOIN_NET] || counts[TAG_STAGING] || counts[TAG_MOUNT_FLAGS] ||
                        counts[TAG_MOUNT_OP])) {
        return -1; /* mounts and a joined network only exist with namespaces */
    }
    if (namespaced && (counts[TAG_STAGING] != 1 || counts[TAG_MOUNT_FLAGS] != 1)) {
        return -1;
    }
    if (counts[TAG_GRANT] && !counts[TAG_LANDLOCK]) {
        return -1;
    }
    /* The arena holds every string (each at most its record plus a NUL) and the cgroup
     * pointers; freed as cgroups.items. */
    size_t pointers = (counts[TAG_CGROUP] + 1) * sizeof(char *);
    char *block = malloc(pointers + size + size / 5 + 1);
    out->rlimits = calloc(counts[TAG_RLIMIT] + 1, sizeof *out->rlimits);
    out->ops = calloc(counts[TAG_MOUNT_OP] + 1, sizeof *out->ops);
    out->grants = calloc(counts[TAG_GRANT] + 1, sizeof *out->grants);
    if (block == NULL || out->rlimits == NULL || out->ops == NULL || out->grants == NULL) {
        free(block);
        out->cgroups.items = NULL;
        sandbox_free(out);
        *why = "out of memory";
        return -1;
    }
    out->cgroups.items = (const char **)(void *)block;
    char *arena = block + pointers;
    out->mask_proc = 1;
    /* Pass 2: the values. */
    for (size_t at = 4; at < size;) {
        unsigned tag = data[at];
        size_t length = be32(data + at + 1);
        const unsigned char *value = data + at + 5;
        at += 5 + length;
        const char *path;
        switch (tag) {
        case TAG_CGROUP:
            if ((path = take_path(value, length, &arena)) == NULL) {
                goto bad;
            }
            out->cgroups.items[out->cgroups.count++] = path;
            break;
        case TAG_RLIMIT:
            if (length != 12) {
                goto bad;
            }
            out->rlimits[out->rlimit_count].resource = be32(value);
            out->rlimits[out->rlimit_count].value = be64(value + 4);
            if (out->rlimits[out->rlimit_count].resource >= RLIM_NLIMITS) {
                goto bad;
            }
            out->rlimit_count++;
            break;
        case TAG_NPROC_IN_USER_NAMESPACE:
            if (length != 8) {
                goto bad;
            }
            out->has_nproc_in_user_namespace = 1;
            out->nproc_in_user_namespace = be64(value);
            break;
        case TAG_OOM_SCORE_ADJ:
            if (length != 8) {
                goto bad;
            }
            out->has_oom_score_adj = 1;
            out->oom_score_adj = (int64_t)be64(value);
            break;
        case TAG_NAMESPACES:
            if (length != 11 || value[0] > 1 || value[1] > 1 || value[2] > 1) {
                goto bad;
            }
            out->has_namespaces = 1;
            out->user = value[0];
            out->net = value[1];
            out->proc = value[2];
            out->uid = be32(value + 3);
            out->gid = be32(value + 7);
            break;
        case TAG_JOIN_NET:
            if (length < 9 || (path = take_path(value + 8, length - 8, &arena)) == NULL) {
                goto bad;
            }
            out->join_net_inode = be64(value);
            out->join_net_path = path;
            break;
        case TAG_STAGING:
            if ((out->staging = take_path(value, length, &arena)) == NULL) {
                goto bad;
            }
            break;
        case TAG_MOUNT_FLAGS:
            if (length != 4 || value[0] > 1 || value[1] > 1 || value[2] > 1 || value[3] > 1) {
                goto bad;
            }
            out->readonly_root = value[0];
            out->private_shm = value[1];
            out->private_dev = value[2];
            out->mask_proc = value[3];
            break;
        case TAG_MOUNT_OP:
            if (length < 2 || strchr("wrpdfs", value[0]) == NULL || value[0] == '\0' ||
                (path = take_path(value + 1, length - 1, &arena)) == NULL) {
                goto bad;
            }
            out->ops[out->op_count].op = (char)value[0];
            out->ops[out->op_count].path = path;
            out->op_count++;
            break;
        case TAG_LANDLOCK:
            if (length != 24) {
                goto bad;
            }
            out->has_landlock = 1;
            out->landlock_fs = be64(value);
            out->landlock_net = be64(value + 8);
            out->landlock_scoped = be64(value + 16);
            break;
        case TAG_GRANT:
            if (length < 9 || (path = take_path(value + 8, length - 8, &arena)) == NULL) {
                goto bad;
            }
            out->grants[out->grant_count].rights = be64(value);
            out->grants[out->grant_count].path = path;
            out->grant_count++;
            break;
        case TAG_SECCOMP:
            if (length == 0 || length % 8 != 0 || length / 8 > 4096) {
                goto bad;
            }
            out->seccomp = value;
            out->seccomp_size = length;
            break;
        default:
            goto bad;
        }
    }
    return 0;
bad:
    sandbox_free(out);
    *why = "malformed sandbox spec";
    return -1;
}

/* --- failing ------------------------------------------------------------------------------- */

static int error_pipe = -1;

void write_all(int fd, const char *text, size_t size) {
    while (size > 0) {
        ssize_t written = write(fd, text, size);
        if (written < 0) {
            if (errno == EINTR) {
                continue;
            }
            return;
        }
        text += written;
        size -= (size_t)written;
    }
}

/* Report a failed stage to the supervisor and exit (child.py: ChildContext.fail). */
static void __attribute__((noreturn)) die(const char *stage, int error, const char *detail) {
    char line[2048];
    int length = snprintf(line, sizeof line, "%s %d %s", stage, error, detail ? detail : "");
    if (length < 0) {
        _exit(127);
    }
    if ((size_t)length >= sizeof line - 1) {
        length = (int)sizeof line - 2;
    }
    while (length > 0 && line[length - 1] == ' ') {
        length--; /* .strip() */
    }
    for (int i = 0; i < length; i++) {
        if (line[i] == '\n') {
            line[i] = ' ';
        }
    }
    line[length++] = '\n';
    write_all(error_pipe, line, (size_t)length);
    _exit(127);
}

static void __attribute__((noreturn)) die_errno(const char *stage) {
    int error = errno;
    die(stage, error, strerror(error));
}

#define CHECK(stage, call)                                                                    \
    do {                                                                                      \
        if ((call) < 0) {                                                                     \
            die_errno(stage);                                                                 \
        }                                                                                     \
    } while (0)

/* --- small system helpers ------------------------------------------------------------------ */

static int write_text(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
        return -1;
    }
    ssize_t written = write(fd, text, strlen(text));
    int error = errno;
    close(fd);
    if (written < 0) {
        errno = error;
        return -1;
    }
    return 0;
}

struct mount_attr_ {
    uint64_t attr_set;
    uint64_t attr_clr;
    uint64_t propagation;
    uint64_t userns_fd;
};

static int set_mount_attr(const char *path, uint64_t set, uint64_t clear, int recursive) {
    struct mount_attr_ attr = {.attr_set = set, .attr_clr = clear};
    return (int)syscall(NR_MOUNT_SETATTR, AT_FDCWD, path, recursive ? AT_RECURSIVE_ : 0, &attr,
                        sizeof attr);
}

struct open_how_ {
    uint64_t flags;
    uint64_t mode;
    uint64_t resolve;
};

/* An O_PATH descriptor of `path` that refuses any symlink on the way (no swaps); with
 * `link_ok` a symlink as the last component is the link itself (launcher.py: _open_exact). */
static int open_exact(const char *path, int link_ok) {
    struct open_how_ how = {
        .flags = (uint64_t)(O_PATH | O_CLOEXEC | (link_ok ? O_NOFOLLOW : 0)),
        .resolve = RESOLVE_NO_SYMLINKS_,
    };
    return (int)syscall(NR_OPENAT2, AT_FDCWD, path, &how, sizeof how);
}

static void fd_path(char *buffer, size_t size, int fd) {
    snprintf(buffer, size, "/proc/self/fd/%d", fd);
}

static int bind_fd(int source_fd, const char *target, unsigned long flags) {
    char source[64];
    fd_path(source, sizeof source, source_fd);
    return mount(source, target, NULL, MS_BIND | flags, NULL);
}

/* --- /proc/self/mountinfo ------------------------------------------------------------------ */

struct mount_entry {
    char *point;
    int readonly;
    char *fstype;
};

struct mount_table {
    struct mount_entry *entries;
    size_t count;
    char *text;
};

static char *read_fd_all(int fd) {
    size_t capacity = 16384;
    size_t used = 0;
    char *text = malloc(capacity);
    if (text == NULL) {
        return NULL;
    }
    for (;;) {
        if (capacity - used < 4096) {
            char *grown = realloc(text, capacity * 2);
            if (grown == NULL) {
                free(text);
                return NULL;
            }
            text = grown;
            capacity *= 2;
        }
        ssize_t got = read(fd, text + used, capacity - used - 1);
        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got < 0) {
            int error = errno;
            free(text);
            errno = error;
            return NULL;
        }
        if (got == 0) {
            break;
        }
        used += (size_t)got;
    }
    text[used] = '\0';
    return text;
}

/* The kernel escapes space, tab, newline and backslash as \ooo. */
static void unescape(char *field) {
    char *out = field;
    for (char *in = field; *in;) {
        if (in[0] == '\\' && in[1] >= '0' && in[1] <= '3' && in[2] >= '0' && in[2] <= '7' &&
            in[3] >= '0' && in[3] <= '7') {
            *out++ = (char)((in[1] - '0') * 64 + (in[2] - '0') * 8 + (in[3] - '0'));
            in += 4;
        } else {
            *out++ = *in++;
        }
    }
    *out = '\0';
}

static int has_option(const char *options, const char *wanted) {
    size_t length = strlen(wanted);
    for (const char *at = options; at != NULL && *at;) {
        const char *comma = strchr(at, ',');
        size_t size = comma ? (size_t)(comma - at) : strlen(at);
        if (size == length && memcmp(at, wanted, length) == 0) {
            return 1;
        }
        at = comma ? comma + 1 : NULL;
    }
    return 0;
}

/* Parse mountinfo read from `fd` (from its start); -1 with errno on failure. */
static int read_mounts(int fd, struct mount_table *table) {
    memset(table, 0, sizeof *table);
    if (lseek(fd, 0, SEEK_SET) < 0) {
        return -1;
    }
    table->text = read_fd_all(fd);
    if (table->text == NULL) {
        return -1;
    }
    size_t lines = 0;
    for (char *c = table->text; *c; c++) {
        lines += *c == '\n';
    }
    table->entries = calloc(lines + 1, sizeof *table->entries);
    if (table->entries == NULL) {
        free(table->text);
        errno = ENOMEM;
        return -1;
    }
    char *save_line = NULL;
    for (char *line = strtok_r(table->text, "\n", &save_line); line != NULL;
         line = strtok_r(NULL, "\n", &save_line)) {
        char *fields[64];
        int count = 0;
        char *save_field = NULL;
        for (char *field = strtok_r(line, " ", &save_field); field != NULL && count < 64;
             field = strtok_r(NULL, " ", &save_field)) {
            fields[count++] = field;
        }
        int separator = -1;
        for (int i = 6; i < count; i++) {
            if (strcmp(fields[i], "-") == 0) {
                separator = i;
                break;
            }
        }
        if (count < 6 || separator < 0 || separator + 1 >= count) {
            continue;
        }
        struct mount_entry *entry = &table->entries[table->count++];
        unescape(fields[4]);
        entry->point = fields[4];
        entry->readonly = has_option(fields[5], "ro");
        entry->fstype = fields[separator + 1];
    }
    return 0;
}

static int read_mounts_now(struct mount_table *table) {
    int fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return -1;
    }
    int result = read_mounts(fd, table);
    int error = errno;
    close(fd);
    errno = error;
    return result;
}

static void free_mounts(struct mount_table *table) {
    free(table->entries);
    free(table->text);
    memset(table, 0, sizeof *table);
}

/* The topmost mount at `point` (the last one in mount order), or NULL. */
static const struct mount_entry *topmost(const struct mount_table *table, const char *point) {
    for (size_t i = table->count; i > 0; i--) {
        if (strcmp(table->entries[i - 1].point, point) == 0) {
            return &table->entries[i - 1];
        }
    }
    return NULL;
}

/* --- limits -------------------------------------------------------------------------------- */

static void lower_rlimit(uint32_t resource, uint64_t value) {
    struct rlimit current;
    CHECK("limits", getrlimit((int)resource, &current));
    rlim_t ceiling = resource == RLIMIT_CPU ? (rlim_t)value + 1 : (rlim_t)value;
    rlim_t hard = current.rlim_max == RLIM_INFINITY
                      ? ceiling
                      : (current.rlim_max < ceiling ? current.rlim_max : ceiling);
    rlim_t soft = current.rlim_cur == RLIM_INFINITY
                      ? (rlim_t)value
                      : (current.rlim_cur < (rlim_t)value ? current.rlim_cur : (rlim_t)value);
    struct rlimit wanted = {.rlim_cur = soft < hard ? soft : hard, .rlim_max = hard};
    CHECK("limits", setrlimit((int)resource, &wanted));
}

static void join_cgroups(const struct sandbox *sandbox) {
    for (size_t i = 0; i < sandbox->cgroups.count; i++) {
        /* This process is single-threaded: a v1 "tasks" file moves all of it. */
        CHECK("limits", write_text(sandbox->cgroups.items[i], "0"));
    }
}

/* Whether PID 1 joins the command's cgroups instead of the outer child, which then reports
 * the exit early (sandbox_launch). Not in a user namespace: moving a process into a cgroup
 * from inside one is a permission path this launcher does not rely on. */
static int pid1_joins_cgroups(const struct sandbox *sandbox) {
    return sandbox->has_namespaces && !sandbox->user;
}

static void enter_limits(const struct sandbox *sandbox) {
    if (!pid1_joins_cgroups(sandbox)) {
        join_cgroups(sandbox);
    }
    if (sandbox->has_oom_score_adj) {
        char text[32];
        snprintf(text, sizeof text, "%lld", (long long)sandbox->oom_score_adj);
        (void)write_text("/proc/self/oom_score_adj", text); /* a preference: never fatal */
    }
    for (size_t i = 0; i < sandbox->rlimit_count; i++) {
        lower_rlimit(sandbox->rlimits[i].resource, sandbox->rlimits[i].value);
    }
}

/* --- namespaces ---------------------------------------------------------------------------- */

static const char *const NAMESPACE_NAMES[] = {"user", "mnt", "pid", "ipc", "net"};
enum { NS_USER, NS_MNT, NS_PID, NS_IPC, NS_NET, NS_COUNT };
_Static_assert(NS_COUNT == SANDBOX_NS_COUNT, "sandbox.h names the count");

static int namespace_inodes(unsigned long long inodes[NS_COUNT]) {
    for (int i = 0; i < NS_COUNT; i++) {
        char path[64];
        struct stat info;
        snprintf(path, sizeof path, "/proc/self/ns/%s", NAMESPACE_NAMES[i]);
        if (stat(path, &info) < 0) {
            return -1;
        }
        inodes[i] = (unsigned long long)info.st_ino;
    }
    return 0;
}

static void join_network(const struct sandbox *sandbox) {
    char gone[1024];
    snprintf(gone, sizeof gone,
             "the session's network namespace is gone (%s no longer names namespace %llu)",
             sandbox->join_net_path, (unsigned long long)sandbox->join_net_inode);
    int fd = open(sandbox->join_net_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        char detail[1200];
        snprintf(detail, sizeof detail, "%s: %s", gone, strerror(errno));
        die("network", 0, detail);
    }
    struct stat info;
    if (fstat(fd, &info) < 0 || (uint64_t)info.st_ino != sandbox->join_net_inode) {
        die("network", 0, gone);
    }
    CHECK("network", setns(fd, CLONE_NEWNET));
    close(fd);
}

static void enter_namespaces(const struct sandbox *sandbox) {
    int flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC;
    if (sandbox->net) {
        flags |= CLONE_NEWNET;
    }
    if (sandbox->user) {
        flags |= CLONE_NEWUSER;
    }
    CHECK("namespaces", unshare(flags));
    if (sandbox->user) {
        char map[64];
        CHECK("namespaces", write_text("/proc/self/setgroups", "deny"));
        snprintf(map, sizeof map, "%u %u 1", sandbox->uid, sandbox->uid);
        CHECK("namespaces", write_text("/proc/self/uid_map", map));
        snprintf(map, sizeof map, "%u %u 1", sandbox->gid, sandbox->gid);
        CHECK("namespaces", write_text("/proc/self/gid_map", map));
        /* RLIMIT_NPROC counts this sandbox only from here (rlimits.py: in_user_namespace). */
        if (sandbox->has_nproc_in_user_namespace) {
            struct rlimit current;
            if (getrlimit(RLIMIT_NPROC, &current) < 0) {
                die_errno("namespaces");
            }
            rlim_t value = (rlim_t)sandbox->nproc_in_user_namespace;
            rlim_t hard = current.rlim_max == RLIM_INFINITY || current.rlim_max > value
                              ? value
                              : current.rlim_max;
            rlim_t soft = current.rlim_cur == RLIM_INFINITY || current.rlim_cur > value
                              ? value
                              : current.rlim_cur;
            struct rlimit wanted = {.rlim_cur = soft < hard ? soft : hard, .rlim_max = hard};
            CHECK("namespaces", setrlimit(RLIMIT_NPROC, &wanted));
        }
    }
}

/* --- mounts -------------------------------------------------------------------------------- */

static const char *const DEVICES[] = {"null", "zero", "full", "random", "urandom", "tty"};
static const char *const DEV_LINKS[][2] = {
    {"fd", "/proc/self/fd"},          {"stdin", "/proc/self/fd/0"},
    {"stdout", "/proc/self/fd/1"},    {"stderr", "/proc/self/fd/2"},
    {"ptmx", "pts/ptmx"},
};
static const char CONSOLE[] = "/dev/console";
static const char *const PROC_MASKED_FILES[] = {
    "/proc/keys",        "/proc/key-users",   "/proc/kcore",        "/proc/kallsyms",
    "/proc/timer_list",  "/proc/sched_debug", "/proc/latency_stats",
};
static const char *const PROC_WRITABLE_FILES[] = {"/proc/sysrq-trigger"};
static const char *const PROC_MASKED_DIRS[] = {"/proc/acpi", "/proc/scsi", "/proc/asound"};
static const char *const PROC_READONLY[] = {"/proc/sys", "/proc/bus", "/proc/fs", "/proc/irq"};

#define COUNT(array) (sizeof(array) / sizeof((array)[0]))

/* Every mount read-only: one recursive call, or mount by mount where the kernel refuses that
 * (a mount that is gone or shadowed by a later one is skipped then). */
static int readonly_everywhere(void) {
    if (set_mount_attr("/", ATTR_RDONLY, 0, 1) == 0) {
        return 0;
    }
    struct mount_table table;
    if (read_mounts_now(&table) < 0) {
        return -1;
    }
    for (size_t i = 0; i < table.count; i++) {
        if (set_mount_attr(table.entries[i].point, ATTR_RDONLY, 0, 0) < 0 && errno != ENOENT &&
            errno != EINVAL) {
            int error = errno;
            free_mounts(&table);
            errno = error;
            return -1;
        }
    }
    free_mounts(&table);
    return 0;
}

static int staging_file(const char *staging) {
    if (mount("tmpfs", staging, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0700,size=16k") <
        0) {
        return -1;
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/empty", staging);
    int fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0);
    if (fd < 0) {
        return -1;
    }
    close(fd);
    if (chmod(path, 0) < 0) {
        return -1;
    }
    return open(path, O_PATH | O_CLOEXEC);
}

/* Cover a host Unix socket with the empty mode-000 file while it is one; skip it when it is
 * gone, replaced, or not even reachable by this user (launcher.py: _mask_socket). */
static int mask_socket(const char *path, int empty_fd) {
    int fd = open_exact(path, 0);
    if (fd < 0) {
        return errno == ENOENT || errno == EACCES || errno == EPERM ? 0 : -1;
    }
    struct stat info;
    int result = fstat(fd, &info);
    if (result == 0 && S_ISSOCK(info.st_mode)) {
        char target[64];
        fd_path(target, sizeof target, fd);
        result = bind_fd(empty_fd, target, 0);
        if (result == 0) {
            result = set_mount_attr(path, ATTR_RDONLY, 0, 0);
        }
    }
    int error = errno;
    close(fd);
    errno = error;
    return result;
}

static int mount_one(const struct sandbox_mount_op *op, int empty_fd,
                     const struct mount_table *host) {
    if (op->op == 's') {
        return mask_socket(op->path, empty_fd);
    }
    int fd = open_exact(op->path, op->op == 'p');
    if (fd < 0) {
        return -1;
    }
    char target[64];
    fd_path(target, sizeof target, fd);
    int result = 0;
    switch (op->op) {
    case 'w':
        result = mount(target, target, NULL, MS_BIND | MS_REC, NULL);
        if (result == 0) {
            result = set_mount_attr(op->path, 0, ATTR_RDONLY, 1);
        }
        /* Mounts below that the host itself has read-only stay read-only. */
        size_t length = strlen(op->path);
        while (length > 1 && op->path[length - 1] == '/') {
            length--;
        }
        for (size_t i = 0; result == 0 && i < host->count; i++) {
            const struct mount_entry *entry = &host->entries[i];
            if (entry->readonly && strncmp(entry->point, op->path, length) == 0 &&
                entry->point[length] == '/') {
                if (set_mount_attr(entry->point, ATTR_RDONLY, 0, 0) < 0 && errno != ENOENT &&
                    errno != EINVAL) {
                    result = -1;
                }
            }
        }
        break;
    case 'p':
        /* A mount point cannot be renamed, removed or replaced: the ground stays put. */
        result = mount(target, target, NULL, MS_BIND | MS_REC, NULL);
        break;
    case 'r':
        result = mount(target, target, NULL, MS_BIND | MS_REC, NULL);
        if (result == 0) {
            result = set_mount_attr(op->path, ATTR_RDONLY, 0, 1);
        }
        break;
    case 'd':
        result = mount("tmpfs", target, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                       "mode=000,size=4k");
        break;
    case 'f':
        result = bind_fd(empty_fd, target, 0);
        if (result == 0) {
            result = set_mount_attr(op->path, ATTR_RDONLY, 0, 0);
        }
        break;
    default:
        errno = EINVAL;
        result = -1;
    }
    int error = errno;
    close(fd);
    errno = error;
    return result;
}

/* Replace /dev with a minimal one: the standard devices bound from the host, a private devpts
 * instance, /dev/shm, the fd links and, with a terminal, that terminal at /dev/console. */
static int private_dev(int private_shm, int tty) {
    int keep[COUNT(DEVICES) + 1];
    size_t kept = 0;
    int shm = -1;
    int result = -1;
    for (size_t i = 0; i < COUNT(DEVICES); i++) {
        char path[64];
        snprintf(path, sizeof path, "/dev/%s", DEVICES[i]);
        if ((keep[kept] = open(path, O_PATH | O_CLOEXEC)) < 0) {
            goto out;
        }
        kept++;
    }
    if (tty) {
        /* By name in this namespace: a bind's source must be a mount of this namespace. */
        char terminal[256];
        int error = ttyname_r(0, terminal, sizeof terminal);
        if (error != 0) {
            errno = error;
            goto out;
        }
        if ((keep[kept] = open(terminal, O_PATH | O_CLOEXEC)) < 0) {
            goto out;
        }
        kept++;
    }
    if (!private_shm && (shm = open("/dev/shm", O_PATH | O_CLOEXEC)) < 0) {
        goto out;
    }
    if (mount("tmpfs", "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k,nr_inodes=64") <
        0) {
        goto out;
    }
    for (size_t i = 0; i < kept; i++) {
        char node[64];
        if (i < COUNT(DEVICES)) {
            snprintf(node, sizeof node, "/dev/%s", DEVICES[i]);
        } else {
            snprintf(node, sizeof node, "%s", CONSOLE);
        }
        if (mknod(node, S_IFREG | 0666, 0) < 0 || bind_fd(keep[i], node, 0) < 0) {
            goto out;
        }
    }
    if (mkdir("/dev/pts", 0755) < 0 ||
        mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
              "newinstance,ptmxmode=0666,mode=620") < 0 ||
        mkdir("/dev/shm", 01777) < 0) {
        goto out;
    }
    if (shm < 0) {
        if (mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777") < 0) {
            goto out;
        }
    } else if (bind_fd(shm, "/dev/shm", MS_REC) < 0) {
        goto out;
    }
    for (size_t i = 0; i < COUNT(DEV_LINKS); i++) {
        char link[64];
        snprintf(link, sizeof link, "/dev/%s", DEV_LINKS[i][0]);
        if (symlink(DEV_LINKS[i][1], link) < 0) {
            goto out;
        }
    }
    result = set_mount_attr("/dev", ATTR_RDONLY, 0, 0);
out:;
    int error = errno;
    for (size_t i = 0; i < kept; i++) {
        close(keep[i]);
    }
    if (shm >= 0) {
        close(shm);
    }
    errno = error;
    return result;
}

/* /proc entries with host-wide secrets or kernel internals: masked as container runtimes do.
 * Entries a kernel config leaves out need no mask (the mount on them fails with ENOENT: no
 * look-up first); any other failure fails the launch. */
static int mask_proc(int readonly) {
    int null = open("/dev/null", O_PATH | O_CLOEXEC);
    if (null < 0) {
        return -1;
    }
    int result = 0;
    /* A mount on an entry that is not there fails with ENOENT: nothing to mask. */
    for (size_t i = 0; result == 0 && i < COUNT(PROC_MASKED_FILES); i++) {
        if (bind_fd(null, PROC_MASKED_FILES[i], 0) < 0 && errno != ENOENT) {
            result = -1;
        }
    }
    for (size_t i = 0; result == 0 && !readonly && i < COUNT(PROC_WRITABLE_FILES); i++) {
        if (bind_fd(null, PROC_WRITABLE_FILES[i], 0) < 0 && errno != ENOENT) {
            result = -1;
        }
    }
    int error = errno;
    close(null);
    errno = error;
    if (result < 0 || readonly) {
        return result;
    }
    /* Their entries are writable settings (acpi, scsi): a read-only /proc covers them. */
    for (size_t i = 0; i < COUNT(PROC_MASKED_DIRS); i++) {
        if (mount("tmpfs", PROC_MASKED_DIRS[i], "tmpfs",
                  MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k") < 0 &&
            errno != ENOENT) {
            return -1;
        }
    }
    for (size_t i = 0; i < COUNT(PROC_READONLY); i++) {
        const char *path = PROC_READONLY[i];
        if (mount(path, path, NULL, MS_BIND | MS_REC, NULL) < 0) {
            if (errno == ENOENT) {
                continue;
            }
            return -1;
        }
        if (set_mount_attr(path, ATTR_RDONLY, 0, 1) < 0) {
            return -1;
        }
    }
    return 0;
}

/* The mount table this namespace was made with, once its mounts are private (no mount or
 * unmount of the host's reaches it any more): what the planned mounts start from. */
static int private_mounts(struct mount_table *host) {
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
        return -1;
    }
    return read_mounts_now(host);
}

/* In PID 1 made ahead: private_mounts done then (the launcher drops a prepared launch as soon
 * as the host's mount table changes, so this is the table a launch made now would see). */
static struct mount_table prepared_host;
static int prepared_host_read;

static int apply_mounts(const struct sandbox *sandbox, int tty) {
    struct mount_table host;
    if (prepared_host_read) {
        host = prepared_host;
        prepared_host_read = 0;
    } else if (private_mounts(&host) < 0) {
        return -1;
    }
    int empty_fd = -1;
    int result = 0;
    for (size_t i = 0; i < sandbox->op_count; i++) {
        if (sandbox->ops[i].op == 'f' || sandbox->ops[i].op == 's') {
            /* Held open and bound through its descriptor: the staging directory lives in the
             * executor's state directory, which a later operation masks when it is visible. */
            empty_fd = staging_file(sandbox->staging);
            result = empty_fd < 0 ? -1 : 0;
            break;
        }
    }
    if (result == 0 && sandbox->readonly_root) {
        result = readonly_everywhere();
    }
    for (size_t i = 0; result == 0 && i < sandbox->op_count; i++) {
        result = mount_one(&sandbox->ops[i], empty_fd, &host);
    }
    int error = errno;
    if (empty_fd >= 0) {
        close(empty_fd);
    }
    free_mounts(&host);
    errno = error;
    if (result < 0) {
        return -1;
    }
    if (sandbox->private_dev) {
        if (private_dev(sandbox->private_shm, tty) < 0) {
            return -1;
        }
    } else if (sandbox->private_shm) {
        struct stat info;
        if (stat("/dev/shm", &info) == 0 && S_ISDIR(info.st_mode) &&
            mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777") < 0) {
            return -1;
        }
    }
    if (sandbox->proc) {
        /* With a read-only root the fresh /proc is read-only too: no sysctl, no sysrq. */
        unsigned long flags = MS_NOSUID | MS_NODEV | MS_NOEXEC;
        if (sandbox->readonly_root) {
            flags |= MS_RDONLY;
        }
        if (mount("proc", "/proc", "proc", flags, NULL) < 0) {
            return -1;
        }
        if (sandbox->mask_proc && mask_proc(sandbox->readonly_root) < 0) {
            return -1;
        }
    }
    return 0;
}

/* --- confinement --------------------------------------------------------------------------- */

struct landlock_ruleset_attr_ {
    uint64_t handled_access_fs;
    uint64_t handled_access_net;
    uint64_t scoped;
};

struct __attribute__((packed)) landlock_path_beneath_attr_ {
    uint64_t allowed_access;
    int32_t parent_fd;
};

static void apply_landlock(const struct sandbox *sandbox) {
    struct landlock_ruleset_attr_ attr = {
        .handled_access_fs = sandbox->landlock_fs,
        .handled_access_net = sandbox->landlock_net,
        .scoped = sandbox->landlock_scoped,
    };
    size_t size = sandbox->landlock_scoped ? 24 : sandbox->landlock_net ? 16 : 8;
    int ruleset = (int)syscall(NR_LANDLOCK_CREATE_RULESET, &attr, size, 0);
    if (ruleset < 0) {
        die_errno("landlock");
    }
    for (size_t i = 0; i < sandbox->grant_count; i++) {
        int fd = open(sandbox->grants[i].path, O_PATH | O_CLOEXEC);
        if (fd < 0) {
            if (errno == ENOENT) {
                continue; /* granting less than asked is safe; the path vanished since */
            }
            die_errno("landlock");
        }
        struct stat info;
        if (fstat(fd, &info) < 0) {
            die_errno("landlock");
        }
        uint64_t rights = sandbox->grants[i].rights;
        if (!S_ISDIR(info.st_mode)) {
            rights &= LANDLOCK_FILE_RIGHTS;
        }
        rights &= sandbox->landlock_fs;
        if (rights) {
            struct landlock_path_beneath_attr_ rule = {.allowed_access = rights, .parent_fd = fd};
            CHECK("landlock",
                  syscall(NR_LANDLOCK_ADD_RULE, ruleset, LANDLOCK_RULE_PATH_BENEATH_, &rule, 0));
        }
        close(fd);
    }
    CHECK("landlock", syscall(NR_LANDLOCK_RESTRICT_SELF, ruleset, 0));
    close(ruleset);
}

/* Empty the bounding, ambient, effective, permitted and inheritable capability sets. */
static void drop_capabilities(void) {
    for (int cap = 0; cap < 64; cap++) {
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) {
            if (errno == EINVAL) {
                break; /* past the kernel's last capability: so is every later one */
            }
            die_errno("capabilities");
        }
    }
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    struct {
        uint32_t version;
        int pid;
    } header = {CAPABILITY_VERSION_3, 0};
    uint32_t data[6] = {0}; /* two empty __user_cap_data_struct */
    CHECK("capabilities", syscall(SYS_capset, &header, data));
}

static void load_seccomp(const struct sandbox *sandbox) {
    struct sock_fprog program = {
        .len = (unsigned short)(sandbox->seccomp_size / 8),
        .filter = (struct sock_filter *)(void *)sandbox->seccomp,
    };
    CHECK("seccomp", prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program, 0, 0));
}

/* --- verification (observe.py) ------------------------------------------------------------- */

struct text {
    char buffer[8192];
    size_t used;
};

static void text_vadd(struct text *text, const char *format, va_list args) {
    if (text->used >= sizeof text->buffer - 1) {
        return;
    }
    int length =
        vsnprintf(text->buffer + text->used, sizeof text->buffer - text->used, format, args);
    if (length > 0) {
        text->used += (size_t)length;
        if (text->used > sizeof text->buffer - 1) {
            text->used = sizeof text->buffer - 1;
        }
    }
}

static void text_add(struct text *text, const char *format, ...) {
    va_list args;
    va_start(args, format);
    text_vadd(text, format, args);
    va_end(args);
}

/* One more item of a list joined by `separator`. */
static void text_item(struct text *text, const char *separator, const char *format, ...) {
    if (text->used) {
        text_add(text, "%s", separator);
    }
    va_list args;
    va_start(args, format);
    text_vadd(text, format, args);
    va_end(args);
}

#define PROBLEM(...) text_item(problems, "; ", __VA_ARGS__)

/* A field of /proc/self/status ("Key:\tvalue"), or NULL. */
static const char *status_field(const char *status, const char *key, char *value, size_t size) {
    size_t length = strlen(key);
    for (const char *line = status; line && *line;) {
        const char *end = strchr(line, '\n');
        if (strncmp(line, key, length) == 0 && line[length] == ':') {
            const char *start = line + length + 1;
            while (*start == ' ' || *start == '\t') {
                start++;
            }
            size_t count = end ? (size_t)(end - start) : strlen(start);
            while (count > 0 && (start[count - 1] == ' ' || start[count - 1] == '\t')) {
                count--;
            }
            if (count >= size) {
                count = size - 1;
            }
            memcpy(value, start, count);
            value[count] = '\0';
            return value;
        }
        line = end ? end + 1 : NULL;
    }
    return NULL;
}

static void expect_mount(const struct mount_table *mounts, struct text *problems, const char *path,
                         int readonly, const char *fstype) {
    const struct mount_entry *found = topmost(mounts, path);
    if (found == NULL) {
        PROBLEM("%s is not mounted", path);
    } else if (readonly >= 0 && found->readonly != readonly) {
        PROBLEM("%s is %s", path, found->readonly ? "read-only" : "writable");
    } else if (fstype != NULL && strcmp(found->fstype, fstype) != 0) {
        PROBLEM("%s is %s, not %s", path, found->fstype, fstype);
    }
}

static int is_socket(const char *path) {
    struct stat info;
    return lstat(path, &info) == 0 && S_ISSOCK(info.st_mode);
}

/* Check from inside that every planned layer is in force; fail the launch when one is not,
 * and report what was observed (observe.py: Observer.verify, word for word). */
static void verify(const struct sandbox *sandbox, const unsigned long long *before, int status_fd,
                   int mountinfo_fd, struct text *observed) {
    static struct text problem_text;
    struct text *problems = &problem_text;
    problems->used = 0;
    observed->used = 0;
    if (sandbox->has_namespaces && before != NULL) {
        unsigned long long after[NS_COUNT];
        if (namespace_inodes(after) < 0) {
            die_errno("verify");
        }
        int planned[NS_COUNT];
        int count = 0;
        planned[count++] = NS_MNT;
        planned[count++] = NS_PID;
        planned[count++] = NS_IPC;
        if (sandbox->net) {
            planned[count++] = NS_NET;
        }
        if (sandbox->user) {
            planned[count++] = NS_USER;
        }
        struct text shown = {.used = 0};
        for (int i = 0; i < count; i++) {
            int which = planned[i];
            if (after[which] == before[which]) {
                PROBLEM("the %s namespace is the host's", NAMESPACE_NAMES[which]);
            }
            text_item(&shown, ",", "%s:%llu", NAMESPACE_NAMES[which], after[which]);
        }
        if (sandbox->join_net_path != NULL) {
            if (after[NS_NET] != sandbox->join_net_inode) {
                PROBLEM("the net namespace is not the session's");
            }
            text_item(&shown, ",", "net:%llu=session", after[NS_NET]);
        }
        text_item(observed, " + ", "namespaces(%s)", shown.buffer);
    }
    if (sandbox->has_namespaces) {
        struct mount_table mounts;
        if (read_mounts(mountinfo_fd, &mounts) < 0) {
            die_errno("verify");
        }
        if (sandbox->readonly_root) {
            expect_mount(&mounts, problems, "/", 1, NULL);
        }
        for (size_t i = 0; i < sandbox->op_count; i++) {
            const struct sandbox_mount_op *op = &sandbox->ops[i];
            switch (op->op) {
            case 'w':
                expect_mount(&mounts, problems, op->path, 0, NULL);
                break;
            case 'r':
                expect_mount(&mounts, problems, op->path, 1, NULL);
                break;
            case 'd':
                expect_mount(&mounts, problems, op->path, -1, "tmpfs");
                break;
            case 's':
                if (topmost(&mounts, op->path) == NULL && is_socket(op->path)) {
                    PROBLEM("the host socket %s is not masked", op->path);
                }
                break;
            default:
                expect_mount(&mounts, problems, op->path, -1, NULL);
            }
        }
        struct text parts = {.used = 0};
        if (sandbox->readonly_root) {
            text_item(&parts, ", ", "read-only /");
        }
        if (sandbox->private_dev) {
            expect_mount(&mounts, problems, "/dev", 1, "tmpfs");
            expect_mount(&mounts, problems, "/dev/pts", -1, "devpts");
            text_item(&parts, ", ", "private /dev");
        }
        if (sandbox->proc) {
            expect_mount(&mounts, problems, "/proc", -1, "proc");
            text_item(&parts, ", ", "fresh /proc");
        }
        text_item(&parts, ", ", "%zu planned mounts", sandbox->op_count);
        text_item(observed, " + ", "mounts(%s)", parts.buffer);
        free_mounts(&mounts);
    }
    if (lseek(status_fd, 0, SEEK_SET) < 0) {
        die_errno("verify");
    }
    char *status = read_fd_all(status_fd);
    if (status == NULL) {
        die_errno("verify");
    }
    char value[128];
    const char *field = status_field(status, "NoNewPrivs", value, sizeof value);
    if (field == NULL || strcmp(field, "1") != 0) {
        PROBLEM("no_new_privs is not set");
    }
    text_item(observed, " + ", "no_new_privs");
    if (sandbox->has_landlock) {
        /* Reached only once landlock_restrict_self succeeded (the kernel offers no way to
         * read a domain back). */
        text_item(observed, " + ",
                  "landlock(restricted: fs=0x%llx net=0x%llx scoped=0x%llx, %zu grants)",
                  (unsigned long long)sandbox->landlock_fs,
                  (unsigned long long)sandbox->landlock_net,
                  (unsigned long long)sandbox->landlock_scoped, sandbox->grant_count);
    }
    static const char *const sets[] = {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"};
    struct text held = {.used = 0};
    for (size_t i = 0; i < COUNT(sets); i++) {
        field = status_field(status, sets[i], value, sizeof value);
        char *end = NULL;
        unsigned long long bits = field ? strtoull(field, &end, 16) : 1;
        if (field == NULL || end == field || *end != '\0' || bits != 0) {
            text_item(&held, ", ", "%s", sets[i]);
        }
    }
    if (held.used) {
        PROBLEM("capabilities left in %s", held.buffer);
    }
    text_item(observed, " + ", "capabilities(none)");
    if (sandbox->seccomp_size) {
        char mode[32];
        const char *seccomp = status_field(status, "Seccomp", mode, sizeof mode);
        const char *filters = status_field(status, "Seccomp_filters", value, sizeof value);
        if (filters == NULL) {
            filters = "0";
        }
        if (seccomp == NULL || strcmp(seccomp, "2") != 0 || strcmp(filters, "0") == 0) {
            PROBLEM("the seccomp filter is not loaded");
        }
        text_item(observed, " + ", "seccomp(filter mode, %s filter%s)", filters,
                  strcmp(filters, "1") != 0 ? "s" : "");
    }
    free(status);
    if (problems->used) {
        char detail[8300];
        snprintf(detail, sizeof detail, "planned but not in force: %s", problems->buffer);
        die("verify", EPERM, detail);
    }
}

/* no_new_privs, Landlock, capabilities, seccomp; then check each planned layer is in force and
 * report what was observed (launcher.py: _confine). */
static void confine(const struct sandbox *sandbox, const unsigned long long *before) {
    /* Opened before Landlock applies (a profile may not grant /proc); reading an open procfs
     * file from offset 0 shows the state at that read. */
    int status_fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    int mountinfo_fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
    if (status_fd < 0 || mountinfo_fd < 0) {
        die_errno("verify");
    }
    CHECK("no_new_privs", prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0));
    if (sandbox->has_landlock) {
        apply_landlock(sandbox);
    }
    drop_capabilities();
    if (sandbox->seccomp_size) {
        load_seccomp(sandbox);
    }
    static struct text observed;
    verify(sandbox, before, status_fd, mountinfo_fd, &observed);
    close(status_fd);
    close(mountinfo_fd);
    for (size_t i = 0; i < observed.used; i++) {
        if (observed.buffer[i] == '\n') {
            observed.buffer[i] = ' ';
        }
    }
    write_all(error_pipe, "+", 1);
    write_all(error_pipe, observed.buffer, observed.used);
    write_all(error_pipe, "\n", 1);
}

/* --- processes ----------------------------------------------------------------------------- */

/* Signals PID 1 forwards to the command's process group. */
static const int FORWARDED[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
static volatile sig_atomic_t forward_to;

static void forward(int signal_number) {
    int error = errno;
    if (forward_to > 0) {
        kill(-(pid_t)forward_to, signal_number);
    }
    errno = error;
}

static int exit_code(int status) {
    if (WIFSIGNALED(status)) {
        return 128 + WTERMSIG(status);
    }
    return WEXITSTATUS(status);
}

/* PID 1 of the new namespaces: mounts, confine itself, spawn the command, relay. Confining
 * PID 1 and spawning the command (which inherits every layer) saves a fork. `limits`: the
 * outer child has not entered the other limits (PID 1 made ahead, see sandbox_prepare). */
static void __attribute__((noreturn)) namespace_init(const struct sandbox *sandbox,
                                                     const struct sandbox_command *command,
                                                     const unsigned long long *before,
                                                     int exit_fd, int limits) {
    if (exit_fd >= 0) {
        close(exit_fd); /* the outer child's alone: nothing in here may speak for the exit */
    }
    if (pid1_joins_cgroups(sandbox)) {
        join_cgroups(sandbox); /* first: everything the command becomes is counted and capped */
    }
    if (limits) {
        enter_limits(sandbox);
    }
    prctl(PR_SET_NAME, (unsigned long)"executor-init", 0, 0, 0); /* what ps and top show */
    if (apply_mounts(sandbox, command->tty) < 0) {
        die_errno("mounts");
    }
    CHECK("chdir", chdir(command->cwd));
    confine(sandbox, before);

    char terminal[256];
    if (command->tty) {
        /* After setsid, opening the terminal by name makes it the controlling terminal; in a
         * private /dev it is bound at /dev/console (its host name is not there). */
        if (sandbox->private_dev) {
            snprintf(terminal, sizeof terminal, "%s", CONSOLE);
        } else {
            int error = ttyname_r(0, terminal, sizeof terminal);
            if (error != 0) {
                die("exec", error, strerror(error));
            }
        }
    }
    pid_t child;
    int error = command_spawn(command->executable, command->argv, command->envp, NULL,
                              command->tty ? terminal : NULL, &child);
    if (error != 0) {
        die("exec", error, strerror(error));
    }
    forward_to = child;
    close(error_pipe);
    /* PID 1 needs no stdio of its own: the command's output ends when the command's does. */
    for (int fd = 0; fd < 3; fd++) {
        close(fd);
    }
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = forward;
    action.sa_flags = SA_RESTART;
    sigemptyset(&action.sa_mask);
    for (size_t i = 0; i < COUNT(FORWARDED); i++) {
        sigaction(FORWARDED[i], &action, NULL);
    }
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, 0);
        if (pid < 0) {
            if (errno == EINTR) {
                continue;
            }
            _exit(255);
        }
        if (pid == child) {
            _exit(exit_code(status));
        }
    }
}

/* Without namespaces this process becomes the command: confine it just before execve. */
static void __attribute__((noreturn)) exec_confined(const struct sandbox *sandbox,
                                                    const struct sandbox_command *command) {
    CHECK("session", setsid());
    if (command->tty) {
        CHECK("session", ioctl(0, TIOCSCTTY, 0));
    }
    CHECK("chdir", chdir(command->cwd));
    confine(sandbox, NULL);
    execve(command->executable, command->argv, command->envp);
    die_errno("exec");
}

int sandbox_preparable(const struct sandbox *sandbox) {
    return sandbox->has_namespaces && sandbox->net && !sandbox->user &&
           sandbox->join_net_path == NULL;
}

/* What the outer child does once PID 1 is running: wait for it, report its wait status on
 * `exit_fd` (-1: none) as soon as it is reaped, and exit with it. */
static void __attribute__((noreturn)) relay_init(pid_t init, int exit_fd) {
    for (;;) {
        int status;
        if (waitpid(init, &status, 0) < 0) {
            if (errno == EINTR) {
                continue;
            }
            _exit(255);
        }
        int code = exit_code(status);
        if (exit_fd >= 0) {
            /* PID 1 is reaped: the kernel ended every other process of its namespace before
             * that, and none of them was in a cgroup of the command's that this process is
             * in (PID 1 joined them, not this one). The tree has ended, so the exit is
             * reported now; this process's own exit, which tears the namespaces down (~1-2
             * ms), no longer delays it. The supervisor falls back to this process's wait
             * status if the report does not arrive whole. */
            int reported = W_EXITCODE(code, 0);
            write_all(exit_fd, (const char *)&reported, sizeof reported);
        }
        _exit(code);
    }
}

/* --- a launch prepared ahead -----------------------------------------------------------------
 *
 * sandbox_prepare makes the namespaces and forks PID 1 of them right away, before any request:
 * the fork into a new PID namespace (~0.2 ms here) and PID 1's first touches of its memory are
 * off the launch's path. PID 1 returns from sandbox_prepare and takes the request; the outer
 * child stays in here until PID 1 hands it the exit pipe (sandbox_launch), then relays the
 * exit as after its own fork. The hand-over is one datagram (the pipe's descriptor) to an
 * abstract Unix socket, which exists only in the network namespace just made (the request's
 * descriptors are all PID 1 keeps, so no socket pair could survive until then): only these two
 * processes are in it until the command starts, after the hand-over, and the outer child takes
 * the datagram of PID 1 only (its sender's credentials). PID 1 also makes its mounts private
 * and reads its mount table ahead (apply_mounts). */

/* The abstract name (leading NUL) of the outer child's hand-over socket. */
static const char HANDOVER_NAME[] = "\0executor-sandbox-outer-child";

static int prepared_init; /* this process is PID 1, made ahead by sandbox_prepare */

static socklen_t handover_address(struct sockaddr_un *address) {
    memset(address, 0, sizeof *address);
    address->sun_family = AF_UNIX;
    memcpy(address->sun_path, HANDOVER_NAME, sizeof HANDOVER_NAME - 1);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + sizeof HANDOVER_NAME - 1);
}

/* The prepared outer child, from PID 1's fork on: wait for PID 1 to take a launch and hand
 * over the exit pipe, then relay its exit. PID 1 ending first (dropped, or the launch failed
 * before the hand-over) ends this process too. Never returns. */
static void __attribute__((noreturn)) prepared_outer(pid_t init, int sock, int alive) {
    /* Only these stay, at 0, 1 and 2: not the launcher's stdio, nor the supervisor's socket
     * (with PID 1 gone, the supervisor's hand-over of a request then fails at once, and it
     * launches as usual). */
    int kept[3] = {sock, alive, (int)syscall(NR_PIDFD_OPEN, init, 0)};
    for (int i = 0; i < 3; i++) {
        if (kept[i] < 0 || (kept[i] = fcntl(kept[i], F_DUPFD_CLOEXEC, 10)) < 0) {
            _exit(127); /* PID 1 dies with this process */
        }
    }
    for (int i = 0; i < 3; i++) {
        if (dup3(kept[i], i, O_CLOEXEC) < 0) {
            _exit(127);
        }
    }
    if (syscall(NR_CLOSE_RANGE, 3U, ~0U, 0U) < 0) {
        for (int fd = 3; fd < 1024; fd++) {
            close(fd);
        }
    }
    sock = 0;
    alive = 1;
    int pidfd = 2;
    reset_signals();
    for (size_t i = 0; i < COUNT(FORWARDED); i++) {
        signal(FORWARDED[i], SIG_IGN); /* PID 1 is in our group and gets them itself */
    }
    int exit_fd = -1;
    for (int handed = 0; !handed;) {
        struct pollfd polled[2] = {{.fd = sock, .events = POLLIN},
                                   {.fd = pidfd, .events = POLLIN}};
        int count = poll(polled, 2, -1);
        if (count < 0 && errno != EINTR) {
            _exit(127);
        }
        if (count > 0 && polled[0].revents != 0) {
            char byte;
            struct iovec vector = {.iov_base = &byte, .iov_len = 1};
            union {
                char buffer[CMSG_SPACE(sizeof(struct ucred)) + CMSG_SPACE(sizeof(int))];
                struct cmsghdr align;
            } ancillary;
            struct msghdr message = {
                .msg_iov = &vector,
                .msg_iovlen = 1,
                .msg_control = ancillary.buffer,
                .msg_controllen = sizeof ancillary.buffer,
            };
            if (recvmsg(sock, &message, MSG_CMSG_CLOEXEC | MSG_DONTWAIT) < 0) {
                continue;
            }
            int received = -1;
            pid_t sender = 0;
            for (struct cmsghdr *part = CMSG_FIRSTHDR(&message); part != NULL;
                 part = CMSG_NXTHDR(&message, part)) {
                if (part->cmsg_level != SOL_SOCKET) {
                    continue;
                }
                if (part->cmsg_type == SCM_CREDENTIALS &&
                    part->cmsg_len == CMSG_LEN(sizeof(struct ucred))) {
                    struct ucred credentials;
                    memcpy(&credentials, CMSG_DATA(part), sizeof credentials);
                    sender = credentials.pid;
                } else if (part->cmsg_type == SCM_RIGHTS) {
                    size_t count_fds = (part->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                    for (size_t i = 0; i < count_fds; i++) {
                        int fd;
                        memcpy(&fd, CMSG_DATA(part) + i * sizeof(int), sizeof fd);
                        if (received < 0 && count_fds == 1) {
                            received = fd;
                        } else {
                            close(fd);
                        }
                    }
                }
            }
            /* Only PID 1 is in this network namespace yet; whatever else arrives is not
             * heard. */
            if (sender == init) {
                exit_fd = received;
                handed = 1;
            } else if (received >= 0) {
                close(received);
            }
        } else if (count > 0 && polled[1].revents != 0) {
            relay_init(init, -1); /* PID 1 ended before it took a launch */
        }
    }
    close(sock);
    close(alive);
    close(pidfd);
    prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0); /* from here a launch's outer child like any other */
    relay_init(init, exit_fd);
}

/* In PID 1 made ahead, once it has taken a launch: give the outer child the exit pipe's write
 * end (one datagram to its socket) and close it here. */
static void hand_over(int exit_fd) {
    struct sockaddr_un address;
    socklen_t length = handover_address(&address);
    int sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (sock < 0) {
        die_errno("namespaces");
    }
    char byte = 'x';
    struct iovec vector = {.iov_base = &byte, .iov_len = 1};
    union {
        char buffer[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ancillary;
    memset(&ancillary, 0, sizeof ancillary);
    struct msghdr message = {
        .msg_name = &address,
        .msg_namelen = length,
        .msg_iov = &vector,
        .msg_iovlen = 1,
    };
    if (exit_fd >= 0) {
        message.msg_control = ancillary.buffer;
        message.msg_controllen = sizeof ancillary.buffer;
        struct cmsghdr *part = CMSG_FIRSTHDR(&message);
        part->cmsg_level = SOL_SOCKET;
        part->cmsg_type = SCM_RIGHTS;
        part->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(part), &exit_fd, sizeof exit_fd);
    }
    ssize_t sent;
    do {
        sent = sendmsg(sock, &message, MSG_NOSIGNAL);
    } while (sent < 0 && errno == EINTR);
    if (sent != 1) {
        die_errno("namespaces");
    }
    close(sock);
    if (exit_fd >= 0) {
        close(exit_fd);
    }
}

int sandbox_prepare(unsigned long long before[SANDBOX_NS_COUNT]) {
    if (namespace_inodes(before) < 0 ||
        unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWNET) < 0) {
        return -1;
    }
    setpgid(0, 0); /* our own group: the daemon signals it; PID 1 forwards to the command */
    struct sockaddr_un address;
    socklen_t length = handover_address(&address);
    /* Each datagram comes with its sender's credentials: only PID 1's is taken. */
    int sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    int on = 1;
    if (sock < 0 || setsockopt(sock, SOL_SOCKET, SO_PASSCRED, &on, sizeof on) < 0 ||
        bind(sock, (const struct sockaddr *)&address, length) < 0) {
        return -1;
    }
    int alive[2]; /* its write end held by the outer child only: PID 1 sees it gone */
    if (pipe2(alive, O_CLOEXEC) < 0) {
        return -1;
    }
    pid_t init = fork();
    if (init < 0) {
        return -1;
    }
    if (init > 0) {
        close(alive[0]);
        prepared_outer(init, sock, alive[1]);
    }
    /* PID 1: dies with the outer child until it takes a launch (launcher.c then clears this,
     * as PID 1 forked after the request has none). The outer child may have died already. */
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    close(sock);
    close(alive[1]);
    struct pollfd gone = {.fd = alive[0], .events = POLLIN};
    if (poll(&gone, 1, 0) != 0) {
        _exit(0);
    }
    close(alive[0]);
    prepared_init = 1;
    reset_signals();
    prepared_host_read = private_mounts(&prepared_host) == 0; /* else at the launch */
    return 0;
}

void sandbox_launch(const struct sandbox *sandbox, const struct sandbox_command *command,
                    int error_fd, int exit_fd, const unsigned long long *prepared) {
    error_pipe = error_fd;
    if (prepared != NULL) {
        if (!prepared_init || !sandbox_preparable(sandbox)) {
            die("namespaces", 0, "the namespaces prepared ahead do not fit this launch");
        }
        /* PID 1 already (sandbox_prepare), signals reset: the outer child gets the exit pipe
         * to relay the exit (preparable: PID 1 joins the cgroups, the exit is early), and
         * the limits are entered here, after the cgroups (namespace_init). */
        hand_over(exit_fd);
        namespace_init(sandbox, command, prepared, -1, 1);
    }
    reset_signals();
    enter_limits(sandbox); /* first: everything the command becomes is counted and capped */
    if (!sandbox->has_namespaces) {
        exec_confined(sandbox, command); /* exit_fd is close-on-exec: EOF, no early exit */
    }
    if (!pid1_joins_cgroups(sandbox) && exit_fd >= 0) {
        close(exit_fd); /* in the command's cgroups until it has exited: no early report */
        exit_fd = -1;
    }
    unsigned long long before[NS_COUNT];
    if (namespace_inodes(before) < 0) {
        die_errno("namespaces");
    }
    if (sandbox->join_net_path != NULL) {
        join_network(sandbox);
    }
    enter_namespaces(sandbox);
    setpgid(0, 0); /* our own group: the daemon signals it; PID 1 forwards to the command */
    pid_t init = fork();
    if (init < 0) {
        die_errno("namespaces");
    }
    if (init == 0) {
        namespace_init(sandbox, command, before, exit_fd, 0);
    }
    close(error_pipe);
    /* Nor does this process: closed now, not when its exit has torn the namespaces down (a
     * dying process's last descriptors are released after its namespaces). */
    for (int fd = 0; fd < 3; fd++) {
        close(fd);
    }
    for (size_t i = 0; i < COUNT(FORWARDED); i++) {
        signal(FORWARDED[i], SIG_IGN); /* PID 1 is in our group and gets them itself */
    }
    relay_init(init, exit_fd);
}
