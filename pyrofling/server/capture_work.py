"""The work a game's request needs from the machine (the capture shell's, :mod:`pyrofling.server.capture`):
mapping a shared-memory game's images, and PyroFling's Vulkan layer's device, images and reads through
:mod:`pyrofling.server.vulkan_import`.  Each returns why it could not, in words, or None."""

from __future__ import annotations

import fcntl
import logging
import mmap
import os
import stat
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from pyrofling.core.host.capture_session import (
    CheckVulkan,
    HostWork,
    ImportImages,
    MapImages,
    OpenDevice,
    ReadImage,
)
from pyrofling.server.vulkan_import import ImportedGroup, VulkanError, VulkanHost, vulkan_problem
from pyrofling.wire import capture as m

log = logging.getLogger(__name__)


@dataclass(slots=True)
class GameMemory:
    """What the host holds of one game's images."""

    images: list[npt.NDArray[np.uint8]] = field(default_factory=list)
    pixel_format: str = ""
    vk_device: Any = None  # a Vulkan layer's GPU, once it said which (vulkan_import.ImportDevice)
    vk_group: ImportedGroup | None = None

    def release(self) -> dict[str, Any] | None:
        """The game left: let its memory go (an image the encoder still reads stays valid until it is done);
        the summary of its Vulkan images, if it had any."""
        self.images = []
        group, self.vk_group = self.vk_group, None
        if group is None:
            return None
        summary = group_summary(group)
        group.close()
        return summary


class CaptureWork:
    """Does a :class:`~pyrofling.core.host.capture_session.HostWork` for a game."""

    def __init__(self) -> None:
        self._vulkan: VulkanHost | None = None
        self._vulkan_problem: str | None = None

    def close(self) -> None:
        if self._vulkan is not None:
            self._vulkan.close()
            self._vulkan = None

    def do(self, work: HostWork, game: GameMemory, fds: list[int]) -> tuple[str | None, str]:
        """(why it could not be done or None, the images in words)."""
        if isinstance(work, CheckVulkan):
            return self._vulkan_ready(), ""
        if isinstance(work, OpenDevice):
            assert self._vulkan is not None
            try:
                game.vk_device = self._vulkan.device_for(work.device)
            except VulkanError as exc:
                return str(exc), ""
            if game.vk_device is None:
                gpus = ", ".join(g.name for g in self._vulkan.gpus) or "none"
                return f"the game's GPU is not one this host can open (this host has: {gpus})", ""
            return None, ""
        if isinstance(work, MapImages):
            group = work.group
            return map_images(game, group, fds), f"{group.width}x{group.height} {group.format.name}"
        if isinstance(work, ImportImages):
            vk = work.group
            try:
                imported = ImportedGroup(game.vk_device, vk, fds)
            except VulkanError as exc:
                return str(exc), ""
            if game.vk_group is not None:
                game.vk_group.close()  # arrays the encoder still reads stay valid: they are the host's memory
            game.vk_group = imported
            return None, f"{vk.width}x{vk.height} {m.VkFormat(vk.vk_format).name} on {game.vk_device.ids.name}"
        if isinstance(work, ReadImage):
            assert game.vk_group is not None
            try:
                game.vk_group.read(work.present, fds[0] if work.semaphore else None)
            except VulkanError as exc:
                return str(exc), ""
            return None, ""
        raise TypeError(f"unknown work {work!r}")

    def _vulkan_ready(self) -> str | None:
        """Why this host cannot take Vulkan games (said once in the log), or None once its instance exists."""
        if self._vulkan is not None:
            return None
        if self._vulkan_problem is None:
            problem = vulkan_problem()
            if problem is None:
                try:
                    self._vulkan = VulkanHost()
                    return None
                except Exception as exc:  # the driver's word, whatever it is: the host goes on without Vulkan
                    problem = f"cannot create a Vulkan instance: {exc!r}"
            self._vulkan_problem = f"this host cannot read Vulkan games: {problem}"
            log.warning("capture: %s; other games and sources are unaffected", self._vulkan_problem)
        return self._vulkan_problem


def map_images(game: GameMemory, group: m.ImageGroup, fds: list[int]) -> str | None:
    """Map a shared-memory game's images read-only; why not, or None."""
    images = []
    for fd in fds:
        problem = check_memfd(fd, group.image_bytes)
        if problem is not None:
            return problem
        mapping = mmap.mmap(fd, group.image_bytes, mmap.MAP_SHARED, mmap.PROT_READ)
        bpp = group.format.bytes_per_pixel
        images.append(np.ndarray((group.height, group.width, bpp), np.uint8, mapping, 0, (group.stride, bpp, 1)))
    game.images, game.pixel_format = images, group.format.av_name
    return None


def check_memfd(fd: int, needed: int) -> str | None:
    """Why ``fd`` cannot back an image of ``needed`` bytes, or None.

    It must be sealed against shrinking: a game that truncated a mapped file
    under the encoder would crash the host with SIGBUS.
    """
    try:
        st = os.fstat(fd)
    except OSError as exc:
        return f"cannot stat the image fd: {exc.strerror}"
    if not stat.S_ISREG(st.st_mode):
        return "an image fd must be a memfd"
    if st.st_size < needed:
        return f"the image memfd has {st.st_size} bytes, the image needs {needed}"
    try:
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
    except OSError:
        return "the image fd is not a memfd (no seals)"
    if not seals & fcntl.F_SEAL_SHRINK:
        return "the image memfd must be sealed with F_SEAL_SHRINK"
    return None


def _median(values: Any) -> float | None:
    ordered = sorted(values)
    return round(ordered[len(ordered) // 2], 3) if ordered else None


def group_summary(group: ImportedGroup) -> dict[str, Any]:
    st = group.stats
    return {
        "gpu": group.device.ids.name,
        "format": m.VkFormat(group.group.vk_format).name,
        "size": f"{group.group.width}x{group.group.height}",
        "presents": st.presents,
        "semaphores_imported": st.semaphores_imported,
        "semaphores_assumed": st.semaphores_assumed,
        "submit_ms_median": _median(st.submit_ms),
        "wait_ms_median": _median(st.wait_ms),
    }
