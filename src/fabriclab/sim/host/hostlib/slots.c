/* fabriclab's host library: the fd table of umad and issm files, kept as the kernel
 * keeps its own (fs/file.c, fs/file_table.c): an fd names a shared file with a
 * reference per fd and per call running on it, so a close in one thread never frees
 * what a read, write, poll or ioctl in another is using.
 *
 * The table is read without a lock (a signal handler may read or write any fd): taking
 * a slot's file marks the slot busy while it adds its reference; emptying a slot waits
 * until the slot is not busy before letting go of the file's reference. */
#include "hostlib.h"

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

struct ufd *ufd_take(int fd) { return slot_ref(fd); }

void ufd_put(struct ufd *u)
{
    if (!u || __atomic_sub_fetch(&u->refs, 1, __ATOMIC_ACQ_REL))
        return;
    int err = errno;
    free(u->msg);
    free(u->scratch);
    pthread_mutex_destroy(&u->lock);
    pthread_mutex_destroy(&u->rlock);
    pthread_mutex_destroy(&u->wlock);
    free(u);
    errno = err;
}

int ufd_open(int s, int kind, uint32_t token)
{
    struct ufd *u = s < FD_LIMIT ? calloc(1, sizeof *u) : NULL;
    if (!u) {
        errno = s < FD_LIMIT ? ENOMEM : EMFILE;
        return -1;
    }
    u->kind = kind;
    u->token = token;
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
