"use strict";
// The frame marker (pyrofling/core/frame_marker.py), for the pages' judge mode (benches): 96 bits in blocks along
// the top of the picture, magic 0xA5, frame id (32), capture µs (48), CRC-8 (poly 0x07) of the 88 before it; a
// block's centre over 128 is a one. Shared by the players' page (viewer.js) and the spectators' (spectate.html).

function markerLayout(width) {
  const block = Math.max(8, 2 * Math.floor(width / 192));
  const perRow = Math.floor(width / block);
  return perRow < 16 ? null : { block, perRow, rows: Math.ceil(96 / perRow) };
}

function crc8(value, nbits) {
  let crc = 0;
  for (let i = nbits - 1; i >= 0; i--) {
    const bit = Number((value >> BigInt(i)) & 1n);
    const top = (crc >> 7) & 1;
    crc = (crc << 1) & 0xff;
    if (bit ^ top) crc ^= 0x07;
  }
  return crc;
}

// The marker in samples of the band's brightness (``at(x, y)``: 0..255 at that pixel): {id, captureUs}, id -1 when
// it does not read.
function parseMarker(layout, at) {
  let word = 0n;
  for (let i = 0; i < 96; i++) {
    const y = Math.floor(i / layout.perRow) * layout.block + (layout.block >> 1);
    const x = (i % layout.perRow) * layout.block + (layout.block >> 1);
    word = (word << 1n) | (at(x, y) >= 128 ? 1n : 0n);
  }
  const body = word >> 8n;
  return body >> 80n !== 0xa5n || crc8(body, 88) !== Number(word & 0xffn)
    ? { id: -1, captureUs: 0 }
    : { id: Number((body >> 48n) & 0xffffffffn), captureUs: Number(body & 0xffffffffffffn) };
}
