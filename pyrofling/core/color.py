"""HDR10 on an SDR screen: ST 2084 (PQ) to light and back, BT.2020 to BT.709, and the tone curve between them.

Pure numpy, no I/O. An HDR10 stream (colour profiles BT.2020-PQ, protocol.md §2.3) carries light up to 10,000
nits in PQ code values; an SDR screen shows up to its white. :class:`ToneMapper` takes the decoded picture's
R'G'B' code values (BT.2020 primaries, PQ) and gives 8-bit sRGB for such a screen:

1. PQ code → nits (ST 2084's EOTF), with BT.2390's EETF in the PQ domain on each channel: light up to the
   knee passes unchanged, the highlights up to the mastering peak are rolled off into the target's peak;
2. relative to the SDR white (203 nits, BT.2408's HDR reference white), BT.2020 → BT.709 primaries in linear
   light, clipped to the screen's gamut;
3. sRGB's encoding, to 8 bits.

Steps 1 and 3 are tables (4,096 entries each), step 2 one 3x3 matrix: in numpy a 1280x720 picture costs about
30 ms of a core on the 2-core machine (the look-ups' gathers), so a window does the same in a shader
(:mod:`pyrofling.client.tone_gl`). Each channel is tone-mapped on its own (the curve is the identity below the
knee, so skin and diffuse colours keep their hue; only highlights past it desaturate toward white).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from pyrofling.wire import ColorProfile

# ST 2084's constants.
_M1 = 2610 / 16384
_M2 = 2523 / 4096 * 128
_C1 = 3424 / 4096
_C2 = 2413 / 4096 * 32
_C3 = 2392 / 4096 * 32
PQ_PEAK_NITS = 10_000.0

#: BT.2408's HDR reference white: where an SDR picture's white sits in an HDR10 one.
SDR_WHITE_NITS = 203.0
#: The mastering peak assumed when the stream does not say (HDR10 games master to about this).
DEFAULT_MASTER_PEAK_NITS = 1000.0

#: Linear BT.2020 RGB → linear BT.709 RGB (both D65), from the primaries' XYZ matrices.
BT2020_TO_BT709 = np.array(
    [
        [1.660491, -0.587641, -0.072850],
        [-0.124550, 1.132900, -0.008349],
        [-0.018151, -0.100579, 1.118730],
    ],
    dtype=np.float32,
)
BT709_TO_BT2020 = np.linalg.inv(BT2020_TO_BT709.astype(np.float64)).astype(np.float32)

#: The colour profiles whose pictures are BT.2020 primaries in PQ (HDR10).
HDR10_PROFILES = frozenset(
    {ColorProfile.BT2020_PQ_LIMITED_LEFT_420, ColorProfile.BT2020_PQ_FULL_CENTER_420, ColorProfile.BT2020_PQ_FULL_444}
)

#: FFmpeg's AVColorTransferCharacteristic for ST 2084, AVColorPrimaries and AVColorSpace for BT.2020 (non-constant).
AVCOL_TRC_SMPTE2084 = 16
AVCOL_PRI_BT2020 = 9
AVCOL_SPC_BT2020_NCL = 9


def is_hdr10(profile: int) -> bool:
    """Whether a stream of this colour profile (CODEC_PARAMETERS) is HDR10."""
    return profile in HDR10_PROFILES


def pq_to_nits(code: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """ST 2084's EOTF: PQ code values in 0..1 → nits (0..10,000)."""
    e = np.clip(np.asarray(code, np.float64), 0.0, 1.0) ** (1 / _M2)
    return PQ_PEAK_NITS * (np.maximum(e - _C1, 0.0) / (_C2 - _C3 * e)) ** (1 / _M1)


def nits_to_pq(nits: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """ST 2084's inverse EOTF: nits → PQ code values in 0..1."""
    y = (np.clip(np.asarray(nits, np.float64), 0.0, PQ_PEAK_NITS) / PQ_PEAK_NITS) ** _M1
    return ((_C1 + _C2 * y) / (1 + _C3 * y)) ** _M2


def bt2390_eetf(code: npt.ArrayLike, source_peak_nits: float, target_peak_nits: float) -> npt.NDArray[np.float64]:
    """BT.2390's EETF in the PQ domain: the identity up to a knee, then a Hermite roll-off that takes the source's
    peak to the target's. Code values in and out (0..1); black stays black."""
    source_peak = float(nits_to_pq(source_peak_nits))
    e1 = np.clip(np.asarray(code, np.float64) / source_peak, 0.0, 1.0)
    max_lum = float(nits_to_pq(min(target_peak_nits, source_peak_nits))) / source_peak
    knee = 1.5 * max_lum - 0.5
    if knee >= 1.0:  # the target holds the whole source
        return e1 * source_peak
    t = np.clip((e1 - knee) / (1.0 - knee), 0.0, 1.0)
    t2, t3 = t * t, t * t * t
    rolled = (2 * t3 - 3 * t2 + 1) * knee + (t3 - 2 * t2 + t) * (1 - knee) + (-2 * t3 + 3 * t2) * max_lum
    return np.where(e1 < knee, e1, rolled) * source_peak


def srgb_encode(linear: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """sRGB's encoding of linear light in 0..1."""
    x = np.clip(np.asarray(linear, np.float64), 0.0, 1.0)
    return np.where(x <= 0.0031308, 12.92 * x, 1.055 * x ** (1 / 2.4) - 0.055)


def srgb_decode(encoded: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """sRGB's decoding to linear light in 0..1."""
    v = np.clip(np.asarray(encoded, np.float64), 0.0, 1.0)
    return np.where(v <= 0.04045, v / 12.92, ((v + 0.055) / 1.055) ** 2.4)


#: Table sizes: 16-bit code values index the first after a shift of 4 (12 bits of the source's 10 and more);
#: the second is indexed by the square root of linear light, which spends its entries where the eye sees steps.
_PQ_TABLE_BITS = 12
_SRGB_TABLE = 4096


@dataclass(frozen=True, slots=True)
class ToneMapping:
    """What the viewer does to an HDR10 picture, said once in its log."""

    source_peak_nits: float
    target_white_nits: float

    def describe(self) -> str:
        return (
            f"HDR10 (BT.2020, PQ) tone-mapped for an SDR screen: BT.2390 roll-off from {self.source_peak_nits:.0f} "
            f"nits to its white at {self.target_white_nits:.0f} nits, BT.709 colours, sRGB"
        )


class ToneMapper:
    """``to_srgb8(rgb16)``: 16-bit BT.2020 PQ R'G'B' (rgb48 as swscale gives it) → 8-bit sRGB BT.709 for an SDR
    screen. The tables are built once (a millisecond); mapping allocates only its output and two temporaries."""

    def __init__(
        self, source_peak_nits: float = DEFAULT_MASTER_PEAK_NITS, target_white_nits: float = SDR_WHITE_NITS
    ) -> None:
        self.mapping = ToneMapping(source_peak_nits, target_white_nits)
        codes = (np.arange(1 << _PQ_TABLE_BITS, dtype=np.float64) + 0.5) / (1 << _PQ_TABLE_BITS)
        mapped = bt2390_eetf(codes, source_peak_nits, target_white_nits)
        self._to_linear = (pq_to_nits(mapped) / target_white_nits).astype(np.float32)
        roots = np.arange(_SRGB_TABLE, dtype=np.float64) / (_SRGB_TABLE - 1)
        self._to_srgb8 = np.round(srgb_encode(roots * roots) * 255).astype(np.uint8)
        self._matrix_t = np.ascontiguousarray(BT2020_TO_BT709.T)

    @property
    def to_linear_table(self) -> npt.NDArray[np.float32]:
        """The first table: entry ``code >> 4`` of a 16-bit PQ code value is its tone-mapped linear light (1.0 at the
        SDR white), before the matrix; a shader that does the same looks it up too."""
        return self._to_linear

    def linear(self, rgb16: npt.NDArray[np.uint16]) -> npt.NDArray[np.float32]:
        """Tone-mapped linear BT.709 light, 1.0 at the SDR white, clipped to 0..1."""
        light = self._to_linear[rgb16 >> (16 - _PQ_TABLE_BITS)]
        out: npt.NDArray[np.float32] = light @ self._matrix_t
        np.clip(out, 0.0, 1.0, out=out)
        return out

    def to_srgb8(self, rgb16: npt.NDArray[np.uint16]) -> npt.NDArray[np.uint8]:
        """``(h, w, 3)`` uint16 → ``(h, w, 3)`` uint8."""
        light = self.linear(rgb16)
        np.sqrt(light, out=light)
        light *= _SRGB_TABLE - 1
        light += 0.5
        result: npt.NDArray[np.uint8] = self._to_srgb8[light.astype(np.uint16)]
        return result


def sdr_to_pq16(srgb8: npt.NDArray[np.uint8], white_nits: float = SDR_WHITE_NITS) -> npt.NDArray[np.uint16]:
    """An 8-bit sRGB picture placed in HDR10 as BT.2408 places SDR content: BT.709 → BT.2020 primaries, its white at
    ``white_nits``, PQ-encoded to 16-bit code values (for tests and stand-ins that need an HDR10 source)."""
    linear = srgb_decode(srgb8.astype(np.float64) / 255.0) @ BT709_TO_BT2020.T.astype(np.float64)
    return np.round(nits_to_pq(np.clip(linear, 0.0, None) * white_nits) * 65535).astype(np.uint16)


@dataclass(frozen=True, slots=True)
class MasteringDisplay:
    """The HDR10 metadata a stream carries (SMPTE ST 2086 and the content light levels), in each encoder's syntax."""

    primaries: tuple[tuple[float, float], tuple[float, float], tuple[float, float]]  # G, B, R as x, y (CIE 1931)
    white: tuple[float, float]
    max_nits: float
    min_nits: float
    max_cll: int  # the brightest pixel, nits
    max_fall: int  # the brightest picture's average, nits

    def x26x(self) -> str:
        """x264's and x265's ``master-display``: chromaticities in 0.00002 units, light in 0.0001 nits."""
        (gx, gy), (bx, by), (rx, ry) = self.primaries
        c = [round(v / 0.00002) for v in (gx, gy, bx, by, rx, ry, *self.white)]
        return (
            f"G({c[0]},{c[1]})B({c[2]},{c[3]})R({c[4]},{c[5]})WP({c[6]},{c[7]})"
            f"L({round(self.max_nits * 10000)},{round(self.min_nits * 10000)})"
        )

    def svt(self) -> str:
        """SVT-AV1's ``mastering-display``: the same in plain numbers."""
        (gx, gy), (bx, by), (rx, ry) = self.primaries
        wx, wy = self.white
        return f"G({gx},{gy})B({bx},{by})R({rx},{ry})WP({wx},{wy})L({self.max_nits:g},{self.min_nits:g})"

    def cll(self) -> str:
        return f"{self.max_cll},{self.max_fall}"


#: What an HDR10 stream says when its source said nothing (a Vulkan swapchain's images carry no metadata on the
#: layer's wire): a BT.2020 display with a D65 white, mastered to 1,000 nits.
HDR10_MASTERING = MasteringDisplay(
    primaries=((0.170, 0.797), (0.131, 0.046), (0.708, 0.292)),
    white=(0.3127, 0.3290),
    max_nits=DEFAULT_MASTER_PEAK_NITS,
    min_nits=0.0001,
    max_cll=1000,
    max_fall=400,
)
