/* fabriclab's host library: /sys/class/infiniband[_mad] as the tray's tree (where it
 * is, asked once), paths rewritten into it, and the path calls that only need the
 * rewrite (fopen, scandir, the stat family, access, chdir, readlink).
 *
 * glibc 2.33 or later only: the stat family is looked up in libc and the __xstat shims
 * call fstatat, which libc.so.6 exports from 2.33 on (before, stat and fstatat were
 * wrappers of __xstat and __fxstatat in libc_nonshared.a and the headers: glibc 2.33's
 * NEWS); an older glibc stops the build with an #error below.  A library built here
 * loads only under a glibc at least as new as the one it was built against (its symbol
 * versions), so at run time fstatat is always there. */
#include "hostlib.h"

#define NO_TREE "/proc/self/fabriclab-no-tree" /* where paths go when there is no tree */

static pthread_once_t tree_once = PTHREAD_ONCE_INIT;
static char tree_root[PATH_MAX]; /* holds class/infiniband; NO_TREE when there is none */

/* Asks the server once where the tray's tree is (a TREE round trip). */
static void tree_init(void)
{
    char text[FL_TEXT_MAX + 1];
    uint32_t token = 0;
    int s = hello(FL_KIND_TREE, 0, &token, NULL, 0, 1, text);
    size_t n = s < 0 ? 0 : strlen(text);
    while (n && (text[n - 1] == '\n' || text[n - 1] == '/'))
        text[--n] = '\0';
    if (s >= 0)
        NEXT(close)(s);
    if (s >= 0 && n && text[0] == '/' && n < sizeof tree_root - 64) {
        memcpy(tree_root, text, n + 1);
        return;
    }
    if (s >= 0)
        snprintf(text, sizeof text, "the fabric server '%s' named no tree for '%s'",
                 server_name, tray_name);
    say_once(&said_failure, text);
    strcpy(tree_root, NO_TREE);
}

/* Where `path` really is: for /sys/class/infiniband[_mad][/...] the same path in the
 * tray's tree (written into buf, PATH_MAX bytes), anything else unchanged.  The first
 * test rejects nearly every other path at its second byte. */
const char *sys_path(const char *path, char *buf)
{
    static const char prefix[] = "/sys/class/infiniband";
    const size_t n = sizeof prefix - 1;
    if (!path || path[0] != '/' || path[1] != 's' || strncmp(path, prefix, n) != 0)
        return path;
    const char *rest = path + n;
    if (!strncmp(rest, "_mad", 4))
        rest += 4;
    if (*rest != '\0' && *rest != '/')
        return path;
    if (!active())
        return path;
    pthread_once(&tree_once, tree_init);
    if (snprintf(buf, PATH_MAX, "%s%s", tree_root, path + 4) >= PATH_MAX)
        snprintf(buf, PATH_MAX, "%s", NO_TREE);
    return buf;
}

/* --- the other path calls: rewritten, then libc's ---------------------------------- */

/* Defines `ret name(params)` calling libc's `name(args)` with the path argument `path`
 * rewritten by sys_path. */
#define PATH_CALL(ret, name, params, ...)                                      \
    ret name params                                                            \
    {                                                                          \
        char buf[PATH_MAX];                                                    \
        path = sys_path(path, buf);                                            \
        return NEXT(name)(__VA_ARGS__);                                        \
    }

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
PATH_CALL(int, stat, (const char *path, struct stat *st), path, st)
PATH_CALL(int, lstat, (const char *path, struct stat *st), path, st)
PATH_CALL(int, stat64, (const char *path, struct stat64 *st), path, st)
PATH_CALL(int, lstat64, (const char *path, struct stat64 *st), path, st)
PATH_CALL(int, fstatat, (int dirfd, const char *path, struct stat *st, int fl), dirfd, path,
          st, fl)
PATH_CALL(int, fstatat64, (int dirfd, const char *path, struct stat64 *st, int fl), dirfd,
          path, st, fl)
PATH_CALL(int, statx,
          (int dirfd, const char *path, int fl, unsigned int mask, struct statx *st), dirfd,
          path, fl, mask, st)
PATH_CALL(int, access, (const char *path, int mode), path, mode)
PATH_CALL(int, faccessat, (int dirfd, const char *path, int mode, int fl), dirfd, path, mode,
          fl)
PATH_CALL(int, chdir, (const char *path), path)
PATH_CALL(ssize_t, readlink, (const char *path, char *out, size_t n), path, out, n)
PATH_CALL(ssize_t, readlinkat, (int dirfd, const char *path, char *out, size_t n), dirfd,
          path, out, n)

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
