/* fabriclab's host library: configuration from the environment (which fabric server,
 * which tray), the messages said once when the server fails us, and gethostname (the
 * tray's name). */
#include "hostlib.h"

static pthread_once_t config_once = PTHREAD_ONCE_INIT;
const char *server_name;
const char *tray_name;
struct sockaddr_un server_addr;
socklen_t server_len;
int said_failure, said_gone;

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

/* The server closed a umad connection: say so once, and fail the call with ENOTCONN. */
int server_gone(void)
{
    char text[256];
    snprintf(text, sizeof text, "the fabric server '%s' went away", server_name);
    say_once(&said_gone, text);
    errno = ENOTCONN;
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
