/* fabriclab's host library: select, pselect and epoll_wait, where a umad file with a
 * whole message pending in the library (read.c: the rest of a long message came with
 * its first read) reads at once, as poll.c does for poll: the kernel's ib_umad_poll
 * says EPOLLIN while its receive list is not empty. */
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

/* How many of the fds below n in `in` are ready umad files. */
static int pending_in(int n, fd_set *in)
{
    int k = 0;
    if (!in || !__atomic_load_n(&ufd_count, __ATOMIC_RELAXED))
        return 0;
    for (int fd = 0; fd < n && fd < FD_SETSIZE; fd++)
        k += FD_ISSET(fd, in) && ready(fd);
    return k;
}

/* After a zero-timeout select `r`: the pending files of `want` added to `in`; the
 * count, as select counts (each bit set). */
static int with_pending(int n, fd_set *in, const fd_set *want, int r)
{
    if (r < 0)
        return r;
    for (int fd = 0; fd < n && fd < FD_SETSIZE; fd++)
        if (FD_ISSET(fd, want) && ready(fd) && !FD_ISSET(fd, in)) {
            FD_SET(fd, in);
            r++;
        }
    return r;
}

int select(int n, fd_set *in, fd_set *out, fd_set *ex, struct timeval *t)
{
    if (!pending_in(n, in))
        return NEXT(select)(n, in, out, ex, t);
    fd_set want = *in;
    struct timeval zero = {0, 0};
    return with_pending(n, in, &want, NEXT(select)(n, in, out, ex, &zero));
}

int pselect(int n, fd_set *in, fd_set *out, fd_set *ex, const struct timespec *t,
            const sigset_t *mask)
{
    if (!pending_in(n, in))
        return NEXT(pselect)(n, in, out, ex, t, mask);
    fd_set want = *in;
    static const struct timespec zero;
    return with_pending(n, in, &want, NEXT(pselect)(n, in, out, ex, &zero, mask));
}

/* --- epoll: which umad files each epoll set watches, for reading -------------------- */

#define WATCH_MAX 256 /* umad files watched by epoll sets at once (more: not seen ready) */

static struct {
    int epfd, fd;
    epoll_data_t data;
} watches[WATCH_MAX];
static int watch_count;
static pthread_mutex_t watch_lock = PTHREAD_MUTEX_INITIALIZER;

int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
    int r = NEXT(epoll_ctl)(epfd, op, fd, ev);
    if (r < 0 || (!is_ours(fd) && !__atomic_load_n(&watch_count, __ATOMIC_ACQUIRE)))
        return r;
    pthread_mutex_lock(&watch_lock);
    for (int j = 0; j < watch_count;) /* closed files leave the kernel's sets: ours too */
        if (is_ours(watches[j].fd))
            j++;
        else
            watches[j] = watches[--watch_count];
    int i = 0;
    while (i < watch_count && (watches[i].epfd != epfd || watches[i].fd != fd))
        i++;
    int keep = op != EPOLL_CTL_DEL && is_ours(fd) && ev && (ev->events & EPOLLIN);
    if (i < watch_count && !keep) { /* gone, or no longer for reading */
        watches[i] = watches[--watch_count];
    } else if (keep && (i < watch_count || watch_count < WATCH_MAX)) {
        watches[i].epfd = epfd;
        watches[i].fd = fd;
        watches[i].data = ev->data;
        if (i == watch_count)
            __atomic_add_fetch(&watch_count, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&watch_lock);
    return r;
}

/* After a zero-timeout epoll_wait `r`: the ready umad files epfd watches added (once
 * each, up to `max` events). */
static int epoll_pending(int epfd, struct epoll_event *evs, int max, int r)
{
    if (r < 0)
        return r;
    pthread_mutex_lock(&watch_lock);
    for (int i = 0; i < watch_count && r < max; i++) {
        if (watches[i].epfd != epfd || !ready(watches[i].fd))
            continue;
        int j = 0;
        while (j < r && evs[j].data.u64 != watches[i].data.u64)
            j++;
        if (j == r) {
            evs[r].data = watches[i].data;
            evs[r++].events = 0;
        }
        evs[j].events |= EPOLLIN;
    }
    pthread_mutex_unlock(&watch_lock);
    return r;
}

/* Whether epfd watches a umad file with a message waiting. */
static int epoll_has_pending(int epfd)
{
    if (!__atomic_load_n(&watch_count, __ATOMIC_ACQUIRE))
        return 0;
    int k = 0;
    pthread_mutex_lock(&watch_lock);
    for (int i = 0; i < watch_count && !k; i++)
        k = watches[i].epfd == epfd && ready(watches[i].fd);
    pthread_mutex_unlock(&watch_lock);
    return k;
}

int epoll_wait(int epfd, struct epoll_event *evs, int max, int timeout)
{
    if (!epoll_has_pending(epfd))
        return NEXT(epoll_wait)(epfd, evs, max, timeout);
    return epoll_pending(epfd, evs, max, NEXT(epoll_wait)(epfd, evs, max, 0));
}

int epoll_pwait(int epfd, struct epoll_event *evs, int max, int timeout, const sigset_t *mask)
{
    if (!epoll_has_pending(epfd))
        return NEXT(epoll_pwait)(epfd, evs, max, timeout, mask);
    return epoll_pending(epfd, evs, max, NEXT(epoll_pwait)(epfd, evs, max, 0, mask));
}
