"""Reading the images PyroFling's Vulkan layer presents: the one module that talks to a GPU driver.

The layer exports each image's memory as an OPAQUE_FD; the host imports it into
images of its own on the same GPU (found by the UUIDs / LUID the layer sends),
and on each present records a copy into host memory: an acquire barrier from the
external queue family (the layer's release barrier, old → new layout), a copy to
a buffer, a barrier to host reads, waiting on the layer's release semaphore where
the driver can import it.  The encoder then reads that host memory in its one
colour-conversion pass.

The host memory is a numpy array the driver writes into directly where
``VK_EXT_external_memory_host`` exists (every desktop driver and lavapipe): no
CPU copy, and the array outlives the Vulkan objects, so an encoder still reading
a replaced group's last frame is safe.  Without it, a mapped buffer is copied
into the array once.

Uses the PyPI ``vulkan`` binding (cffi over the system loader, an optional
extra); :func:`vulkan_problem` says why it cannot be used.  The host's own
instance never loads the capture layer (:func:`instance_environment`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import stat
import time
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from pyrofling.wire import capture as m

log = logging.getLogger(__name__)

#: VkStructureType / enum values the binding spells long; named once here.
_OPAQUE_FD = 0x1  # VK_EXTERNAL_*_HANDLE_TYPE_OPAQUE_FD_BIT
_HOST_ALLOCATION = 0x80  # VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT
_QUEUE_FAMILY_EXTERNAL = 0xFFFF_FFFE
_LAYOUT_TRANSFER_SRC = 6
_TIMEOUT_NS = 2_000_000_000  # a copy that takes this long is a hung GPU, not a slow one
#: Host memory one game's images may take (three 4K images are 100 MiB): a bound on what a game can make
#: the host allocate.
MAX_HOST_BYTES = 512 << 20

#: Environment a host's instance is created with: PyroFling's layer is implicit when ``PYROFLING=1`` and
#: explicit through VK_INSTANCE_LAYERS; either would make the host present into itself.
_LAYER_DISABLE_ENV = "DISABLE_PYROFLING"


class VulkanError(Exception):
    """Why images could not be imported or read (the reply's reason)."""


def instance_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The environment changes that keep PyroFling's capture layer out of the host's own instance."""
    changes = {_LAYER_DISABLE_ENV: "1"}
    for name in ("VK_INSTANCE_LAYERS", "VK_LOADER_LAYERS_ENABLE"):
        if name in env:
            kept = [layer for layer in env[name].split(":") if layer and "pyrofling_capture" not in layer]
            changes[name] = ":".join(kept)
    return changes


@contextlib.contextmanager
def _environment(changes: Mapping[str, str]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in changes}
    os.environ.update(changes)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def vulkan_problem() -> str | None:
    """Why this host cannot read Vulkan images (None: it can): the binding or the loader is missing."""
    try:
        import vulkan  # noqa: F401
    except ImportError:
        return "the Python Vulkan binding is not installed (pip install 'pyrofling[vulkan]')"
    except OSError as exc:
        return f"no Vulkan loader ({exc}; install libvulkan1 and a driver, e.g. mesa-vulkan-drivers)"
    return None


@dataclass(frozen=True, slots=True)
class DeviceIds:
    name: str
    device_uuid: bytes
    driver_uuid: bytes
    luid: bytes
    luid_valid: bool

    def matches(self, want: m.Device) -> bool:
        """PyroFling's rule: the same LUID (where both have one) or the same device and driver UUIDs."""
        if want.luid_valid and self.luid_valid and want.luid == self.luid:
            return True
        return want.device_uuid == self.device_uuid and want.driver_uuid == self.driver_uuid


class VulkanHost:
    """The host's Vulkan instance and, per GPU a layer names, a device that imports its images."""

    def __init__(self) -> None:
        import vulkan as vk

        self.vk: Any = vk
        app = vk.VkApplicationInfo(
            pApplicationName="pyrofling host", apiVersion=vk.VK_MAKE_VERSION(1, 2, 0), pEngineName="pyrofling"
        )
        with _environment(instance_environment(os.environ)):
            self.instance = vk.vkCreateInstance(vk.VkInstanceCreateInfo(pApplicationInfo=app), None)
        self._gpus: list[tuple[Any, DeviceIds]] = []
        for physical in vk.vkEnumeratePhysicalDevices(self.instance):
            self._gpus.append((physical, self._ids(physical)))
        self._devices: dict[bytes, ImportDevice] = {}

    def _ids(self, physical: Any) -> DeviceIds:
        vk = self.vk
        ids = vk.VkPhysicalDeviceIDProperties()
        props = vk.VkPhysicalDeviceProperties2(pNext=ids)
        vk.vkGetPhysicalDeviceProperties2(physical, props)
        return DeviceIds(
            vk.ffi.string(props.properties.deviceName).decode(errors="replace"),
            bytes(vk.ffi.buffer(ids.deviceUUID)),
            bytes(vk.ffi.buffer(ids.driverUUID)),
            bytes(vk.ffi.buffer(ids.deviceLUID)),
            bool(ids.deviceLUIDValid),
        )

    @property
    def gpus(self) -> list[DeviceIds]:
        return [ids for _, ids in self._gpus]

    def device_for(self, want: m.Device) -> ImportDevice | None:
        """The device on the GPU the layer named (created once), or None if this machine has no such GPU."""
        for physical, ids in self._gpus:
            if ids.matches(want):
                key = ids.device_uuid + ids.driver_uuid
                if key not in self._devices:
                    with _driver_errors(f"cannot open {ids.name}"):
                        self._devices[key] = ImportDevice(self.vk, physical, ids)
                return self._devices[key]
        return None

    def close(self) -> None:
        for device in self._devices.values():
            device.close()
        self._devices.clear()
        self.vk.vkDestroyInstance(self.instance, None)


class ImportDevice:
    """A logical device with one queue that copies imported images into host memory."""

    def __init__(self, vk: Any, physical: Any, ids: DeviceIds) -> None:
        self.vk, self.physical, self.ids = vk, physical, ids
        families = vk.vkGetPhysicalDeviceQueueFamilyProperties(physical)
        wanted = vk.VK_QUEUE_GRAPHICS_BIT | vk.VK_QUEUE_COMPUTE_BIT | vk.VK_QUEUE_TRANSFER_BIT
        self.family = next(i for i, f in enumerate(families) if f.queueFlags & wanted)
        have = {e.extensionName for e in vk.vkEnumerateDeviceExtensionProperties(physical, None)}
        if "VK_KHR_external_memory_fd" not in have:
            raise VulkanError(f"{ids.name} cannot import memory (no VK_KHR_external_memory_fd)")
        extensions = ["VK_KHR_external_memory_fd"]
        self.semaphores = "VK_KHR_external_semaphore_fd" in have
        self.host_pointers = "VK_EXT_external_memory_host" in have
        extensions += [e for e, on in (("VK_KHR_external_semaphore_fd", self.semaphores),
                                        ("VK_EXT_external_memory_host", self.host_pointers)) if on]  # fmt: skip
        queue = vk.VkDeviceQueueCreateInfo(queueFamilyIndex=self.family, queueCount=1, pQueuePriorities=[1.0])
        info = vk.VkDeviceCreateInfo(
            queueCreateInfoCount=1,
            pQueueCreateInfos=[queue],
            enabledExtensionCount=len(extensions),
            ppEnabledExtensionNames=extensions,
        )
        self.device = vk.vkCreateDevice(physical, info, None)
        self.queue = vk.vkGetDeviceQueue(self.device, self.family, 0)
        self.memory = vk.vkGetPhysicalDeviceMemoryProperties(physical)
        self._import_semaphore: Any = (
            vk.vkGetDeviceProcAddr(self.device, "vkImportSemaphoreFdKHR") if self.semaphores else None
        )
        self._host_pointer_props: Any = (
            vk.vkGetDeviceProcAddr(self.device, "vkGetMemoryHostPointerPropertiesEXT") if self.host_pointers else None
        )
        self.host_alignment = 4096
        if self.host_pointers:
            ext = vk.VkPhysicalDeviceExternalMemoryHostPropertiesEXT()
            vk.vkGetPhysicalDeviceProperties2(physical, vk.VkPhysicalDeviceProperties2(pNext=ext))
            self.host_alignment = max(4096, int(ext.minImportedHostPointerAlignment))
        log.info(
            "vulkan: importing images on %s (semaphores: %s, host pointers: %s)",
            ids.name,
            "imported" if self.semaphores else "no, presents are read as they arrive",
            "yes" if self.host_pointers else "no, one CPU copy",
        )

    def memory_type(self, bits: int, want: int, avoid: int = 0) -> int | None:
        for i in range(self.memory.memoryTypeCount):
            flags = self.memory.memoryTypes[i].propertyFlags
            if bits & (1 << i) and flags & want == want and not flags & avoid:
                return i
        return None

    def import_semaphore(self, fd: int, handle_type: int) -> Any:
        """A new semaphore holding ``fd``'s payload (temporarily; the fd is Vulkan's on success)."""
        vk = self.vk
        semaphore = vk.vkCreateSemaphore(self.device, vk.VkSemaphoreCreateInfo(), None)
        info = vk.VkImportSemaphoreFdInfoKHR(
            semaphore=semaphore, flags=vk.VK_SEMAPHORE_IMPORT_TEMPORARY_BIT, handleType=handle_type, fd=fd
        )
        try:
            self._import_semaphore(self.device, info)
        except vk.VkError as exc:
            vk.vkDestroySemaphore(self.device, semaphore, None)
            raise VulkanError(f"cannot import the release semaphore: {type(exc).__name__}") from None
        return semaphore

    def host_pointer_type(self, address: int) -> int:
        vk = self.vk
        props = vk.VkMemoryHostPointerPropertiesEXT()
        self._host_pointer_props(self.device, _HOST_ALLOCATION, vk.ffi.cast("void *", address), props)
        return int(props.memoryTypeBits)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.vk.vkDeviceWaitIdle(self.device)
        self.vk.vkDestroyDevice(self.device, None)


@dataclass(slots=True)
class _Image:
    image: Any
    memory: Any
    buffer: Any
    buffer_memory: Any
    pixels: npt.NDArray[np.uint8]  # (height, width, 4): where the host reads the image
    mapped: Any = None  # without host pointers: the mapped buffer the copy lands in
    pool: Any = None
    command: Any = None
    fence: Any = None
    semaphore: Any = None  # the present's imported release semaphore, until its copy is done
    pending: bool = False  # a copy was submitted and not yet waited for
    copied: bool = False  # ``mapped`` was copied into ``pixels`` after the last copy


@dataclass(slots=True)
class ReadbackStats:
    presents: int = 0
    semaphores_imported: int = 0
    semaphores_assumed: int = 0  # the driver cannot import: the layer's fd taken as signalled
    #: Time the caller spent recording and submitting each copy, and waiting for it (the host's loop).
    submit_ms: deque[float] = field(default_factory=lambda: deque(maxlen=600))
    wait_ms: deque[float] = field(default_factory=lambda: deque(maxlen=600))


class ImportedGroup:
    """One image group's images, imported; :meth:`read` starts a present's copy, :meth:`pixels` waits for it."""

    def __init__(self, device: ImportDevice, group: m.VulkanImageGroup, fds: list[int]) -> None:
        """Imports duplicates of ``fds`` (the caller still closes its own); VulkanError if the driver refuses."""
        self.device, self.group = device, group
        self.stats = ReadbackStats()
        self._images: list[_Image] = []
        host_bytes = group.width * group.height * 4 * group.num_images
        if host_bytes > MAX_HOST_BYTES:
            raise VulkanError(f"{group.num_images} images of {group.width}x{group.height} need {host_bytes >> 20} MiB "
                              f"of host memory; at most {MAX_HOST_BYTES >> 20} MiB")  # fmt: skip
        try:
            with _driver_errors("cannot import the images"):
                for fd in fds:
                    self._images.append(self._import(fd))
        except BaseException:
            self.close()
            raise

    def _import(self, fd: int) -> _Image:
        vk, dev, g = self.device.vk, self.device.device, self.group
        chain: Any = vk.VkExternalMemoryImageCreateInfo(handleTypes=_OPAQUE_FD)
        if g.num_view_formats:
            chain = vk.VkExternalMemoryImageCreateInfo(
                handleTypes=_OPAQUE_FD,
                pNext=vk.VkImageFormatListCreateInfo(viewFormatCount=g.num_view_formats, pViewFormats=list(g.formats)),
            )
        info = vk.VkImageCreateInfo(
            pNext=chain,
            flags=g.flags,
            imageType=vk.VK_IMAGE_TYPE_2D,
            format=g.vk_format,
            extent=vk.VkExtent3D(g.width, g.height, 1),
            mipLevels=1,
            arrayLayers=1,
            samples=vk.VK_SAMPLE_COUNT_1_BIT,
            tiling=vk.VK_IMAGE_TILING_OPTIMAL,
            usage=g.usage,
            sharingMode=vk.VK_SHARING_MODE_EXCLUSIVE,
            initialLayout=vk.VK_IMAGE_LAYOUT_UNDEFINED,
        )
        try:
            image = vk.vkCreateImage(dev, info, None)
        except vk.VkError as exc:
            raise VulkanError(f"the driver refuses these images: {type(exc).__name__}") from None
        reqs = vk.vkGetImageMemoryRequirements(dev, image)
        problem = _fd_problem(fd, reqs.size)
        if problem is not None:
            vk.vkDestroyImage(dev, image, None)
            raise VulkanError(problem)
        kind = self.device.memory_type(reqs.memoryTypeBits, vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT)
        if kind is None:
            kind = self.device.memory_type(reqs.memoryTypeBits, 0)
        mine = os.dup(fd)
        alloc = vk.VkMemoryAllocateInfo(
            pNext=vk.VkMemoryDedicatedAllocateInfo(
                image=image, pNext=vk.VkImportMemoryFdInfoKHR(handleType=_OPAQUE_FD, fd=mine)
            ),
            allocationSize=reqs.size,
            memoryTypeIndex=kind or 0,
        )
        try:
            memory = vk.vkAllocateMemory(dev, alloc, None)
        except vk.VkError as exc:
            os.close(mine)  # a failed import leaves the fd with us
            vk.vkDestroyImage(dev, image, None)
            raise VulkanError(f"cannot import the image memory: {type(exc).__name__}") from None
        vk.vkBindImageMemory(dev, image, memory, 0)
        slot = _Image(image, memory, *self._host_buffer())
        slot.pool = vk.vkCreateCommandPool(
            dev,
            vk.VkCommandPoolCreateInfo(
                flags=vk.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT, queueFamilyIndex=self.device.family
            ),
            None,
        )
        slot.command = vk.vkAllocateCommandBuffers(
            dev,
            vk.VkCommandBufferAllocateInfo(
                commandPool=slot.pool, level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, commandBufferCount=1
            ),
        )[0]
        slot.fence = vk.vkCreateFence(dev, vk.VkFenceCreateInfo(), None)
        return slot

    def _host_buffer(self) -> tuple[Any, Any, npt.NDArray[np.uint8], Any]:
        """A buffer the copy lands in and the array the host reads: the same memory where the driver imports
        host pointers, else a mapped buffer and an array it is copied into."""
        d, g = self.device, self.group
        vk, dev = d.vk, d.device
        size = g.width * g.height * 4
        usage = vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT
        if d.host_pointers:
            padded = -(-size // d.host_alignment) * d.host_alignment
            raw = np.empty(padded + d.host_alignment, np.uint8)
            start = -raw.ctypes.data % d.host_alignment
            backing = raw[start : start + padded]
            buffer = vk.vkCreateBuffer(
                dev,
                vk.VkBufferCreateInfo(
                    pNext=vk.VkExternalMemoryBufferCreateInfo(handleTypes=_HOST_ALLOCATION),
                    size=padded,
                    usage=usage,
                    sharingMode=vk.VK_SHARING_MODE_EXCLUSIVE,
                ),
                None,
            )
            reqs = vk.vkGetBufferMemoryRequirements(dev, buffer)
            kind = d.memory_type(reqs.memoryTypeBits & d.host_pointer_type(backing.ctypes.data), 0)
            alloc = vk.VkMemoryAllocateInfo(
                pNext=vk.VkImportMemoryHostPointerInfoEXT(
                    handleType=_HOST_ALLOCATION, pHostPointer=vk.ffi.cast("void *", backing.ctypes.data)
                ),
                allocationSize=padded,
                memoryTypeIndex=kind or 0,
            )
            memory = vk.vkAllocateMemory(dev, alloc, None)
            vk.vkBindBufferMemory(dev, buffer, memory, 0)
            pixels = backing[:size].reshape(g.height, g.width, 4)  # keeps ``raw`` alive
            return buffer, memory, pixels, None
        buffer = vk.vkCreateBuffer(
            dev, vk.VkBufferCreateInfo(size=size, usage=usage, sharingMode=vk.VK_SHARING_MODE_EXCLUSIVE), None
        )
        reqs = vk.vkGetBufferMemoryRequirements(dev, buffer)
        host = vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
        kind = d.memory_type(reqs.memoryTypeBits, host | vk.VK_MEMORY_PROPERTY_HOST_CACHED_BIT)
        if kind is None:
            kind = d.memory_type(reqs.memoryTypeBits, host)
        memory = vk.vkAllocateMemory(dev, vk.VkMemoryAllocateInfo(allocationSize=reqs.size, memoryTypeIndex=kind), None)
        vk.vkBindBufferMemory(dev, buffer, memory, 0)
        mapped = np.frombuffer(vk.vkMapMemory(dev, memory, 0, size, 0), np.uint8).reshape(g.height, g.width, 4)
        return buffer, memory, np.empty((g.height, g.width, 4), np.uint8), mapped

    @property
    def av_name(self) -> str:
        return self.group.av_name

    def read(self, present: m.VulkanPresentImage, semaphore_fd: int | None) -> None:
        """Start copying the presented image into its host memory, after the layer's release semaphore.

        ``semaphore_fd`` stays the caller's to close.  A driver that cannot import semaphores takes it as
        signalled (lavapipe: the layer's copy is done on the CPU before it presents); an eventfd it carries
        is drained so it does not stay readable.
        """
        self.settle(present.index)
        with _driver_errors("cannot read the image"):
            self._read(present, semaphore_fd)

    def _read(self, present: m.VulkanPresentImage, semaphore_fd: int | None) -> None:
        vk, d = self.device.vk, self.device
        slot = self._images[present.index]
        started = time.perf_counter()
        self.stats.presents += 1
        waits: list[Any] = []
        if present.semaphore_type and semaphore_fd is not None:
            if d.semaphores:
                mine = os.dup(semaphore_fd)
                try:
                    slot.semaphore = d.import_semaphore(mine, present.semaphore_type)
                except VulkanError:
                    os.close(mine)
                    raise
                waits = [slot.semaphore]
                self.stats.semaphores_imported += 1
            else:
                _drain_eventfd(semaphore_fd)
                self.stats.semaphores_assumed += 1
        cmd = slot.command
        vk.vkBeginCommandBuffer(cmd, vk.VkCommandBufferBeginInfo(flags=vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT))
        color = vk.VkImageSubresourceRange(vk.VK_IMAGE_ASPECT_COLOR_BIT, 0, 1, 0, 1)
        barriers = [  # the other half of the layer's release: ownership from the external queue family
            vk.VkImageMemoryBarrier(
                srcAccessMask=0,
                dstAccessMask=vk.VK_ACCESS_TRANSFER_READ_BIT,
                oldLayout=present.old_layout,
                newLayout=present.new_layout,
                srcQueueFamilyIndex=_QUEUE_FAMILY_EXTERNAL,
                dstQueueFamilyIndex=d.family,
                image=slot.image,
                subresourceRange=color,
            )
        ]
        if present.new_layout != _LAYOUT_TRANSFER_SRC:
            barriers.append(
                vk.VkImageMemoryBarrier(
                    srcAccessMask=0,
                    dstAccessMask=vk.VK_ACCESS_TRANSFER_READ_BIT,
                    oldLayout=present.new_layout,
                    newLayout=_LAYOUT_TRANSFER_SRC,
                    srcQueueFamilyIndex=vk.VK_QUEUE_FAMILY_IGNORED,
                    dstQueueFamilyIndex=vk.VK_QUEUE_FAMILY_IGNORED,
                    image=slot.image,
                    subresourceRange=color,
                )
            )
        for barrier in barriers:
            vk.vkCmdPipelineBarrier(
                cmd, vk.VK_PIPELINE_STAGE_TRANSFER_BIT, vk.VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 0, None, 0, None, 1,
                [barrier],
            )  # fmt: skip
        g = self.group
        region = vk.VkBufferImageCopy(
            bufferOffset=0,
            bufferRowLength=0,
            bufferImageHeight=0,
            imageSubresource=vk.VkImageSubresourceLayers(vk.VK_IMAGE_ASPECT_COLOR_BIT, 0, 0, 1),
            imageOffset=vk.VkOffset3D(0, 0, 0),
            imageExtent=vk.VkExtent3D(g.width, g.height, 1),
        )
        vk.vkCmdCopyImageToBuffer(cmd, slot.image, _LAYOUT_TRANSFER_SRC, slot.buffer, 1, [region])
        to_host = vk.VkMemoryBarrier(
            srcAccessMask=vk.VK_ACCESS_TRANSFER_WRITE_BIT, dstAccessMask=vk.VK_ACCESS_HOST_READ_BIT
        )
        vk.vkCmdPipelineBarrier(
            cmd, vk.VK_PIPELINE_STAGE_TRANSFER_BIT, vk.VK_PIPELINE_STAGE_HOST_BIT, 0, 1, [to_host], 0, None, 0, None
        )
        vk.vkEndCommandBuffer(cmd)
        submit = vk.VkSubmitInfo(
            waitSemaphoreCount=len(waits),
            pWaitSemaphores=waits or None,
            pWaitDstStageMask=[vk.VK_PIPELINE_STAGE_TRANSFER_BIT] if waits else None,
            commandBufferCount=1,
            pCommandBuffers=[cmd],
        )
        vk.vkQueueSubmit(d.queue, 1, [submit], slot.fence)
        slot.pending, slot.copied = True, False
        self.stats.submit_ms.append((time.perf_counter() - started) * 1000)

    def settle(self, index: int) -> None:
        """Wait for ``index``'s copy, if one is under way (before it is read, or given back to the game)."""
        vk, slot = self.device.vk, self._images[index]
        if not slot.pending:
            return
        dev = self.device.device
        started = time.perf_counter()
        try:
            vk.vkWaitForFences(dev, 1, [slot.fence], vk.VK_TRUE, _TIMEOUT_NS)
        except (vk.VkError, vk.VkException) as exc:  # VK_TIMEOUT, a lost device: not readable, not safe to give back
            raise VulkanError(f"the copy of image {index} did not finish: {type(exc).__name__}") from None
        self.stats.wait_ms.append((time.perf_counter() - started) * 1000)
        vk.vkResetFences(dev, 1, [slot.fence])
        slot.pending = False
        if slot.semaphore is not None:
            vk.vkDestroySemaphore(dev, slot.semaphore, None)
            slot.semaphore = None

    def pixels(self, index: int) -> npt.NDArray[np.uint8]:
        """The image as last presented, in host memory (waits for its copy)."""
        self.settle(index)
        slot = self._images[index]
        if slot.mapped is not None and not slot.copied:
            np.copyto(slot.pixels, slot.mapped)
            slot.copied = True
        return slot.pixels

    def close(self) -> None:
        """Destroy the Vulkan objects (the host arrays stay valid for whoever still reads them)."""
        vk, dev = self.device.vk, self.device.device
        for slot in self._images:
            with contextlib.suppress(Exception):
                self.settle(self._images.index(slot))
            if slot.mapped is not None:
                vk.vkUnmapMemory(dev, slot.buffer_memory)
                slot.mapped = None
            for destroy, handle in (
                (vk.vkDestroyFence, slot.fence),
                (vk.vkDestroyCommandPool, slot.pool),
                (vk.vkDestroyBuffer, slot.buffer),
                (vk.vkFreeMemory, slot.buffer_memory),
                (vk.vkDestroyImage, slot.image),
                (vk.vkFreeMemory, slot.memory),
            ):
                if handle is not None:
                    destroy(dev, handle, None)
        self._images = []


@contextlib.contextmanager
def _driver_errors(what: str) -> Iterator[None]:
    """The driver's errors (VkError and its kin) as VulkanError, which the capture server answers."""
    import vulkan as vk

    try:
        yield
    except (vk.VkError, vk.VkException) as exc:  # errors, and codes like VK_TIMEOUT that are not
        raise VulkanError(f"{what}: {type(exc).__name__}") from None
    except KeyError as exc:  # a VkResult the binding has no exception for (VK_ERROR_INVALID_EXTERNAL_HANDLE)
        if not (exc.args and isinstance(exc.args[0], int) and exc.args[0] < 0):
            raise
        raise VulkanError(f"{what}: VkResult {exc.args[0]}") from None


def _drain_eventfd(fd: int) -> None:
    """Consume an eventfd's count if it has one (a semaphore the driver cannot import, already signalled)."""
    with contextlib.suppress(OSError):
        if select.select([fd], [], [], 0)[0]:
            os.read(fd, 8)


def _fd_problem(fd: int, needed: int) -> str | None:
    """Why ``fd`` cannot be image memory of ``needed`` bytes, where that can be told: drivers whose exported
    memory is a plain file (lavapipe's memfds) would otherwise map a file too small for the image and fault
    in the copy."""
    try:
        st = os.fstat(fd)
    except OSError as exc:
        return f"cannot stat an image fd: {exc.strerror}"
    if stat.S_ISREG(st.st_mode) and st.st_size < needed:
        return f"an image fd holds {st.st_size} bytes, the image needs {needed}"
    return None
