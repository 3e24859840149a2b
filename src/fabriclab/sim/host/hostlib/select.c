/* fabriclab's host library: select, pselect and epoll_wait, where a umad file with a
 * whole message pending in the library (read.c: the rest of a long message came with
 * its first read) reads at once, as poll.c does for poll (the kernel's ib_umad_poll
 * says EPOLLIN while its receive list is not empty), and a failed one (its server went
 * away) is reported at once, then at most every DEAD_PACE_MS as poll.c does and says
 * why: select sees it readable and writable (fs/select.c: EPOLLERR is in POLLIN_SET and
 * POLLOUT_SET), epoll_wait EPOLLERR alone. */
#include "hostlib.h"

#include <sys/epoll.h>
#include <sys/select.h>

/* Whether fd is a umad file with a whole message waiting. */
static int ready(int fd) { return ufd_pending(fd); }

/* Whether fd is a umad or issm file. */
static int is_ours(int fd)
{
    struct ufd *u HELD = ufd_get(fd);
    return u != NULL;
}

/* When the failed umad file `fd` may be reported again (dead_due_in): 0 now, the ms
 * until then, -1 when fd is none. */
static long due_in(int fd)
{
    struct ufd *u HELD = ufd_get(fd);
    return u && u->kind == FL_KIND_UMAD ? dead_due_in(u) : -1;
}

/* Marks the failed umad file `fd` reported now. */
static void told(int fd)
{
    struct ufd *u HELD = ufd_get(fd);
    if (u)
        __atomic_store_n(&u->dead_polled, mono_ms(), __ATOMIC_RELEASE);
}

/* ms from now to `end` (mono_ms), at least 0; -1 when end is -1 (no bound). */
static long left_to(long end)
{
    if (end < 0)
        return -1;
    long left = end - mono_ms();
    return left > 0 ? left : 0;
}

/* --- select and pselect ----------------------------------------------------------- */

static int in_set(int fd, const fd_set *s) { return s && FD_ISSET(fd, s); }

/* Whether any fd below n in the sets is a umad file with a message waiting or one that
 * failed: the wait must be the library's (paced_select). */
static int any_ours(int n, fd_set *in, fd_set *out, fd_set *ex)
{
    if (!__atomic_load_n(&ufd_count, __ATOMIC_RELAXED) || (!in && !out && !ex))
        return 0;
    for (int fd = 0; fd < n && fd < FD_SETSIZE; fd++)
        if ((in_set(fd, in) || in_set(fd, out) || in_set(fd, ex)) &&
            (due_in(fd) >= 0 || (in_set(fd, in) && ready(fd))))
            return 1;
    return 0;
}

/* select and pselect over umad files of the library's: each round waits with libc's
 * pselect on copies of the sets without the failed files not yet due, at most until
 * the first is due, within `ms` (-1: no bound); then the pending files are readable,
 * the failed ones due readable and writable as asked.  The count, as select counts. */
static int paced_select(int n, fd_set *in, fd_set *out, fd_set *ex, long ms,
                        const sigset_t *mask)
{
    fd_set want[3], got[3];
    fd_set *sets[3] = {in, out, ex};
    for (int k = 0; k < 3; k++)
        if (sets[k])
            want[k] = *sets[k];
        else
            FD_ZERO(&want[k]);
    long end = ms < 0 ? -1 : mono_ms() + ms;
    int top = n < FD_SETSIZE ? n : FD_SETSIZE;
    for (int round = 0;; round++) {
        long due = -1;
        int now = 0;
        for (int k = 0; k < 3; k++)
            got[k] = want[k];
        for (int fd = 0; fd < top; fd++) {
            if (!in_set(fd, &want[0]) && !in_set(fd, &want[1]) && !in_set(fd, &want[2]))
                continue;
            long d = due_in(fd);
            if (d > 0) {
                for (int k = 0; k < 3; k++)
                    FD_CLR(fd, &got[k]);
                due = due < 0 || d < due ? d : due;
            }
            now += d == 0 || (in_set(fd, &want[0]) && ready(fd));
        }
        long left = left_to(end), wait = due >= 0 && (left < 0 || due < left) ? due : left;
        if (now || round >= 64) /* bounded: each round waits its part */
            wait = 0;
        struct timespec ts = {wait / 1000, (wait % 1000) * 1000000L};
        int r = NEXT(pselect)(n, sets[0] ? &got[0] : NULL, sets[1] ? &got[1] : NULL,
                              sets[2] ? &got[2] : NULL, wait < 0 ? NULL : &ts, mask);
        if (r < 0)
            return r;
        r = 0;
        for (int fd = 0; fd < top; fd++) {
            long d = in_set(fd, &want[0]) || in_set(fd, &want[1]) || in_set(fd, &want[2])
                         ? due_in(fd)
                         : -1;
            if (d == 0) { /* failed, due: readable and writable, as the kernel says */
                told(fd);
                for (int k = 0; k < 2; k++)
                    if (in_set(fd, &want[k]))
                        FD_SET(fd, &got[k]);
                FD_CLR(fd, &got[2]);
            } else if (d < 0 && in_set(fd, &want[0]) && ready(fd)) {
                FD_SET(fd, &got[0]);
            }
            for (int k = 0; k < 3; k++)
                r += sets[k] && FD_ISSET(fd, &got[k]);
        }
        if (r || due < 0 || wait == 0 || left_to(end) == 0) {
            for (int k = 0; k < 3; k++)
                if (sets[k])
                    *sets[k] = got[k];
            return r;
        }
    }
}

int select(int n, fd_set *in, fd_set *out, fd_set *ex, struct timeval *t)
{
    if (!any_ours(n, in, out, ex))
        return NEXT(select)(n, in, out, ex, t);
    long ms = t ? t->tv_sec * 1000L + (t->tv_usec + 999) / 1000 : -1;
    long end = mono_ms() + ms;
    int r = paced_select(n, in, out, ex, ms, NULL);
    if (t && r >= 0) { /* Linux's select leaves the time not slept in *t */
        long left = left_to(end);
        t->tv_sec = left / 1000;
        t->tv_usec = (left % 1000) * 1000;
    }
    return r;
}

int pselect(int n, fd_set *in, fd_set *out, fd_set *ex, const struct timespec *t,
            const sigset_t *mask)
{
    if (!any_ours(n, in, out, ex))
        return NEXT(pselect)(n, in, out, ex, t, mask);
    long ms = t ? t->tv_sec * 1000L + (t->tv_nsec + 999999) / 1000000 : -1;
    return paced_select(n, in, out, ex, ms, mask);
}

/* --- epoll: which umad files each epoll set watches --------------------------------
 * A failed file leaves the kernel's set when the library first reports it (a socket
 * that hung up is ready for ever there, EPOLLHUP even to no events): the library
 * reports it from then on, paced, and answers epoll_ctl for it. */

#define WATCH_MAX 256 /* umad files watched by epoll sets at once (more: not seen ready) */

static struct {
    int epfd, fd;
    uint32_t events;
    int paced; /* failed: out of the kernel's set, reported by the library */
    epoll_data_t data;
} watches[WATCH_MAX];
static int watch_count;
static pthread_mutex_t watch_lock = PTHREAD_MUTEX_INITIALIZER;

/* The watch of fd in epfd, or -1 (under watch_lock). */
static int watch_of(int epfd, int fd)
{
    for (int i = 0; i < watch_count; i++)
        if (watches[i].epfd == epfd && watches[i].fd == fd)
            return i;
    return -1;
}

/* epoll_ctl on a failed file the library reports itself: as the kernel would answer
 * for a file in its set (0, EEXIST for ADD); 1 when `fd` is none such (under lock). */
static int ctl_paced(int epfd, int op, int fd, struct epoll_event *ev)
{
    int i = watch_of(epfd, fd);
    if (i < 0 || !watches[i].paced)
        return 1;
    if (op == EPOLL_CTL_ADD)
        return errno = EEXIST, -1;
    if (op == EPOLL_CTL_DEL || !ev)
        watches[i] = watches[--watch_count];
    else
        watches[i].events = ev->events, watches[i].data = ev->data;
    return 0;
}

int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
    if (!is_ours(fd) && !__atomic_load_n(&watch_count, __ATOMIC_ACQUIRE))
        return NEXT(epoll_ctl)(epfd, op, fd, ev);
    pthread_mutex_lock(&watch_lock);
    for (int j = 0; j < watch_count;) /* closed files leave the kernel's sets: ours too */
        if (is_ours(watches[j].fd))
            j++;
        else
            watches[j] = watches[--watch_count];
    int r = ctl_paced(epfd, op, fd, ev);
    if (r == 1 && (r = NEXT(epoll_ctl)(epfd, op, fd, ev)) == 0) {
        int i = watch_of(epfd, fd);
        int keep = op != EPOLL_CTL_DEL && is_ours(fd) && ev;
        if (i >= 0 && !keep) {
            watches[i] = watches[--watch_count];
        } else if (keep && (i >= 0 || watch_count < WATCH_MAX)) {
            if (i < 0)
                i = watch_count;
            watches[i].epfd = epfd;
            watches[i].fd = fd;
            watches[i].events = ev->events;
            watches[i].paced = 0;
            watches[i].data = ev->data;
            if (i == watch_count)
                __atomic_add_fetch(&watch_count, 1, __ATOMIC_RELEASE);
        }
    }
    pthread_mutex_unlock(&watch_lock);
    return r;
}

/* What epfd's umad files ask of the next wait: failed ones leave the kernel's set;
 * 1 when one answers at once (a message waiting, or failed and due), and *due the ms
 * until the first failed one is due again (-1: none). */
static int epoll_state(int epfd, long *due)
{
    int now = 0;
    *due = -1;
    if (!__atomic_load_n(&watch_count, __ATOMIC_ACQUIRE))
        return 0;
    pthread_mutex_lock(&watch_lock);
    for (int i = 0; i < watch_count; i++) {
        if (watches[i].epfd != epfd)
            continue;
        long d = due_in(watches[i].fd);
        if (d >= 0 && !watches[i].paced) {
            NEXT(epoll_ctl)(epfd, EPOLL_CTL_DEL, watches[i].fd, NULL);
            watches[i].paced = 1;
        }
        if (d > 0)
            *due = *due < 0 || d < *due ? d : *due;
        now += d == 0 || (d < 0 && (watches[i].events & EPOLLIN) && ready(watches[i].fd));
    }
    pthread_mutex_unlock(&watch_lock);
    return now != 0;
}

/* After an epoll_wait `r`: epfd's umad files that answer added (once each, up to `max`
 * events): EPOLLIN for a message waiting, EPOLLERR for a failed one due. */
static int epoll_report(int epfd, struct epoll_event *evs, int max, int r)
{
    if (r < 0)
        return r;
    pthread_mutex_lock(&watch_lock);
    for (int i = 0; i < watch_count && r < max; i++) {
        if (watches[i].epfd != epfd)
            continue;
        long d = due_in(watches[i].fd);
        uint32_t ev = d == 0                                                    ? EPOLLERR
                      : d < 0 && (watches[i].events & EPOLLIN) && ready(watches[i].fd) ? EPOLLIN
                                                                                        : 0;
        if (!ev)
            continue;
        if (d == 0)
            told(watches[i].fd);
        int j = 0;
        while (j < r && evs[j].data.u64 != watches[i].data.u64)
            j++;
        if (j == r) {
            evs[r].data = watches[i].data;
            evs[r++].events = 0;
        }
        evs[j].events |= ev;
    }
    pthread_mutex_unlock(&watch_lock);
    return r;
}

/* epoll_wait and epoll_pwait: libc's, then the library's files added; paced as
 * paced_select is when a failed file is not due. */
static int epoll_paced(int epfd, struct epoll_event *evs, int max, int timeout,
                       const sigset_t *mask)
{
    long end = timeout < 0 ? -1 : mono_ms() + timeout;
    for (int round = 0;; round++) {
        long due;
        int now = epoll_state(epfd, &due);
        long left = left_to(end);
        if (!now && due < 0)
            return epoll_report(epfd, evs, max,
                                NEXT(epoll_pwait)(epfd, evs, max, (int)left, mask));
        long wait = due >= 0 && (left < 0 || due < left) ? due : left;
        if (now || round >= 64) /* bounded: each round waits its part */
            wait = 0;
        int r = epoll_report(epfd, evs, max, NEXT(epoll_pwait)(epfd, evs, max, (int)wait, mask));
        if (r != 0 || wait == 0 || left_to(end) == 0)
            return r;
    }
}

int epoll_wait(int epfd, struct epoll_event *evs, int max, int timeout)
{
    if (!__atomic_load_n(&watch_count, __ATOMIC_ACQUIRE))
        return NEXT(epoll_wait)(epfd, evs, max, timeout);
    return epoll_paced(epfd, evs, max, timeout, NULL);
}

int epoll_pwait(int epfd, struct epoll_event *evs, int max, int timeout, const sigset_t *mask)
{
    if (!__atomic_load_n(&watch_count, __ATOMIC_ACQUIRE))
        return NEXT(epoll_pwait)(epfd, evs, max, timeout, mask);
    return epoll_paced(epfd, evs, max, timeout, mask);
}
