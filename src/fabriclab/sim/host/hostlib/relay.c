/* fabriclab's host library: a umad or issm device over TCP.  The application gets one
 * end of socketpair(AF_UNIX, SOCK_SEQPACKET), so read.c, write.c and poll.c see the
 * socket they see on a unix connection; a thread of the library (one per device, every
 * signal blocked) moves each packet between the other end and the TCP stream, where it
 * goes behind its u32 little-endian length (remote.c).
 *
 * Buffers are bounded: two stream packets each way; the application's queue is the
 * socketpair's own (net.unix.max_dgram_qlen packets), and when it is full the thread
 * stops reading the stream, so TCP holds the server back.  A length outside 1..
 * FL_FRAME_MAX from the server is a protocol error: one line, and the device closes.
 * Either side's end ends both: the server closing (or resetting) the stream closes
 * the thread's end, so the application reads what was already relayed and then
 * end-of-file, the "went away" of a unix connection; the application closing its end
 * (the last descriptor of it) closes the stream, and the thread exits.
 *
 * fork: a child shares its parent's devices as it would a kernel umad fd (the same
 * open file; whichever process reads first gets a message), relayed by the parent's
 * thread; the child's copies of the thread's own descriptors are closed in the child
 * (pthread_atfork), so a device goes away with its parent's relay.  exec keeps only
 * the application's end (the thread's descriptors are close-on-exec). */
#include "hostlib.h"

#include <signal.h>
#include <sys/syscall.h>

#define CAP (2 * (FL_LENGTH_SIZE + FL_FRAME_MAX)) /* bytes buffered each way */
#define STACK (128 * 1024)                        /* the thread's stack */

struct relay {
    int tcp, lib;             /* the stream; the thread's end of the socketpair */
    uint8_t *in, *out;        /* CAP bytes each: from the stream; for the stream */
    size_t in_at, in_end;     /* in: stream bytes [in_at, in_end) not yet delivered */
    size_t out_at, out_end;   /* out: framed packets [out_at, out_end) not yet sent */
    struct relay *next;       /* the relays of this process (for fork) */
};

static pthread_mutex_t relays_lock = PTHREAD_MUTEX_INITIALIZER;
static struct relay *relays;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void fork_prepare(void) { pthread_mutex_lock(&relays_lock); }
static void fork_parent(void) { pthread_mutex_unlock(&relays_lock); }

/* In a child: the parent's threads are not here; their descriptors go (raw close:
 * nothing but async-signal-safe calls after fork), the records stay theirs. */
static void fork_child(void)
{
    for (struct relay *r = relays; r; r = r->next) {
        syscall(SYS_close, r->tcp);
        syscall(SYS_close, r->lib);
    }
    relays = NULL;
    pthread_mutex_unlock(&relays_lock);
}

static void atfork_init(void) { pthread_atfork(fork_prepare, fork_parent, fork_child); }

/* The relay leaves the list and its descriptors close (under the lock: a fork sees
 * either both open and listed or neither). */
static void relay_free(struct relay *r)
{
    pthread_mutex_lock(&relays_lock);
    for (struct relay **p = &relays; *p; p = &(*p)->next)
        if (*p == r) {
            *p = r->next;
            break;
        }
    NEXT(close)(r->tcp);
    NEXT(close)(r->lib);
    pthread_mutex_unlock(&relays_lock);
    free(r->in);
    free(r->out);
    free(r);
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Hands the whole packets of `in` to the application; 1 when one waits for room, 0
 * when none is whole, -1 when the device ends (*bad: a length out of bounds). */
static int deliver(struct relay *r, uint32_t *bad)
{
    for (;;) {
        size_t have = r->in_end - r->in_at;
        if (have < FL_LENGTH_SIZE)
            break;
        uint32_t n = le32(r->in + r->in_at);
        if (n < 1 || n > FL_FRAME_MAX)
            return *bad = n ? n : 1, -1;
        if (have < FL_LENGTH_SIZE + n)
            break;
        ssize_t w = send(r->lib, r->in + r->in_at + FL_LENGTH_SIZE, n,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN)
            return 1;
        if (w < 0)
            return -1; /* the application closed its end */
        r->in_at += FL_LENGTH_SIZE + n;
    }
    if (r->in_at == r->in_end) {
        r->in_at = r->in_end = 0;
    } else if (r->in_at) { /* a partial packet: to the front, room for the rest */
        memmove(r->in, r->in + r->in_at, r->in_end - r->in_at);
        r->in_end -= r->in_at;
        r->in_at = 0;
    }
    return 0;
}

/* Sends what `out` holds as far as the stream takes it; 0, or -1 when it failed. */
static int flush(struct relay *r)
{
    while (r->out_at < r->out_end) {
        ssize_t w = send(r->tcp, r->out + r->out_at, r->out_end - r->out_at,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0)
            r->out_at += (size_t)w;
        else if (w < 0 && errno == EAGAIN)
            return 0;
        else if (w == 0 || errno != EINTR)
            return -1;
    }
    r->out_at = r->out_end = 0;
    return 0;
}

/* Takes the application's packets into `out`, each behind its length; 0, or -1 when
 * the application closed its end (or wrote more than a frame: not the protocol). */
static int take(struct relay *r)
{
    while (CAP - r->out_end >= FL_LENGTH_SIZE + FL_FRAME_MAX) {
        uint8_t *at = r->out + r->out_end;
        ssize_t n = recv(r->lib, at + FL_LENGTH_SIZE, FL_FRAME_MAX, MSG_DONTWAIT | MSG_TRUNC);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return 0;
        if (n <= 0 || n > FL_FRAME_MAX)
            return -1;
        uint32_t len = (uint32_t)n;
        memcpy(at, &len, FL_LENGTH_SIZE);
        r->out_end += FL_LENGTH_SIZE + (size_t)n;
    }
    return 0;
}

/* The thread: relays both ways until either side ends. */
static void *relay_run(void *arg)
{
    struct relay *r = arg;
    uint32_t bad = 0;
    int eof = 0; /* the server closed the stream: deliver what came, then end */
    for (;;) {
        int waiting = deliver(r, &bad);
        if (waiting < 0 || flush(r) < 0 || (eof && !waiting))
            break;
        struct pollfd pf[2] = {{r->tcp, 0, 0}, {r->lib, 0, 0}};
        if (!waiting && !eof)
            pf[0].events |= POLLIN;
        if (r->out_end && !eof)
            pf[0].events |= POLLOUT;
        if (waiting)
            pf[1].events |= POLLOUT;
        if (CAP - r->out_end >= FL_LENGTH_SIZE + FL_FRAME_MAX)
            pf[1].events |= POLLIN;
        pf[0].fd = pf[0].events ? r->tcp : -1; /* (a hang-up is seen when it matters) */
        pf[1].fd = pf[1].events ? r->lib : -1;
        if (NEXT(poll)(pf, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if ((pf[0].events & POLLIN) && pf[0].revents) {
            ssize_t n = recv(r->tcp, r->in + r->in_end, CAP - r->in_end, MSG_DONTWAIT);
            if (n > 0)
                r->in_end += (size_t)n;
            else if (n == 0 || (errno != EAGAIN && errno != EINTR))
                eof = 1;
        }
        if ((pf[1].events & POLLIN) && pf[1].revents && take(r) < 0)
            break;
    }
    if (bad) {
        char text[256];
        snprintf(text, sizeof text,
                 "the fabric server '%s' sent a packet of %u bytes (the protocol allows 1 to "
                 "%d): its device is closed",
                 server_name, bad, FL_FRAME_MAX);
        say_once(&said_gone, text); /* the first cause only: not the went-away after it */
    }
    relay_free(r);
    return NULL;
}

/* The application's end of a socketpair relayed to the TCP connection `tcp` (which
 * the relay owns from now on, even when this fails); -1 with errno and `text`. */
int relay_start(int tcp, int cloexec, char *text)
{
    pthread_once(&atfork_once, atfork_init);
    int sv[2] = {-1, -1}, err = 0;
    struct relay *r = calloc(1, sizeof *r);
    if (!r || !(r->in = malloc(CAP)) || !(r->out = malloc(CAP)))
        err = ENOMEM;
    else if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
        err = errno;
    if (err) {
        snprintf(text, FL_TEXT_MAX, "cannot make the device's socket: %s", strerror(err));
        NEXT(close)(tcp);
        if (r) {
            free(r->in);
            free(r->out);
        }
        free(r);
        return errno = err, -1;
    }
    if (!cloexec)
        fcntl(sv[0], F_SETFD, 0);
    r->tcp = tcp;
    r->lib = sv[1];
    pthread_mutex_lock(&relays_lock);
    r->next = relays;
    relays = r;
    pthread_mutex_unlock(&relays_lock);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the thread starts with every signal blocked */
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, STACK);
    pthread_t t;
    err = pthread_create(&t, &attr, relay_run, r);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err) {
        snprintf(text, FL_TEXT_MAX, "cannot start the device's relay: %s", strerror(err));
        relay_free(r);
        NEXT(close)(sv[0]);
        return errno = err, -1;
    }
    return sv[0];
}
