/* fabriclab's host library: /sys/class/infiniband[_mad] as the tray's tree (where it
 * is, asked again while the process uses it), paths rewritten into it (absolute,
 * relative, or written another way), and the path calls that only need the rewrite
 * (fopen, scandir, the stat family, access, chdir, readlink).
 *
 * glibc 2.33 or later only: the stat family is looked up in libc and the __xstat shims
 * call fstatat, which libc.so.6 exports from 2.33 on (before, stat and fstatat were
 * wrappers of __xstat and __fxstatat in libc_nonshared.a and the headers: glibc 2.33's
 * NEWS); an older glibc stops the build with an #error below.  A library built here
 * loads only under a glibc at least as new as the one it was built against (its symbol
 * versions), so at run time fstatat is always there. */
#include "hostlib.h"

#define NO_TREE "/proc/self/fabriclab-no-tree" /* where paths go when there is no tree */
#define REASK_DEFAULT_MS 10000 /* a server that names no keep-fresh time: ask again after */

static pthread_once_t tree_once = PTHREAD_ONCE_INIT;
static const char *tree_root; /* holds class/infiniband; NO_TREE when there is none */
static size_t tree_len;       /* strlen(tree_root) */
static long long asked_ms;    /* CLOCK_MONOTONIC of the last ask */
static long long reask_ms = REASK_DEFAULT_MS;

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Asks the server where the tray's tree is (a TREE round trip, which also has the
 * server write it fresh now and keep it fresh for the time its REPLY's value gives, in
 * ms); the first answer's root stays the root.  `first`: a failure is said (once). */
static void tree_ask(int first)
{
    char text[FL_TEXT_MAX + 1];
    uint32_t token = 0, live_ms = 0;
    int s = hello(FL_KIND_TREE, 0, &token, NULL, 0, 1, text);
    if (s >= 0)
        live_ms = reply_value;
    size_t n = s < 0 ? 0 : strlen(text);
    while (n && (text[n - 1] == '\n' || text[n - 1] == '/'))
        text[--n] = '\0';
    if (s >= 0)
        NEXT(close)(s);
    if (live_ms) /* ask again before the server stops keeping it fresh */
        __atomic_store_n(&reask_ms, (long long)live_ms / 2, __ATOMIC_RELAXED);
    if (s >= 0 && n && text[0] == '/' && n < PATH_MAX - 64) {
        const char *root = __atomic_load_n(&tree_root, __ATOMIC_ACQUIRE);
        if (!root || !strcmp(root, NO_TREE)) { /* kept for the process: never freed */
            char *copy = strdup(text);
            if (copy) {
                __atomic_store_n(&tree_len, n, __ATOMIC_RELAXED);
                __atomic_store_n(&tree_root, copy, __ATOMIC_RELEASE);
            }
        }
        return;
    }
    if (!first)
        return; /* the root named before stays; the server's going is said elsewhere */
    if (s >= 0)
        snprintf(text, sizeof text, "the fabric server '%s' named no tree for '%s'",
                 server_name, tray_name);
    say_once(&said_failure, text);
    __atomic_store_n(&tree_len, sizeof NO_TREE - 1, __ATOMIC_RELAXED);
    __atomic_store_n(&tree_root, NO_TREE, __ATOMIC_RELEASE);
}

static void tree_init(void)
{
    __atomic_store_n(&asked_ms, now_ms(), __ATOMIC_RELAXED);
    tree_ask(1);
}

/* The tray's tree, fresh: asked for on first use, and again (by one thread, the others
 * go on) when the last ask is older than half the time the server keeps a tree fresh
 * after an ask (hostlink.py: 30 s), so a process reading now and then never reads a
 * frozen tree.  The root, or NO_TREE. */
static const char *tree_use(void)
{
    pthread_once(&tree_once, tree_init);
    long long now = now_ms(), last = __atomic_load_n(&asked_ms, __ATOMIC_RELAXED);
    if (now - last >= __atomic_load_n(&reask_ms, __ATOMIC_RELAXED) &&
        __atomic_compare_exchange_n(&asked_ms, &last, now, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_RELAXED))
        tree_ask(0);
    return __atomic_load_n(&tree_root, __ATOMIC_ACQUIRE);
}

/* Whether `p` is /sys/class/infiniband or infiniband_mad, or a path below them: the
 * part after "/sys", or NULL. */
static const char *in_class(const char *p)
{
    static const char prefix[] = "/sys/class/infiniband";
    if (strncmp(p, prefix, sizeof prefix - 1))
        return NULL;
    const char *rest = p + sizeof prefix - 1;
    if (!strncmp(rest, "_mad", 4))
        rest += 4;
    return *rest == '\0' || *rest == '/' ? p + 4 : NULL;
}

/* `path` made absolute (against dirfd's directory, or the working directory) with "",
 * "." and ".." components resolved by name, into out (PATH_MAX bytes); 0, or -1 when
 * it does not fit or the base is unknown.  No component above the tree's class
 * directories is a symbolic link on a host (/, /sys, /sys/class, /dev,
 * /dev/infiniband), so resolving ".." by name is what the kernel does there. */
int lexical_path(int dirfd, const char *path, char *out)
{
    char base[PATH_MAX];
    size_t n = 0;
    if (path[0] != '/') {
        if (dirfd == AT_FDCWD) {
            if (!NEXT(getcwd)(base, sizeof base))
                return -1;
        } else {
            char link[64];
            snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
            ssize_t k = NEXT(readlink)(link, base, sizeof base - 1);
            if (k <= 0 || base[0] != '/')
                return -1;
            base[k] = '\0';
        }
        const char *v = virtual_path(base, out); /* a working directory in the tree */
        if (v != base)
            memmove(base, v, strlen(v) + 1);
        n = strlen(base);
        memcpy(out, base, n + 1);
        while (n && out[n - 1] == '/')
            n--; /* "/" itself: components are added after it */
    }
    for (const char *p = path; *p;) {
        while (*p == '/')
            p++;
        const char *end = strchrnul(p, '/');
        size_t len = (size_t)(end - p);
        if (len == 2 && p[0] == '.' && p[1] == '.') {
            while (n && out[n - 1] != '/')
                n--;
            if (n)
                n--; /* the slash before it; the root stays "" here, "/" below */
        } else if (len && !(len == 1 && p[0] == '.')) {
            if (n + 1 + len >= PATH_MAX)
                return -1;
            out[n++] = '/';
            memcpy(out + n, p, len);
            n += len;
        }
        p = end;
    }
    if (!n)
        out[n++] = '/';
    out[n] = '\0';
    return 0;
}

/* Whether a path not starting with "/sys/class/infiniband" may still name a place in
 * the tree: a relative one naming it ("class/infiniband" from /sys), or an absolute
 * one written another way ("//sys", "/sys/./class", "/sys/class/../class"). */
static int may_name_tree(const char *path)
{
    if (!strstr(path, "infiniband"))
        return 0;
    return path[0] != '/' || strstr(path, "//") || strstr(path, "/.");
}

/* Where `path` (relative to dirfd) really is: for /sys/class/infiniband[_mad][/...]
 * the same path in the tray's tree (written into buf, PATH_MAX bytes), anything else
 * unchanged.  The first test rejects nearly every absolute path at its second byte. */
const char *sys_path_at(int dirfd, const char *path, char *buf)
{
    if (!path)
        return path;
    const char *rest = path[0] == '/' && path[1] == 's' ? in_class(path) : NULL;
    char norm[PATH_MAX];
    if (rest && strstr(rest, "/..") && active() && !lexical_path(AT_FDCWD, path, norm)) {
        rest = in_class(norm); /* "/sys/class/infiniband/../../block": out of the tree */
        if (!rest)
            return strcpy(buf, norm);
    } else if (!rest && may_name_tree(path) && active() && !lexical_path(dirfd, path, norm)) {
        rest = in_class(norm);
    }
    if (!rest || !active())
        return path;
    const char *root = tree_use();
    if (snprintf(buf, PATH_MAX, "%s%s", root, rest) >= PATH_MAX)
        snprintf(buf, PATH_MAX, "%s", NO_TREE);
    return buf;
}

const char *sys_path(const char *path, char *buf) { return sys_path_at(AT_FDCWD, path, buf); }

/* The path a process sees for `real`, a path in the tray's tree: /sys/class/... (in
 * buf, PATH_MAX bytes); anything else unchanged. */
const char *virtual_path(const char *real, char *buf)
{
    const char *root = __atomic_load_n(&tree_root, __ATOMIC_ACQUIRE);
    size_t n = __atomic_load_n(&tree_len, __ATOMIC_RELAXED);
    if (!root || strncmp(real, root, n) || strncmp(real + n, "/class/infiniband", 17))
        return real;
    const char *rest = real + n + 17;
    if (!strncmp(rest, "_mad", 4))
        rest += 4;
    if (*rest && *rest != '/')
        return real;
    snprintf(buf, PATH_MAX, "/sys%s", real + n);
    return buf;
}

/* --- the other path calls: rewritten, then libc's ---------------------------------- */

/* Defines `ret name(params)` calling libc's `name(args)` with the path argument `path`
 * (relative to `dirfd`) rewritten by sys_path_at; `pre` may answer first. */
#define PATH_CALL_AT(ret, name, params, dirfd, pre, ...)                       \
    ret name params                                                            \
    {                                                                          \
        pre;                                                                   \
        char buf[PATH_MAX];                                                    \
        path = sys_path_at(dirfd, path, buf);                                  \
        return NEXT(name)(__VA_ARGS__);                                        \
    }
#define PATH_CALL(ret, name, params, ...)                                      \
    PATH_CALL_AT(ret, name, params, AT_FDCWD, (void)0, __VA_ARGS__)
/* /dev/infiniband/umad<N> and issm<N> answered as the kernel's nodes (devnode.c) */
#define DEV_STAT(dirfd, st)                                                    \
    int r_;                                                                    \
    if (dev_node_stat(dirfd, path, (struct stat *)(st), &r_))                  \
    return r_
#define DEV_STATX(dirfd, st)                                                   \
    int r_;                                                                    \
    if (dev_node_statx(dirfd, path, st, &r_))                                  \
    return r_
#define DEV_ACCESS(dirfd, mode)                                                \
    int r_;                                                                    \
    if (dev_node_access(dirfd, path, mode, &r_))                               \
    return r_

PATH_CALL(FILE *, fopen, (const char *path, const char *mode), path, mode)
PATH_CALL(FILE *, fopen64, (const char *path, const char *mode), path, mode)
PATH_CALL(int, scandir,
          (const char *path, struct dirent ***list, int (*sel)(const struct dirent *),
           int (*cmp)(const struct dirent **, const struct dirent **)),
          path, list, sel, cmp)
PATH_CALL(int, scandir64,
          (const char *path, struct dirent64 ***list, int (*sel)(const struct dirent64 *),
           int (*cmp)(const struct dirent64 **, const struct dirent64 **)),
          path, list, sel, cmp)
PATH_CALL_AT(int, stat, (const char *path, struct stat *st), AT_FDCWD, DEV_STAT(AT_FDCWD, st),
             path, st)
PATH_CALL_AT(int, lstat, (const char *path, struct stat *st), AT_FDCWD,
             DEV_STAT(AT_FDCWD, st), path, st)
PATH_CALL_AT(int, stat64, (const char *path, struct stat64 *st), AT_FDCWD,
             DEV_STAT(AT_FDCWD, st), path, st)
PATH_CALL_AT(int, lstat64, (const char *path, struct stat64 *st), AT_FDCWD,
             DEV_STAT(AT_FDCWD, st), path, st)
PATH_CALL_AT(int, fstatat, (int dirfd, const char *path, struct stat *st, int fl), dirfd,
             DEV_STAT(dirfd, st), dirfd, path, st, fl)
PATH_CALL_AT(int, fstatat64, (int dirfd, const char *path, struct stat64 *st, int fl), dirfd,
             DEV_STAT(dirfd, st), dirfd, path, st, fl)
PATH_CALL_AT(int, statx,
             (int dirfd, const char *path, int fl, unsigned int mask, struct statx *st), dirfd,
             DEV_STATX(dirfd, st), dirfd, path, fl, mask, st)
PATH_CALL_AT(int, access, (const char *path, int mode), AT_FDCWD, DEV_ACCESS(AT_FDCWD, mode),
             path, mode)
PATH_CALL_AT(int, faccessat, (int dirfd, const char *path, int mode, int fl), dirfd,
             DEV_ACCESS(dirfd, mode), dirfd, path, mode, fl)
PATH_CALL(int, chdir, (const char *path), path)
PATH_CALL(ssize_t, readlink, (const char *path, char *out, size_t n), path, out, n)
PATH_CALL_AT(ssize_t, readlinkat, (int dirfd, const char *path, char *out, size_t n), dirfd,
             (void)0, dirfd, path, out, n)

/* glibc before 2.33 compiled stat() into calls of these (still exported for old
 * binaries); on x86-64 their struct is the kernel's, so they are stat() and friends.
 * They call fstatat, a function of libc.so.6 from glibc 2.33 on; with an older glibc's
 * headers fstatat would be an inline call of __fxstatat, that is of the shim below,
 * which would call itself. */
#if defined(__GLIBC__) && (__GLIBC__ < 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ < 33))
#error "fabriclab: the host library needs glibc 2.33 or later (stat and fstatat exported by libc.so.6)"
#endif
#define XSTAT(name, call, ...)                                                   \
    int name(int ver, __VA_ARGS__);                                            \
    int name(int ver, __VA_ARGS__)                                             \
    {                                                                          \
        (void)ver;                                                             \
        return call;                                                           \
    }
XSTAT(__xstat, fstatat(AT_FDCWD, path, st, 0), const char *path, struct stat *st)
XSTAT(__lxstat, fstatat(AT_FDCWD, path, st, AT_SYMLINK_NOFOLLOW), const char *path,
      struct stat *st)
XSTAT(__xstat64, fstatat64(AT_FDCWD, path, st, 0), const char *path, struct stat64 *st)
XSTAT(__lxstat64, fstatat64(AT_FDCWD, path, st, AT_SYMLINK_NOFOLLOW), const char *path,
      struct stat64 *st)
XSTAT(__fxstatat, fstatat(dirfd, path, st, fl), int dirfd, const char *path,
      struct stat *st, int fl)
XSTAT(__fxstatat64, fstatat64(dirfd, path, st, fl), int dirfd, const char *path,
      struct stat64 *st, int fl)
