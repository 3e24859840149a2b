/* fabriclab's host library: the private directory a process over TCP keeps its tray's
 * tree in (unpack.c writes it, tree.c reads it as the tree's root).
 *
 * One per process: mkdtemp (0700) under $TMPDIR, else /dev/shm (a tmpfs: a tree's
 * hundreds of small files cost no disk writes), else /tmp, named
 * fabriclab-tree-<pid namespace>-<pid>-XXXXXX after the process that made it, and
 * stamped (FL_STAMP) with the server and tray it came from once whole.  The process
 * that made it removes it when it exits; a process that ends without running
 * destructors (_exit: dash does; a signal) leaves it, and the next directory made
 * there removes those of this user whose process (in this pid namespace) is gone.
 *
 * A process's first ask takes an ancestor's tree (ANCESTORS up: a shell script, its
 * subshells, the command) when its stamp names the same server and tray and is
 * INHERIT_S seconds old at most, so a script's commands (ibstatus runs a cat per
 * file) do not each fetch one.  It stays the ancestor's to remove; a refresh rewrites
 * it in place (each process under a temporary name of its own), and makes it again as
 * the process's own when the ancestor has removed it.  A forked child does the same
 * with its parent's. */
#include "hostlib.h"

#include <ftw.h>
#include <signal.h>

#define PREFIX "fabriclab-tree-"
#define INHERIT_S 5 /* a tree is taken from an ancestor this long after it was fetched */
#define ANCESTORS 4 /* how far up: a script, its subshell, a pipeline's, the command */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char root[PATH_MAX]; /* the directory, or "" */
static pid_t root_pid;      /* the process that made it (and removes it); -1: another's */

static int drop(const char *path, const struct stat *st, int flag, struct FTW *f)
{
    (void)st, (void)flag, (void)f;
    remove(path);
    return 0;
}

/* The directory goes with the process that made it (not a forked child). */
__attribute__((destructor)) static void privdir_cleanup(void)
{
    if (root[0] && root_pid == getpid())
        nftw(root, drop, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}

/* Where private trees go: $TMPDIR, else /dev/shm, else /tmp. */
static const char *tmp_dir(void)
{
    const char *tmp = getenv("TMPDIR");
    struct stat st;
    if (tmp && *tmp)
        return tmp;
    if (NEXT(stat)("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) &&
        NEXT(access)("/dev/shm", W_OK | X_OK) == 0)
        return "/dev/shm";
    return "/tmp";
}

/* This process's pid namespace (its inode number, as /proc/self/ns/pid names it), or 0. */
static unsigned long pid_ns(void)
{
    char link[64] = {0};
    unsigned long ns = 0;
    if (NEXT(readlink)("/proc/self/ns/pid", link, sizeof link - 1) > 0)
        sscanf(link, "pid:[%lu]", &ns);
    return ns;
}

/* The pid a directory's name gives, when it is one of ours of namespace `ns`; else 0. */
static pid_t owner_pid(const char *name, unsigned long ns)
{
    if (strncmp(name, PREFIX, sizeof PREFIX - 1))
        return 0;
    char *end;
    unsigned long n = strtoul(name + sizeof PREFIX - 1, &end, 10);
    if (n != ns || *end != '-')
        return 0;
    long pid = strtol(end + 1, &end, 10);
    return *end == '-' && pid > 0 ? (pid_t)pid : 0;
}

/* What the stamp says: which server's tree for which tray. */
int privdir_stamp(char *buf, size_t n)
{
    return snprintf(buf, n, "%s\n%s\n%s:%s\n", server_name, tray_name, remote_host,
                    remote_port);
}

/* Removes the directories in `tmp` of this user and pid namespace whose process is
 * gone (one that ended without its destructor). */
static void sweep(const char *tmp, unsigned long ns)
{
    DIR *d = NEXT(opendir)(tmp);
    char path[PATH_MAX];
    for (struct dirent *e; d && (e = NEXT(readdir)(d));) {
        pid_t pid = owner_pid(e->d_name, ns);
        struct stat st;
        if (!pid || kill(pid, 0) == 0 || errno != ESRCH ||
            NEXT(fstatat)(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) ||
            !S_ISDIR(st.st_mode) || st.st_uid != geteuid())
            continue;
        if (snprintf(path, sizeof path, "%s/%s", tmp, e->d_name) < (int)sizeof path)
            nftw(path, drop, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
    }
    if (d)
        NEXT(closedir)(d);
}

/* Takes over the directory at `root`, made by another process (an ancestor's this
 * process took, or a forked child's parent's): tree.c keeps the first root it was
 * given, so a refresh goes there.  Rewritten in place while it is there and this
 * user's; made again, this process's now (*fresh), when its maker removed it.  0, or
 * -1 with errno. */
static int take_over(int *fresh)
{
    struct stat st;
    if (mkdir(root, 0700) == 0) {
        root_pid = getpid();
        *fresh = 1;
        return 0;
    }
    if (errno != EEXIST)
        return -1;
    if (NEXT(lstat)(root, &st) || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
        (st.st_mode & 07777) != 0700)
        return errno = EACCES, -1;
    return 0;
}

/* Locks the process's directory (privdir_end unlocks) and opens it, made now (swept
 * and made: *fresh) when the process has none; its path into `path` (PATH_MAX bytes).
 * The descriptor, or -1 with errno and `text` (unlocked). */
int privdir_begin(char *path, int *fresh, char *text)
{
    int err = 0;
    pthread_mutex_lock(&lock);
    int none = !root[0];
    *fresh = none;
    if (!none && root_pid != getpid() && take_over(fresh)) {
        err = errno;
        snprintf(text, FL_TEXT_MAX, "cannot keep the tray's tree in %.1024s: %s", root,
                 strerror(err));
    }
    if (none) {
        const char *tmp = tmp_dir();
        unsigned long ns = pid_ns();
        sweep(tmp, ns);
        int k = snprintf(root, sizeof root, "%s/" PREFIX "%lu-%d-XXXXXX", tmp, ns,
                         (int)getpid());
        if (k >= PATH_MAX - 256 || !mkdtemp(root)) { /* room for the tree's own paths */
            err = k >= PATH_MAX - 256 ? ENAMETOOLONG : errno;
            snprintf(text, FL_TEXT_MAX,
                     "cannot make a directory for the tray's tree (%.1024s): %s", root,
                     strerror(err));
            root[0] = '\0';
        }
        root_pid = getpid();
    }
    int top = err ? -1 : NEXT(open)(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (top < 0 && !err) {
        err = errno;
        snprintf(text, FL_TEXT_MAX, "cannot open the tray's tree %.1024s: %s", root,
                 strerror(err));
    }
    if (top < 0) {
        pthread_mutex_unlock(&lock);
        return errno = err, -1;
    }
    memcpy(path, root, strlen(root) + 1);
    return top;
}

void privdir_end(void) { pthread_mutex_unlock(&lock); }

/* Whether `fd` is a directory of this user's (0700) whose stamp says `want` (n bytes)
 * and is younger than INHERIT_S. */
static int inheritable(int fd, const char *want, int n)
{
    struct stat st;
    struct timespec now;
    char got[512];
    clock_gettime(CLOCK_REALTIME, &now);
    if (fstat(fd, &st) || st.st_uid != geteuid() || (st.st_mode & 07777) != 0700)
        return 0;
    int sf = NEXT(openat)(fd, FL_STAMP, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    int ok = sf >= 0 && fstat(sf, &st) == 0 && S_ISREG(st.st_mode) &&
             st.st_uid == geteuid() && now.tv_sec >= st.st_mtim.tv_sec &&
             now.tv_sec - st.st_mtim.tv_sec < INHERIT_S &&
             NEXT(read)(sf, got, sizeof got) == n && !memcmp(got, want, (size_t)n);
    if (sf >= 0)
        NEXT(close)(sf);
    return ok;
}

/* This process's parent, grandparent ... (ANCESTORS of them) into `pids`; how many. */
static int ancestors(pid_t *pids)
{
    int k = 0;
    pid_t pid = getppid();
    while (pid > 1 && k < ANCESTORS) {
        pids[k++] = pid;
        char path[64], stat[512];
        snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
        int fd = NEXT(open)(path, O_RDONLY | O_CLOEXEC);
        ssize_t n = fd < 0 ? -1 : NEXT(read)(fd, stat, sizeof stat - 1);
        if (fd >= 0)
            NEXT(close)(fd);
        stat[n > 0 ? n : 0] = '\0';
        const char *end = strrchr(stat, ')'); /* pid (comm) state ppid ... (proc(5)) */
        int ppid = 0;
        if (!end || sscanf(end + 1, " %*c %d", &ppid) != 1)
            break;
        pid = ppid;
    }
    return k;
}

/* The tree an ancestor of this process fetched from the same server for the same tray
 * a moment ago, taken as this process's (not to rewrite or remove); 0 with its
 * directory in `text`, or -1. */
int inherit_tree(char *text)
{
    char want[512], path[PATH_MAX];
    pid_t pids[ANCESTORS];
    int n = privdir_stamp(want, sizeof want), r = -1, k = ancestors(pids);
    unsigned long ns = pid_ns();
    const char *tmp = tmp_dir();
    DIR *d = k && n > 0 && n < (int)sizeof want ? NEXT(opendir)(tmp) : NULL;
    for (struct dirent *e; r && d && (e = NEXT(readdir)(d));) {
        pid_t pid = owner_pid(e->d_name, ns);
        int i = 0;
        while (pid && i < k && pids[i] != pid)
            i++;
        if (!pid || i == k)
            continue;
        int fd = NEXT(openat)(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
                                                       O_CLOEXEC);
        int len = snprintf(path, sizeof path, "%s/%s", tmp, e->d_name);
        if (fd >= 0 && len < PATH_MAX - 256 && inheritable(fd, want, n)) {
            pthread_mutex_lock(&lock);
            if (!root[0]) {
                memcpy(root, path, (size_t)len + 1);
                root_pid = -1;
                memcpy(text, path, (size_t)len + 1);
                r = 0;
            }
            pthread_mutex_unlock(&lock);
        }
        if (fd >= 0)
            NEXT(close)(fd);
    }
    if (d)
        NEXT(closedir)(d);
    return r;
}
