"""Writing files into a directory a user names, safely when other users can reach it
(``/tmp``): through directory descriptors, never following a symbolic link, each file
created anew (``O_EXCL``) and renamed into place.

The directory must be the caller's own (by uid), not writable by others, in a parent
that only its owner, root or the sticky bit lets change; entries in it owned by another
uid are refused (:meth:`Dir.check_entries`).  A file written replaces whatever had its
name (a symbolic link included: the link goes, its target is untouched); a directory
entered is opened with ``O_NOFOLLOW`` and must be the caller's too.  Every refusal is
one line naming the path and the uid.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from pathlib import Path

from .errors import InputError, Problem

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
ENTRIES_MAX = 100_000  # entries a check looks at before it gives up (a bound on the walk)


class UnsafeDir(InputError):
    """A directory, or an entry in it, could be someone else's."""


def _refuse(path: str, why: str) -> UnsafeDir:
    return UnsafeDir([Problem(path, why)])


def _failed(path: str, e: OSError) -> InputError:
    return InputError([Problem(path, f"cannot write: {e.strerror or e}")])


def _not_yours(uid: int) -> str:
    return f"is owned by uid {uid}, not by you (uid {os.geteuid()})"


class Dir:
    """An open directory (its descriptor) and the path it is shown by; a context
    manager that closes it."""

    def __init__(self, fd: int, path: str):
        self.fd = fd
        self.path = path

    def __enter__(self) -> Dir:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def ident(self) -> tuple[int, int]:
        """The directory's device and inode: the same directory, whatever its path."""
        st = os.fstat(self.fd)
        return st.st_dev, st.st_ino

    def _at(self, name: str) -> str:
        return f"{self.path.rstrip('/')}/{name}"

    def entry(self, name: str) -> os.stat_result | None:
        """The entry ``name`` itself (a link not followed), or None when there is none."""
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise _failed(self._at(name), e) from None

    def sub(self, name: str, create: bool = True) -> Dir:
        """The directory ``name`` in this one (made 0755 when missing and ``create``),
        never through a symbolic link, and only the caller's own."""
        at = self._at(name)
        try:
            try:
                fd = os.open(name, _DIR | os.O_NOFOLLOW, dir_fd=self.fd)
            except FileNotFoundError:
                if not create:
                    raise
                try:
                    os.mkdir(name, 0o755, dir_fd=self.fd)
                except FileExistsError:  # made meanwhile: opened as it is
                    pass
                fd = os.open(name, _DIR | os.O_NOFOLLOW, dir_fd=self.fd)
        except OSError as e:
            if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise _failed(at, e) from None
            st = self.entry(name)  # (O_DIRECTORY|O_NOFOLLOW on a link: ENOTDIR)
            if st is not None and stat.S_ISLNK(st.st_mode):
                raise _refuse(at, "is a symbolic link: refusing to follow it") from None
            raise _refuse(at, "is not a directory") from None
        d = Dir(fd, at)
        uid = os.fstat(fd).st_uid
        if uid != os.geteuid():
            d.close()
            raise _refuse(at, f"{_not_yours(uid)}: refusing to write into it")
        return d

    def write(self, name: str, data: bytes, mode: int | None = None, aside: Dir | None = None):
        """Replace the file ``name`` with ``data``: written to a new file (in ``aside``, a
        directory on the same file system, else here) that no one else can have opened,
        then renamed over the old name; ``mode`` set exactly when given (0644 less the
        umask otherwise)."""
        tmp_dir = aside or self
        tmp = f".{name}.{os.getpid()}"
        try:
            try:
                fd = os.open(tmp, _NEW, 0o644 if mode is None else mode, dir_fd=tmp_dir.fd)
            except FileExistsError:  # left by a process of the same pid that died
                os.unlink(tmp, dir_fd=tmp_dir.fd)
                fd = os.open(tmp, _NEW, 0o644 if mode is None else mode, dir_fd=tmp_dir.fd)
            try:
                if mode is not None:
                    os.fchmod(fd, mode)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
            try:
                os.rename(tmp, name, src_dir_fd=tmp_dir.fd, dst_dir_fd=self.fd)
            except OSError:
                os.unlink(tmp, dir_fd=tmp_dir.fd)
                raise
        except OSError as e:
            raise _failed(self._at(name), e) from None

    def remove(self, name: str) -> None:
        """Remove the entry ``name`` (a directory with all in it) if there is one; a
        symbolic link is removed, never followed."""
        st = self.entry(name)
        if st is None:
            return
        try:
            if stat.S_ISDIR(st.st_mode):
                shutil.rmtree(name, dir_fd=self.fd)  # descriptor-based: follows no link
            else:
                os.unlink(name, dir_fd=self.fd)
        except OSError as e:
            raise _failed(self._at(name), e) from None

    def names(self) -> list[str]:
        """The entries in this directory."""
        try:
            return os.listdir(self.fd)
        except OSError as e:
            raise _failed(self.path, e) from None

    def check_entries(self, only: tuple[str, ...] | None = None, deep: bool = False) -> None:
        """Refuse when an entry here (``only`` those names; with ``deep`` all below
        them too, without following links) is owned by another uid."""
        me = os.geteuid()
        seen = 0
        todo: list[tuple[Dir, list[str]]] = [(self, list(only) if only else self.names())]
        opened: list[Dir] = []
        try:
            while todo:
                d, names = todo.pop()
                for name in names:
                    st = d.entry(name)
                    if st is None:
                        continue
                    seen += 1
                    if st.st_uid != me:
                        raise _refuse(
                            d._at(name),
                            f"{_not_yours(st.st_uid)}: refusing to write into {self.path}",
                        )
                    if seen > ENTRIES_MAX:
                        raise _refuse(self.path, f"holds more than {ENTRIES_MAX} entries")
                    if deep and stat.S_ISDIR(st.st_mode):
                        sub = d.sub(name, create=False)
                        opened.append(sub)
                        todo.append((sub, sub.names()))
        finally:
            for d in opened:
                d.close()


def open_dir(path: Path | str, create: bool = True) -> Dir:
    """The directory ``path`` (with ``create``, made 0755 if missing, and its parents as
    ``mkdir -p`` makes them), checked: the caller's own, not writable by others, in a
    parent no other user can change.  Its last component may be the caller's own
    symbolic link, never another user's."""
    shown = str(path)
    full = os.path.abspath(path)
    parent, name = os.path.split(full)
    try:
        if create and name:
            os.makedirs(parent, exist_ok=True)
        pfd = os.open(parent, _DIR)
    except OSError as e:
        raise _failed(parent, e) from None
    try:
        _check_parent(pfd, parent, shown)
        if not name:  # "/"
            fd = os.dup(pfd)
        else:
            fd = _open_last(pfd, name, shown, create)
    finally:
        os.close(pfd)
    d = Dir(fd, shown)
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            raise _refuse(shown, f"{_not_yours(st.st_uid)}: refusing to write into it")
        if st.st_mode & 0o002:
            raise _refuse(
                shown,
                f"is writable by every user (mode {stat.S_IMODE(st.st_mode):o}): "
                "refusing to write into it",
            )
    except BaseException:
        d.close()
        raise
    return d


def _check_parent(pfd: int, parent: str, shown: str) -> None:
    """Whoever may rename entries in the parent may swap the directory for their own."""
    st = os.fstat(pfd)
    if st.st_uid not in (0, os.geteuid()):
        raise _refuse(shown, f"is in {parent}, which {_not_yours(st.st_uid)}: refusing it")
    if st.st_mode & 0o002 and not st.st_mode & stat.S_ISVTX:
        raise _refuse(
            shown,
            f"is in {parent}, writable by every user without the sticky bit "
            f"(mode {stat.S_IMODE(st.st_mode):o}): refusing it",
        )


def _open_last(pfd: int, name: str, shown: str, create: bool) -> int:
    try:
        if create:
            try:
                os.mkdir(name, 0o755, dir_fd=pfd)
            except FileExistsError:
                pass
        return os.open(name, _DIR | os.O_NOFOLLOW, dir_fd=pfd)
    except OSError as e:
        if e.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise _failed(shown, e) from None
    # (O_DIRECTORY|O_NOFOLLOW on a link: ENOTDIR) a symbolic link is followed only when
    # it is the caller's own
    link = os.stat(name, dir_fd=pfd, follow_symlinks=False)
    if not stat.S_ISLNK(link.st_mode):
        raise _refuse(shown, "is not a directory")
    if link.st_uid != os.geteuid():
        raise _refuse(shown, f"is a symbolic link that {_not_yours(link.st_uid)}: refusing it")
    try:
        return os.open(name, _DIR, dir_fd=pfd)
    except OSError as e:
        if e.errno == errno.ENOTDIR:
            raise _refuse(shown, "is not a directory") from None
        raise _failed(shown, e) from None
