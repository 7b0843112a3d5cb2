"""The one atomic writer: every file groupattn writes appears whole or not at all.

Every file the library writes (checkpoints, JSON summaries and certificates, plots,
graphs) goes through ``atomic_open``:

- the data go to a temporary file created *exclusively* in the target's folder — an
  anonymous ``O_TMPFILE`` inode where the file system supports it (it has no name, so
  nothing can be planted at it and nothing is left behind even by ``SIGKILL``),
  otherwise a randomly named file opened with ``O_CREAT | O_EXCL | O_NOFOLLOW`` (never a
  predictable name, never through a symbolic link);
- the writer writes through the open descriptor, never by reopening a name;
- the data are flushed and ``fsync``-ed, then the file is renamed over the target in
  one step (a symbolic link at the target is replaced, its target left untouched) and
  the folder is ``fsync``-ed;
- a ``SIGKILL`` during the write leaves nothing behind (the file has no name yet); one
  in the instant between naming it and renaming it over the target can leave a
  ``.NAME.<random>.tmp`` file beside the target (the target itself is never partial);
- on any failure — an exception, Ctrl-C, or ``SIGTERM`` while a write is in progress
  (turned into ``SystemExit`` with code 143 for the duration of the write when the
  process has no handler of its own) — the temporary file is removed and an existing
  target is left as it was.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import signal
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

__all__ = ["atomic_open", "check_distinct_outputs", "check_output_path", "write_atomic"]

#: ``O_TMPFILE`` where the platform defines it (Linux); ``0`` elsewhere.
_O_TMPFILE = getattr(os, "O_TMPFILE", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def _folder(path: Path) -> Path:
    return path.parent if str(path.parent) else Path(".")


def check_output_path(path: str | Path, what: str = "output") -> Path:
    """Check that ``path`` can be written by ``atomic_open``, before any work.

    Parameters
    ----------
    path
        The file to write.
    what
        How the caller names it in messages (e.g. ``"--json"``).

    Returns
    -------
    Path
        ``path`` as a ``Path``.

    Raises
    ------
    OSError
        ``IsADirectoryError`` if ``path`` is a folder, ``FileNotFoundError`` if its folder
        does not exist, ``PermissionError`` if the folder cannot be written (the
        temporary file is created there) or an existing file is read-only. The message
        names ``what``, the path and the reason.
    """
    path = Path(path)
    folder = _folder(path)
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, f"cannot write {what} {str(path)!r}: it is a folder")
    if (path.exists() or path.is_symlink()) and not _regular_or_link_to_regular(path):
        raise PermissionError(
            errno.EPERM,
            f"cannot write {what} {str(path)!r}: it is a device, pipe, socket or a link to one, not a regular file",
        )
    if not folder.is_dir():
        raise FileNotFoundError(
            errno.ENOENT,
            f"cannot write {what} {str(path)!r}: the folder {str(folder)!r} does not exist",
        )
    if path.exists() and not path.is_symlink() and not os.access(path, os.W_OK):
        raise PermissionError(
            errno.EACCES, f"cannot write {what} {str(path)!r}: the file is read-only"
        )
    try:  # the only reliable test (root passes os.access everywhere; /proc refuses new files)
        fd, temporary = _create_temporary(folder, path.name)
    except OSError as error:
        raise PermissionError(
            errno.EACCES,
            f"cannot write {what} {str(path)!r}: cannot create a file in the folder {str(folder)!r} "
            f"({error.strerror or error})",
        ) from None
    os.close(fd)
    if temporary is not None:
        with contextlib.suppress(OSError):
            temporary.unlink()
    return path


def _regular_or_link_to_regular(path: Path) -> bool:
    """``path`` is a regular file, or a symbolic link whose target is missing or a regular file."""
    if path.is_symlink():
        return not path.exists() or (path.resolve().is_file() and stat.S_ISREG(path.stat().st_mode))
    return stat.S_ISREG(path.lstat().st_mode)


def check_distinct_outputs(
    paths: dict[str, str | Path | None], inputs: dict[str, str | Path | None] | None = None
) -> None:
    """Refuse two outputs that are the same file, or an output inside (or equal to) an input.

    Parameters
    ----------
    paths
        Option name → output path (``None`` entries are ignored).
    inputs
        Option name → an input file or folder that no output may overwrite.

    Raises
    ------
    FileExistsError
        Naming both options and the path.
    """
    seen: dict[Path, str] = {}
    for option, value in paths.items():
        if value is None:
            continue
        resolved = Path(value).resolve()
        if resolved in seen:
            raise FileExistsError(
                errno.EEXIST,
                f"expected {seen[resolved]} and {option} to name different files, got {str(value)!r} for both",
            )
        seen[resolved] = option
        for name, source in (inputs or {}).items():
            if source is None or not Path(source).exists():
                continue
            base = Path(source).resolve()
            if resolved == base or base in resolved.parents:
                raise FileExistsError(
                    errno.EEXIST,
                    f"expected {option} outside {name} {str(source)!r}, got {str(value)!r}, which would overwrite it",
                )


def _create_temporary(folder: Path, name: str) -> tuple[int, Path | None]:
    """An exclusive temporary file in ``folder``: ``(descriptor, name or None if anonymous)``."""
    if _O_TMPFILE and os.path.isdir("/proc/self/fd"):
        try:
            return os.open(folder, _O_TMPFILE | os.O_RDWR | _O_CLOEXEC, 0o666), None
        except OSError as error:  # file systems without O_TMPFILE: fall back to a named file
            if error.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL, errno.ENOENT):
                raise
    return _create_named(folder, name)


def _create_named(folder: Path, name: str) -> tuple[int, Path]:
    """An exclusive, randomly named temporary file in ``folder`` (never through a link)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC
    for _ in range(100):
        candidate = folder / f".{name}.{secrets.token_hex(8)}.tmp"
        try:
            return os.open(candidate, flags, 0o666), candidate
        except FileExistsError:
            continue
    raise FileExistsError(
        errno.EEXIST, f"atomic_open: cannot create a temporary file in {str(folder)!r}"
    )


def _name_anonymous(fd: int, folder: Path, target: Path) -> Path:
    """Give an ``O_TMPFILE`` inode a fresh random name in ``folder``.

    ``linkat`` through ``/proc/self/fd`` where the file system allows it; otherwise
    (overlay file systems refuse it with ``EXDEV``) the written bytes are copied into
    an exclusive named temporary file — named only for the moment of the copy.
    """
    for _ in range(100):
        candidate = folder / f".{target.name}.{secrets.token_hex(8)}.tmp"
        try:
            os.link(f"/proc/self/fd/{fd}", candidate, follow_symlinks=True)
            return candidate
        except FileExistsError:
            continue
        except OSError:
            break
    copy_fd, named = _create_named(folder, target.name)
    try:
        size = os.fstat(fd).st_size
        with open(f"/proc/self/fd/{fd}", "rb") as source:
            while chunk := source.read(1 << 20):
                os.write(copy_fd, chunk)
        if os.fstat(copy_fd).st_size != size:  # pragma: no cover - a short write
            raise OSError(errno.EIO, f"atomic_open: short copy into {str(named)!r}")
        os.fsync(copy_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            named.unlink()
        raise
    finally:
        os.close(copy_fd)
    return named


def _publish(fd: int, temporary: Path | None, target: Path) -> None:
    """Give the written file its final name in one step."""
    folder = _folder(target)
    if temporary is None:
        temporary = _name_anonymous(fd, folder, target)
    try:
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise
    with contextlib.suppress(OSError):  # make the rename itself durable
        dir_fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _terminate(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def _sigterm_as_exit() -> Iterator[None]:
    """While writing, turn ``SIGTERM`` into ``SystemExit`` (if nobody handles it already)."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL
    ):
        yield
        return
    signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "wb") -> Iterator[IO[Any]]:
    """Open a new version of ``path`` for writing; it replaces ``path`` when the block ends.

    Parameters
    ----------
    path
        The file to write. Its folder must exist.
    mode
        ``"wb"`` (bytes) or ``"w"`` (text, UTF-8).

    Yields
    ------
    IO
        A file object writing to an exclusive temporary file in ``path``'s folder
        (see the module's docstring). When the block ends normally the data are
        flushed, ``fsync``-ed and renamed over ``path``; if it raises (or the process
        gets Ctrl-C or ``SIGTERM``) the temporary file is removed and ``path`` is left
        untouched.

    Examples
    --------
    >>> with atomic_open("checkpoint.pt") as fh:          # doctest: +SKIP
    ...     torch.save(state, fh)
    """
    if mode not in ("wb", "w"):
        raise ValueError(f"atomic_open: expected mode 'wb' or 'w', got {mode!r}")
    target = Path(path)
    if target.is_dir():
        raise IsADirectoryError(
            errno.EISDIR, f"atomic_open: cannot write {str(target)!r}: it is a folder"
        )
    with _sigterm_as_exit():
        fd, temporary = _create_temporary(_folder(target), target.name)
        try:
            encoding = "utf-8" if mode == "w" else None
            with os.fdopen(fd, mode, encoding=encoding, closefd=False) as fh:
                yield fh
                fh.flush()
                os.fsync(fd)
            _publish(fd, temporary, target)
        except BaseException:
            if temporary is not None:
                with contextlib.suppress(OSError):
                    temporary.unlink()
            raise
        finally:
            os.close(fd)


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` through ``atomic_open``."""
    with atomic_open(path, "wb") as fh:
        fh.write(data if isinstance(data, bytes) else data.encode("utf-8"))
