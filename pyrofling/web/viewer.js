// pyrofling's browser viewer: the host's H.264 over a WebSocket, decoded with WebCodecs, drawn at once.
// Wire format: pyrofling/core/host/web_viewers.py and docs/browser.md.
"use strict";

const stats = {
  state: "connecting", framesReceived: 0, framesDecoded: 0, framesDrawn: 0, decodeErrors: 0,
  keyframeRequests: 0, bytes: 0, lastCaptureUs: 0, lastPtsUs: 0, latencyMs: [], reconnects: 0, refused: "",
};
window.pyrofling = { stats };

const canvas = document.getElementById("screen");
const ctx = canvas.getContext("2d", { alpha: false, desynchronized: true });
const message = document.getElementById("message");
const overlay = document.getElementById("overlay");
const params = new URLSearchParams(location.hash.slice(1));
const token = params.get("t");
// judge=1 (benches): read the frame marker of the picture on screen at every refresh, as --check-scene does.
const judge = params.get("judge") === "1";
stats.refreshes = []; // judge: [wall ms of the refresh, frame id or -1 (unreadable), capture µs (low 48 bits)]
let onScreen = null; // judge: the marker of the picture drawn last

let ws = null;
let decoder = null;
let hello = null;
let needKey = true;
let retryMs = 1000;
const captureOf = new Map(); // pts → capture µs, for the latency of what is drawn

function say(text) { message.textContent = text; }

function codecFromSps(bytes) {
  // Annex-B: find the SPS (NAL type 7); its next three bytes are profile, constraints and level.
  for (let i = 0; i + 7 < bytes.length; i++) {
    if (bytes[i] === 0 && bytes[i + 1] === 0 && bytes[i + 2] === 1 && (bytes[i + 3] & 0x1f) === 7) {
      const hex = (b) => b.toString(16).padStart(2, "0");
      return "avc1." + hex(bytes[i + 4]) + hex(bytes[i + 5]) + hex(bytes[i + 6]);
    }
  }
  return null;
}

function askForKey() {
  needKey = true;
  stats.keyframeRequests++;
  if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "keyframe" }));
}

function draw(frame) {
  if (canvas.width !== frame.displayWidth || canvas.height !== frame.displayHeight) {
    canvas.width = frame.displayWidth;
    canvas.height = frame.displayHeight;
  }
  ctx.drawImage(frame, 0, 0);
  stats.framesDrawn++;
  if (judge) onScreen = readMarker();
  const capture = captureOf.get(frame.timestamp);
  captureOf.delete(frame.timestamp);
  if (capture !== undefined && hello) {
    const now = performance.timeOrigin + performance.now();
    stats.latencyMs.push(now - (capture / 1000 + hello.clock_offset_ms));
    if (stats.latencyMs.length > 2000) stats.latencyMs.splice(0, 1000);
  }
  frame.close();
}

function newDecoder(codec) {
  if (decoder && decoder.state !== "closed") decoder.close();
  decoder = new VideoDecoder({
    output: (frame) => { stats.framesDecoded++; draw(frame); },
    error: (e) => { stats.decodeErrors++; console.warn("decode error", e); decoder = null; askForKey(); },
  });
  decoder.configure({ codec, optimizeForLatency: true, hardwareAcceleration: "no-preference" });
}

function onVideo(buf) {
  const view = new DataView(buf);
  if (view.getUint8(0) !== 0x56) return; // "V"
  const idr = (view.getUint8(1) & 1) !== 0;
  const capture = Number(view.getBigUint64(2, true));
  const pts = Number(view.getBigUint64(10, true));
  const data = new Uint8Array(buf, 18);
  stats.framesReceived++;
  stats.bytes += buf.byteLength;
  if (needKey && !idr) return;
  if (idr && (needKey || !decoder)) {
    const codec = codecFromSps(data);
    if (!codec) return;
    newDecoder(codec);
    needKey = false;
  }
  if (!decoder || decoder.state !== "configured") return;
  // Far behind (a stalled tab, a slow machine): drop to the next key frame rather than show old pictures late.
  if (decoder.decodeQueueSize > 8) { askForKey(); return; }
  captureOf.set(pts, capture);
  if (captureOf.size > 120) captureOf.delete(captureOf.keys().next().value);
  stats.lastCaptureUs = capture;
  stats.lastPtsUs = pts;
  decoder.decode(new EncodedVideoChunk({ type: idr ? "key" : "delta", timestamp: pts, data }));
}

function connect() {
  if (!token) { stats.state = "no token"; say("Open the link the host printed: it carries the key to this stream."); return; }
  if (typeof VideoDecoder === "undefined") { stats.state = "no webcodecs"; say("This browser cannot decode the stream (no WebCodecs): use a current Chromium, Chrome, Edge or Firefox."); return; }
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  ws = new WebSocket(scheme + "//" + location.host + "/stream");
  ws.binaryType = "arraybuffer";
  ws.onopen = () => ws.send(JSON.stringify({ type: "auth", token }));
  ws.onmessage = (ev) => {
    if (typeof ev.data === "string") {
      const msg = JSON.parse(ev.data);
      if (msg.type === "hello") {
        hello = msg; stats.clockOffsetMs = msg.clock_offset_ms;
        stats.state = "streaming"; retryMs = 1000; needKey = true; say("");
      }
      return;
    }
    onVideo(ev.data);
  };
  ws.onclose = (ev) => {
    if (decoder && decoder.state !== "closed") decoder.close();
    decoder = null;
    if (ev.code === 1008) { // the host refused this browser: say why, do not hammer it
      stats.state = "refused"; stats.refused = ev.reason; say("The host refused this page: " + ev.reason);
      return;
    }
    stats.state = "reconnecting"; stats.reconnects++;
    say(hello ? "The host is gone: reconnecting…" : "Cannot reach the host: retrying…");
    setTimeout(connect, retryMs);
    retryMs = Math.min(retryMs * 2, 10000);
  };
}

// The frame marker (pyrofling/core/frame_marker.py): 96 bits in blocks along the top, magic 0xA5, frame id
// (32), capture µs (48), CRC-8 (poly 0x07) of the 88 before it; a block's centre over 128 is a one.
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

function readMarker() {
  const layout = markerLayout(canvas.width);
  if (!layout) return null;
  const w = layout.perRow * layout.block, h = layout.rows * layout.block;
  const px = ctx.getImageData(0, 0, w, h).data;
  let word = 0n;
  for (let i = 0; i < 96; i++) {
    const y = Math.floor(i / layout.perRow) * layout.block + (layout.block >> 1);
    const x = (i % layout.perRow) * layout.block + (layout.block >> 1);
    const o = (y * w + x) * 4;
    const luma = 0.2126 * px[o] + 0.7152 * px[o + 1] + 0.0722 * px[o + 2];
    word = (word << 1n) | (luma >= 128 ? 1n : 0n);
  }
  const body = word >> 8n;
  if (body >> 80n !== 0xa5n || crc8(body, 88) !== Number(word & 0xffn)) return { id: -1, captureUs: 0 };
  return { id: Number((body >> 48n) & 0xffffffffn), captureUs: Number(body & 0xffffffffffffn) };
}

function judgeRefresh(t) {
  if (onScreen) stats.refreshes.push([performance.timeOrigin + t, onScreen.id, onScreen.captureUs]);
  if (stats.refreshes.length > 20000) stats.refreshes.splice(0, 10000);
  requestAnimationFrame(judgeRefresh);
}
if (judge) requestAnimationFrame(judgeRefresh);

function median(values) {
  if (!values.length) return NaN;
  const s = [...values].sort((a, b) => a - b);
  return s[s.length >> 1];
}

let lastBytes = 0;
setInterval(() => {
  const kbits = (stats.bytes - lastBytes) * 8 / 1000;
  lastBytes = stats.bytes;
  if (!overlay.hidden) {
    overlay.textContent =
      `${hello ? hello.width + "x" + hello.height : "-"}  ${(kbits / 1000).toFixed(1)} Mbit/s\n` +
      `latency ${median(stats.latencyMs.slice(-120)).toFixed(1)} ms (capture → drawn)\n` +
      `frames ${stats.framesDrawn} drawn, ${stats.framesReceived} received, ${stats.decodeErrors} decode errors`;
  }
}, 1000);

document.addEventListener("keydown", (ev) => {
  if (ev.key === "v" || ev.key === "V") overlay.hidden = !overlay.hidden;
  if (ev.key === "f" || ev.key === "F") {
    if (document.fullscreenElement) document.exitFullscreen(); else document.documentElement.requestFullscreen();
  }
});

connect();
