/* fabriclab's host library: a connection to the fabric server, opened with a HELLO
 * and answered by a REPLY (fabriclab.ib.hostwire). */
#include "hostlib.h"

/* Opens a connection of `kind` (only as the fabric's owner or root, and only to a
 * server running as one of them: SO_PEERCRED) and says HELLO (index, token, then
 * `extra` in the same frame, as hostlink.py reads a REGISTER); waits at most WAIT_MS
 * for the REPLY.  The connected, blocking socket, or -1 with errno and what went wrong
 * in `text` (the server's own line when it refused).  REPLY's token goes to *token. */
int hello(int kind, unsigned index, uint32_t *token, const void *extra, size_t n,
          int cloexec, char *text)
{
    if (remote)
        return remote_hello(kind, index, token, extra, n, cloexec, text);
    if (config_problem[0]) {
        snprintf(text, FL_TEXT_MAX, "%s", config_problem);
        errno = EINVAL;
        return -1;
    }
    uid_t me = geteuid();
    if (me != server_owner && me != 0) {
        /* its socket and trees are in the owner's 0700 state directory */
        snprintf(text, FL_TEXT_MAX,
                 "the host library serves the fabric '%s' to its owner (uid %u) only, not "
                 "to uid %u: a user admitted with up --allow-user attaches through "
                 "libumad2sim (fabriclab exec --via umad2sim)",
                 server_name, (unsigned)server_owner, (unsigned)me);
        errno = EACCES;
        return -1;
    }
    if (strlen(tray_name) >= FL_TRAY_MAX) {
        snprintf(text, FL_TEXT_MAX, "FABRICLAB_TRAY '%s' is longer than %d bytes", tray_name,
                 FL_TRAY_MAX - 1);
        errno = EINVAL;
        return -1;
    }
    int s = socket(AF_UNIX, SOCK_SEQPACKET | (cloexec ? SOCK_CLOEXEC : 0), 0);
    if (s < 0) {
        snprintf(text, FL_TEXT_MAX, "cannot make a socket: %s", strerror(errno));
        return -1;
    }
    unsigned char frame[FL_HELLO_SIZE + UMAD_REG_REQ2_SIZE] = {0};
    struct fl_hello *h = (struct fl_hello *)frame;
    h->magic = FL_MAGIC;
    h->version = FL_VERSION;
    h->kind = (uint16_t)kind;
    h->pid = (uint32_t)getpid();
    h->index = index;
    h->token = *token;
    memcpy(h->tray, tray_name, strlen(tray_name));
    if (n > sizeof frame - FL_HELLO_SIZE)
        n = sizeof frame - FL_HELLO_SIZE;
    if (n)
        memcpy(frame + FL_HELLO_SIZE, extra, n);
    unsigned char reply[FL_REPLY_SIZE + FL_TEXT_MAX];
    struct pollfd pf = {s, POLLIN, 0};
    ssize_t got;
    int err;
    struct ucred peer;
    socklen_t peer_len = sizeof peer;
    if (connect(s, (struct sockaddr *)&server_addr, server_len) < 0) {
        err = errno;
        snprintf(text, FL_TEXT_MAX, "cannot reach the fabric server '%s' at %s: %s%s",
                 server_name, server_addr.sun_path, strerror(err),
                 err == EACCES ? " (it serves its owner and root only: a user admitted with "
                                 "up --allow-user attaches through libumad2sim)"
                               : "");
    } else if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &peer, &peer_len) < 0) {
        err = errno;
        snprintf(text, FL_TEXT_MAX, "cannot tell whose the fabric server '%s' is: %s",
                 server_name, strerror(err));
    } else if (peer.uid != server_owner && peer.uid != 0) {
        /* not the fabric's server: someone else's socket where it should be */
        err = EACCES;
        snprintf(text, FL_TEXT_MAX,
                 "%s is held by uid %u (pid %d), not by the fabric's owner (uid %u) or "
                 "root: refusing to talk to it",
                 server_addr.sun_path, (unsigned)peer.uid, (int)peer.pid,
                 (unsigned)server_owner);
    } else if (send(s, frame, FL_HELLO_SIZE + n, MSG_NOSIGNAL) < 0) {
        err = errno;
        snprintf(text, FL_TEXT_MAX, "the fabric server '%s' hung up: %s", server_name,
                 strerror(err));
    } else if (NEXT(poll)(&pf, 1, WAIT_MS) <= 0) {
        err = ETIMEDOUT;
        snprintf(text, FL_TEXT_MAX, "the fabric server '%s' did not answer", server_name);
    } else if ((got = recv(s, reply, sizeof reply, 0)) < FL_REPLY_SIZE ||
               ((struct fl_reply *)reply)->magic != FL_MAGIC) {
        err = got < 0 ? errno : EPROTO;
        snprintf(text, FL_TEXT_MAX, "the fabric server '%s' hung up without an answer",
                 server_name);
    } else {
        struct fl_reply *r = (struct fl_reply *)reply;
        size_t len = (size_t)got - FL_REPLY_SIZE;
        memcpy(text, reply + FL_REPLY_SIZE, len);
        text[len] = '\0';
        *token = r->token;
        if (!r->err)
            return s;
        err = r->err;
        if (!len)
            snprintf(text, FL_TEXT_MAX, "the fabric server refused: %s", strerror(err));
    }
    NEXT(close)(s);
    errno = err;
    return -1;
}
