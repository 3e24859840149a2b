/* A probe of the host library's fd table and its threads (tests/test_hostlib_lifetime.py):
 * run under the library, against a server end of the host protocol that answers a
 * directed-route SubnGet(NodeInfo).  argv[1] names the case, argv[2] is a file holding
 * "hello".  Prints one line per step; exits 0 when every step went as on Linux, 3 when
 * something hung past its deadline. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define REGISTER_AGENT 0xC01C1B01u /* _IOWR(0x1b, 1, struct ib_user_mad_reg_req) */
#define MSG 320                    /* the 64-byte header and one MAD */
#define DEADLINE 20                /* seconds: past it the probe says so and exits 3 */
#define CANCELS 40                 /* registrations cancelled in cancel-register-fds */

static const char *file;

static void stuck(int sig)
{
    (void)sig;
    static const char text[] = "stuck\n";
    ssize_t w = write(1, text, sizeof text - 1);
    (void)w;
    _exit(3);
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

static int open_umad(void)
{
    int fd = open("/dev/infiniband/umad0", O_RDWR);
    if (fd < 0)
        say("open %s", strerror(errno)), exit(1);
    return fd;
}

/* REGISTER_AGENT for directed-route SMPs, with `methods` (a mask: the registration is
 * told to the server) or none: the agent id, or -errno. */
static int reg_methods(int fd, uint32_t methods)
{
    struct {
        uint32_t id, mask[4];
        uint8_t qpn, mclass, version, oui[3], rmpp;
    } __attribute__((aligned(4))) r = {.mask = {methods}, .qpn = 0, .mclass = 0x81, .version = 1};
    return ioctl(fd, REGISTER_AGENT, &r) < 0 ? -errno : (int)r.id;
}

static int reg(int fd) { return reg_methods(fd, 0); }

/* A directed-route SubnGet(NodeInfo) to the local port from `agent`: write's result. */
static ssize_t ask(int fd, int agent)
{
    uint8_t m[MSG] = {0};
    memcpy(m, &agent, 4);
    m[28] = m[29] = 0xFF; /* the permissive LID */
    uint8_t *mad = m + 64;
    mad[0] = 1, mad[1] = 0x81, mad[2] = 1, mad[3] = 0x01; /* SubnGet */
    mad[15] = 0x42;                                     /* the TID's low half */
    mad[17] = 0x11;                                     /* NodeInfo */
    return write(fd, m, sizeof m);
}

/* read's result on `fd` (a count, or -errno) and, for a file, what it read. */
static ssize_t get(int fd, char *text)
{
    char buf[MSG + 1];
    ssize_t n = read(fd, buf, MSG);
    if (n < 0)
        return -errno;
    if (text) {
        buf[n] = '\0';
        snprintf(text, 16, "%.15s", buf);
    }
    return n;
}

/* Waits until thread `tid` sits in system call `nr`, or in `or` (the first number of
 * /proc/<pid>/task/<tid>/syscall: proc(5)). */
static void wait_in(pid_t tid, int nr, int or)
{
    char path[64], line[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/syscall", (int)tid);
    for (int i = 0; i < DEADLINE * 1000; i++) {
        FILE *f = fopen(path, "r");
        int in = f && fgets(line, sizeof line, f) && (atoi(line) == nr || atoi(line) == or);
        if (f)
            fclose(f);
        if (in)
            return;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    stuck(0);
}

struct reader {
    int fd;
    pid_t tid;
    ssize_t got;
};

static void *reader(void *arg)
{
    struct reader *r = arg;
    __atomic_store_n(&r->tid, (pid_t)syscall(SYS_gettid), __ATOMIC_RELEASE);
    r->got = get(r->fd, NULL);
    return NULL;
}

static pthread_t start_reader(struct reader *r)
{
    pthread_t t;
    pthread_create(&t, NULL, reader, r);
    while (!__atomic_load_n(&r->tid, __ATOMIC_ACQUIRE))
        sched_yield();
    wait_in(r->tid, SYS_recvmsg, SYS_recvmsg);
    return t;
}

/* An fd of the file holding "hello". */
static int open_file(void)
{
    int fd = open(file, O_RDONLY);
    if (fd < 0)
        say("file %s", strerror(errno)), exit(1);
    return fd;
}

/* Reads `fd` as the file: "file <count> <text>", or the error. */
static void as_file(const char *what, int fd)
{
    char text[16] = "";
    ssize_t n = get(fd, text);
    say("%s %zd %s", what, n, n < 0 ? strerror((int)-n) : text);
}

/* close while another thread blocks in read: the read goes on (the file lives while it
 * runs) and returns the answer that comes after the close. */
static void close_blocked(void)
{
    struct reader r = {.fd = open_umad()};
    int agent = reg(r.fd);
    pthread_t t = start_reader(&r);
    say("ask %zd", ask(r.fd, agent));
    say("close %d", close(r.fd));
    pthread_join(t, NULL);
    say("read %zd", r.got);
}

/* a thread cancelled in read, then read, write, ioctl and close from another */
static void cancel(void)
{
    struct reader r = {.fd = open_umad()};
    int agent = reg(r.fd);
    pthread_t t = start_reader(&r);
    pthread_cancel(t);
    void *ret;
    pthread_join(t, &ret);
    say("cancelled %d", ret == PTHREAD_CANCELED);
    say("reg %d", reg(r.fd));
    say("ask %zd", ask(r.fd, agent));
    say("read %zd", get(r.fd, NULL));
    say("close %d", close(r.fd));
}

static void *registrar(void *arg)
{
    struct reader *r = arg;
    __atomic_store_n(&r->tid, (pid_t)syscall(SYS_gettid), __ATOMIC_RELEASE);
    r->got = reg_methods(r->fd, 1u << 0x01); /* Get: told to the server */
    return NULL;
}

/* a thread cancelled while its registration waits for the server's answer (under the
 * fd's agent lock), then ioctl, write, read and close from another */
static void cancel_register(void)
{
    struct reader r = {.fd = open_umad()};
    pthread_t t;
    pthread_create(&t, NULL, registrar, &r);
    while (!__atomic_load_n(&r.tid, __ATOMIC_ACQUIRE))
        sched_yield();
    wait_in(r.tid, SYS_poll, SYS_ppoll);
    pthread_cancel(t);
    void *ret;
    pthread_join(t, &ret);
    say("cancelled %d", ret == PTHREAD_CANCELED);
    int agent = reg(r.fd);
    say("reg %d", agent);
    say("ask %zd", ask(r.fd, agent));
    say("read %zd", get(r.fd, NULL));
    say("close %d", close(r.fd));
}

/* How many fds this process has open (/proc/self/fd, less the directory's own). */
static int fd_count(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        say("opendir %s", strerror(errno)), exit(1);
    while (readdir(d))
        n++;
    closedir(d);
    return n - 3; /* ".", ".." and the directory's fd */
}

/* threads cancelled, one after another, while their registrations wait for the
 * server's answer: the fds the process holds before and after */
static void cancel_register_fds(void)
{
    int fd = open_umad(), before = fd_count();
    for (int i = 0; i < CANCELS; i++) {
        struct reader r = {.fd = fd};
        pthread_t t;
        pthread_create(&t, NULL, registrar, &r);
        while (!__atomic_load_n(&r.tid, __ATOMIC_ACQUIRE))
            sched_yield();
        wait_in(r.tid, SYS_poll, SYS_ppoll);
        pthread_cancel(t);
        pthread_join(t, NULL);
    }
    say("fds %d more after %d", fd_count() - before, CANCELS);
    say("close %d", close(fd));
}

/* dup, fcntl(F_DUPFD_CLOEXEC), dup2, dup3: the same file, its agents shared */
static void dups(void)
{
    int fd = open_umad();
    int a = dup(fd);
    say("dup %d", reg(a));
    close(fd);
    say("ask %zd", ask(a, 0));
    say("read %zd", get(a, NULL));
    int b = fcntl(a, F_DUPFD_CLOEXEC, 100);
    say("dupfd %d %d", b >= 100, reg(b));
    say("dup2 %d", dup2(a, 50) == 50 ? reg(50) : -errno);
    say("dup3 %d", dup3(a, 51, O_CLOEXEC) == 51 ? reg(51) : -errno);
    int c = fcntl64(a, F_DUPFD, 200); /* what fcntl is with _FILE_OFFSET_BITS=64 */
    say("dupfd64 %d %d", c >= 200, reg(c));
    /* a file put on a umad fd's number is the file */
    int f = open_file();
    say("over %d", dup2(f, a) == a);
    as_file("file", a);
    say("ioctl %d", reg(a));
    close(f);
    close(a);
    close(50);
    close(b);
    close(c);
    say("ask51 %zd", ask(51, 0));
    say("read51 %zd", get(51, NULL));
    close(51);
}

/* a umad fd closed by close_range, closefrom, fclose(fdopen()) or a bare system call,
 * its number taken by a file: the file */
static void closes(void)
{
    int fd = open_umad();
    say("range %d", close_range(fd, fd, 0));
    int f = open_file();
    say("same %d", f == fd);
    as_file("file", f);
    close(f);
    fd = open_umad();
    say("cloexec %d", close_range(fd, fd, CLOSE_RANGE_CLOEXEC));
    say("still %d", reg(fd));
    closefrom(fd);
    f = open_file();
    say("same %d", f == fd);
    as_file("file", f);
    close(f);
    fd = open_umad();
    fclose(fdopen(fd, "r+"));
    f = open_file();
    say("same %d", f == fd);
    say("ioctl %d", reg(f));
    as_file("file", f);
    close(f);
    fd = open_umad();
    syscall(SYS_close, fd);
    f = open_file();
    say("same %d", f == fd);
    as_file("file", f);
    close(f);
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    file = argv[2];
    signal(SIGALRM, stuck);
    alarm(DEADLINE);
    if (!strcmp(argv[1], "close-blocked"))
        close_blocked();
    else if (!strcmp(argv[1], "cancel"))
        cancel();
    else if (!strcmp(argv[1], "cancel-register"))
        cancel_register();
    else if (!strcmp(argv[1], "cancel-register-fds"))
        cancel_register_fds();
    else if (!strcmp(argv[1], "dups"))
        dups();
    else if (!strcmp(argv[1], "closes"))
        closes();
    else
        return 2;
    return 0;
}
