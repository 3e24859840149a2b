/* fabriclab's host library: configuration from the environment (which fabric server,
 * where its socket is, whose it must be, or its TCP address and token; which tray), the
 * messages said once when the server fails us, and gethostname and uname (the tray's
 * name). */
#include "hostlib.h"

#include <sys/utsname.h>

static pthread_once_t config_once = PTHREAD_ONCE_INIT;
const char *server_name;
const char *tray_name;
struct sockaddr_un server_addr;
socklen_t server_len;
uid_t server_owner;
char config_problem[256];
int said_failure, said_gone;
int remote;
char remote_host[256], remote_port[8], remote_token[FL_TOKEN_SIZE];

/* Where the server's socket is when FABRICLAB_HOST_SOCKET does not say: `<name>.host`
 * in the state directory, found as fabriclab finds it (fabriclab.statedir):
 * $FABRICLAB_STATE_DIR, else $XDG_RUNTIME_DIR/fabriclab, else $TMPDIR (or
 * /tmp)/fabriclab-<euid>.  Written into buf (n bytes); the length it wanted. */
static int derive_path(char *buf, size_t n)
{
    const char *d = getenv("FABRICLAB_STATE_DIR");
    if (d && *d)
        return snprintf(buf, n, "%s/%s.%s", d, server_name, FL_SOCKET_KIND);
    d = getenv("XDG_RUNTIME_DIR");
    if (d && *d)
        return snprintf(buf, n, "%s/fabriclab/%s.%s", d, server_name, FL_SOCKET_KIND);
    d = getenv("TMPDIR");
    return snprintf(buf, n, "%s/fabriclab-%u/%s.%s", d && *d ? d : "/tmp",
                    (unsigned)geteuid(), server_name, FL_SOCKET_KIND);
}

/* FABRICLAB_HOST_ADDR: HOST:PORT, [IPv6]:PORT or NAME:PORT into remote_host and
 * remote_port; 0, or -1 with config_problem said. */
static int parse_addr(const char *addr)
{
    const char *colon = strrchr(addr, ':'), *host = addr;
    size_t n = colon ? (size_t)(colon - addr) : 0;
    if (addr[0] == '[') { /* [IPv6]:PORT (RFC 3986 host syntax) */
        host = addr + 1;
        n = colon && colon > addr && colon[-1] == ']' ? (size_t)(colon - addr) - 2 : 0;
    }
    const char *port = colon ? colon + 1 : "";
    char *end;
    errno = 0;
    unsigned long v = strtoul(port, &end, 10);
    if (!n || n >= sizeof remote_host || memchr(host, '[', n) || memchr(host, ']', n) ||
        (addr[0] != '[' && memchr(host, ':', n)) || !*port || *end || errno || !v ||
        v > 65535 || port[0] < '0' || port[0] > '9') {
        snprintf(config_problem, sizeof config_problem,
                 "FABRICLAB_HOST_ADDR '%.64s' is not HOST:PORT (or [IPv6]:PORT)", addr);
        return -1;
    }
    memcpy(remote_host, host, n);
    remote_host[n] = '\0';
    snprintf(remote_port, sizeof remote_port, "%lu", v);
    return 0;
}

/* FABRICLAB_HOST_TOKEN_FILE, read once: a regular file of at most 128 bytes holding the
 * 64 lowercase hex characters (and a newline) that `up` wrote; into remote_token. */
static void read_token(const char *path)
{
    if (!path || !*path) {
        snprintf(config_problem, sizeof config_problem,
                 "FABRICLAB_HOST_ADDR is set but FABRICLAB_HOST_TOKEN_FILE is not");
        return;
    }
    char buf[129];
    ssize_t n = -1;
    struct stat st;
    int fd = NEXT(open)(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    int err = fd < 0 ? errno : 0;
    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size < 129)
        n = NEXT(read)(fd, buf, sizeof buf);
    if (fd >= 0)
        NEXT(close)(fd);
    if (n > 0 && buf[n - 1] == '\n')
        n--;
    int ok = n == FL_TOKEN_SIZE;
    for (ssize_t i = 0; ok && i < n; i++)
        ok = (buf[i] >= '0' && buf[i] <= '9') || (buf[i] >= 'a' && buf[i] <= 'f');
    if (ok)
        memcpy(remote_token, buf, FL_TOKEN_SIZE);
    else if (err)
        snprintf(config_problem, sizeof config_problem,
                 "cannot read the token file %.128s: %s", path, strerror(err));
    else
        snprintf(config_problem, sizeof config_problem,
                 "the token file %.128s does not hold a fabric's token (64 hex characters)",
                 path);
}

/* Reads the environment: the server's socket (a file in its owner's 0700 state
 * directory: FABRICLAB_HOST_SOCKET, else derived) and the uid the server must run as
 * (FABRICLAB_OWNER, else this process's own); what is wrong goes to config_problem. */
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
    const char *addr = getenv("FABRICLAB_HOST_ADDR");
    if (addr && *addr) { /* over TCP: the token is the proof, not uids */
        remote = 1;
        if (!parse_addr(addr))
            read_token(getenv("FABRICLAB_HOST_TOKEN_FILE"));
        return;
    }
    server_owner = geteuid();
    const char *owner = getenv("FABRICLAB_OWNER");
    if (owner && *owner) {
        char *end;
        errno = 0;
        unsigned long v = strtoul(owner, &end, 10);
        if (*end || errno || owner[0] == '-' || v >= (uid_t)-1)
            snprintf(config_problem, sizeof config_problem,
                     "FABRICLAB_OWNER '%.32s' is not a uid", owner);
        else
            server_owner = (uid_t)v;
    }
    char path[PATH_MAX];
    const char *given = getenv("FABRICLAB_HOST_SOCKET");
    int n = given && *given ? snprintf(path, sizeof path, "%s", given)
                            : derive_path(path, sizeof path);
    server_addr.sun_family = AF_UNIX;
    if (n > 0 && (size_t)n < sizeof server_addr.sun_path) {
        memcpy(server_addr.sun_path, path, (size_t)n + 1);
        server_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)n + 1);
    } else if (!config_problem[0]) {
        snprintf(config_problem, sizeof config_problem,
                 "the path of the fabric server's socket is %d bytes, more than a Unix "
                 "socket takes (%zu): set a shorter FABRICLAB_STATE_DIR",
                 n, sizeof server_addr.sun_path - 1);
    }
}

/* Whether this process talks to a fabric server at all. */
int active(void)
{
    pthread_once(&config_once, config_init);
    return server_name != NULL;
}

/* One line "fabriclab: <text>" on stderr, the first time `flag` is used. */
void say_once(int *flag, const char *text)
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

/* The umad file `u` fails as the kernel's does when its port goes away (user_mad.c
 * ib_umad_kill_port sets agents_dead; ib_umad_read and ib_umad_write are then EIO and
 * ib_umad_poll EPOLLERR alone: kernel commits "IB/umad: Return EIO in case of when
 * device disassociated" and def4cd43f522 "IB/umad: Return EPOLLERR ..."): the
 * connection ends, so the server forgets its agents as the kernel unregisters them. */
int device_dead(struct ufd *u, int fd, int *flag, const char *text)
{
    if (!__atomic_exchange_n(&u->dead, 1, __ATOMIC_ACQ_REL)) { /* the first cause only */
        shutdown(fd, SHUT_RDWR);
        say_once(flag, text);
    }
    errno = EIO;
    return -1;
}

/* The server closed a umad connection: the device fails with the line "went away". */
int server_gone(struct ufd *u, int fd)
{
    char text[256];
    snprintf(text, sizeof text, "the fabric server '%s' went away", server_name);
    return device_dead(u, fd, &said_gone, text);
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

/* uname: the node name is the tray's, as gethostname says (the kernel's utsname
 * nodename is what gethostname returns: glibc's gethostname calls uname). */
int uname(struct utsname *u)
{
    int r = NEXT(uname)(u);
    if (r == 0 && active() && *tray_name)
        snprintf(u->nodename, sizeof u->nodename, "%s", tray_name);
    return r;
}
