/* fabriclab's host library: the fd table of umad and issm files, kept as the kernel
 * keeps its own (fs/file.c, fs/file_table.c): an fd names a shared file with a
 * reference per fd and per call running on it, so a close in one thread never frees
 * what a read, write, poll or ioctl in another is using; dup, dup2, dup3,
 * fcntl(F_DUPFD[_CLOEXEC]), close, close_range and closefrom change the table as they
 * change the kernel's.  A close the library does not see (fclose(fdopen()), a raw
 * syscall) leaves a stale slot: each use checks the fd is still the file's socket (its
 * st_dev and st_ino, recorded at open) and drops the slot when it is not, so a file that
 * reused the number passes through as itself.
 *
 * The table is read without a lock (a signal handler may read or write any fd): taking
 * a slot's file marks the slot busy while it adds its reference; emptying a slot waits
 * until the slot is not busy before letting go of the file's reference (a signal
 * handler closing the very fd its thread was taking would wait for ever: none does).
 *
 * Left out: a dup numbered FD_LIMIT or more is a bare socket (open refuses such a
 * number with EMFILE); a call still running when its fd closes goes on with the number,
 * as the kernel goes on with the file, so a later system call of the same read (a long
 * message's next piece) reaches whatever the number names by then. */
#include "hostlib.h"

#include <sys/syscall.h>

struct ufd *ufds[FD_LIMIT];
int ufd_count;
static int busy[FD_LIMIT]; /* calls between reading a slot and referencing its file */

/* The file in `fd`'s slot, referenced, or NULL (the slot as it is: not checked). */
static struct ufd *slot_ref(int fd)
{
    __atomic_add_fetch(&busy[fd], 1, __ATOMIC_SEQ_CST);
    struct ufd *u = __atomic_load_n(&ufds[fd], __ATOMIC_SEQ_CST);
    if (u)
        __atomic_add_fetch(&u->refs, 1, __ATOMIC_RELAXED);
    __atomic_sub_fetch(&busy[fd], 1, __ATOMIC_RELEASE);
    return u;
}

/* Waits until no call is between reading `fd`'s slot and referencing what it read
 * (a few instructions: see slot_ref). */
static void slot_quiet(int fd)
{
    while (__atomic_load_n(&busy[fd], __ATOMIC_SEQ_CST))
        sched_yield();
}

/* Puts `u` (referenced anew; NULL: nothing) in `fd`'s slot; what was there lets go. */
static void slot_set(int fd, struct ufd *u)
{
    if (u)
        __atomic_add_fetch(&u->refs, 1, __ATOMIC_RELAXED);
    struct ufd *old = __atomic_exchange_n(&ufds[fd], u, __ATOMIC_SEQ_CST);
    if (!old != !u)
        __atomic_add_fetch(&ufd_count, u ? 1 : -1, __ATOMIC_RELEASE);
    if (old) {
        slot_quiet(fd);
        ufd_put(old);
    }
}

/* Empties `fd`'s slot if it still holds `u` (another thread may have put a new file
 * there since); the slot's reference lets go. */
static void slot_drop(int fd, struct ufd *u)
{
    struct ufd *want = u;
    if (!__atomic_compare_exchange_n(&ufds[fd], &want, NULL, 0, __ATOMIC_SEQ_CST,
                                     __ATOMIC_SEQ_CST))
        return;
    __atomic_sub_fetch(&ufd_count, 1, __ATOMIC_RELEASE);
    slot_quiet(fd);
    ufd_put(u);
}

/* Whether `fd` is still the socket `u` was opened on.  The system call itself: fstat
 * may be another of the library's own wrappers, and is not exported before glibc 2.33
 * (on x86-64 the kernel's struct stat is glibc's). */
static int same_socket(int fd, const struct ufd *u)
{
    struct stat st;
    int err = errno;
    int same = syscall(SYS_fstat, fd, &st) == 0 && st.st_dev == u->dev && st.st_ino == u->ino;
    errno = err;
    return same;
}

struct ufd *ufd_take(int fd)
{
    struct ufd *u = slot_ref(fd);
    if (!u || same_socket(fd, u))
        return u;
    slot_drop(fd, u); /* stale: closed where the library did not see it */
    ufd_put(u);
    return NULL;
}

struct ufd *ufd_peek_slot(int fd) { return slot_ref(fd); }

int ufd_still(int fd, struct ufd *u)
{
    if (same_socket(fd, u))
        return 1;
    slot_drop(fd, u); /* stale: closed where the library did not see it */
    return 0;
}

void ufd_put(struct ufd *u)
{
    if (!u || __atomic_sub_fetch(&u->refs, 1, __ATOMIC_ACQ_REL))
        return;
    int err = errno;
    free(u->msg);
    free(u->scratch);
    free(u->in);
    pthread_mutex_destroy(&u->lock);
    pthread_mutex_destroy(&u->rlock);
    pthread_mutex_destroy(&u->wlock);
    free(u);
    errno = err;
}

int ufd_open(int s, int kind, uint32_t token)
{
    struct stat st;
    struct ufd *u = s < FD_LIMIT ? calloc(1, sizeof *u) : NULL;
    if (!u || syscall(SYS_fstat, s, &st) < 0) {
        int err = !u ? (s < FD_LIMIT ? ENOMEM : EMFILE) : errno;
        free(u);
        errno = err;
        return -1;
    }
    u->kind = kind;
    u->token = token;
    u->stream = remote; /* over TCP the fd is the stream itself (stream.c) */
    u->dev = st.st_dev;
    u->ino = st.st_ino;
    pthread_mutex_init(&u->lock, NULL);
    pthread_mutex_init(&u->rlock, NULL);
    pthread_mutex_init(&u->wlock, NULL);
    slot_set(s, u);
    return 0;
}

int ufd_pending(int fd)
{
    struct ufd *u = ufd_get(fd);
    int ready = u && __atomic_load_n(&u->ready, __ATOMIC_ACQUIRE);
    ufd_put(u);
    return ready;
}

/* --- close: the fd goes; the file when its last fd and call let go ----------------- */

/* The connection ends when the file goes: the server forgets its agents (and IsSM). */
int close(int fd)
{
    struct ufd *u HELD = NULL;
    if (__atomic_load_n(&ufd_count, __ATOMIC_RELAXED) && (unsigned)fd < FD_LIMIT &&
        __atomic_load_n(&ufds[fd], __ATOMIC_RELAXED))
        u = slot_ref(fd);
    int r = NEXT(close)(fd);
    if (u) { /* the number is free now: Linux frees it even when close fails */
        int err = errno;
        slot_drop(fd, u);
        errno = err;
    }
    return r;
}

/* Empties the slots of fds first..last, closed together. */
static void slots_clear(unsigned first, unsigned last)
{
    if (!__atomic_load_n(&ufd_count, __ATOMIC_ACQUIRE))
        return;
    int err = errno;
    for (unsigned fd = first; fd <= last && fd < FD_LIMIT; fd++) {
        struct ufd *u = __atomic_load_n(&ufds[fd], __ATOMIC_SEQ_CST);
        if (u)
            slot_drop((int)fd, u);
    }
    errno = err;
}

#if __GLIBC_PREREQ(2, 34)
/* close_range(2): CLOSE_RANGE_CLOEXEC only marks the fds. */
int close_range(unsigned first, unsigned last, int flags)
{
    int r = NEXT(close_range)(first, last, flags);
    if (r == 0 && !(flags & CLOSE_RANGE_CLOEXEC))
        slots_clear(first, last);
    return r;
}

void closefrom(int low)
{
    NEXT(closefrom)(low);
    slots_clear(low < 0 ? 0 : (unsigned)low, UINT_MAX);
}
#endif

/* --- the dup family: the new fd shares the file, as the kernel's shares the struct
 * file (fs/file.c do_dup2, f_dupfd) ------------------------------------------------- */

/* After a dup of `u`'s fd (NULL: not ours) gave `r`: r's slot holds u (or nothing, a
 * stale file of that number gone).  r, errno kept. */
static int dup_done(struct ufd *u, int r)
{
    int err = errno;
    if (r >= 0 && r < FD_LIMIT && (u || __atomic_load_n(&ufd_count, __ATOMIC_ACQUIRE)))
        slot_set(r, u);
    errno = err;
    return r;
}

int dup(int fd)
{
    struct ufd *u HELD = ufd_get(fd);
    return dup_done(u, NEXT(dup)(fd));
}

int dup2(int fd, int to)
{
    struct ufd *u HELD = ufd_get(fd);
    int r = NEXT(dup2)(fd, to);
    return fd == to ? r : dup_done(u, r); /* dup2(fd, fd) changes nothing (dup2(2)) */
}

int dup3(int fd, int to, int flags)
{
    struct ufd *u HELD = ufd_get(fd);
    return dup_done(u, NEXT(dup3)(fd, to, flags)); /* fd == to: EINVAL */
}

/* fcntl's third argument, whatever its type, passed on as glibc's own fcntl does
 * (sysdeps/unix/sysv/linux/fcntl64.c: va_arg as void *). */
#define FCNTL_BODY(real)                                                       \
    do {                                                                       \
        va_list ap;                                                            \
        va_start(ap, cmd);                                                     \
        void *arg = va_arg(ap, void *);                                        \
        va_end(ap);                                                            \
        if (cmd != F_DUPFD && cmd != F_DUPFD_CLOEXEC)                          \
            return NEXT(real)(fd, cmd, arg);                                   \
        struct ufd *u HELD = ufd_get(fd);                                      \
        return dup_done(u, NEXT(real)(fd, cmd, arg));                          \
    } while (0)

int fcntl(int fd, int cmd, ...) { FCNTL_BODY(fcntl); }

int fcntl64(int fd, int cmd, ...) { FCNTL_BODY(fcntl64); }
