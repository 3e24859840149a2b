/* A probe of fabriclab's host library (run under LD_PRELOAD by
 * tests/test_hostlib_frames.py): opens /dev/infiniband/umad0 and does one thing with it,
 * printing what each call gave (errno numbers) and how long it took, in milliseconds.
 *
 *   recv SIZE       register agent 0 (SA class, no methods), write one Get, then poll
 *                   and read (SIZE bytes) until a message or an error; after an error,
 *                   what poll, read and write give on the failed device
 *   open [sig]      just open (with "sig": SIGALRM every 10 ms, without SA_RESTART)
 *   register MARK   agent 0 registered; a thread registers agent 1 with methods (a
 *                   round trip to the server) while the main thread, once the file
 *                   MARK exists, writes a MAD on agent 0
 *   flood           writes on a blocking fd until a write fails (or 30 s pass)
 *   issm intr|restart  holds issm0, then opens it again, blocking, while SIGALRM
 *                   comes at 300 ms (its handler without SA_RESTART, or with it) and a
 *                   thread lets the first go at 2 s
 *   dead HOW        agent 0 registered and a Get written; once the device has failed
 *                   (the server went away), 3 s of a receiver's loop on it as OpenSM's
 *                   is (HOW, with no timeout: poll, select or epoll_wait, then read;
 *                   "read": a blocking read alone), counting the calls that came back */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "hostwire.h"

#define DEADLINE_MS 20000

static long now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000L + t.tv_nsec / 1000000L;
}

/* Registers an agent of class `mclass` (methods: `method` bit set, or none). */
static int reg(int fd, uint8_t mclass, uint8_t version, int method)
{
    struct umad_reg_req r;
    memset(&r, 0, sizeof r);
    r.qpn = 1;
    r.mgmt_class = mclass;
    r.mgmt_class_version = version;
    if (mclass == 0x03)
        r.rmpp_version = 1;
    if (mclass >= 0x30) {
        r.oui[1] = 0x14;
        r.oui[2] = 0x05;
    }
    if (method >= 0)
        r.method_mask[method / 32] = 1u << (method % 32);
    if (ioctl(fd, UMAD_REGISTER_AGENT, &r) < 0)
        return -1;
    return (int)r.id;
}

/* Writes a Get of the SA class on `agent`: write's result, errno in *err. */
static long send_get(int fd, uint32_t agent, int *err)
{
    unsigned char m[UMAD_HDR_SIZE + UMAD_MAD_SIZE] = {0};
    memcpy(m, &agent, 4);
    m[UMAD_HDR_SIZE] = 1;
    m[UMAD_HDR_SIZE + 1] = 0x03;
    m[UMAD_HDR_SIZE + 2] = 2;
    m[UMAD_HDR_SIZE + 3] = 0x01;
    errno = 0;
    long r = (long)write(fd, m, sizeof m);
    *err = errno;
    return r;
}

static int do_recv(size_t size)
{
    int fd = open("/dev/infiniband/umad0", O_RDWR | O_NONBLOCK);
    if (fd < 0)
        return printf("open -1 %d\n", errno), 1;
    int agent = reg(fd, 0x03, 2, -1), err;
    if (agent < 0)
        return printf("reg -1 %d\n", errno), 1;
    if (send_get(fd, (uint32_t)agent, &err) < 0)
        return printf("send -1 %d\n", err), 1;
    unsigned char *buf = malloc(size);
    long t0 = now_ms();
    ssize_t n = -1;
    while (now_ms() - t0 < DEADLINE_MS) {
        struct pollfd pf = {fd, POLLIN, 0};
        poll(&pf, 1, 500);
        n = read(fd, buf, size);
        if (n >= 0 || errno != EAGAIN)
            break;
    }
    long ms = now_ms() - t0;
    if (n >= 0) {
        int ok = n >= UMAD_HDR_SIZE;
        for (ssize_t i = UMAD_HDR_SIZE; i < n; i++)
            ok &= buf[i] == (i - UMAD_HDR_SIZE) % 251;
        printf("got %zd %d %ld\n", n, ok, ms);
        return 0;
    }
    printf("err %d %ld\n", errno, ms);
    struct pollfd pf = {fd, POLLIN, 0};
    t0 = now_ms();
    int p = poll(&pf, 1, 3000);
    printf("poll %d 0x%x %ld\n", p, (unsigned)pf.revents, now_ms() - t0);
    printf("read %zd %d\n", read(fd, buf, size), errno);
    long w = send_get(fd, (uint32_t)agent, &err);
    printf("write %ld %d\n", w, err);
    return 0;
}

static volatile sig_atomic_t signals;
static void on_alarm(int sig)
{
    (void)sig;
    signals++;
}

static int do_open(int with_signals)
{
    if (with_signals) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_alarm; /* no SA_RESTART: each signal interrupts a wait */
        sigaction(SIGALRM, &sa, NULL);
        struct itimerval it = {{0, 10000}, {0, 10000}};
        setitimer(ITIMER_REAL, &it, NULL);
    }
    long t0 = now_ms();
    int fd = open("/dev/infiniband/umad0", O_RDWR);
    int err = errno;
    long ms = now_ms() - t0;
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    printf("open %d %d %ld %d\n", fd < 0 ? -1 : 0, fd < 0 ? err : 0, ms, (int)signals);
    return 0;
}

static int reg_fd;
static int reg_done;

static void *register_methods(void *arg)
{
    (void)arg;
    long t0 = now_ms();
    int id = reg(reg_fd, 0x32, 1, 0x12);
    __atomic_store_n(&reg_done, 1, __ATOMIC_RELEASE);
    printf("reg %d %ld\n", id, now_ms() - t0);
    return NULL;
}

static int do_register(const char *mark)
{
    reg_fd = open("/dev/infiniband/umad0", O_RDWR);
    if (reg_fd < 0)
        return printf("open -1 %d\n", errno), 1;
    int agent = reg(reg_fd, 0x03, 2, -1), err;
    pthread_t t;
    pthread_create(&t, NULL, register_methods, NULL);
    struct stat st;
    long t0 = now_ms();
    while (stat(mark, &st) < 0 && now_ms() - t0 < DEADLINE_MS) {
        struct timespec nap = {0, 5000000};
        nanosleep(&nap, NULL);
    }
    t0 = now_ms();
    long w = send_get(reg_fd, (uint32_t)agent, &err);
    long ms = now_ms() - t0;
    int during = !__atomic_load_n(&reg_done, __ATOMIC_ACQUIRE);
    printf("write %ld %d %ld %d\n", w, err, ms, during);
    fflush(stdout);
    pthread_join(t, NULL);
    return 0;
}

static int do_flood(void)
{
    int fd = open("/dev/infiniband/umad0", O_RDWR); /* blocking */
    if (fd < 0)
        return printf("open -1 %d\n", errno), 1;
    int agent = reg(fd, 0x03, 2, -1), err = 0, k;
    long t0 = now_ms(), w = 0, last = 0;
    for (k = 0; w >= 0 && now_ms() - t0 < 30000; k++) {
        long t = now_ms();
        w = send_get(fd, (uint32_t)agent, &err);
        last = now_ms() - t;
    }
    printf("flood %d %ld %d %ld\n", k, w, w < 0 ? err : 0, last);
    return 0;
}

static int held_issm = -1;

static void *let_go(void *arg)
{
    (void)arg;
    struct timespec t = {2, 0};
    nanosleep(&t, NULL);
    close(held_issm);
    return NULL;
}

static int do_issm(int restart)
{
    held_issm = open("/dev/infiniband/issm0", O_RDWR | O_NONBLOCK);
    if (held_issm < 0)
        return printf("hold -1 %d\n", errno), 1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = restart ? SA_RESTART : 0;
    sigaction(SIGALRM, &sa, NULL);
    pthread_t t;
    pthread_create(&t, NULL, let_go, NULL);
    struct itimerval it = {{0, 0}, {0, 300000}};
    setitimer(ITIMER_REAL, &it, NULL);
    long t0 = now_ms();
    int fd = open("/dev/infiniband/issm0", O_RDWR);
    int err = errno;
    printf("issm %d %d %ld %d\n", fd < 0 ? -1 : 0, fd < 0 ? err : 0, now_ms() - t0,
           (int)signals);
    pthread_join(t, NULL);
    return 0;
}

/* The loop of a receiver with no timeout on a device whose server went away: the ms
 * until the first failure, then how many polls and reads came back in DEAD_LOOP_MS. */
#define DEAD_LOOP_MS 3000

/* Waits for `fd` as `how` says (poll, select or epoll on `ep`), up to `ms` (-1: no
 * bound): what the call returned, and whether it said fd failed (POLLERR, EPOLLERR; for
 * select, readable). */
static int wait_for(const char *how, int fd, int ep, int ms, int *failed)
{
    int r;
    if (!strcmp(how, "select")) {
        fd_set in;
        FD_ZERO(&in);
        FD_SET(fd, &in);
        struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
        r = select(fd + 1, &in, NULL, NULL, ms < 0 ? NULL : &tv);
        *failed = r > 0 && FD_ISSET(fd, &in);
    } else if (!strcmp(how, "epoll")) {
        struct epoll_event ev;
        r = epoll_wait(ep, &ev, 1, ms);
        *failed = r > 0 && (ev.events & EPOLLERR);
    } else {
        struct pollfd pf = {fd, POLLIN, 0};
        r = poll(&pf, 1, ms);
        *failed = r > 0 && pf.revents == POLLERR;
    }
    return r;
}

static int do_dead(const char *how)
{
    int waits = strcmp(how, "read") != 0;
    int fd = open("/dev/infiniband/umad0", O_RDWR | (waits ? O_NONBLOCK : 0));
    if (fd < 0)
        return printf("open -1 %d\n", errno), 1;
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 7};
    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
    int agent = reg(fd, 0x03, 2, -1), err;
    if (agent < 0 || send_get(fd, (uint32_t)agent, &err) < 0)
        return printf("setup -1 %d\n", errno), 1;
    unsigned char buf[UMAD_HDR_SIZE + UMAD_MAD_SIZE];
    long t0 = now_ms(), failed = -1, polls = 0, reads = 0, other = 0;
    while (now_ms() - t0 < DEADLINE_MS && (failed < 0 || now_ms() - failed < DEAD_LOOP_MS)) {
        if (waits) {
            int said; /* -1: as umad_recv(fd, .., -1) */
            int p = wait_for(how, fd, ep, failed < 0 ? 500 : -1, &said);
            polls += failed >= 0;
            if (p < 0 || (failed >= 0 && !said))
                other++;
        }
        ssize_t n = read(fd, buf, sizeof buf);
        if (n < 0 && errno == EIO) {
            if (failed < 0)
                failed = now_ms();
            else
                reads++;
        } else if (failed >= 0 || (n < 0 && errno != EAGAIN)) {
            other++;
        }
    }
    printf("dead %ld %ld %ld %ld\n", failed < 0 ? -1 : failed - t0, polls, reads, other);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 3 && !strcmp(argv[1], "recv"))
        return do_recv((size_t)atol(argv[2]));
    if (argc >= 2 && !strcmp(argv[1], "open"))
        return do_open(argc >= 3 && !strcmp(argv[2], "sig"));
    if (argc >= 3 && !strcmp(argv[1], "register"))
        return do_register(argv[2]);
    if (argc >= 2 && !strcmp(argv[1], "flood"))
        return do_flood();
    if (argc >= 3 && !strcmp(argv[1], "issm"))
        return do_issm(!strcmp(argv[2], "restart"));
    if (argc >= 3 && !strcmp(argv[1], "dead"))
        return do_dead(argv[2]);
    fprintf(stderr, "usage: probe recv SIZE | open [sig] | register MARK | flood | "
                    "issm intr|restart | dead poll|select|epoll|read\n");
    return 2;
}
