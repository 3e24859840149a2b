/* fabriclab's host library: the open family (open, openat, their 64-bit and fortified
 * variants) for the umad and issm devices, each a connection to the fabric server put
 * in the fd table (slots.c, where close is), or for a path rewritten into the tray's
 * tree. */
#include "hostlib.h"

#include <sys/timerfd.h>

#define ISSM_RETRY_NS 200000000L /* a blocking issm open retries this often */

static void close_timer(int *t)
{
    int err = errno;
    if (*t >= 0)
        NEXT(close)(*t);
    errno = err;
}

/* Waits ISSM_RETRY_NS before an issm open tries again, as interruptible as the kernel's
 * wait for the SM's semaphore (user_mad.c ib_umad_sm_open: down_interruptible, then
 * -ERESTARTSYS): a signal whose handler has SA_RESTART goes on waiting, one without it
 * ends the open with EINTR.  A blocking read of a timerfd (`*timer`, made on first use)
 * is restarted or interrupted exactly so (fs/timerfd.c timerfd_read; signal(7));
 * nanosleep would be EINTR for both.  0, or -1 with errno EINTR. */
static int issm_wait(int *timer)
{
    struct itimerspec it = {{0, 0}, {0, ISSM_RETRY_NS}};
    uint64_t ticks;
    if (*timer < 0)
        *timer = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
    if (*timer < 0 || timerfd_settime(*timer, 0, &it, NULL) < 0) {
        struct timespec ts = {0, ISSM_RETRY_NS}; /* no timerfd: not interruptible */
        nanosleep(&ts, NULL);
        return 0;
    }
    return NEXT(read)(*timer, &ticks, sizeof ticks) < 0 && errno == EINTR ? -1 : 0;
}

/* Whether `path` is /dev/infiniband/umad<N> or issm<N>: its kind, N in *index; else 0.
 * A path written another way ("//dev", "/dev/./infiniband", "infiniband/umad0" from
 * /dev) is resolved by name first. */
int dev_kind(const char *path, unsigned *index)
{
    static const char dev[] = "/dev/infiniband/";
    if (!path)
        return 0;
    char norm[PATH_MAX];
    if ((path[0] != '/' || strstr(path, "//") || strstr(path, "/.")) &&
        strstr(path, "infiniband/") && active() && !lexical_path(AT_FDCWD, path, norm))
        path = norm;
    if (path[0] != '/' || path[1] != 'd' || strncmp(path, dev, sizeof dev - 1))
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
 * ib_umad_sm_open): a connection to the server; an issm held by another waits (a
 * signal may end the wait: issm_wait), or is EAGAIN under O_NONBLOCK.  The fd, or -1
 * with errno. */
static int dev_open(int kind, unsigned index, int flags)
{
    char text[FL_TEXT_MAX + 1];
    uint32_t token = 0;
    int s, timer __attribute__((cleanup(close_timer))) = -1;
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
        if (issm_wait(&timer) < 0)
            return -1; /* EINTR */
    }
    if (flags & O_NONBLOCK)
        fcntl(s, F_SETFL, fcntl(s, F_GETFL) | O_NONBLOCK);
    if (ufd_open(s, kind, token) < 0) {
        int err = errno;
        NEXT(close)(s);
        errno = err;
        return -1;
    }
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
    OPEN_BODY(openat, dirfd, sys_path_at(dirfd, path, buf), flags, mode);
}

int openat64(int dirfd, const char *path, int flags, ...)
{
    mode_t mode = 0;
    MODE_ARG(flags, mode);
    OPEN_BODY(openat64, dirfd, sys_path_at(dirfd, path, buf), flags, mode);
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
    OPEN_BODY(__openat_2, dirfd, sys_path_at(dirfd, path, buf), flags);
}
int __openat64_2(int dirfd, const char *path, int flags)
{
    OPEN_BODY(__openat64_2, dirfd, sys_path_at(dirfd, path, buf), flags);
}
