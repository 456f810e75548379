"""A node's data directory on a small filesystem of its own, which can be filled up.

:class:`LoopDisk` is an ext4 filesystem in an image file mounted through a loop device
(root); it can also lose power. :class:`TmpfsDisk` is a tmpfs of a fixed size, which a
user namespace may mount without root (``rt chaos`` run by another user); it can fill
up but not lose power, and what it holds is gone when the run ends.

**Power loss.** A loop device hands every block the filesystem writes to the image
file at once, so the image always holds exactly what has reached the "disk": what
was synced, plus whatever the kernel happened to write back, and never what is
still only in the filesystem's page cache. :meth:`LoopDisk.snapshot` copies the
image while the node's processes are frozen; :meth:`LoopDisk.restore` unmounts
(the page cache goes with the old image) and mounts the copy, so ext4 replays its
journal as after a real power cut. Unsynced data is lost the way a power cut loses
it: files created but never synced vanish, appends not synced are cut.
"""

from __future__ import annotations

import abc
import contextlib
import os
import subprocess
import time
from pathlib import Path

from rt_appliance.log.segments import fsync_dir

__all__ = ["Disk", "LoopDisk", "TmpfsDisk"]

BALLAST = ".chaos-ballast"


def _run(*command: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise OSError(f"{' '.join(command)} failed: {(done.stderr or done.stdout).strip()}")


class Disk(abc.ABC):
    """A filesystem mounted at ``mountpoint`` that :meth:`fill` can fill with ballast."""

    mountpoint: Path
    mounted: bool = False

    @abc.abstractmethod
    def mount(self) -> None:
        """Mount the filesystem at :attr:`mountpoint`."""

    def unmount(self, attempts: int = 50) -> None:
        """Unmount, retrying while a process that just exited still holds it."""
        for attempt in range(attempts):
            if not self.mounted:
                return
            try:
                _run("umount", str(self.mountpoint))
                self.mounted = False
            except OSError:
                if attempt == attempts - 1:
                    raise
                time.sleep(0.1)

    def fill(self) -> int:
        """Take every free byte with a ballast file; returns how many."""
        path = self.mountpoint / BALLAST
        taken = 0
        fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
        try:
            chunk = 64 << 20
            while chunk >= 4096:
                try:
                    os.posix_fallocate(fd, taken, chunk)
                    taken += chunk
                except OSError:
                    chunk //= 2
        finally:
            os.close(fd)
        return taken

    def drain(self) -> None:
        """Give the ballast's room back, durably: a power loss soon after must not bring
        the ballast back (an unlink not yet synced is undone by one), which would leave
        the disk full long after the fault."""
        with contextlib.suppress(FileNotFoundError):
            (self.mountpoint / BALLAST).unlink()
            fsync_dir(self.mountpoint)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.unmount()


class TmpfsDisk(Disk):
    """``mountpoint`` on a tmpfs of ``size_bytes`` (memory, taken as it is written)."""

    def __init__(self, mountpoint: Path, size_bytes: int) -> None:
        self.mountpoint, self.size_bytes = mountpoint, size_bytes
        mountpoint.mkdir(parents=True, exist_ok=True)
        self.mount()

    def mount(self) -> None:
        _run(
            "mount",
            "-t",
            "tmpfs",
            "-o",
            f"size={self.size_bytes},mode=0755",
            "rt-chaos",
            str(self.mountpoint),
        )
        self.mounted = True


class LoopDisk(Disk):
    """``mountpoint`` backed by ``image`` (a sparse file of ``size_bytes``)."""

    def __init__(self, image: Path, mountpoint: Path, size_bytes: int) -> None:
        self.image, self.mountpoint = image, mountpoint
        image.parent.mkdir(parents=True, exist_ok=True)
        mountpoint.mkdir(parents=True, exist_ok=True)
        with open(image, "wb") as f:
            f.truncate(size_bytes)
        _run("mkfs.ext4", "-q", "-F", "-m", "0", str(image))  # no blocks reserved for root
        self.mounted = False
        self.mount()

    def mount(self) -> None:
        _run("mount", "-o", "loop", str(self.image), str(self.mountpoint))
        self.mounted = True

    # -- power loss --------------------------------------------------------------------

    @property
    def _crash_image(self) -> Path:
        return self.image.with_name(self.image.name + ".at-power-loss")

    def snapshot(self) -> None:
        """Copy what has reached the disk (call with every writer frozen)."""
        _run("cp", "--sparse=always", str(self.image), str(self._crash_image))

    def restore(self) -> None:
        """Unmount (every writer must have exited) and mount the snapshot instead."""
        self.unmount()
        os.replace(self._crash_image, self.image)
        self.mount()

    def close(self) -> None:
        """Unmount and keep the image for a post-mortem."""
        with contextlib.suppress(OSError):
            self.unmount()
        with contextlib.suppress(FileNotFoundError):
            self._crash_image.unlink()
