/* fabriclab's host library: a TREE archive from a server over TCP (remote.c), checked
 * and unpacked into this process's private directory, which tree.c then uses as the
 * tree's root as it uses the directory a unix connection names.
 *
 * The archive (ib/hostwire.py, ib/treearchive.py): entries of FL_ENTRY_SIZE bytes (u8
 * type, u8 0, u16 LE path length, u32 LE data length), the path, the data.  Nothing
 * from the server is trusted, and the whole archive is checked before anything is
 * written: every length against what is left; a path is relative, at most
 * FL_ENTRY_PATH_MAX bytes, without NUL, empty, '.' or '..' components; a symlink's
 * target is relative, its '..' components come first and no more of them than the
 * link's depth, so (every directory on the way being a real one, every link checked
 * alike) it resolves inside the tree.  Entries are made under the private directory
 * with *at() calls from its descriptor, parents opened with O_NOFOLLOW, so nothing is
 * written through a link or outside.  The directory is this process's (privdir.c);
 * asking again rewrites it in place (each file and link to a temporary name, then
 * renamed over the old one), and it is stamped last, once whole.  Directories are
 * 0755 and files 0444, as sysfs makes them (fs/sysfs/dir.c; kernfs attributes 0444
 * when read-only). */
#include "hostlib.h"

/* The temporary name a file or link is written under (this process's: a directory
 * may be refreshed by an ancestor's process too) */
static char NEW[32];

static void new_name(void) { snprintf(NEW, sizeof NEW, ".fabriclab-new-%d", (int)getpid()); }

/* Whether `p` (n bytes) is a relative path of plain components. */
static int plain_path(const char *p, size_t n)
{
    if (!n || n > FL_ENTRY_PATH_MAX || memchr(p, 0, n))
        return 0;
    for (size_t at = 0; at <= n;) {
        const char *end = memchr(p + at, '/', n - at);
        size_t len = end ? (size_t)(end - (p + at)) : n - at;
        int dots = len <= 2 && p[at] == '.' && (len == 1 || p[at + 1] == '.');
        if (!len || dots)
            return 0;
        at += len + 1;
    }
    return 1;
}

/* Whether a link at `path` (depth = its '/' count) may point at `t` (n bytes). */
static int inside_target(const char *path, size_t plen, const char *t, size_t n)
{
    if (!n || n >= PATH_MAX || memchr(t, 0, n) || t[0] == '/')
        return 0;
    size_t depth = 0, ups = 0, at = 0;
    for (size_t i = 0; i < plen; i++)
        depth += path[i] == '/';
    while (at + 2 <= n && t[at] == '.' && t[at + 1] == '.' &&
           (at + 2 == n || t[at + 2] == '/'))
        ups++, at += 3;
    if (ups > depth)
        return 0;
    return at >= n || plain_path(t + at, n - at);
}

/* The directory the last entry went into, kept open: an archive lists a directory's
 * files together, so most entries need no walk from the top. */
struct parent {
    char path[FL_ENTRY_PATH_MAX + 1];
    size_t len;
    int fd; /* -1: none */
};

/* The directory `path` (len bytes, 0: the top) names under `top`, walked from the top
 * one real directory at a time (O_NOFOLLOW), or the cached one; -1 with errno. */
static int parent_dir(int top, struct parent *c, const char *path, size_t len)
{
    if (!len)
        return top;
    if (c->fd >= 0 && c->len == len && !memcmp(c->path, path, len))
        return c->fd;
    char name[FL_ENTRY_PATH_MAX + 1];
    memcpy(name, path, len);
    name[len] = '\0';
    int dir = top;
    for (char *comp = name, *slash = name; slash; comp = slash + 1) {
        slash = strchr(comp, '/');
        if (slash)
            *slash = '\0';
        int next = NEXT(openat)(dir, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int err = errno;
        if (dir != top)
            NEXT(close)(dir);
        if (next < 0)
            return errno = err, -1;
        dir = next;
    }
    if (c->fd >= 0)
        NEXT(close)(c->fd);
    memcpy(c->path, path, len);
    c->len = len;
    return c->fd = dir;
}

/* Writes a file's or link's content under `as` in `dir` (a stale one removed first);
 * 0, or -1 with errno. */
static int make_new(int dir, const char *as, int type, const uint8_t *data, size_t dlen)
{
    for (int tries = 0; tries < 2; tries++) {
        if (tries)
            unlinkat(dir, as, 0);
        if (type == FL_ENTRY_SYMLINK) {
            char target[PATH_MAX];
            memcpy(target, data, dlen);
            target[dlen] = '\0';
            if (symlinkat(target, dir, as) == 0)
                return 0;
            if (errno != EEXIST)
                return -1;
            continue;
        }
        int fd = NEXT(openat)(dir, as, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                              0444);
        if (fd < 0 && errno == EEXIST)
            continue;
        if (fd < 0)
            return -1;
        int err = 0;
        while (!err && dlen) {
            ssize_t w = NEXT(write)(fd, data, dlen);
            if (w < 0 && errno != EINTR)
                err = errno;
            else if (w > 0)
                data += w, dlen -= (size_t)w;
        }
        NEXT(close)(fd);
        return err ? (errno = err, -1) : 0;
    }
    return errno = EEXIST, -1;
}

/* Makes one entry under `top`: in a `fresh` directory at once, else under NEW then
 * renamed over the old one; 0, or -1 with errno. */
static int make(int top, struct parent *c, int fresh, int type, const char *path,
                size_t plen, const uint8_t *data, size_t dlen)
{
    const char *slash = memrchr(path, '/', plen);
    size_t len = slash ? (size_t)(slash - path) : 0;
    int dir = parent_dir(top, c, path, len);
    if (dir < 0)
        return -1;
    char name[FL_ENTRY_PATH_MAX + 1];
    size_t n = slash ? plen - len - 1 : plen;
    memcpy(name, slash ? slash + 1 : path, n);
    name[n] = '\0';
    struct stat st;
    int err = 0;
    if (type == FL_ENTRY_DIR) {
        if (mkdirat(dir, name, 0755) < 0 &&
            (errno != EEXIST || NEXT(fstatat)(dir, name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
             !S_ISDIR(st.st_mode)))
            err = errno == EEXIST ? ENOTDIR : errno;
    } else if (fresh) {
        err = make_new(dir, name, type, data, dlen) < 0 ? errno : 0;
    } else if (make_new(dir, NEW, type, data, dlen) < 0 ||
               renameat(dir, NEW, dir, name) < 0) {
        err = errno;
        unlinkat(dir, NEW, 0);
    }
    return err ? (errno = err, -1) : 0;
}

/* Goes through the archive's entries: checks each (cache NULL), or makes each under
 * `top` (they were all checked); 0, or -1 with errno and the reason in `text`. */
static int entries(int top, int fresh, struct parent *cache, const uint8_t *a, size_t n,
                   char *text)
{
    for (size_t at = 0, count = 0; at < n; count++) {
        if (n - at < FL_ENTRY_SIZE) {
            snprintf(text, FL_TEXT_MAX, "entry %zu is cut short", count);
            return errno = EPROTO, -1;
        }
        int type = a[at], zero = a[at + 1];
        size_t plen = (size_t)a[at + 2] | (size_t)a[at + 3] << 8;
        size_t dlen = (size_t)a[at + 4] | (size_t)a[at + 5] << 8 | (size_t)a[at + 6] << 16 |
                      (size_t)a[at + 7] << 24;
        const char *path = (const char *)a + at + FL_ENTRY_SIZE;
        size_t left = n - at - FL_ENTRY_SIZE; /* bytes after the entry's head */
        const uint8_t *data = a + at + FL_ENTRY_SIZE + (left < plen ? 0 : plen);
        const char *bad = NULL;
        if (plen > left || dlen > left - plen)
            bad = "is longer than the archive";
        else if (zero || type < FL_ENTRY_DIR || type > FL_ENTRY_SYMLINK)
            bad = "is of no known type";
        else if (!plain_path(path, plen))
            bad = "has a path that is not relative and plain (no '.', '..' or '/' first)";
        else if (type == FL_ENTRY_DIR && dlen)
            bad = "is a directory with data";
        else if (type == FL_ENTRY_SYMLINK &&
                 !inside_target(path, plen, (const char *)data, dlen))
            bad = "is a symbolic link that points out of the tree";
        if (bad) {
            snprintf(text, FL_TEXT_MAX, "entry %zu %s", count, bad);
            return errno = EPROTO, -1;
        }
        if (cache && make(top, cache, fresh, type, path, plen, data, dlen) < 0) {
            int e = errno;
            snprintf(text, FL_TEXT_MAX, "entry %zu (%.*s) cannot be made: %s", count,
                     (int)(plen < 200 ? plen : 200), path, strerror(e));
            return errno = e, -1;
        }
        at += FL_ENTRY_SIZE + plen + dlen;
    }
    return 0;
}

/* Checks every entry of the archive, then (all good) makes them under `top`; 0, or -1
 * with errno and the reason in `text`. */
static int unpack_into(int top, int fresh, const uint8_t *a, size_t n, char *text)
{
    struct parent cache = {.fd = -1};
    int r = entries(top, fresh, NULL, a, n, text);
    if (!r)
        r = entries(top, fresh, &cache, a, n, text);
    int err = errno;
    if (cache.fd >= 0)
        NEXT(close)(cache.fd);
    errno = err;
    return r;
}

/* Unpacks a TREE archive (`n` bytes) into this process's private directory; 0 with
 * the directory in `text`, or -1 with errno and what is wrong in `text`. */
int unpack_tree(const uint8_t *archive, size_t n, char *text)
{
    char why[FL_TEXT_MAX], root[PATH_MAX];
    int fresh;
    int top = privdir_begin(root, &fresh, text);
    if (top < 0)
        return -1;
    new_name(); /* under privdir's lock */
    int r = unpack_into(top, fresh, archive, n, why);
    if (!r) { /* stamped last: another process may take it once it is whole */
        char stamp[512];
        int k = privdir_stamp(stamp, sizeof stamp);
        if (k > 0 && k < (int)sizeof stamp &&
            make_new(top, NEW, FL_ENTRY_FILE, (const uint8_t *)stamp, (size_t)k) == 0)
            renameat(top, NEW, top, FL_STAMP);
    }
    int err = errno;
    NEXT(close)(top);
    privdir_end();
    if (r)
        snprintf(text, FL_TEXT_MAX,
                 "the fabric server '%.256s' sent a tree that is not one: %.1024s",
                 server_name, why);
    else
        memcpy(text, root, strlen(root) + 1); /* shorter than PATH_MAX - 256 */
    errno = err;
    return r;
}
