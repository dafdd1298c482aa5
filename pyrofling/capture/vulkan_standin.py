"""A stand-in for PyroFling's Vulkan capture layer, in Python: the layer's messages from real Vulkan images.

It does what the layer does at a game's present, without a window or a game:
images created with exportable OPAQUE_FD memory (dedicated allocations, usage
TRANSFER_SRC | TRANSFER_DST | SAMPLED, MUTABLE_FORMAT with a UNORM/SRGB view
list), filled by a copy on the GPU, released to the external queue family
(TRANSFER_DST → SHADER_READ_ONLY), then ClientHello (intent 1) → Device → ImageGroup
→ PresentImage per frame, waiting for AcquireImage / RetireImage / FrameComplete
as the layer does (FIFO: the previous present completed first).  It reconnects
every ``retry_presents`` presents after losing the host, as the layer does.

Semaphores: ``export`` signals an exportable semaphore with the copy and sends its
fd (real GPUs); ``eventfd`` waits for the copy on the CPU and sends an eventfd
already signalled, as PyroFling's own layer build does on lavapipe (which cannot export
semaphores); ``none`` sends semaphore type 0.  ``auto``: export where the driver can.

Used by the tests, ``bench capture`` and by hand:
``python -m pyrofling.capture.vulkan_standin --socket /tmp/pyrofling-socket --frames 600``.
"""

from __future__ import annotations

import argparse
import array
import contextlib
import os
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from pyrofling.capture.paths import default_layer_socket
from pyrofling.wire import ProtocolError
from pyrofling.wire import capture as m

_OPAQUE_FD = 0x1
_QUEUE_FAMILY_EXTERNAL = 0xFFFF_FFFE
LAYOUT_TRANSFER_DST = 7
LAYOUT_SHADER_READ_ONLY = 5
_SRGB_OF = {m.VkFormat.B8G8R8A8_UNORM: m.VkFormat.B8G8R8A8_SRGB, m.VkFormat.R8G8B8A8_UNORM: m.VkFormat.R8G8B8A8_SRGB}
_UNORM_OF = {v: k for k, v in _SRGB_OF.items()}

#: Fills an image's pixels (height, width, 4 bytes in the image's format's order) for present number n.
Painter = Callable[[npt.NDArray[np.uint8], int], None]


class HostGone(Exception):
    """The host closed the socket, answered with an error, or stopped answering."""


@dataclass(slots=True)
class StandInStats:
    connects: int = 0
    disconnects: int = 0
    presents: int = 0  # sent to a host
    presents_local: int = 0  # while no host was there
    image_groups: int = 0
    errors: list[str] = field(default_factory=list)
    complete_times: list[float] = field(default_factory=list)  # monotonic time of each FrameComplete

    def interval_ms(self) -> tuple[float, float]:
        """Median and standard deviation of the FrameComplete intervals, in ms."""
        gaps = np.diff(self.complete_times) * 1000 if len(self.complete_times) > 2 else np.zeros(1)
        return float(np.median(gaps)), float(np.std(gaps))


class StandInLayer:
    """Presents images of its own into a host's layer socket, as PyroFling's capture layer does."""

    def __init__(
        self,
        path: str,
        width: int,
        height: int,
        *,
        images: int = 3,
        vk_format: int = m.VkFormat.B8G8R8A8_UNORM,
        color_space: int = m.COLOR_SPACE_SRGB_NONLINEAR,
        fifo: bool = True,
        semaphores: str = "auto",
        name: str = "pyrofling stand-in layer",
        retry_presents: int = 30,
        timeout_s: float = 2.0,
    ) -> None:
        import vulkan as vk

        self.vk: Any = vk
        self.path, self.name = path, name
        self.fifo, self.retry_presents, self.timeout_s = fifo, retry_presents, timeout_s
        self.vk_format = int(vk_format)
        self.color_space = int(color_space)
        self.count = images
        self.stats = StandInStats()
        self.sock: socket.socket | None = None
        self._serial = 0
        self._retry = 0
        self._present_id = 0
        self._group_serial = 0
        self._free: set[int] = set()
        self._completed = 0
        self._open_device()
        if semaphores == "auto":
            semaphores = "export" if self._can_export else "eventfd"
        if semaphores == "export" and not self._can_export:
            raise RuntimeError(f"{self.gpu_name} cannot export semaphores (VK_KHR_external_semaphore_fd)")
        self.semaphores = semaphores
        self._images: list[dict[str, Any]] = []
        self.width, self.height = width, height
        self._make_images(width, height)

    # -- Vulkan ------------------------------------------------------------------------------------

    def _open_device(self) -> None:
        vk = self.vk
        app = vk.VkApplicationInfo(pApplicationName="stand-in", apiVersion=vk.VK_MAKE_VERSION(1, 2, 0))
        self.instance = vk.vkCreateInstance(vk.VkInstanceCreateInfo(pApplicationInfo=app), None)
        self.physical = vk.vkEnumeratePhysicalDevices(self.instance)[0]
        ids = vk.VkPhysicalDeviceIDProperties()
        props = vk.VkPhysicalDeviceProperties2(pNext=ids)
        vk.vkGetPhysicalDeviceProperties2(self.physical, props)
        self.gpu_name = vk.ffi.string(props.properties.deviceName).decode()
        self.device_message = m.Device(
            bytes(vk.ffi.buffer(ids.deviceUUID)),
            bytes(vk.ffi.buffer(ids.driverUUID)),
            bytes(vk.ffi.buffer(ids.deviceLUID)),
            int(ids.deviceLUIDValid),
        )
        have = {e.extensionName for e in vk.vkEnumerateDeviceExtensionProperties(self.physical, None)}
        self._can_export = "VK_KHR_external_semaphore_fd" in have
        extensions = ["VK_KHR_external_memory_fd"] + (["VK_KHR_external_semaphore_fd"] if self._can_export else [])
        families = vk.vkGetPhysicalDeviceQueueFamilyProperties(self.physical)
        self.family = next(i for i, f in enumerate(families) if f.queueFlags & vk.VK_QUEUE_GRAPHICS_BIT)
        queue = vk.VkDeviceQueueCreateInfo(queueFamilyIndex=self.family, queueCount=1, pQueuePriorities=[1.0])
        self.device = vk.vkCreateDevice(
            self.physical,
            vk.VkDeviceCreateInfo(
                queueCreateInfoCount=1,
                pQueueCreateInfos=[queue],
                enabledExtensionCount=len(extensions),
                ppEnabledExtensionNames=extensions,
            ),
            None,
        )
        self.queue = vk.vkGetDeviceQueue(self.device, self.family, 0)
        self._memory_fd = vk.vkGetDeviceProcAddr(self.device, "vkGetMemoryFdKHR")
        self._semaphore_fd: Any = (
            vk.vkGetDeviceProcAddr(self.device, "vkGetSemaphoreFdKHR") if self._can_export else None
        )
        self.memory = vk.vkGetPhysicalDeviceMemoryProperties(self.physical)
        self.pool = vk.vkCreateCommandPool(
            self.device,
            vk.VkCommandPoolCreateInfo(
                flags=vk.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT, queueFamilyIndex=self.family
            ),
            None,
        )

    def _memory_type(self, bits: int, want: int) -> int:
        for i in range(self.memory.memoryTypeCount):
            if bits & (1 << i) and self.memory.memoryTypes[i].propertyFlags & want == want:
                return i
        raise RuntimeError("no suitable memory type")

    @property
    def view_formats(self) -> tuple[int, ...]:
        fmt = m.VkFormat(self.vk_format)
        other = _SRGB_OF.get(fmt) or _UNORM_OF.get(fmt)
        return (self.vk_format, int(other)) if other is not None else ()

    def _make_images(self, width: int, height: int) -> None:
        vk, dev = self.vk, self.device
        formats = list(self.view_formats)
        for _ in range(self.count):
            chain: Any = vk.VkExternalMemoryImageCreateInfo(handleTypes=_OPAQUE_FD)
            if formats:
                chain = vk.VkExternalMemoryImageCreateInfo(
                    handleTypes=_OPAQUE_FD,
                    pNext=vk.VkImageFormatListCreateInfo(viewFormatCount=len(formats), pViewFormats=formats),
                )
            image = vk.vkCreateImage(
                dev,
                vk.VkImageCreateInfo(
                    pNext=chain,
                    flags=m.IMAGE_MUTABLE_FORMAT if formats else 0,
                    imageType=vk.VK_IMAGE_TYPE_2D,
                    format=self.vk_format,
                    extent=vk.VkExtent3D(width, height, 1),
                    mipLevels=1,
                    arrayLayers=1,
                    samples=vk.VK_SAMPLE_COUNT_1_BIT,
                    tiling=vk.VK_IMAGE_TILING_OPTIMAL,
                    usage=self.usage,
                    sharingMode=vk.VK_SHARING_MODE_EXCLUSIVE,
                    initialLayout=vk.VK_IMAGE_LAYOUT_UNDEFINED,
                ),
                None,
            )
            reqs = vk.vkGetImageMemoryRequirements(dev, image)
            memory = vk.vkAllocateMemory(
                dev,
                vk.VkMemoryAllocateInfo(
                    pNext=vk.VkMemoryDedicatedAllocateInfo(
                        image=image, pNext=vk.VkExportMemoryAllocateInfo(handleTypes=_OPAQUE_FD)
                    ),
                    allocationSize=reqs.size,
                    memoryTypeIndex=self._memory_type(reqs.memoryTypeBits, vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT),
                ),
                None,
            )
            vk.vkBindImageMemory(dev, image, memory, 0)
            size = width * height * 4
            staging = vk.vkCreateBuffer(
                dev,
                vk.VkBufferCreateInfo(
                    size=size, usage=vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT, sharingMode=vk.VK_SHARING_MODE_EXCLUSIVE
                ),
                None,
            )
            sreqs = vk.vkGetBufferMemoryRequirements(dev, staging)
            host = vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
            smem = vk.vkAllocateMemory(
                dev,
                vk.VkMemoryAllocateInfo(
                    allocationSize=sreqs.size, memoryTypeIndex=self._memory_type(sreqs.memoryTypeBits, host)
                ),
                None,
            )
            vk.vkBindBufferMemory(dev, staging, smem, 0)
            pixels = np.frombuffer(vk.vkMapMemory(dev, smem, 0, size, 0), np.uint8).reshape(height, width, 4)
            command = vk.vkAllocateCommandBuffers(
                dev,
                vk.VkCommandBufferAllocateInfo(
                    commandPool=self.pool, level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, commandBufferCount=1
                ),
            )[0]
            fence = vk.vkCreateFence(dev, vk.VkFenceCreateInfo(), None)
            export = vk.VkExportSemaphoreCreateInfo(handleTypes=_OPAQUE_FD) if self.semaphores == "export" else None
            release = vk.vkCreateSemaphore(dev, vk.VkSemaphoreCreateInfo(pNext=export), None)
            self._images.append(
                {
                    "image": image,
                    "memory": memory,
                    "staging": staging,
                    "staging_memory": smem,
                    "pixels": pixels,
                    "command": command,
                    "fence": fence,
                    "release": release,
                    "pending": False,
                }
            )
        self.width, self.height = width, height

    def pixels_of(self, index: int) -> npt.NDArray[np.uint8]:
        """What image ``index`` was last painted with."""
        pixels: npt.NDArray[np.uint8] = self._images[index]["pixels"]
        return pixels

    @property
    def usage(self) -> int:
        vk = self.vk
        return int(
            vk.VK_IMAGE_USAGE_TRANSFER_SRC_BIT | vk.VK_IMAGE_USAGE_TRANSFER_DST_BIT | vk.VK_IMAGE_USAGE_SAMPLED_BIT
        )

    def _destroy_images(self) -> None:
        vk, dev = self.vk, self.device
        for img in self._images:
            self._wait(img)
            vk.vkUnmapMemory(dev, img["staging_memory"])
            vk.vkDestroySemaphore(dev, img["release"], None)
            vk.vkDestroyFence(dev, img["fence"], None)
            vk.vkFreeCommandBuffers(dev, self.pool, 1, [img["command"]])
            vk.vkDestroyBuffer(dev, img["staging"], None)
            vk.vkFreeMemory(dev, img["staging_memory"], None)
            vk.vkDestroyImage(dev, img["image"], None)
            vk.vkFreeMemory(dev, img["memory"], None)
        self._images = []

    def _wait(self, img: dict[str, Any]) -> None:
        if img["pending"]:
            self.vk.vkWaitForFences(self.device, 1, [img["fence"]], self.vk.VK_TRUE, 5_000_000_000)
            self.vk.vkResetFences(self.device, 1, [img["fence"]])
            img["pending"] = False

    def render(self, index: int, painter: Painter, n: int) -> int | None:
        """Paint image ``index`` and release it to the host; the semaphore fd to send, if any."""
        vk, img = self.vk, self._images[index]
        self._wait(img)
        painter(img["pixels"], n)
        cmd = img["command"]
        vk.vkBeginCommandBuffer(cmd, vk.VkCommandBufferBeginInfo(flags=vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT))
        color = vk.VkImageSubresourceRange(vk.VK_IMAGE_ASPECT_COLOR_BIT, 0, 1, 0, 1)
        to_dst = vk.VkImageMemoryBarrier(
            srcAccessMask=0,
            dstAccessMask=vk.VK_ACCESS_TRANSFER_WRITE_BIT,
            oldLayout=vk.VK_IMAGE_LAYOUT_UNDEFINED,
            newLayout=LAYOUT_TRANSFER_DST,
            srcQueueFamilyIndex=vk.VK_QUEUE_FAMILY_IGNORED,
            dstQueueFamilyIndex=vk.VK_QUEUE_FAMILY_IGNORED,
            image=img["image"],
            subresourceRange=color,
        )
        top, transfer = vk.VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, vk.VK_PIPELINE_STAGE_TRANSFER_BIT
        vk.vkCmdPipelineBarrier(cmd, top, transfer, 0, 0, None, 0, None, 1, [to_dst])
        region = vk.VkBufferImageCopy(
            bufferOffset=0,
            bufferRowLength=0,
            bufferImageHeight=0,
            imageSubresource=vk.VkImageSubresourceLayers(vk.VK_IMAGE_ASPECT_COLOR_BIT, 0, 0, 1),
            imageOffset=vk.VkOffset3D(0, 0, 0),
            imageExtent=vk.VkExtent3D(self.width, self.height, 1),
        )
        vk.vkCmdCopyBufferToImage(cmd, img["staging"], img["image"], LAYOUT_TRANSFER_DST, 1, [region])
        release = vk.VkImageMemoryBarrier(  # as the layer does: to the external queue family
            srcAccessMask=vk.VK_ACCESS_TRANSFER_WRITE_BIT,
            dstAccessMask=0,
            oldLayout=LAYOUT_TRANSFER_DST,
            newLayout=LAYOUT_SHADER_READ_ONLY,
            srcQueueFamilyIndex=self.family,
            dstQueueFamilyIndex=_QUEUE_FAMILY_EXTERNAL,
            image=img["image"],
            subresourceRange=color,
        )
        vk.vkCmdPipelineBarrier(
            cmd, transfer, vk.VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, 0, 0, None, 0, None, 1, [release]
        )
        vk.vkEndCommandBuffer(cmd)
        signal = [img["release"]] if self.semaphores == "export" else []
        submit = vk.VkSubmitInfo(
            commandBufferCount=1,
            pCommandBuffers=[cmd],
            signalSemaphoreCount=len(signal),
            pSignalSemaphores=signal or None,
        )
        vk.vkQueueSubmit(self.queue, 1, [submit], img["fence"])
        img["pending"] = True
        if self.semaphores == "export":
            info = vk.VkSemaphoreGetFdInfoKHR(semaphore=img["release"], handleType=_OPAQUE_FD)
            return int(self._semaphore_fd(self.device, info))
        if self.semaphores == "eventfd":
            self._wait(img)  # the shim's way: the copy is done before the present goes out
            fd = os.eventfd(1, os.EFD_CLOEXEC)
            return fd
        self._wait(img)
        return None

    def memory_fds(self) -> list[int]:
        """A new fd per image's memory (the caller closes them), as the layer sends with its image group."""
        vk = self.vk
        return [
            int(self._memory_fd(self.device, vk.VkMemoryGetFdInfoKHR(memory=img["memory"], handleType=_OPAQUE_FD)))
            for img in self._images
        ]

    # -- the socket ----------------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self.sock is not None

    def connect(self) -> bool:
        """The layer's handshake; False (and disconnected) if no host answers it."""
        try:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
            sock.settimeout(self.timeout_s)
            sock.connect(self.path)
        except OSError:
            return False
        self.sock, self._serial, self._completed = sock, 0, 0
        try:
            self._request(m.ClientHello.of(self.name, m.Intent.VULKAN_EXTERNAL_STREAM), want=m.MessageType.SERVER_HELLO)
            self._request(self.device_message)
            self._send_group()
        except HostGone as exc:
            self.stats.errors.append(str(exc))
            self._disconnect()
            return False
        self.stats.connects += 1
        return True

    def _send_group(self) -> None:
        formats = self.view_formats
        group = m.VulkanImageGroup(
            self.count,
            self.width,
            self.height,
            self.vk_format,
            self.color_space,
            self.usage,
            m.IMAGE_MUTABLE_FORMAT if formats else 0,
            m.HANDLE_OPAQUE_FD,
            len(formats),
            formats,
        )
        fds = self.memory_fds()
        try:
            self._group_serial = self._request(group, fds=fds)
        finally:
            for fd in fds:
                os.close(fd)
        self._free = set(range(self.count))
        self._present_id = self._completed = 0  # a new group's present ids start again at 1
        self.stats.image_groups += 1

    def resize(self, width: int, height: int) -> None:
        """A new image group, as a game whose window changed size re-creates its swapchain."""
        self._destroy_images()
        self._make_images(width, height)
        if self.sock is not None:
            try:
                self._send_group()
            except HostGone as exc:
                self.stats.errors.append(str(exc))
                self._disconnect()

    def _disconnect(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
            self.stats.disconnects += 1

    def _send(self, data: bytes, fds: list[int] | None = None) -> None:
        assert self.sock is not None
        anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())] if fds else []
        try:
            self.sock.sendmsg([data], anc)
        except OSError as exc:
            raise HostGone(f"send failed: {exc}") from None

    def _request(self, message: m.CaptureMessage, *, want: int = m.MessageType.OK, fds: list[int] | None = None) -> int:
        self._serial += 1
        serial = self._serial
        self._send(message.encode(serial), fds)
        while True:
            header, body = self._receive()
            if header.type & m.EVENT:
                continue
            if header.serial != serial or header.type != want:
                name = m.MessageType(header.type).name if header.type in m.MessageType._value2member_map_ else "?"
                raise HostGone(f"{message.record_name()} answered {name}: {m.error_text(body)}")
            return serial

    def _receive(self, timeout_s: float | None = None) -> tuple[m.Header, memoryview]:
        assert self.sock is not None
        self.sock.settimeout(self.timeout_s if timeout_s is None else timeout_s)
        try:
            data = self.sock.recv(m.MAX_MESSAGE_BYTES)
        except TimeoutError:
            waiting = f"free images {sorted(self._free)}, present {self._present_id}, completed {self._completed}"
            raise HostGone(f"the host stopped answering ({waiting})") from None
        except OSError as exc:
            raise HostGone(f"receive failed: {exc}") from None
        if not data:
            raise HostGone("the host closed the socket")
        try:
            header, body = m.unpack(data)
        except ProtocolError as exc:
            raise HostGone(f"bad message from the host: {exc}") from None
        self._event(header, body)
        return header, body

    def _event(self, header: m.Header, body: memoryview) -> None:
        if header.type == m.MessageType.RETIRE_IMAGE:
            retire = m.RetireImage.parse_payload(body)
            if retire.image_group_serial == self._group_serial:
                self._free.add(retire.index)
        elif header.type == m.MessageType.FRAME_COMPLETE:
            done = m.FrameComplete.parse_payload(body)
            if done.image_group_serial == self._group_serial:
                self._completed = max(self._completed, done.presented_id)
                self.stats.complete_times.append(time.monotonic())

    def present(self, painter: Painter) -> None:
        """One frame: wait for a free image (and, FIFO, for the last present to complete), paint, present."""
        n = self.stats.presents + self.stats.presents_local
        if self.sock is None:
            self._retry += 1
            if self._retry >= self.retry_presents:
                self._retry = 0
                self.connect()
        if self.sock is None:
            self.stats.presents_local += 1
            painter(self._images[0]["pixels"], n)
            return
        try:
            while not self._free or (self.fifo and self._completed < self._present_id):
                self._receive()
            index = min(self._free)
            self._free.discard(index)
            fd = self.render(index, painter, n)
            self._present_id += 1
            present = m.VulkanPresentImage(
                self._group_serial,
                1 if self.fifo else 0,
                index,
                _OPAQUE_FD if fd is not None else 0,
                LAYOUT_TRANSFER_DST,
                LAYOUT_SHADER_READ_ONLY,
                self._present_id,
            )
            try:
                self._request(present, fds=[fd] if fd is not None else None)
            finally:
                if fd is not None:
                    os.close(fd)
            self.stats.presents += 1
        except HostGone as exc:
            self.stats.errors.append(str(exc))
            self._disconnect()

    def close(self) -> None:
        self._disconnect()
        self._destroy_images()
        vk = self.vk
        vk.vkDestroyCommandPool(self.device, self.pool, None)
        vk.vkDestroyDevice(self.device, None)
        vk.vkDestroyInstance(self.instance, None)


# -- patterns -----------------------------------------------------------------------------------------

#: The four quadrants' colours, as (R, G, B): what a viewer must see where.
QUADRANTS = ((220, 30, 30), (30, 200, 40), (40, 60, 220), (230, 220, 40))


def quadrant_painter(vk_format: int = m.VkFormat.B8G8R8A8_UNORM, shift: Callable[[int], int] | None = None) -> Painter:
    """Four coloured quadrants (QUADRANTS, top-left clockwise…), in the image's byte order; ``shift(n)``
    rotates which colour is where per present.  Each picture is drawn once in ordinary memory and copied
    in one pass: the staging memory may be write-combined, slow to write piecemeal."""
    bgr = m.VK_FORMAT_AV_NAMES[m.VkFormat(vk_format)] == "bgra"
    drawn: dict[tuple[tuple[int, ...], int], npt.NDArray[np.uint8]] = {}

    def paint(pixels: npt.NDArray[np.uint8], n: int) -> None:
        k = (shift(n) if shift is not None else 0) % 4
        picture = drawn.get((pixels.shape, k))
        if picture is None:
            picture = np.empty(pixels.shape, np.uint8)
            h, w = pixels.shape[:2]
            for q, (y, x) in enumerate(((0, 0), (0, 1), (1, 1), (1, 0))):
                r, g, b = QUADRANTS[(q + k) % 4]
                picture[y * h // 2 : (y + 1) * h // 2, x * w // 2 : (x + 1) * w // 2] = (
                    (b, g, r, 255) if bgr else (r, g, b, 255)
                )
            drawn[(pixels.shape, k)] = picture
        np.copyto(pixels, picture)

    return paint


#: The HDR10 quadrants' light: QUADRANTS placed in HDR10 with their white at these nits (BT.2408's 203 for SDR
#: content; the last one a highlight that an SDR screen's tone mapping must roll off).
HDR10_QUADRANT_WHITE_NITS = (203.0, 203.0, 203.0, 600.0)


def hdr10_quadrant_codes() -> tuple[tuple[int, int, int], ...]:
    """The HDR10 quadrants as 10-bit BT.2020 PQ code values (R, G, B), in QUADRANTS' order."""
    from pyrofling.core.color import sdr_to_pq16

    out = []
    for (r, g, b), nits in zip(QUADRANTS, HDR10_QUADRANT_WHITE_NITS, strict=True):
        pq16 = sdr_to_pq16(np.array([[[r, g, b]]], np.uint8), white_nits=nits)[0, 0]
        out.append(tuple(round(int(v) / 65535 * 1023) for v in pq16))
    return tuple(out)  # type: ignore[arg-type]


def hdr10_quadrant_painter(vk_format: int = m.VkFormat.A2B10G10R10_UNORM_PACK32) -> Painter:
    """The quadrants of :func:`hdr10_quadrant_codes` in a 10-bit image (A2B10G10R10 or A2R10G10B10 words)."""
    if vk_format not in m.TEN_BIT_FORMATS:
        raise ValueError("HDR10 quadrants need a 10-bit format")
    red_low = vk_format == m.VkFormat.A2B10G10R10_UNORM_PACK32  # bits 0-9 red (else blue)
    words = [
        (r if red_low else b) | g << 10 | (b if red_low else r) << 20 | 3 << 30 for r, g, b in hdr10_quadrant_codes()
    ]
    drawn: dict[tuple[int, ...], npt.NDArray[np.uint8]] = {}

    def paint(pixels: npt.NDArray[np.uint8], n: int) -> None:
        picture = drawn.get(pixels.shape)
        if picture is None:
            h, w = pixels.shape[:2]
            packed = np.empty((h, w), "<u4")
            for q, (y, x) in enumerate(((0, 0), (0, 1), (1, 1), (1, 0))):
                packed[y * h // 2 : (y + 1) * h // 2, x * w // 2 : (x + 1) * w // 2] = words[q]
            picture = drawn[pixels.shape] = packed.view(np.uint8).reshape(h, w, 4)
        np.copyto(pixels, picture)

    return paint


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m pyrofling.capture.vulkan_standin",
        description="Present coloured quadrants through a host's PyroFling layer socket, from real Vulkan images "
        "(a stand-in for PyroFling's capture layer; for checking a host and a GPU driver).",
    )
    p.add_argument("--socket", default=default_layer_socket(), help="the host's layer socket (default %(default)s)")
    p.add_argument("--size", default="1280x720", help="image size WxH (default %(default)s)")
    p.add_argument("--frames", type=int, default=600, help="presents before it stops (default %(default)s)")
    p.add_argument("--mailbox", action="store_true", help="present as fast as it can (period 0) instead of FIFO")
    p.add_argument(
        "--semaphores",
        choices=("auto", "export", "eventfd", "none"),
        default="auto",
        help="release semaphores: export (real GPUs), eventfd (as the shim on lavapipe), none; auto picks",
    )
    p.add_argument("--resize-every", type=int, default=0, help="re-create the image group every N presents")
    p.add_argument(
        "--hdr10",
        action="store_true",
        help="an HDR10 swapchain (A2B10G10R10, ST 2084): the quadrants in PQ, one of them a 600-nit highlight",
    )
    args = p.parse_args(argv)
    try:
        width, height = (int(v) for v in args.size.lower().split("x"))
    except ValueError:
        p.error(f"--size {args.size!r}: write it as WIDTHxHEIGHT, e.g. 1280x720")
    layer = StandInLayer(
        args.socket,
        width,
        height,
        fifo=not args.mailbox,
        semaphores=args.semaphores,
        vk_format=m.VkFormat.A2B10G10R10_UNORM_PACK32 if args.hdr10 else m.VkFormat.B8G8R8A8_UNORM,
        color_space=m.COLOR_SPACE_HDR10_ST2084 if args.hdr10 else m.COLOR_SPACE_SRGB_NONLINEAR,
    )
    print(f"stand-in: {layer.gpu_name}, semaphores {layer.semaphores}, {width}x{height} -> {args.socket}", flush=True)
    if not layer.connect():
        print(f"stand-in: no host on {args.socket} yet; presenting anyway, retrying every 30 presents", flush=True)
    paint = hdr10_quadrant_painter() if args.hdr10 else quadrant_painter(layer.vk_format, shift=lambda n: n // 60)
    started = time.monotonic()
    try:
        for n in range(args.frames):
            if args.resize_every and n and n % args.resize_every == 0:
                layer.resize(layer.width if n // args.resize_every % 2 == 0 else width // 2, height)
            layer.present(paint)
            if layer.sock is None:
                time.sleep(1 / 60)
    except KeyboardInterrupt:
        pass
    finally:
        st = layer.stats
        median, sigma = st.interval_ms()
        elapsed = time.monotonic() - started
        print(
            f"stand-in: {st.presents} presents to the host ({st.presents_local} alone) in {elapsed:.1f} s, "
            f"{st.connects} connects, {st.image_groups} image groups; FrameComplete every {median:.2f} ms "
            f"(σ {sigma:.2f} ms)",
            flush=True,
        )
        for error in st.errors[-3:]:
            print(f"stand-in: {error}", file=sys.stderr)
        with contextlib.suppress(Exception):
            layer.close()
    return 0 if st.presents else 1


if __name__ == "__main__":
    sys.exit(main())
