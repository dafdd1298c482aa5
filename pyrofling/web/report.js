// pyrofling's browser viewer: its arrival reports, by which the host's rate control hears the browser's link as
// it hears a pyrofling viewer's (RATE_FEEDBACK, protocol.md §7.10): every 50 ms, when each picture began and
// finished arriving, and the bytes that came. The WebTransport worker (transport.js) sends them as datagrams, the
// page (viewer.js) over its WebSocket where it has no session.
"use strict";

function newArrivals() { return { seq: 0, at: performance.now(), bytes: 0, samples: [] }; }

// A message came: a picture's ("S", its number, …) began arriving at `first` and ended at `last` (performance.now()).
function noteArrival(rate, buf, first, last) {
  rate.bytes += buf.byteLength;
  if (new Uint8Array(buf, 0, 1)[0] !== 0x53) return; // "S": a picture
  const unit = new DataView(buf).getUint32(1, true);
  rate.samples.push([unit & 0x3fff, Math.ceil(buf.byteLength / 1300), first, last]);
}

// "R" and the report of what came since the last one (its newest eight pictures); the next interval starts now.
function arrivalReport(rate, now) {
  const used = rate.samples.slice(-8);
  const buf = new ArrayBuffer(1 + 16 + 8 * 12);
  const v = new DataView(buf);
  const us = (ms) => Math.round(ms * 1000) >>> 0; // modulo 2³², as the wire has it
  v.setUint8(0, 0x52); // "R"
  v.setUint32(1, rate.seq = (rate.seq + 1) >>> 0, true);
  v.setUint32(5, us(now - rate.at), true);
  v.setUint32(9, rate.bytes >>> 0, true);
  v.setUint16(13, used.length, true);
  used.forEach(([unit, count, first, last], i) => {
    const o = 17 + 12 * i;
    v.setUint16(o, unit, true); v.setUint16(o + 2, Math.min(count, 0xffff), true);
    v.setUint32(o + 4, us(first), true); v.setUint32(o + 8, us(last), true);
  });
  rate.samples = []; rate.bytes = 0; rate.at = now;
  return buf;
}
