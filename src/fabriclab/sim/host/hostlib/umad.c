/* fabriclab's host library: preloaded (LD_PRELOAD) into a libibumad program on an
 * emulated tray, it makes the process see the tray's HCAs as a host does.
 *
 * - /sys/class/infiniband and /sys/class/infiniband_mad are the tray's tree, written by
 *   the fabric server (sim/sysfs.py) under a root it names once per process (TREE).
 * - gethostname() is the tray's name.
 * - /dev/infiniband/umad<N> is a SOCK_SEQPACKET connection to the server carrying
 *   ib_user_mad frames, with the kernel's ioctl, read, write and poll semantics
 *   (Linux drivers/infiniband/core/user_mad.c, mad.c); /dev/infiniband/issm<N> is a
 *   connection held open.
 *
 * The protocol is fabriclab.ib.hostwire (hostwire.h).  Environment: FABRICLAB_SOCKNAME
 * (the fabric server's name; unset: everything passes through untouched) and
 * FABRICLAB_TRAY (the tray's host name).  Every process under the preload loads this
 * (dash, cat, python), so nothing happens at load time: configuration is read on the
 * first path or file that may be ours, and libc's functions are looked up lazily.
 *
 * Which calls are wrapped follows what libibumad 44 and 56, the infiniband-diags tools,
 * OpenSM's vendor layer, dash and cat call (the research note's table; libibumad's
 * sysfs.c and umad.c). */
#undef _FORTIFY_SOURCE
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "hostwire.h"

#define WAIT_MS 5000        /* how long the server may take to answer a HELLO */
#define SEND_WAIT_MS 10000  /* how long a write waits for room before it fails */
#define ISSM_RETRY_NS 200000000L /* a blocking issm open retries this often */
#define FD_LIMIT 65536      /* umad and issm fds are looked up in an array this long */
#define NO_TREE "/proc/self/fabriclab-no-tree" /* where paths go when there is no tree */

/* libc's own function `name`, looked up on first use (dlsym RTLD_NEXT); one cached
 * pointer per call site. */
#define NEXT(name)                                                             \
    ({                                                                         \
        static void *slot_;                                                    \
        (__typeof__(&name))next_symbol(&slot_, #name);                         \
    })

static void *next_symbol(void **slot, const char *name)
{
    void *f = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (!f) {
        f = dlsym(RTLD_NEXT, name);
        if (!f) {
            fprintf(stderr, "fabriclab: libc has no %s\n", name);
            abort();
        }
        __atomic_store_n(slot, f, __ATOMIC_RELEASE);
    }
    return f;
}

/* --- configuration and messages -------------------------------------------------- */

static pthread_once_t config_once = PTHREAD_ONCE_INIT;
static const char *server_name;  /* FABRICLAB_SOCKNAME; NULL: pass everything through */
static const char *tray_name;     /* FABRICLAB_TRAY */
static struct sockaddr_un server_addr;
static socklen_t server_len;      /* 0: the name does not fit an address */
static int said_failure, said_gone; /* each message is printed once per process */

/* Reads the environment and builds the server's address as ibsim's make_name does
 * (fabriclab.ib.simwire.sockname): a NUL, "name:host", and the terminating NUL counted
 * in the length. */
static void config_init(void)
{
    server_name = getenv("FABRICLAB_SOCKNAME");
    if (server_name && !*server_name)
        server_name = NULL;
    tray_name = getenv("FABRICLAB_TRAY");
    if (!tray_name)
        tray_name = "";
    if (!server_name)
        return;
    server_addr.sun_family = AF_UNIX;
    int n = snprintf(server_addr.sun_path + 1, sizeof server_addr.sun_path - 1, "%s:%s",
                     server_name, FL_SOCKET_KIND);
    if (n > 0 && (size_t)n + 2 <= sizeof server_addr.sun_path)
        server_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n + 1);
}

/* Whether this process talks to a fabric server at all. */
static int active(void)
{
    pthread_once(&config_once, config_init);
    return server_name != NULL;
}

/* One line "fabriclab: <text>" on stderr, the first time `flag` is used. */
static void say_once(int *flag, const char *text)
{
    if (__atomic_exchange_n(flag, 1, __ATOMIC_ACQ_REL))
        return;
    char line[FL_TEXT_MAX + 32];
    int n = snprintf(line, sizeof line, "fabriclab: %s\n", text);
    if (n > (int)sizeof line - 1)
        n = sizeof line - 1;
    ssize_t w = NEXT(write)(2, line, (size_t)n);
    (void)w;
}

/* The server closed a umad connection: say so once, and fail the call with ENOTCONN. */
static int server_gone(void)
{
    char text[256];
    snprintf(text, sizeof text, "the fabric server '%s' went away", server_name);
    say_once(&said_gone, text);
    errno = ENOTCONN;
    return -1;
}

/* --- connections to the server ---------------------------------------------------- */

/* Opens a connection of `kind` and says HELLO (index, token, then `extra` in the same
 * frame, as hostlink.py reads a REGISTER); waits at most WAIT_MS for the REPLY.  The
 * connected, blocking socket, or -1 with errno and what went wrong in `text` (the
 * server's own line when it refused).  REPLY's token goes to *token. */
static int hello(int kind, unsigned index, uint32_t *token, const void *extra, size_t n,
                 int cloexec, char *text)
{
    if (!server_len) {
        snprintf(text, FL_TEXT_MAX, "FABRICLAB_SOCKNAME '%s' is too long", server_name);
        errno = ENAMETOOLONG;
        return -1;
    }
    if (strlen(tray_name) >= FL_TRAY_MAX) {
        snprintf(text, FL_TEXT_MAX, "FABRICLAB_TRAY '%s' is longer than %d bytes", tray_name,
                 FL_TRAY_MAX - 1);
        errno = EINVAL;
        return -1;
    }
    int s = socket(AF_UNIX, SOCK_SEQPACKET | (cloexec ? SOCK_CLOEXEC : 0), 0);
    if (s < 0) {
        snprintf(text, FL_TEXT_MAX, "cannot make a socket: %s", strerror(errno));
        return -1;
    }
    unsigned char frame[FL_HELLO_SIZE + UMAD_REG_REQ2_SIZE] = {0};
    struct fl_hello *h = (struct fl_hello *)frame;
    h->magic = FL_MAGIC;
    h->version = FL_VERSION;
    h->kind = (uint16_t)kind;
    h->pid = (uint32_t)getpid();
    h->index = index;
    h->token = *token;
    memcpy(h->tray, tray_name, strlen(tray_name));
    if (n > sizeof frame - FL_HELLO_SIZE)
        n = sizeof frame - FL_HELLO_SIZE;
    if (n)
        memcpy(frame + FL_HELLO_SIZE, extra, n);
    unsigned char reply[FL_REPLY_SIZE + FL_TEXT_MAX];
    struct pollfd pf = {s, POLLIN, 0};
    ssize_t got;
    int err;
    if (connect(s, (struct sockaddr *)&server_addr, server_len) < 0) {
        err = errno;
        snprintf(text, FL_TEXT_MAX, "cannot reach the fabric server '%s': %s", server_name,
                 strerror(err));
    } else if (send(s, frame, FL_HELLO_SIZE + n, MSG_NOSIGNAL) < 0) {
        err = errno;
        snprintf(text, FL_TEXT_MAX, "the fabric server '%s' hung up: %s", server_name,
                 strerror(err));
    } else if (NEXT(poll)(&pf, 1, WAIT_MS) <= 0) {
        err = ETIMEDOUT;
        snprintf(text, FL_TEXT_MAX, "the fabric server '%s' did not answer", server_name);
    } else if ((got = recv(s, reply, sizeof reply, 0)) < FL_REPLY_SIZE ||
               ((struct fl_reply *)reply)->magic != FL_MAGIC) {
        err = got < 0 ? errno : EPROTO;
        snprintf(text, FL_TEXT_MAX, "the fabric server '%s' hung up without an answer",
                 server_name);
    } else {
        struct fl_reply *r = (struct fl_reply *)reply;
        size_t len = (size_t)got - FL_REPLY_SIZE;
        memcpy(text, reply + FL_REPLY_SIZE, len);
        text[len] = '\0';
        *token = r->token;
        if (!r->err)
            return s;
        err = r->err;
        if (!len)
            snprintf(text, FL_TEXT_MAX, "the fabric server refused: %s", strerror(err));
    }
    NEXT(close)(s);
    errno = err;
    return -1;
}

/* The tray's host name, for a process on it (ibping -S answers a ping with it); the
 * machine's when not served. */
int gethostname(char *name, size_t len)
{
    if (!active() || !*tray_name)
        return NEXT(gethostname)(name, len);
    size_t n = strlen(tray_name) + 1;
    if (n > len) /* glibc's gethostname: ENAMETOOLONG when it does not fit */
        return errno = ENAMETOOLONG, -1;
    memcpy(name, tray_name, n);
    return 0;
}

/* --- /sys/class/infiniband: the tray's tree ---------------------------------------- */

static pthread_once_t tree_once = PTHREAD_ONCE_INIT;
static char tree_root[PATH_MAX]; /* holds class/infiniband; NO_TREE when there is none */

/* Asks the server once where the tray's tree is (a TREE round trip). */
static void tree_init(void)
{
    char text[FL_TEXT_MAX + 1];
    uint32_t token = 0;
    int s = hello(FL_KIND_TREE, 0, &token, NULL, 0, 1, text);
    size_t n = s < 0 ? 0 : strlen(text);
    while (n && (text[n - 1] == '\n' || text[n - 1] == '/'))
        text[--n] = '\0';
    if (s >= 0)
        NEXT(close)(s);
    if (s >= 0 && n && text[0] == '/' && n < sizeof tree_root - 64) {
        memcpy(tree_root, text, n + 1);
        return;
    }
    if (s >= 0)
        snprintf(text, sizeof text, "the fabric server '%s' named no tree for '%s'",
                 server_name, tray_name);
    say_once(&said_failure, text);
    strcpy(tree_root, NO_TREE);
}

/* Where `path` really is: for /sys/class/infiniband[_mad][/...] the same path in the
 * tray's tree (written into buf, PATH_MAX bytes), anything else unchanged.  The first
 * test rejects nearly every other path at its second byte. */
static const char *sys_path(const char *path, char *buf)
{
    static const char prefix[] = "/sys/class/infiniband";
    const size_t n = sizeof prefix - 1;
    if (!path || path[0] != '/' || path[1] != 's' || strncmp(path, prefix, n) != 0)
        return path;
    const char *rest = path + n;
    if (!strncmp(rest, "_mad", 4))
        rest += 4;
    if (*rest != '\0' && *rest != '/')
        return path;
    if (!active())
        return path;
    pthread_once(&tree_once, tree_init);
    if (snprintf(buf, PATH_MAX, "%s%s", tree_root, path + 4) >= PATH_MAX)
        snprintf(buf, PATH_MAX, "%s", NO_TREE);
    return buf;
}

/* --- open umad and issm files ------------------------------------------------------- */

/* One open umad or issm file: the socket's state beyond what the kernel socket keeps. */
struct ufd {
    int kind;                 /* FL_KIND_UMAD or FL_KIND_ISSM */
    uint32_t token;           /* the server's id of this connection */
    pthread_mutex_t lock;     /* the agents and already_used */
    pthread_mutex_t rlock;    /* the receive state (msg ...) */
    pthread_mutex_t wlock;    /* a long message's frames go out together */
    struct {
        uint8_t used, told, kernel_rmpp;
    } agent[UMAD_MAX_AGENTS];
    int already_used;         /* an agent was registered: ENABLE_PKEY is EINVAL */
    uint8_t *msg;             /* a message being reassembled, or waiting (ENOSPC) */
    size_t msg_len, msg_have;
    int ready;                /* msg is whole: the fd reads at once */
    uint8_t *scratch;         /* FL_FRAME_MAX bytes: a frame beyond the reader's count */
};

static struct ufd *ufds[FD_LIMIT];
static int ufd_count; /* how many are open: 0 lets every fd call pass at once */

/* The umad or issm file behind `fd`, or NULL (O(1), no lock). */
static inline struct ufd *lookup(int fd)
{
    if (__builtin_expect(!__atomic_load_n(&ufd_count, __ATOMIC_RELAXED), 1))
        return NULL;
    if ((unsigned)fd >= FD_LIMIT)
        return NULL;
    return __atomic_load_n(&ufds[fd], __ATOMIC_ACQUIRE);
}

/* Whether `path` is /dev/infiniband/umad<N> or issm<N>: its kind, N in *index; else 0. */
static int dev_kind(const char *path, unsigned *index)
{
    static const char dev[] = "/dev/infiniband/";
    if (!path || path[0] != '/' || path[1] != 'd' || strncmp(path, dev, sizeof dev - 1))
        return 0;
    const char *name = path + sizeof dev - 1;
    int kind = !strncmp(name, "umad", 4) ? FL_KIND_UMAD
               : !strncmp(name, "issm", 4) ? FL_KIND_ISSM
                                           : 0;
    if (!kind || name[4] < '0' || name[4] > '9' || !active())
        return 0;
    char *end;
    unsigned long n = strtoul(name + 4, &end, 10);
    if (*end || n > 0xFFFF)
        return 0;
    *index = (unsigned)n;
    return kind;
}

/* Opens umad<index> or issm<index> as the kernel would (user_mad.c ib_umad_open,
 * ib_umad_sm_open): a connection to the server; an issm held by another waits, or is
 * EAGAIN under O_NONBLOCK.  The fd, or -1 with errno. */
static int dev_open(int kind, unsigned index, int flags)
{
    char text[FL_TEXT_MAX + 1];
    uint32_t token = 0;
    int s;
    while ((s = hello(kind, index, &token, NULL, 0, flags & O_CLOEXEC, text)) < 0) {
        int err = errno;
        if (kind != FL_KIND_ISSM || err != EBUSY) {
            say_once(&said_failure, text);
            errno = err;
            return -1;
        }
        if (flags & O_NONBLOCK) {
            errno = EAGAIN;
            return -1;
        }
        struct timespec ts = {0, ISSM_RETRY_NS};
        nanosleep(&ts, NULL);
    }
    struct ufd *u = calloc(1, sizeof *u);
    if (s >= FD_LIMIT || !u) {
        NEXT(close)(s);
        free(u);
        errno = u ? EMFILE : ENOMEM;
        return -1;
    }
    if (flags & O_NONBLOCK)
        fcntl(s, F_SETFL, fcntl(s, F_GETFL) | O_NONBLOCK);
    u->kind = kind;
    u->token = token;
    pthread_mutex_init(&u->lock, NULL);
    pthread_mutex_init(&u->rlock, NULL);
    pthread_mutex_init(&u->wlock, NULL);
    __atomic_store_n(&ufds[s], u, __ATOMIC_RELEASE);
    __atomic_add_fetch(&ufd_count, 1, __ATOMIC_RELEASE);
    return s;
}

/* Whether open's flags carry a mode argument (glibc fcntl.h __OPEN_NEEDS_MODE). */
#define NEEDS_MODE(flags) (((flags) & O_CREAT) || ((flags) & O_TMPFILE) == O_TMPFILE)
#define MODE_ARG(flags, mode)                                                  \
    do {                                                                       \
        if (NEEDS_MODE(flags)) {                                               \
            va_list ap;                                                        \
            va_start(ap, flags);                                               \
            mode = va_arg(ap, mode_t);                                         \
            va_end(ap);                                                        \
        }                                                                      \
    } while (0)

/* open and its relatives: a umad/issm device, a path of the tray's tree, or libc's. */
#define OPEN_BODY(real, ...)                                                   \
    do {                                                                       \
        unsigned index;                                                        \
        int kind = dev_kind(path, &index);                                     \
        if (kind)                                                              \
            return dev_open(kind, index, flags);                               \
        char buf[PATH_MAX];                                                    \
        return NEXT(real)(__VA_ARGS__);                                        \
    } while (0)

int open(const char *path, int flags, ...)
{
    mode_t mode = 0;
    MODE_ARG(flags, mode);
    OPEN_BODY(open, sys_path(path, buf), flags, mode);
}

int open64(const char *path, int flags, ...)
{
    mode_t mode = 0;
    MODE_ARG(flags, mode);
    OPEN_BODY(open64, sys_path(path, buf), flags, mode);
}

int openat(int dirfd, const char *path, int flags, ...)
{
    mode_t mode = 0;
    MODE_ARG(flags, mode);
    OPEN_BODY(openat, dirfd, sys_path(path, buf), flags, mode);
}

int openat64(int dirfd, const char *path, int flags, ...)
{
    mode_t mode = 0;
    MODE_ARG(flags, mode);
    OPEN_BODY(openat64, dirfd, sys_path(path, buf), flags, mode);
}

/* The fortified entry points (glibc io/open_2.c and friends): open without a mode. */
int __open_2(const char *path, int flags);
int __open64_2(const char *path, int flags);
int __openat_2(int dirfd, const char *path, int flags);
int __openat64_2(int dirfd, const char *path, int flags);

int __open_2(const char *path, int flags) { OPEN_BODY(__open_2, sys_path(path, buf), flags); }
int __open64_2(const char *path, int flags)
{
    OPEN_BODY(__open64_2, sys_path(path, buf), flags);
}
int __openat_2(int dirfd, const char *path, int flags)
{
    OPEN_BODY(__openat_2, dirfd, sys_path(path, buf), flags);
}
int __openat64_2(int dirfd, const char *path, int flags)
{
    OPEN_BODY(__openat64_2, dirfd, sys_path(path, buf), flags);
}

/* --- the other path calls: rewritten, then libc's ---------------------------------- */

/* Defines `ret name(params)` calling libc's `name(args)` with the path argument `path`
 * rewritten by sys_path. */
#define PATH_CALL(ret, name, params, ...)                                      \
    ret name params                                                            \
    {                                                                          \
        char buf[PATH_MAX];                                                    \
        path = sys_path(path, buf);                                            \
        return NEXT(name)(__VA_ARGS__);                                        \
    }

PATH_CALL(FILE *, fopen, (const char *path, const char *mode), path, mode)
PATH_CALL(FILE *, fopen64, (const char *path, const char *mode), path, mode)
PATH_CALL(int, scandir,
          (const char *path, struct dirent ***list, int (*sel)(const struct dirent *),
           int (*cmp)(const struct dirent **, const struct dirent **)),
          path, list, sel, cmp)
PATH_CALL(int, scandir64,
          (const char *path, struct dirent64 ***list, int (*sel)(const struct dirent64 *),
           int (*cmp)(const struct dirent64 **, const struct dirent64 **)),
          path, list, sel, cmp)
PATH_CALL(int, stat, (const char *path, struct stat *st), path, st)
PATH_CALL(int, lstat, (const char *path, struct stat *st), path, st)
PATH_CALL(int, stat64, (const char *path, struct stat64 *st), path, st)
PATH_CALL(int, lstat64, (const char *path, struct stat64 *st), path, st)
PATH_CALL(int, fstatat, (int dirfd, const char *path, struct stat *st, int fl), dirfd, path,
          st, fl)
PATH_CALL(int, fstatat64, (int dirfd, const char *path, struct stat64 *st, int fl), dirfd,
          path, st, fl)
PATH_CALL(int, statx,
          (int dirfd, const char *path, int fl, unsigned int mask, struct statx *st), dirfd,
          path, fl, mask, st)
PATH_CALL(int, access, (const char *path, int mode), path, mode)
PATH_CALL(int, faccessat, (int dirfd, const char *path, int mode, int fl), dirfd, path, mode,
          fl)
PATH_CALL(int, chdir, (const char *path), path)
PATH_CALL(ssize_t, readlink, (const char *path, char *out, size_t n), path, out, n)
PATH_CALL(ssize_t, readlinkat, (int dirfd, const char *path, char *out, size_t n), dirfd,
          path, out, n)

/* glibc before 2.33 compiled stat() into calls of these (still exported for old
 * binaries); on x86-64 their struct is the kernel's, so they are stat() and friends. */
#define XSTAT(name, call, ...)                                                   \
    int name(int ver, __VA_ARGS__);                                            \
    int name(int ver, __VA_ARGS__)                                             \
    {                                                                          \
        (void)ver;                                                             \
        return call;                                                           \
    }
XSTAT(__xstat, fstatat(AT_FDCWD, path, st, 0), const char *path, struct stat *st)
XSTAT(__lxstat, fstatat(AT_FDCWD, path, st, AT_SYMLINK_NOFOLLOW), const char *path,
      struct stat *st)
XSTAT(__xstat64, fstatat64(AT_FDCWD, path, st, 0), const char *path, struct stat64 *st)
XSTAT(__lxstat64, fstatat64(AT_FDCWD, path, st, AT_SYMLINK_NOFOLLOW), const char *path,
      struct stat64 *st)
XSTAT(__fxstatat, fstatat(dirfd, path, st, fl), int dirfd, const char *path,
      struct stat *st, int fl)
XSTAT(__fxstatat64, fstatat64(dirfd, path, st, fl), int dirfd, const char *path,
      struct stat64 *st, int fl)

/* --- directories of the tree, listed in the kernel's order ------------------------- */

/* sysfs lists a directory in kernfs order (fs/kernfs/dir.c: children sorted by
 * kernfs_name_hash, then name; "." and ".." first), not the tree's file system's.  It
 * matters: libibumad's default CA (umad.c resolve_ca_name) is the first one readdir
 * gives with an active port, which on a host is mlx5_0. */
static unsigned kernfs_hash(const char *name)
{
    uint64_t h = 0; /* init_name_hash(NULL), partial_name_hash, end_name_hash */
    for (; *name; name++)
        h = (h + ((uint64_t)(unsigned char)*name << 4) + ((unsigned char)*name >> 4)) * 11;
    unsigned x = (unsigned)((h * 0x61C8864680B583EBull) >> 32) & 0x7FFFFFFFu; /* hash_long */
    return x < 2 ? x + 2 : x >= INT_MAX ? INT_MAX - 1 : x;
}

/* qsort order of two entries: dots first, then kernfs order. */
static int kernfs_cmp(const void *a, const void *b)
{
    const char *x = (*(struct dirent64 *const *)a)->d_name;
    const char *y = (*(struct dirent64 *const *)b)->d_name;
    int dx = !strcmp(x, ".") ? 0 : !strcmp(x, "..") ? 1 : 2;
    int dy = !strcmp(y, ".") ? 0 : !strcmp(y, "..") ? 1 : 2;
    if (dx != dy || dx < 2)
        return dx - dy;
    unsigned hx = kernfs_hash(x), hy = kernfs_hash(y);
    return hx != hy ? (hx < hy ? -1 : 1) : strcmp(x, y);
}

/* An open directory of the tree: its entries, read at opendir and sorted. */
struct sdir {
    DIR *dir;
    struct dirent64 **ents;
    size_t n, at;
    struct sdir *next;
};
static struct sdir *sdirs;
static int sdir_count; /* 0: readdir passes at once */
static pthread_mutex_t sdir_lock = PTHREAD_MUTEX_INITIALIZER;

DIR *opendir(const char *path)
{
    char buf[PATH_MAX];
    const char *real = sys_path(path, buf);
    DIR *dir = NEXT(opendir)(real);
    struct sdir *d = dir && real != path ? calloc(1, sizeof *d) : NULL;
    if (!d)
        return dir;
    d->dir = dir;
    for (struct dirent64 *e; (e = NEXT(readdir64)(dir));) {
        struct dirent64 **more = realloc(d->ents, (d->n + 1) * sizeof *more);
        struct dirent64 *copy = more ? malloc(e->d_reclen) : NULL;
        if (!copy)
            break; /* out of memory: the entries so far */
        d->ents = more;
        d->ents[d->n++] = memcpy(copy, e, e->d_reclen);
    }
    qsort(d->ents, d->n, sizeof *d->ents, kernfs_cmp);
    pthread_mutex_lock(&sdir_lock);
    d->next = sdirs;
    sdirs = d;
    __atomic_add_fetch(&sdir_count, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&sdir_lock);
    return dir;
}

/* The next entry of `dir` if it is the tree's (1, in *out), else 0. */
static int sdir_next(DIR *dir, struct dirent64 **out)
{
    if (!__atomic_load_n(&sdir_count, __ATOMIC_ACQUIRE))
        return 0;
    pthread_mutex_lock(&sdir_lock);
    struct sdir *d = sdirs;
    while (d && d->dir != dir)
        d = d->next;
    if (d)
        *out = d->at < d->n ? d->ents[d->at++] : NULL;
    pthread_mutex_unlock(&sdir_lock);
    return d != NULL;
}

/* struct dirent and dirent64 are the same on x86-64 (LP64). */
struct dirent *readdir(DIR *dir)
{
    struct dirent64 *e;
    return sdir_next(dir, &e) ? (struct dirent *)e : NEXT(readdir)(dir);
}

struct dirent64 *readdir64(DIR *dir)
{
    struct dirent64 *e;
    return sdir_next(dir, &e) ? e : NEXT(readdir64)(dir);
}

int closedir(DIR *dir)
{
    if (__atomic_load_n(&sdir_count, __ATOMIC_ACQUIRE)) {
        pthread_mutex_lock(&sdir_lock);
        struct sdir **p = &sdirs;
        while (*p && (*p)->dir != dir)
            p = &(*p)->next;
        struct sdir *d = *p;
        if (d) {
            *p = d->next;
            __atomic_sub_fetch(&sdir_count, 1, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&sdir_lock);
        if (d) {
            for (size_t i = 0; i < d->n; i++)
                free(d->ents[i]);
            free(d->ents);
            free(d);
        }
    }
    return NEXT(closedir)(dir);
}

/* --- ioctl: agent registration (user_mad.c ib_umad_reg_agent[2], mad.c) ------------- */

/* Whether MAD class `c` is one the kernel segments with RMPP (ib_is_mad_class_rmpp). */
static int rmpp_class(uint8_t c)
{
    return c == 0x03 || c == 0x06 || c == 0x10 || c == 0x12 || (c >= 0x30 && c <= 0x4F);
}

/* The kernel's checks of a registration (user_mad.c, then mad.c ib_register_mad_agent):
 * 0 or an errno. */
static int reg_check(const struct umad_reg_req2 *r)
{
    uint8_t c = r->mgmt_class;
    if (r->rmpp_version && r->rmpp_version != 1) /* IB_MGMT_RMPP_VERSION */
        return EINVAL;
    if (!c) /* no class: a send-only agent */
        return (r->flags & UMAD_USER_RMPP) ? EINVAL : 0;
    if (r->mgmt_class_version >= UMAD_MAX_CLASS_VERSION)
        return EINVAL;
    if (c >= 0x50 && c != 0x81) /* MAX_MGMT_CLASS; only directed route beyond it */
        return EINVAL;
    if (c >= 0x30 && c <= 0x4F && !r->oui) /* vendor range 2 needs an OUI */
        return EINVAL;
    if (!rmpp_class(c) && r->rmpp_version)
        return EINVAL;
    int smi = c == 0x01 || c == 0x81;
    return smi == (r->qpn == 0) ? 0 : EINVAL; /* SMI classes on QP0 only, GSI never */
}

/* Registers agent `r` on `u`: a free slot (0..31), and for a class with methods the
 * server told on a connection of its own (OpenSM registers while its receiver thread
 * sits in read on this fd).  The slot, or -1 with errno. */
static int agent_register(struct ufd *u, struct umad_reg_req2 *r)
{
    if (r->qpn != 0 && r->qpn != 1)
        return errno = EINVAL, -1;
    pthread_mutex_lock(&u->lock);
    int id = 0, err = 0;
    while (id < UMAD_MAX_AGENTS && u->agent[id].used)
        id++;
    if (id == UMAD_MAX_AGENTS)
        err = ENOMEM;
    else
        err = reg_check(r);
    int tell = r->mgmt_class && (r->method_mask[0] || r->method_mask[1]);
    if (!err && tell) {
        char text[FL_TEXT_MAX + 1];
        uint32_t token = u->token;
        r->id = (uint32_t)id;
        int s = hello(FL_KIND_REGISTER, 0, &token, r, sizeof *r, 1, text);
        if (s < 0) {
            err = errno;
            if (err != EINVAL) /* EINVAL: a method taken, as the kernel says it */
                say_once(&said_failure, text);
        } else {
            NEXT(close)(s);
        }
    }
    if (!err) {
        u->agent[id].used = 1;
        u->agent[id].told = (uint8_t)tell;
        u->agent[id].kernel_rmpp = r->rmpp_version && !(r->flags & UMAD_USER_RMPP);
        u->already_used = 1;
    }
    pthread_mutex_unlock(&u->lock);
    return err ? (errno = err, -1) : id;
}

/* The umad ioctls (user_mad.c ib_umad_ioctl); anything else is ENOTTY. */
static int umad_ioctl(struct ufd *u, unsigned long req, void *arg)
{
    if (u->kind != FL_KIND_UMAD)
        return errno = ENOTTY, -1;
    if (req == UMAD_REGISTER_AGENT || req == UMAD_REGISTER_AGENT2) {
        struct umad_reg_req2 r = {0};
        if (req == UMAD_REGISTER_AGENT) { /* the old request, as REGISTER_AGENT2's */
            struct umad_reg_req old;
            memcpy(&old, arg, sizeof old);
            r.qpn = old.qpn;
            r.mgmt_class = old.mgmt_class;
            r.mgmt_class_version = old.mgmt_class_version;
            r.oui = (uint32_t)old.oui[0] << 16 | old.oui[1] << 8 | old.oui[2];
            r.rmpp_version = old.rmpp_version;
            memcpy(r.method_mask, old.method_mask, sizeof r.method_mask);
        } else {
            memcpy(&r, arg, sizeof r);
            if (r.qpn != 0 && r.qpn != 1)
                return errno = EINVAL, -1;
            if (r.flags & ~(uint32_t)UMAD_USER_RMPP) { /* the flags it knows, written back */
                uint32_t cap = UMAD_USER_RMPP;
                memcpy((char *)arg + offsetof(struct umad_reg_req2, flags), &cap, sizeof cap);
                return errno = EINVAL, -1;
            }
            if (r.oui & 0xFF000000u)
                return errno = EINVAL, -1;
        }
        int id = agent_register(u, &r);
        if (id >= 0)
            memcpy(arg, &id, sizeof(uint32_t));
        return id < 0 ? -1 : 0;
    }
    if (req == UMAD_UNREGISTER_AGENT) {
        uint32_t id;
        memcpy(&id, arg, sizeof id);
        pthread_mutex_lock(&u->lock);
        int known = id < UMAD_MAX_AGENTS && u->agent[id].used;
        if (known && u->agent[id].told) {
            char text[FL_TEXT_MAX + 1];
            uint32_t token = u->token;
            int s = hello(FL_KIND_UNREGISTER, id, &token, NULL, 0, 1, text);
            if (s >= 0)
                NEXT(close)(s);
        }
        if (known)
            memset(&u->agent[id], 0, sizeof u->agent[id]);
        pthread_mutex_unlock(&u->lock);
        return known ? 0 : (errno = EINVAL, -1);
    }
    if (req == UMAD_ENABLE_PKEY) { /* the 64-byte header is the only one served */
        pthread_mutex_lock(&u->lock);
        int used = u->already_used;
        pthread_mutex_unlock(&u->lock);
        return used ? (errno = EINVAL, -1) : 0;
    }
    return errno = ENOTTY, -1;
}

int ioctl(int fd, unsigned long req, ...)
{
    va_list ap;
    va_start(ap, req);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    struct ufd *u = lookup(fd);
    if (!u)
        return NEXT(ioctl)(fd, req, arg);
    return umad_ioctl(u, req, arg);
}

/* --- write: one MAD to the server (user_mad.c ib_umad_write) ------------------------ */

/* Whether a MAD is a response (ib_mad.h ib_response_mad): the R bit, TrapRepress, or a
 * BM MAD with the response bit in its attribute modifier. */
static int is_response(const uint8_t *mad)
{
    return (mad[3] & 0x80) || mad[3] == 0x07 || (mad[1] == 0x05 && (mad[23] & 1));
}

/* Sends one frame, waiting for room (the kernel's write never drops a MAD); 0, or -1
 * with errno. */
static int send_frame(int fd, struct iovec *iov, int n)
{
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};
    for (;;) {
        if (sendmsg(fd, &m, MSG_NOSIGNAL) >= 0)
            return 0;
        if (errno == EPIPE || errno == ECONNRESET || errno == ENOTCONN)
            return server_gone();
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN)
            return -1;
        struct pollfd pf = {fd, POLLOUT, 0};
        if (NEXT(poll)(&pf, 1, SEND_WAIT_MS) == 0)
            return errno = EIO, -1;
    }
}

/* The kernel's checks of a write, the request's TID (hi_tid = the agent), then the
 * message in frames of at most FL_FRAME_MAX (hostwire: the first marked MORE). */
static ssize_t umad_write(struct ufd *u, int fd, const uint8_t *buf, size_t count)
{
    if (u->kind != FL_KIND_UMAD || count < UMAD_MIN_WRITE)
        return errno = EINVAL, -1;
    uint8_t head[UMAD_HDR_SIZE + UMAD_MAD_HDR];
    memcpy(head, buf, sizeof head);
    uint8_t *mad = head + UMAD_HDR_SIZE;
    uint32_t id;
    memcpy(&id, head, sizeof id);
    pthread_mutex_lock(&u->lock);
    int used = id < UMAD_MAX_AGENTS && u->agent[id].used;
    int krmpp = used && u->agent[id].kernel_rmpp;
    pthread_mutex_unlock(&u->lock);
    if (!used)
        return errno = EINVAL, -1;
    /* ib_create_send_mad: only an active RMPP message of a kernel-RMPP agent may be
     * longer than one MAD */
    int rmpp = krmpp && rmpp_class(mad[1]) &&
               (buf[UMAD_HDR_SIZE + UMAD_RMPP_FLAGS_AT] & UMAD_RMPP_ACTIVE);
    if (!rmpp && count > UMAD_HDR_SIZE + UMAD_MAD_SIZE)
        return errno = EINVAL, -1;
    if (!is_response(mad)) { /* TID bits 32-63 = hi_tid (user_mad.c) */
        mad[8] = mad[9] = 0;
        mad[10] = (uint8_t)(id >> 8);
        mad[11] = (uint8_t)id;
    }
    uint32_t status = count > FL_FRAME_MAX ? FL_MORE : 0, length = (uint32_t)count;
    memcpy(head + UMAD_STATUS_AT, &status, 4);
    memcpy(head + UMAD_LENGTH_AT, &length, 4);
    size_t first = count > FL_FRAME_MAX ? FL_FRAME_MAX : count;
    struct iovec iov[2] = {{head, sizeof head},
                           {(void *)(buf + sizeof head), first - sizeof head}};
    pthread_mutex_lock(&u->wlock);
    int r = send_frame(fd, iov, 2);
    for (size_t at = first; !r && at < count; at += FL_FRAME_MAX) {
        size_t n = count - at < FL_FRAME_MAX ? count - at : FL_FRAME_MAX;
        struct iovec piece = {(void *)(buf + at), n};
        r = send_frame(fd, &piece, 1);
    }
    pthread_mutex_unlock(&u->wlock);
    return r < 0 ? -1 : (ssize_t)count;
}

ssize_t write(int fd, const void *buf, size_t count)
{
    struct ufd *u = lookup(fd);
    if (!u)
        return NEXT(write)(fd, buf, count);
    return umad_write(u, fd, buf, count);
}

/* --- read: one message from the server (user_mad.c ib_umad_read) -------------------- */

/* Drops the pending message. */
static void msg_drop(struct ufd *u)
{
    free(u->msg);
    u->msg = NULL;
    u->msg_len = u->msg_have = 0;
    __atomic_store_n(&u->ready, 0, __ATOMIC_RELEASE);
}

/* Hands the whole pending message to a reader with room `count` as copy_recv_mad does:
 * all of it; or, when it is longer than one MAD, the header and first MAD with ENOSPC
 * (hdr.length tells the size: libibumad's umad_recv reallocs and reads again); or
 * EINVAL.  Without room it stays pending, at the head of the queue. */
static ssize_t msg_deliver(struct ufd *u, uint8_t *buf, size_t count)
{
    size_t len = u->msg_len, first = UMAD_HDR_SIZE + UMAD_MAD_SIZE;
    if (len <= count) {
        memcpy(buf, u->msg, len);
        msg_drop(u);
        return (ssize_t)len;
    }
    if (len <= first || count < first)
        return errno = EINVAL, -1;
    memcpy(buf, u->msg, first);
    return errno = ENOSPC, -1;
}

/* Takes a message of `len` bytes whose first `n` came in `buf` (up to `count`) and the
 * scratch buffer as pending; 0, or -1 with errno. */
static int msg_keep(struct ufd *u, const uint8_t *buf, size_t count, size_t n, size_t len)
{
    if (len < n || !(u->msg = malloc(len)))
        return errno = len < n ? EPROTO : ENOMEM, -1;
    size_t head = n < count ? n : count;
    memcpy(u->msg, buf, head);
    memcpy(u->msg + head, u->scratch, n - head);
    u->msg_len = len;
    u->msg_have = n;
    return 0;
}

/* One message: the common case is one recvmsg straight into the caller's buffer (the
 * server fills the header as the kernel's receive path does); the part of a frame past
 * `count` lands in a scratch buffer and makes the message pending. */
static ssize_t umad_read(struct ufd *u, int fd, uint8_t *buf, size_t count)
{
    if (u->kind != FL_KIND_UMAD || count < UMAD_HDR_SIZE)
        return errno = EINVAL, -1;
    pthread_mutex_lock(&u->rlock);
    ssize_t r = -1;
    for (;;) {
        if (u->ready) {
            r = msg_deliver(u, buf, count);
            break;
        }
        ssize_t n;
        if (u->msg) { /* a long message's next piece: the kernel hands out whole messages
                       * only, so wait for it even under O_NONBLOCK (the server sends
                       * the pieces back to back) */
            n = recv(fd, u->msg + u->msg_have, u->msg_len - u->msg_have, 0);
            if (n < 0 && errno == EAGAIN) {
                struct pollfd pf = {fd, POLLIN, 0};
                int p = NEXT(poll)(&pf, 1, WAIT_MS);
                if (p > 0 || (p < 0 && errno == EINTR))
                    continue;
                msg_drop(u);
                errno = EIO;
                break;
            }
            if (n > 0 && (u->msg_have += (size_t)n) == u->msg_len)
                __atomic_store_n(&u->ready, 1, __ATOMIC_RELEASE);
        } else {
            if (!u->scratch && !(u->scratch = malloc(FL_FRAME_MAX))) {
                errno = ENOMEM;
                break;
            }
            struct iovec iov[2] = {{buf, count}, {u->scratch, FL_FRAME_MAX}};
            struct msghdr m = {.msg_iov = iov, .msg_iovlen = 2};
            n = recvmsg(fd, &m, 0);
            if (n > 0 && (size_t)n < UMAD_HDR_SIZE)
                continue; /* not a message: dropped */
            if (n > 0) {
                uint32_t status, length;
                memcpy(&status, buf + UMAD_STATUS_AT, 4);
                memcpy(&length, buf + UMAD_LENGTH_AT, 4);
                if (!(status & FL_MORE) && (size_t)n <= count) {
                    r = n; /* the common case */
                    break;
                }
                if (msg_keep(u, buf, count, (size_t)n, status & FL_MORE ? length : (size_t)n))
                    break;
                status &= ~FL_MORE;
                memcpy(u->msg + UMAD_STATUS_AT, &status, 4);
                if (u->msg_have == u->msg_len)
                    __atomic_store_n(&u->ready, 1, __ATOMIC_RELEASE);
            }
        }
        if (n == 0 || (n < 0 && (errno == ECONNRESET || errno == ENOTCONN))) {
            msg_drop(u);
            server_gone();
            break;
        }
        if (n < 0)
            break; /* EAGAIN, EINTR: the pending state stays */
    }
    pthread_mutex_unlock(&u->rlock);
    return r;
}

ssize_t read(int fd, void *buf, size_t count)
{
    struct ufd *u = lookup(fd);
    if (!u)
        return NEXT(read)(fd, buf, count);
    return umad_read(u, fd, buf, count);
}

/* The fortified read (glibc debug/read_chk.c) reaches libc's read internally. */
ssize_t __read_chk(int fd, void *buf, size_t count, size_t size);
ssize_t __read_chk(int fd, void *buf, size_t count, size_t size)
{
    struct ufd *u = lookup(fd);
    if (!u)
        return NEXT(__read_chk)(fd, buf, count, size);
    if (count > size)
        abort(); /* __chk_fail */
    return umad_read(u, fd, buf, count);
}

/* --- poll: a pending message reads at once ------------------------------------------ */

/* How many of `fds` are umad files with a whole message waiting (POLLIN now). */
static int pending_in(struct pollfd *fds, nfds_t n)
{
    int k = 0;
    for (nfds_t i = 0; i < n; i++) {
        struct ufd *u = lookup(fds[i].fd);
        k += u && __atomic_load_n(&u->ready, __ATOMIC_ACQUIRE) &&
             (fds[i].events & (POLLIN | POLLRDNORM));
    }
    return k;
}

/* After a zero-timeout poll `r`: the pending messages' POLLIN added; the new count. */
static int with_pending(struct pollfd *fds, nfds_t n, int r)
{
    if (r < 0)
        return r;
    int k = 0;
    for (nfds_t i = 0; i < n; i++) {
        struct ufd *u = lookup(fds[i].fd);
        if (u && __atomic_load_n(&u->ready, __ATOMIC_ACQUIRE))
            fds[i].revents |= fds[i].events & (POLLIN | POLLRDNORM);
        k += fds[i].revents != 0;
    }
    return k;
}

int poll(struct pollfd *fds, nfds_t n, int timeout)
{
    if (!__atomic_load_n(&ufd_count, __ATOMIC_RELAXED) || !pending_in(fds, n))
        return NEXT(poll)(fds, n, timeout);
    return with_pending(fds, n, NEXT(poll)(fds, n, 0));
}

int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *t, const sigset_t *mask)
{
    static const struct timespec zero;
    if (!__atomic_load_n(&ufd_count, __ATOMIC_RELAXED) || !pending_in(fds, n))
        return NEXT(ppoll)(fds, n, t, mask);
    return with_pending(fds, n, NEXT(ppoll)(fds, n, &zero, mask));
}

int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t size);
int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t size)
{
    if (n > size / sizeof *fds)
        abort(); /* __chk_fail */
    return poll(fds, n, timeout);
}

/* --- close: the connection ends; the server forgets its agents (and IsSM) ---------- */

int close(int fd)
{
    struct ufd *u = lookup(fd);
    if (u) {
        __atomic_store_n(&ufds[fd], NULL, __ATOMIC_RELEASE);
        __atomic_sub_fetch(&ufd_count, 1, __ATOMIC_RELEASE);
        free(u->msg);
        free(u->scratch);
        free(u);
    }
    return NEXT(close)(fd);
}
