// pyrofling's browser viewer: its WebTransport session, in a worker of its own.
// The page's main thread decodes and draws; were the streams read there, a busy moment of it would make the
// pictures look late to the host's rate control. Here they are timed as they come, and the rate reports go from
// here (wire format: docs/browser.md).
"use strict";

let session = null;
let datagrams = null;
// The link as the host's rate control hears it (as a pyrofling viewer's RATE_FEEDBACK, protocol.md §7.10):
// every 50 ms, when each picture's stream began and finished arriving, and the bytes that came.
const rate = { seq: 0, at: performance.now(), bytes: 0, samples: [] };

self.onmessage = (ev) => {
  const msg = ev.data;
  if (msg.type === "open") open(msg.url, msg.hash);
  else if (msg.type === "datagram" && datagrams) datagrams.write(new Uint8Array(msg.data)).catch(() => {});
  else if (msg.type === "close" && session) session.close();
};

async function open(url, hash) {
  let t;
  try {
    t = new WebTransport(url, { serverCertificateHashes: [{ algorithm: "sha-256", value: hash }] });
    await t.ready;
  } catch (e) {
    self.postMessage({ type: "failed", error: String(e) });
    return;
  }
  session = t;
  datagrams = t.datagrams.writable.getWriter();
  self.postMessage({ type: "ready" });
  readStreams(t);
  readDatagrams(t);
  t.closed.catch(() => {}).finally(() => { session = null; datagrams = null; self.postMessage({ type: "closed" }); });
}

async function readStreams(t) {
  const streams = t.incomingUnidirectionalStreams.getReader();
  for (;;) {
    let next;
    try { next = await streams.read(); } catch (e) { return; }
    if (next.done) return;
    const first = performance.now();
    new Response(next.value).arrayBuffer().then((buf) => {
      noteArrival(buf, first);
      self.postMessage({ type: "stream", buf }, [buf]);
    }, () => {});
  }
}

async function readDatagrams(t) {
  const reader = t.datagrams.readable.getReader();
  for (;;) {
    let next;
    try { next = await reader.read(); } catch (e) { return; }
    if (next.done) return;
    const d = next.value;
    rate.bytes += d.byteLength;
    const buf = d.buffer.slice(d.byteOffset, d.byteOffset + d.byteLength);
    self.postMessage({ type: "datagram", buf }, [buf]);
  }
}

function noteArrival(buf, first) {
  rate.bytes += buf.byteLength;
  if (new Uint8Array(buf, 0, 1)[0] !== 0x53) return; // "S": a picture
  const unit = new DataView(buf).getUint32(1, true);
  rate.samples.push([unit & 0x3fff, Math.ceil(buf.byteLength / 1300), first, performance.now()]);
}

setInterval(() => {
  if (!datagrams) return;
  const now = performance.now();
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
  datagrams.write(new Uint8Array(buf)).catch(() => {});
  self.postMessage({ type: "reported" });
}, 50);
