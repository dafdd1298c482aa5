// pyrofling's browser viewer: its WebTransport session, in a worker of its own.
// The page's main thread decodes and draws; were the streams read there, a busy moment of it would make the
// pictures look late to the host's rate control. Here they are timed as they come, and the rate reports go from
// here (wire format: docs/browser.md).
"use strict";
importScripts("/report.js");

let session = null;
let datagrams = null;
// The link as the host's rate control hears it: when each picture's stream began and finished arriving.
const rate = newArrivals();

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
      noteArrival(rate, buf, first, performance.now());
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

setInterval(() => {
  if (!datagrams) return;
  datagrams.write(new Uint8Array(arrivalReport(rate, performance.now()))).catch(() => {});
  self.postMessage({ type: "reported" });
}, 50);
