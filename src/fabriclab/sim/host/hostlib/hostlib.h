/* fabriclab's host library, what its files share (the internal header; every file of
 * the library includes it first).
 *
 * Preloaded (LD_PRELOAD) into a libibumad program on an emulated tray, the library makes
 * the process see the tray's HCAs as a host does:
 *
 * - /sys/class/infiniband and /sys/class/infiniband_mad are the tray's tree, written by
 *   the fabric server (sim/host/sysfs.py) under a root it names (TREE), asked again
 *   while the process uses it so the server keeps it fresh.  Paths reach it however
 *   written: absolute, relative to the working directory or a directory fd, with
 *   "//", "." or ".."; getcwd and realpath in it show /sys/class/....
 * - gethostname() and uname().nodename are the tray's name.
 * - /dev/infiniband/umad<N> is a SOCK_SEQPACKET connection to the server (over TCP:
 *   the stream itself, stream.c) carrying ib_user_mad frames, with the kernel's ioctl, read, write, poll, select and epoll
 *   semantics (Linux drivers/infiniband/core/user_mad.c, mad.c); /dev/infiniband/issm<N>
 *   is a connection held open.  stat and access see both as the kernel's character
 *   devices.
 *
 * The protocol is fabriclab.ib.hostwire (hostwire.h).  Environment: FABRICLAB_SOCKNAME
 * (the fabric server's name; unset: everything passes through untouched),
 * FABRICLAB_HOST_SOCKET (its socket file, in the owner's 0700 state directory; unset:
 * derived from the state directory as fabriclab does), FABRICLAB_OWNER (the uid the
 * server must run as, besides root; unset: this process's) and FABRICLAB_TRAY (the
 * tray's host name); or FABRICLAB_HOST_ADDR (HOST:PORT: the server over TCP, remote.c) and
 * FABRICLAB_HOST_TOKEN_FILE (its token).  Every process under the preload loads this
 * (dash, cat, python), so nothing happens at load time: configuration is read on the
 * first path or file that may be ours, and libc's functions are looked up lazily.
 *
 * Which calls are wrapped follows what libibumad 44 and 56, the infiniband-diags tools,
 * OpenSM's vendor layer, dash, cat, Python's os module and hwloc's lstopo call (read
 * off libibumad's sysfs.c and umad.c, and traced with strace -f: the table is in
 * docs/host-library.md).  Left out, as no traced program needs it: fstat of an open
 * umad fd (a socket: glibc's fstat reaches the kernel through its own fstatat);
 * listing /dev/infiniband (libibumad names devices from sysfs); a `device` link from an
 * HCA to a PCI function (none exists behind an emulated HCA, so lstopo shows no
 * OpenFabrics objects); syscall(2), openat2 and io_uring made directly; a relative path
 * climbing out of the tree from a working directory in it (it climbs the state
 * directory, where a host climbs /sys).  Programs that make their system calls
 * themselves (Go's node_exporter, static binaries) never see the preload: they read a
 * tree written by `fabriclab sysfs` or run under `fabriclab exec --mount`.
 *
 * The files, one job each:
 *   libc.c    libc's own functions, looked up on first use (NEXT)
 *   config.c  the environment (which server, where, whose; which tray), messages said
 *             once, gethostname and uname
 *   hello.c   a connection to the server: HELLO and its REPLY, each within WAIT_MS
 *   remote.c  the same over TCP (FABRICLAB_HOST_ADDR): AUTH, framing, TREE's archive
 *   stream.c  a umad or issm device over TCP: packets framed on the stream itself
 *   unpack.c  TREE's archive checked and unpacked into a private directory
 *   privdir.c that directory: where, whose, taken from an ancestor, removed
 *   tree.c    /sys/class/infiniband: the tray's tree (kept fresh), path rewriting, the
 *             stat family
 *   dirs.c    directories of the tree listed in the kernel's (kernfs) order
 *   devnode.c /dev/infiniband/umad<N> and issm<N> to stat and access; getcwd, realpath
 *   open.c    the open family: umad and issm devices, or rewritten paths; close
 *   slots.c   the fd table of umad and issm files: references, dup, close_range
 *   ioctl.c   agent registration (the umad ioctls)
 *   write.c   write: one MAD to the server
 *   read.c    read: one message from the server, held to the protocol's sizes
 *   poll.c    poll: a pending message reads at once, a failed device is POLLERR
 *             (again at most every DEAD_PACE_MS)
 *   select.c  select, pselect and epoll: a pending message reads at once, a failed
 *             device is paced as poll.c paces it
 *
 * What one file defines and another uses is declared here, hidden (FL_HIDDEN): the
 * library exports only the calls it wraps. */
#ifndef FABRICLAB_HOSTLIB_H
#define FABRICLAB_HOSTLIB_H

#undef _FORTIFY_SOURCE
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "hostwire.h"

/* Shared between the library's files, not exported from it. */
#define FL_HIDDEN __attribute__((visibility("hidden")))

#define WAIT_MS 5000        /* how long the server may take to take a connection and to
                             * answer its HELLO, or to send a long message's next piece */
#define FD_LIMIT 65536      /* umad and issm fds are looked up in an array this long */
#define DEAD_PACE_MS 1000   /* a failed umad device is reported again (POLLERR to a poll,
                             * select or epoll; EIO to a blocking read) at most this often:
                             * a receiver that loops on it with no timeout (OpenSM's
                             * umad_receiver: umad_recv(-1), "ERR 5404", again) wakes once a
                             * second instead of spinning (poll.c says where this departs
                             * from the kernel) */

/* --- libc's own functions (libc.c) ------------------------------------------------- */

/* libc's own function `name`, looked up on first use (dlsym RTLD_NEXT); one cached
 * pointer per call site. */
#define NEXT(name)                                                             \
    ({                                                                         \
        static void *slot_;                                                    \
        (__typeof__(&name))next_symbol(&slot_, #name);                         \
    })

/* What NEXT calls: libc's `name`, cached in *slot (libc.c). */
FL_HIDDEN void *next_symbol(void **slot, const char *name);

/* --- configuration and messages (config.c) ----------------------------------------- */

/* FABRICLAB_SOCKNAME; NULL: pass everything through */
extern FL_HIDDEN const char *server_name;
extern FL_HIDDEN const char *tray_name;   /* FABRICLAB_TRAY */
extern FL_HIDDEN struct sockaddr_un server_addr;
extern FL_HIDDEN socklen_t server_len;    /* 0: the path does not fit an address */
extern FL_HIDDEN uid_t server_owner;      /* FABRICLAB_OWNER: the server's uid, or root */
extern FL_HIDDEN char config_problem[256]; /* what is wrong with the environment, or "" */
extern FL_HIDDEN int said_failure, said_gone; /* each message is printed once per process */
extern FL_HIDDEN int remote;              /* FABRICLAB_HOST_ADDR: the server is over TCP */
extern FL_HIDDEN char remote_host[256], remote_port[8]; /* its host and port */
extern FL_HIDDEN char remote_token[FL_TOKEN_SIZE]; /* FABRICLAB_HOST_TOKEN_FILE's token */

/* Whether this process talks to a fabric server at all. */
FL_HIDDEN int active(void);

/* One line "fabriclab: <text>" on stderr, the first time `flag` is used. */
FL_HIDDEN void say_once(int *flag, const char *text);

struct ufd;

/* The umad file `u` (its socket `fd`) fails as the kernel's does when its port goes
 * away (user_mad.c ib_umad_kill_port: agents_dead): the connection ends, reads and
 * writes are EIO and poll is POLLERR alone from then on.  Says `text` once (`flag`)
 * when this is the device's first failure; -1 with errno EIO. */
FL_HIDDEN int device_dead(struct ufd *u, int fd, int *flag, const char *text);

/* The server closed a umad connection: the device fails (device_dead) with the line
 * "went away"; -1 with errno EIO. */
FL_HIDDEN int server_gone(struct ufd *u, int fd);

/* Milliseconds of CLOCK_MONOTONIC (poll.c). */
FL_HIDDEN long mono_ms(void);

/* How long until the failed umad file `u` may be reported to a poll, select or epoll
 * again (DEAD_PACE_MS after the last time), in ms: 0 now, -1 when `u` has not failed. */
FL_HIDDEN long dead_due_in(struct ufd *u);

/* --- connections to the server (hello.c) ------------------------------------------- */

/* A connection of `kind` after HELLO and REPLY: the socket, or -1 with errno and what
 * went wrong in `text`. */
FL_HIDDEN int hello(int kind, unsigned index, uint32_t *token, const void *extra, size_t n,
                    int cloexec, char *text);

/* --- the server over TCP (remote.c, stream.c, unpack.c) --------------------------- */

/* hello() over TCP: the same answer; a umad or issm device is the TCP stream itself
 * (stream.c frames its packets), a TREE's text the directory its archive was unpacked
 * into. */
FL_HIDDEN int remote_hello(int kind, unsigned index, uint32_t *token, const void *extra,
                           size_t n, int cloexec, char *text);

/* recvmsg and sendmsg of one packet, as on a unix connection, for a umad file `u`
 * whose fd is the TCP stream (stream.c; under u's rlock, wlock).  stream_recv: the
 * packet's length, 0 at the end, or -1 with errno (EAGAIN: none, or the rest of one
 * not within WAIT_MS; ECONNRESET: the server is gone; EIO: it lied, the device
 * failed).  stream_send: the packet's length, or -1 with errno (EAGAIN: nothing went;
 * ECONNRESET; EIO: part went and the rest not within `ms`, the device failed). */
FL_HIDDEN ssize_t stream_recv(struct ufd *u, int fd, struct msghdr *m);
FL_HIDDEN ssize_t stream_send(struct ufd *u, int fd, const struct msghdr *m, long ms);

/* Unpacks a TREE archive (`n` bytes) into this process's private directory; 0 with the
 * directory in `text`, or -1 with errno and what is wrong in `text`. */
FL_HIDDEN int unpack_tree(const uint8_t *archive, size_t n, char *text);

/* --- the private directory of a tree over TCP (privdir.c) ------------------------- */

#define FL_STAMP ".fabriclab-tree" /* in its root: whose tree; its mtime, when fetched */

/* Locks this process's directory (privdir_end unlocks) and opens it, made now (*fresh)
 * when the process has none of its own; its path into `path` (PATH_MAX bytes).  The
 * descriptor, or -1 with errno and `text` (unlocked). */
FL_HIDDEN int privdir_begin(char *path, int *fresh, char *text);
FL_HIDDEN void privdir_end(void);

/* What a directory's stamp says (the server and the tray); its length. */
FL_HIDDEN int privdir_stamp(char *buf, size_t n);

/* The tree an ancestor of this process fetched from the same server for the same tray
 * a moment ago, as this process's; 0 with its directory in `text`, or -1. */
FL_HIDDEN int inherit_tree(char *text);

/* --- the tray's tree (tree.c) ------------------------------------------------------ */

/* Where `path` really is: in the tray's tree for /sys/class/infiniband[_mad][/...]
 * (written into buf, PATH_MAX bytes), anything else unchanged; _at: relative to dirfd. */
FL_HIDDEN const char *sys_path(const char *path, char *buf);
FL_HIDDEN const char *sys_path_at(int dirfd, const char *path, char *buf);

/* The path a process sees for `real`, a path in the tray's tree: /sys/class/... (in
 * buf, PATH_MAX bytes); anything else unchanged. */
FL_HIDDEN const char *virtual_path(const char *real, char *buf);

/* `path` made absolute against dirfd (or the working directory), ".", ".." and "//"
 * resolved by name, into out (PATH_MAX bytes); 0, or -1. */
FL_HIDDEN int lexical_path(int dirfd, const char *path, char *out);

/* --- device nodes (devnode.c) ------------------------------------------------------ */

/* Whether `path` is /dev/infiniband/umad<N> or issm<N> (open.c): its kind, N in *index;
 * else 0. */
FL_HIDDEN int dev_kind(const char *path, unsigned *index);

/* stat, statx and access of a device node of the tray: 1 with the call's result in
 * *ret (errno set when -1), or 0 when `path` is not one. */
FL_HIDDEN int dev_node_stat(int dirfd, const char *path, struct stat *st, int *ret);
FL_HIDDEN int dev_node_statx(int dirfd, const char *path, struct statx *st, int *ret);
FL_HIDDEN int dev_node_access(int dirfd, const char *path, int mode, int *ret);

/* --- open umad and issm files (open.c, slots.c) ---------------------------------- */

/* One open umad or issm file: what the kernel keeps in the device's struct file
 * (user_mad.c struct ib_umad_file) beyond what the socket keeps.  Shared by every fd
 * dup'ed from the one opened, and held by every call using it: it lives until the last
 * of them lets go (refs), as the kernel's struct file does (fs/file_table.c fput). */
struct ufd {
    int refs;                 /* fds in the table, and calls running on it */
    int kind;                 /* FL_KIND_UMAD or FL_KIND_ISSM */
    uint32_t token;           /* the server's id of this connection */
    dev_t dev;                /* the socket's identity (fstat at open): a slot whose fd */
    ino_t ino;                /* is no longer this socket is stale */
    pthread_mutex_t lock;     /* the agents and already_used */
    pthread_mutex_t rlock;    /* the receive state (msg ...) */
    pthread_mutex_t wlock;    /* a long message's frames go out together */
    struct {
        uint8_t used, told, kernel_rmpp;
        uint8_t reserved;     /* the server is being told of it: the slot is taken */
    } agent[UMAD_MAX_AGENTS];
    int already_used;         /* an agent was registered: ENABLE_PKEY is EINVAL */
    uint8_t *msg;             /* a message being reassembled, or waiting (ENOSPC) */
    size_t msg_len, msg_have;
    int ready;                /* msg is whole: the fd reads at once */
    uint8_t *scratch;         /* FL_FRAME_MAX bytes: a frame beyond the reader's count */
    int stream;               /* the fd is a TCP stream of packets behind their lengths
                               * (remote.c, stream.c), not a SOCK_SEQPACKET socket */
    uint8_t *in;              /* stream: FL_LENGTH_SIZE + FL_FRAME_MAX bytes, a packet */
    size_t in_have;           /* being read (its length first), so many bytes of it here */
    int dead;                 /* the server went away or broke the protocol (device_dead) */
    long dead_polled;         /* when a poll, select or epoll last reported it failed, and */
    long dead_read;           /* a read; ms of CLOCK_MONOTONIC (mono_ms), 0: never */
};

extern FL_HIDDEN struct ufd *ufds[FD_LIMIT];
extern FL_HIDDEN int ufd_count; /* slots in use: 0 lets every fd call pass at once */

/* The umad or issm file behind `fd` with a reference the caller gives back with
 * ufd_put, or NULL: a stale slot (its fd closed where the library did not see it, as
 * fclose(fdopen()) does, the number perhaps reused) is dropped (slots.c). */
FL_HIDDEN struct ufd *ufd_take(int fd);

/* Whether `fd`'s slot may hold a file: O(1) and no system call, false for nearly every
 * fd of the process (every read and write comes here first). */
static inline int ufd_slot_used(int fd)
{
    if (__builtin_expect(!__atomic_load_n(&ufd_count, __ATOMIC_RELAXED), 1))
        return 0;
    return (unsigned)fd < FD_LIMIT && __atomic_load_n(&ufds[fd], __ATOMIC_RELAXED);
}

/* The umad or issm file behind `fd`, referenced, or NULL (ufd_take when the slot is
 * used). */
static inline struct ufd *ufd_get(int fd) { return ufd_slot_used(fd) ? ufd_take(fd) : NULL; }

/* Gives back a reference (NULL: none); the last frees the file (errno kept). */
FL_HIDDEN void ufd_put(struct ufd *u);

/* ufd_get without the check that the fd is still the file's socket (no system call):
 * for poll, which looks at every fd of every call and changes a revents only when a
 * file has something to say; it checks then (ufd_still). */
FL_HIDDEN struct ufd *ufd_peek_slot(int fd);
static inline struct ufd *ufd_peek(int fd) { return ufd_slot_used(fd) ? ufd_peek_slot(fd) : NULL; }

/* Whether `fd` is still the socket of `u` (from ufd_peek); a stale slot is dropped. */
FL_HIDDEN int ufd_still(int fd, struct ufd *u);

/* Whether `fd` is a umad file with a whole message pending (it reads at once). */
FL_HIDDEN int ufd_pending(int fd);

/* A new file of `kind` on socket `s` in s's slot: 0, or -1 with errno. */
FL_HIDDEN int ufd_open(int s, int kind, uint32_t token);

/* --- what a cancelled thread leaves behind ------------------------------------------
 * A recv, poll, send, connect or close is a cancellation point (pthreads(7)), and
 * OpenSM stops its receiver thread with pthread_cancel while it sits in read.  glibc
 * cancels by unwinding the thread's stack (nptl: forced unwinding); built with
 * -fexceptions, the library's cleanup variables (GCC's cleanup attribute) run then as
 * they do when their block ends: a reference is given back, a lock unlocked. */
#ifndef __EXCEPTIONS
#error "build the host library with -fexceptions (hatch_build.py): see above"
#endif

static inline void ufd_release(struct ufd **u) { ufd_put(*u); }

/* A variable holding a reference, given back when its block ends:
 *   struct ufd *u HELD = ufd_get(fd); */
#define HELD __attribute__((cleanup(ufd_release)))

static inline void unlock_held(pthread_mutex_t **m)
{
    if (*m)
        pthread_mutex_unlock(*m);
}

static inline pthread_mutex_t *lock_held(pthread_mutex_t *m)
{
    pthread_mutex_lock(m);
    return m;
}

/* Locks `m` until UNLOCK() (or the end of the block); one per block. */
#define LOCK(m) pthread_mutex_t *held_ __attribute__((cleanup(unlock_held))) = lock_held(m)
#define UNLOCK() (pthread_mutex_unlock(held_), held_ = NULL)

/* --- MAD classes (ioctl.c, write.c) ------------------------------------------------ */

/* Whether MAD class `c` is one the kernel segments with RMPP (ib_is_mad_class_rmpp). */
static inline int rmpp_class(uint8_t c)
{
    return c == 0x03 || c == 0x06 || c == 0x10 || c == 0x12 || (c >= 0x30 && c <= 0x4F);
}

#endif
