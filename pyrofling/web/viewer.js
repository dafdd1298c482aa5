// pyrofling's browser viewer: the host's H.264 over WebTransport (QUIC streams, one per picture) or a WebSocket,
// decoded with WebCodecs, drawn at once.
// Wire format: pyrofling/core/host/web_viewers.py and docs/browser.md.
"use strict";

const stats = {
  state: "connecting", framesReceived: 0, framesDecoded: 0, framesDrawn: 0, decodeErrors: 0,
  keyframeRequests: 0, bytes: 0, lastCaptureUs: 0, lastPtsUs: 0, latencyMs: [], reconnects: 0, refused: "",
  transport: "websocket", transportError: "", unitsOutOfOrder: 0, keyframeWhy: {},
  // Pauses over 50 ms between two pictures arriving, and between two drawn: [ms since the page opened, gap ms].
  arrivalGaps: [], drawGaps: [],
};
const gapAt = { arrival: 0, draw: 0 };
function noteGap(kind, list) {
  const now = performance.now();
  if (gapAt[kind] && now - gapAt[kind] > 50 && list.length < 200) list.push([Math.round(now), Math.round(now - gapAt[kind])]);
  gapAt[kind] = now;
}
window.pyrofling = { stats };

const message = document.getElementById("message");
const overlay = document.getElementById("overlay");
const params = new URLSearchParams(location.hash.slice(1));
const token = params.get("t");
// Without the link's key, the host's password or one-time pairing code typed into the page (a password is kept
// for this tab's reconnects only; a pairing code is spent by its first use, after which the pass below serves).
let code = sessionStorage.getItem("pyrofling-code");
// The pass the host gave this browser when it proved the link (a link admits one browser): reloads, reconnects
// and, where the host keeps passes (its pairing directory), its later runs admit the browser with it.
let resume = localStorage.getItem("pyrofling-resume");
const login = document.getElementById("login");
// judge=1 (benches): read the frame marker of the picture on screen at every refresh, as --check-scene does.
const judge = params.get("judge") === "1";
stats.refreshes = []; // judge: [wall ms of the refresh, frame id or -1 (unreadable), capture µs (low 48 bits)]
let onScreen = null; // judge: the marker of the picture drawn last

// Where the pictures go: a <video> fed the decoded frames (MediaStreamTrackGenerator) where the browser has one,
// so that the compositor converts and scales each frame off the page's main thread, else the page's canvas.
// Drawn into a 2D canvas a 720p frame took that thread 5 ms (p90 9 ms on a busy machine), and the decoder's
// results wait for it: the page fell behind and its pictures turned stale.
let surface = document.getElementById("screen");
let ctx = null; // the canvas's, when the pictures are drawn there by the page's own thread
let drawer = null; // the worker that draws them there instead (draw.js), where the browser has OffscreenCanvas
let frames = null; // the <video>'s track's writer, when they go there
const picture = { width: surface.width, height: surface.height }; // the last one's size
if (typeof MediaStreamTrackGenerator === "function" && params.get("surface") !== "canvas") {
  const video = document.createElement("video");
  Object.assign(video, { id: "screen", muted: true, autoplay: true, playsInline: true, disablePictureInPicture: true });
  const track = new MediaStreamTrackGenerator({ kind: "video" });
  frames = track.writable.getWriter();
  video.srcObject = new MediaStream([track]);
  surface.replaceWith(video);
  surface = video;
} else if (typeof OffscreenCanvas === "function" && surface.transferControlToOffscreen) {
  const offscreen = surface.transferControlToOffscreen();
  drawer = new Worker("/draw.js");
  drawer.inFlight = 0;
  drawer.postMessage({ offscreen }, [offscreen]);
  drawer.onmessage = (ev) => {
    drawer.inFlight--;
    if (ev.data.capture !== undefined) noteLatency(performance.now(), ev.data.capture); // drawn, and said so
  };
} else {
  ctx = surface.getContext("2d", { alpha: false, desynchronized: true });
}
stats.surface = frames ? "video" : "canvas";
stats.canvasDrawnBy = frames ? null : drawer ? "worker" : "page";
// The canvas's worker may hold this many pictures not yet drawn; a later one is dropped rather than queued. On
// the busy 2-core machine 2 dropped too many (96.8 and 97.5 % good refreshes), 4 gave 98.4–99.9 %.
const DRAWER_BEHIND = 4;
stats.framesNotDrawn = 0;
// On the <video>, which picture the compositor presented and when (requestVideoFrameCallback: mediaTime is the
// frame's timestamp, its pts): the judge's picture on screen and the capture → presented latency. On the canvas,
// the picture drawn last and capture → drawn.
stats.latencyKind = frames ? "presented" : "drawn";
const markers = new Map(); // judge: pts → the marker read from that picture
const presenting = new Map(); // pts → capture µs, of the pictures handed to the <video>
if (frames) {
  const onPresented = (_now, meta) => {
    const pts = Math.round(meta.mediaTime * 1e6);
    if (markers.has(pts)) onScreen = markers.get(pts);
    const capture = presenting.get(pts);
    // expectedDisplayTime is Chromium's estimate, for a MediaStream often the deadline of the refresh before the
    // picture came (one suite run read latencies below zero); a picture is not shown before it was handed over.
    if (capture !== undefined) noteLatency(Math.max(meta.expectedDisplayTime, meta.presentationTime), capture);
    for (const key of presenting.keys()) { if (key > pts) break; presenting.delete(key); markers.delete(key); }
    surface.requestVideoFrameCallback(onPresented);
  };
  surface.requestVideoFrameCallback(onPresented);
}

let ws = null;
let decoder = null;
let hello = null;
let needKey = true;
let retryMs = 1000;
const captureOf = new Map(); // pts → capture µs, for the latency of what is drawn

function say(text) { message.textContent = text; }

// The codec the host streams now ("h264" or "av1": its hello, then a "codec" message when it changes), and the
// codecs this browser's WebCodecs decodes, told to the host with the proof (host --codec auto picks by them).
let streamCodec = "h264";
const AV1_FALLBACK = "av01.0.08M.08"; // Main profile, level 4.0, 8-bit: where the sequence header cannot be read
const pageCodecs = (async () => {
  const said = ["h264"];
  try {
    if (typeof VideoDecoder !== "undefined" && (await VideoDecoder.isConfigSupported({ codec: AV1_FALLBACK })).supported) said.push("av1");
  } catch (e) { console.warn("cannot ask WebCodecs about AV1", e); }
  stats.codecsDecoded = said;
  return said;
})();

function codecFromAv1(bytes) {
  // A temporal unit of sized OBUs: its sequence header (OBU type 1) gives the profile, the first operating point's
  // level and tier. The bit depth is taken as 8 (the host's AV1 for pages is 8-bit).
  let i = 0;
  const leb128 = () => { let v = 0; for (let k = 0; k < 8 && i < bytes.length; k++) { const b = bytes[i++]; v |= (b & 0x7f) << (7 * k); if (!(b & 0x80)) break; } return v; };
  while (i < bytes.length) {
    const h = bytes[i++];
    if (h & 0x80) return null; // the forbidden bit: not AV1
    const type = (h >> 3) & 15;
    if (h & 4) i++; // the extension byte
    const size = h & 2 ? leb128() : bytes.length - i;
    if (type === 1) {
      let bit = i * 8;
      const read = (n) => { let v = 0; for (let k = 0; k < n; k++, bit++) v = (v << 1) | ((bytes[bit >> 3] >> (7 - (bit & 7))) & 1); return v; };
      const profile = read(3); read(1); // still_picture
      let level, tier = 0;
      if (read(1)) level = read(5); // reduced_still_picture_header
      else {
        if (read(1)) return null; // timing_info_present: more to parse than a page needs; the fallback plays
        read(1); read(5); read(12); // initial_display_delay_present, operating_points_cnt_minus_1, the first's idc
        level = read(5);
        if (level > 7) tier = read(1);
      }
      return "av01." + profile + "." + String(level).padStart(2, "0") + (tier ? "H" : "M") + ".08";
    }
    i += size;
  }
  return null;
}

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

// -- WebTransport: the host offers it in its hello (its certificate's SHA-256 and a one-time ticket, both inside
// the connection that proved the key). Each picture comes on its own stream ("S", its number, the message):
// streams may overtake each other, so they are decoded in their numbers' order. Sound comes as datagrams, and
// the pad, keys and mouse go back as datagrams.
let transport = null; // the worker that holds the open session (transport.js: it reads and times the streams)
const order = { next: 0, held: new Map() };
stats.rateReports = 0;

function openTransport(offer) {
  const port = location.port || (location.protocol === "https:" ? "443" : "80");
  const url = "https://" + location.hostname + ":" + port + "/wt/" + offer.ticket;
  const hash = Uint8Array.from(offer.cert_sha256.match(/../g), (h) => parseInt(h, 16));
  const worker = new Worker("/transport.js");
  worker.onmessage = (ev) => {
    const msg = ev.data;
    if (msg.type === "stream") onStreamMessage(msg.buf);
    else if (msg.type === "datagram") onSound(msg.buf);
    else if (msg.type === "reported") stats.rateReports++;
    else if (msg.type === "ready") {
      transport = worker;
      stats.transport = "webtransport";
      order.next = 0; order.held.clear(); needKey = true;
    } else if (msg.type === "failed") {
      stats.transportError = msg.error;
      worker.terminate();
      if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "websocket" }));
    } else if (msg.type === "closed") {
      worker.terminate();
      if (transport !== worker) return;
      transport = null; stats.transport = "websocket"; needKey = true; // the host goes on over the WebSocket
    }
  };
  worker.postMessage({ type: "open", url, hash });
}

function onStreamMessage(buf) {
  const tag = new Uint8Array(buf, 0, 1)[0];
  if (tag === 0x47) { onSound(buf); return; } // "G": sound too large for a datagram
  if (tag !== 0x53) return; // "S"
  const seq = new DataView(buf).getUint32(1, true);
  if (seq < order.next) return;
  if (seq !== order.next) stats.unitsOutOfOrder++;
  order.held.set(seq, buf.slice(5));
  while (order.held.has(order.next)) {
    const unit = order.held.get(order.next);
    order.held.delete(order.next);
    order.next++;
    onVideo(unit);
  }
  if (order.held.size > 120) { // one never came (a stream the host gave up): start again at a key frame
    order.next = Math.max(...order.held.keys()) + 1; order.held.clear(); askForKey("a picture never came");
  }
}

// Without a session, the arrival reports go over the WebSocket (report.js), once the host has admitted the page;
// while they do not, each interval starts afresh (a report after a session closed covers only the WebSocket's).
let wsArrivals = newArrivals();
setInterval(() => {
  if (transport || !ws || !ws.proved || ws.readyState !== WebSocket.OPEN) { wsArrivals = newArrivals(); return; }
  ws.send(arrivalReport(wsArrivals, performance.now()));
  stats.rateReports++;
}, 50);

function sendState(buf) {
  if (transport) { transport.postMessage({ type: "datagram", data: buf }, [buf]); return; }
  ws.send(buf);
}

function askForKey(why) {
  needKey = true;
  stats.keyframeRequests++;
  stats.keyframeWhy[why] = (stats.keyframeWhy[why] || 0) + 1;
  if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "keyframe" }));
}

function draw(frame) {
  if (drawer && drawer.inFlight >= DRAWER_BEHIND) { frame.close(); stats.framesNotDrawn++; return; }
  picture.width = frame.displayWidth;
  picture.height = frame.displayHeight;
  if (judge) readMarker(frame);
  const capture = captureOf.get(frame.timestamp);
  captureOf.delete(frame.timestamp);
  if (frames) {
    if (capture !== undefined) presenting.set(frame.timestamp, capture);
    if (presenting.size > 120) presenting.delete(presenting.keys().next().value);
    frames.write(frame).catch(() => frame.close()); // the track takes the frame (and closes it)
  } else if (drawer) {
    drawer.inFlight++;
    drawer.postMessage({ frame, capture }, [frame]); // the worker draws it, closes it, and says when
  } else {
    if (surface.width !== picture.width || surface.height !== picture.height) {
      surface.width = picture.width;
      surface.height = picture.height;
    }
    ctx.drawImage(frame, 0, 0);
    frame.close();
  }
  stats.framesDrawn++;
  noteGap("draw", stats.drawGaps);
  if (ctx && capture !== undefined) noteLatency(performance.now(), capture);
}

// The host's clock (its capture stamps') on the page's, as a pyrofling viewer times its own: a ping over the
// WebSocket every half second, and of the last eight answers the one with the shortest round trip gives the
// offset, wrong by at most half that trip. Wall clocks are not used: the page's (performance.timeOrigin) and the
// host's may differ by milliseconds.
const hostClock = { answers: [], offsetMs: null };
stats.hostClockRttMs = null;
function pingHost() {
  if (ws && ws.proved && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "ping", t: performance.now() }));
}
setInterval(pingHost, 500);

// The page's display, for a host whose own desktop takes its viewer's size (protocol.md §7.14, said in JSON): the
// window in device pixels and the rate its animation frames come at (the median of 60 intervals), once admitted
// and again when either changes.
const display = { said: "", hz: 0, frames: [] };
function sayDisplay() {
  if (!(ws && ws.proved && ws.readyState === WebSocket.OPEN)) return;
  const scale = window.devicePixelRatio || 1;
  const text = JSON.stringify({ type: "display", width: Math.round(innerWidth * scale),
    height: Math.round(innerHeight * scale), hz: display.hz });
  if (text !== display.said) { display.said = text; ws.send(text); }
}
function timeRefresh(t) {
  display.frames.push(t);
  if (display.frames.length <= 60) { requestAnimationFrame(timeRefresh); return; }
  const gaps = display.frames.slice(1).map((f, i) => f - display.frames[i]).sort((a, b) => a - b);
  display.hz = Math.round(10000 / gaps[gaps.length >> 1]) / 10;
  sayDisplay();
}
requestAnimationFrame(timeRefresh);
window.addEventListener("resize", sayDisplay);

function onPong(msg) {
  const now = performance.now();
  hostClock.answers.push([now - msg.t, msg.host_us / 1000 - (msg.t + now) / 2]);
  if (hostClock.answers.length > 8) hostClock.answers.shift();
  const best = hostClock.answers.reduce((a, b) => (b[0] < a[0] ? b : a));
  hostClock.offsetMs = best[1];
  stats.hostClockRttMs = best[0];
}

// Capture (the host's µs) → `pageMs` (performance.now()'s time), once the host's clock is known from a few
// answers: the first come while the page starts, slow, and one alone was seen 50 ms off.
const HOST_CLOCK_ANSWERS = 4;
function noteLatency(pageMs, captureUs) {
  if (hostClock.answers.length < HOST_CLOCK_ANSWERS) return;
  stats.latencyMs.push(pageMs - (captureUs / 1000 - hostClock.offsetMs));
  if (stats.latencyMs.length > 2000) stats.latencyMs.splice(0, 1000);
}

function newDecoder(codec) {
  if (decoder && decoder.state !== "closed") decoder.close();
  decoder = new VideoDecoder({
    output: (frame) => { stats.framesDecoded++; draw(frame); },
    error: (e) => { stats.decodeErrors++; console.warn("decode error", e); decoder = null; askForKey("decode error"); },
  });
  decoder.configure({ codec, optimizeForLatency: true, hardwareAcceleration: "no-preference" });
}

// Pictures waiting for the decoder beyond which the page starts again at a key frame (a quarter second at 60
// fps). On the busy 2-core machine the most a run saw ranged 6 to 31 (bench browser's max_decode_queue).
const DECODER_BEHIND = 15;

function onVideo(buf) {
  const view = new DataView(buf);
  if (view.getUint8(0) !== 0x56) return; // "V"
  const idr = (view.getUint8(1) & 1) !== 0;
  const capture = Number(view.getBigUint64(2, true));
  const pts = Number(view.getBigUint64(10, true));
  const data = new Uint8Array(buf, 18);
  stats.framesReceived++;
  stats.bytes += buf.byteLength;
  noteGap("arrival", stats.arrivalGaps);
  if (needKey && !idr) return;
  if (idr && (needKey || !decoder)) {
    const codec = streamCodec === "av1" ? codecFromAv1(data) || AV1_FALLBACK : codecFromSps(data);
    if (!codec) return;
    stats.codec = codec;
    newDecoder(codec);
    needKey = false;
  }
  if (!decoder || decoder.state !== "configured") return;
  // Far behind (a tab that was away, a machine too slow): drop to the next key frame rather than show old
  // pictures late. A short stall (a busy moment of the browser's) catches up by itself: asking for a key frame
  // then would freeze the picture longer than the stall did.
  stats.maxDecodeQueue = Math.max(stats.maxDecodeQueue || 0, decoder.decodeQueueSize);
  if (decoder.decodeQueueSize > DECODER_BEHIND) { askForKey("decoder behind"); return; }
  captureOf.set(pts, capture);
  if (captureOf.size > 120) captureOf.delete(captureOf.keys().next().value);
  stats.lastCaptureUs = capture;
  stats.lastPtsUs = pts;
  decoder.decode(new EncodedVideoChunk({ type: idr ? "key" : "delta", timestamp: pts, data }));
}

// -- sound: the viewers' own packets (Opus through AudioDecoder, or PCM as it comes), played through Web Audio
// with a small buffer (30 ms); the browser lets it start on the first click or key (autoplay rules).
let audio = null;
stats.audioPackets = 0;
stats.audioFramesPlayed = 0;
window.pyrofling.audioClock = () => (audio ? audio.ctx.currentTime : 0);
window.pyrofling.audioState = () => (audio ? audio.ctx.state : "off");

function setupAudio(a) {
  if (audio) { audio.ctx.close(); audio = null; }
  const ctx = new AudioContext({ sampleRate: a.rate, latencyHint: "interactive" });
  audio = { ctx, codec: a.codec, rate: a.rate, channels: a.channels, playAt: 0, decoder: null };
  if (a.codec === "opus" && typeof AudioDecoder !== "undefined") {
    audio.decoder = new AudioDecoder({ output: playAudioData, error: (e) => console.warn("audio decode error", e) });
    audio.decoder.configure({ codec: "opus", sampleRate: a.rate, numberOfChannels: a.channels });
  }
}

function resumeAudio() { if (audio && audio.ctx.state === "suspended") audio.ctx.resume(); }

// Packets come every 5 ms: gathered into 20 ms blocks before they are scheduled, a quarter of the nodes.
const BLOCK_S = 0.02;
let pending = [];
let pendingFrames = 0;

function schedule(planes, frames) {
  const ctx = audio.ctx;
  if (ctx.state !== "running" || !frames) return;
  pending.push(planes);
  pendingFrames += frames;
  if (pendingFrames < BLOCK_S * audio.rate) return;
  const buf = ctx.createBuffer(planes.length, pendingFrames, audio.rate);
  for (let c = 0; c < planes.length; c++) {
    const out = buf.getChannelData(c);
    let at = 0;
    for (const p of pending) { out.set(p[c], at); at += p[c].length; }
  }
  const src = ctx.createBufferSource();
  src.buffer = buf;
  src.connect(ctx.destination);
  const now = ctx.currentTime;
  // Hold 30 ms beyond the block; start over when it ran dry or grew past 150 ms (the tab was away).
  if (audio.playAt < now + 0.005 || audio.playAt > now + 0.15) audio.playAt = now + 0.03;
  src.start(audio.playAt);
  audio.playAt += pendingFrames / audio.rate;
  stats.audioFramesPlayed += pendingFrames;
  pending = [];
  pendingFrames = 0;
}

function playAudioData(data) {
  const planes = [];
  for (let c = 0; c < data.numberOfChannels; c++) {
    const plane = new Float32Array(data.numberOfFrames);
    data.copyTo(plane, { planeIndex: c, format: "f32-planar" });
    planes.push(plane);
  }
  data.close();
  if (audio) schedule(planes, planes.length ? planes[0].length : 0);
}

// A session's sound: "G", then units of 20 ms in all, each its length (uint32) and its "A" message.
function onSound(buf) {
  const view = new DataView(buf);
  if (view.getUint8(0) !== 0x47) return;
  for (let at = 1; at + 4 <= buf.byteLength; ) {
    const n = view.getUint32(at, true);
    at += 4;
    if (at + n > buf.byteLength) return;
    onAudio(buf.slice(at, at + n));
    at += n;
  }
}

function onAudio(buf) {
  stats.audioPackets++;
  if (!audio) return;
  if (audio.codec === "pcm_s16le") {
    const pcm = new Int16Array(buf.slice(18));
    const n = Math.floor(pcm.length / audio.channels);
    const planes = Array.from({ length: audio.channels }, () => new Float32Array(n));
    for (let i = 0; i < n; i++) for (let c = 0; c < audio.channels; c++) planes[c][i] = pcm[i * audio.channels + c] / 32768;
    schedule(planes, n);
  } else if (audio.decoder && audio.decoder.state === "configured") {
    const pts = Number(new DataView(buf).getBigUint64(10, true));
    audio.decoder.decode(new EncodedAudioChunk({ type: "key", timestamp: pts, data: new Uint8Array(buf, 18) }));
  }
}

login.addEventListener("submit", (ev) => {
  ev.preventDefault();
  code = document.getElementById("password").value;
  sessionStorage.setItem("pyrofling-code", code);
  login.hidden = true;
  connect();
});

function connect() {
  if (!token && !code && !resume) {
    stats.state = "no token";
    say("");
    login.hidden = false;
    document.getElementById("password").focus();
    return;
  }
  if (typeof VideoDecoder === "undefined") { stats.state = "no webcodecs"; say("This browser cannot decode the stream (no WebCodecs): use a current Chromium, Chrome, Edge or Firefox."); return; }
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  ws = new WebSocket(scheme + "//" + location.host + "/stream");
  ws.binaryType = "arraybuffer";
  const proof = resume ? { resume } : token ? { token } : { code };
  const socket = ws;
  socket.onopen = async () => {
    const codecs = await pageCodecs; // asked of WebCodecs once, when the page loaded
    if (socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify({ type: "auth", ...proof, codecs }));
  };
  ws.onmessage = (ev) => {
    if (typeof ev.data === "string") {
      const msg = JSON.parse(ev.data);
      if (msg.type === "rumble") { rumble(msg); return; }
      if (msg.type === "pong") { onPong(msg); return; }
      if (msg.type === "codec") { // the host changed codec: its next picture is a key frame of the new one
        streamCodec = msg.codec; needKey = true; stats.codecChanges = (stats.codecChanges || 0) + 1; return;
      }
      if (msg.type === "hello") {
        hello = msg; stats.clockOffsetMs = msg.clock_offset_ms; socket.proved = true; streamCodec = msg.codec;
        hostClock.answers = []; hostClock.offsetMs = null; pingHost(); // a host (maybe restarted) to time anew
        display.said = ""; sayDisplay();
        if (msg.resume) { resume = msg.resume; localStorage.setItem("pyrofling-resume", resume); }
        if (msg.paired) { code = null; sessionStorage.removeItem("pyrofling-code"); } // a spent pairing code
        if (msg.audio) setupAudio(msg.audio);
        stats.state = "streaming"; retryMs = 1000; needKey = true; say("");
        if (stats.codecsDecoded && !stats.codecsDecoded.includes(msg.codec)) { // a host held to one codec
          stats.state = "cannot decode";
          say("This browser cannot decode the host's " + msg.codec.toUpperCase() + ": the host can stream H.264 (--codec h264, or auto to follow its viewers).");
        }
        if (msg.webtransport) {
          if (typeof WebTransport === "undefined") { stats.transportError = "no WebTransport"; ws.send(JSON.stringify({ type: "websocket" })); }
          else openTransport(msg.webtransport);
        }
      }
      return;
    }
    const tag = new Uint8Array(ev.data, 0, 1)[0];
    if (tag === 0x41) { wsArrivals.bytes += ev.data.byteLength; onAudio(ev.data); } // "A"
    else if (tag === 0x53 && !transport) { // "S": a picture, its number and its "V" message
      const now = performance.now();
      noteArrival(wsArrivals, ev.data, now, now); // a WebSocket hands over whole messages: when it came, both
      onVideo(ev.data.slice(5));
    }
  };
  ws.onclose = (ev) => {
    if (decoder && decoder.state !== "closed") decoder.close();
    decoder = null;
    if (transport) { const t = transport; transport = null; t.terminate(); }
    stats.transport = "websocket";
    // How the host closed says what to do (pyrofling/core/host/web_viewers.py): 4001, it keeps no such pass (an
    // earlier run's, or revoked): forget it, and prove the link or the password if there is one; 1013, busy: keep
    // everything and come back later; 1008, refused: say why and do not hammer it. Only 4001 costs the pass.
    if (ev.code === 4001 && proof.resume) {
      resume = null; localStorage.removeItem("pyrofling-resume");
      if (token || code) { connect(); return; }
    }
    if (ev.code === 1013) {
      stats.state = "busy"; stats.busy = (stats.busy || 0) + 1;
      say("The host is busy (" + ev.reason + "): trying again…");
      setTimeout(connect, retryMs);
      retryMs = Math.min(retryMs * 2, 10000);
      return;
    }
    if (ev.code === 1008 || ev.code === 4001) {
      stats.state = "refused"; stats.refused = ev.reason;
      if (!token && code) { // a wrong password: ask again
        code = null; sessionStorage.removeItem("pyrofling-code"); login.hidden = false;
      }
      say("The host refused this page: " + ev.reason);
      return;
    }
    stats.state = "reconnecting"; stats.reconnects++;
    say(hello ? "The host is gone: reconnecting…" : "Cannot reach the host: retrying…");
    setTimeout(connect, retryMs);
    retryMs = Math.min(retryMs * 2, 10000);
  };
}

// The frame marker: marker.js.

// The marker is read from the frame itself, its band of rows copied out of the luma plane (microseconds; drawing
// it to read it back would convert the whole frame). Luma over 128 is a one, as the host's checker reads it.
let judgedSeq = 0;
let shownSeq = 0;
function readMarker(frame) {
  const layout = markerLayout(frame.displayWidth);
  const seq = ++judgedSeq;
  const pts = frame.timestamp;
  const found = (read) => { // the canvas shows the picture drawn last: a later one's read first wins
    if (frames) markers.set(pts, read);
    else if (seq >= shownSeq) { shownSeq = seq; onScreen = read; }
  };
  if (!layout) { found(null); return; } // too small to carry one
  if (frame.format !== "I420" && frame.format !== "NV12" && frame.format !== "I420A") {
    found({ id: -1, captureUs: 0 }); // no luma plane to read
    return;
  }
  const w = layout.perRow * layout.block, h = layout.rows * layout.block;
  const rect = { x: 0, y: 0, width: w, height: h };
  const copy = frame.clone();
  const buf = new Uint8Array(copy.allocationSize({ rect }));
  copy.copyTo(buf, { rect }).then((planes) => {
    copy.close();
    const stride = planes[0].stride, base = planes[0].offset;
    found(parseMarker(layout, (x, y) => buf[base + y * stride + x]));
  }, () => copy.close());
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
      `${hello ? hello.width + "x" + hello.height : "-"}  ${(kbits / 1000).toFixed(1)} Mbit/s  ${stats.transport}\n` +
      `latency ${median(stats.latencyMs.slice(-120)).toFixed(1)} ms ± ${((stats.hostClockRttMs ?? 0) / 2).toFixed(1)} ` +
      `(capture → ${stats.latencyKind}; ± half the host clock's best round trip)\n` +
      `frames ${stats.framesDrawn} drawn, ${stats.framesReceived} received, ${stats.decodeErrors} decode errors`;
  }
}, 1000);


// -- the player: keys and the mouse, the pad (sent as INPUT_STATE and GAMEPAD_STATE payloads, protocol.md §7.11,
// §2.3; the host applies them by the same rules as a pyrofling viewer's). A click on the picture captures the
// keyboard and the mouse (the pointer is locked where the browser allows it, else its position over the picture
// is sent); Ctrl+Alt+Z lets go, as in the native window. The pad needs no capture: press a button on it.
const LINUX_KEYS = {"KeyA":30,"KeyB":48,"KeyC":46,"KeyD":32,"KeyE":18,"KeyF":33,"KeyG":34,"KeyH":35,"KeyI":23,"KeyJ":36,"KeyK":37,"KeyL":38,"KeyM":50,"KeyN":49,"KeyO":24,"KeyP":25,"KeyQ":16,"KeyR":19,"KeyS":31,"KeyT":20,"KeyU":22,"KeyV":47,"KeyW":17,"KeyX":45,"KeyY":21,"KeyZ":44,"Digit0":11,"Digit1":2,"Digit2":3,"Digit3":4,"Digit4":5,"Digit5":6,"Digit6":7,"Digit7":8,"Digit8":9,"Digit9":10,"F1":59,"F2":60,"F3":61,"F4":62,"F5":63,"F6":64,"F7":65,"F8":66,"F9":67,"F10":68,"F11":87,"F12":88,"Escape":1,"Minus":12,"Equal":13,"Backspace":14,"Tab":15,"BracketLeft":26,"BracketRight":27,"Enter":28,"ControlLeft":29,"Semicolon":39,"Quote":40,"Backquote":41,"ShiftLeft":42,"Backslash":43,"Comma":51,"Period":52,"Slash":53,"ShiftRight":54,"NumpadMultiply":55,"AltLeft":56,"Space":57,"CapsLock":58,"NumLock":69,"ScrollLock":70,"Numpad7":71,"Numpad8":72,"Numpad9":73,"NumpadSubtract":74,"Numpad4":75,"Numpad5":76,"Numpad6":77,"NumpadAdd":78,"Numpad1":79,"Numpad2":80,"Numpad3":81,"Numpad0":82,"NumpadDecimal":83,"IntlBackslash":86,"NumpadEnter":96,"ControlRight":97,"NumpadDivide":98,"PrintScreen":99,"AltRight":100,"Home":102,"ArrowUp":103,"PageUp":104,"ArrowLeft":105,"ArrowRight":106,"End":107,"ArrowDown":108,"PageDown":109,"Insert":110,"Delete":111,"Pause":119,"MetaLeft":125,"MetaRight":126,"ContextMenu":127};
const input = { captured: false, held: new Set(), buttons: 0, dx: 0, dy: 0, wheel: 0, absX: 0, absY: 0, seq: 0 };
let padSeq = 0;
let lastPad = "";
stats.inputStatesSent = 0;
stats.padStatesSent = 0;

function sendInput() {
  if (!ws || ws.readyState !== WebSocket.OPEN || !hello) return;
  const buf = new ArrayBuffer(1 + 58);
  const v = new DataView(buf);
  v.setUint8(0, 0x49); // "I"
  v.setUint16(1, input.seq = (input.seq + 1) & 0xffff, true);
  v.setUint8(3, input.buttons);
  const locked = document.pointerLockElement === surface;
  v.setUint8(4, input.captured ? (locked ? 2 : 1) : 0); // CAPTURED (relative) or ABSOLUTE
  for (const code of input.held) v.setUint8(5 + (code >> 3), v.getUint8(5 + (code >> 3)) | (1 << (code & 7)));
  v.setInt32(37, input.dx | 0, true);
  v.setInt32(41, input.dy | 0, true);
  v.setInt32(45, input.wheel | 0, true);
  v.setInt32(49, 0, true);
  v.setUint16(53, input.absX, true);
  v.setUint16(55, input.absY, true);
  sendState(buf);
  stats.inputStatesSent++;
}

function capture(on) {
  if (input.captured === on) return;
  input.captured = on;
  if (!on) {
    input.held.clear(); input.buttons = 0;
    if (document.pointerLockElement === surface) document.exitPointerLock();
    say("");
  }
  sendInput();
}

surface.addEventListener("mousedown", (ev) => {
  resumeAudio();
  if (!input.captured) {
    capture(true);
    if (surface.requestPointerLock) { try { surface.requestPointerLock(); } catch (e) { /* absolute positions */ } }
  }
  input.buttons |= [1, 4, 2, 8, 16][ev.button] || 0;
  sendInput();
  ev.preventDefault();
});
window.addEventListener("mouseup", (ev) => {
  input.buttons &= ~([1, 4, 2, 8, 16][ev.button] || 0);
  if (input.captured) sendInput();
});
surface.addEventListener("contextmenu", (ev) => ev.preventDefault());
window.addEventListener("mousemove", (ev) => {
  if (!input.captured) return;
  input.dx += ev.movementX; input.dy += ev.movementY;
  const r = surface.getBoundingClientRect();
  // object-fit: contain leaves bars: the picture's own box within the element.
  const scale = Math.min(r.width / picture.width, r.height / picture.height);
  const w = picture.width * scale, h = picture.height * scale;
  const x = (ev.clientX - r.left - (r.width - w) / 2) / w, y = (ev.clientY - r.top - (r.height - h) / 2) / h;
  input.absX = Math.round(Math.min(1, Math.max(0, x)) * 65535);
  input.absY = Math.round(Math.min(1, Math.max(0, y)) * 65535);
  sendInput();
});
window.addEventListener("wheel", (ev) => {
  if (!input.captured) return;
  input.wheel += ev.deltaY < 0 ? 1 : ev.deltaY > 0 ? -1 : 0;
  sendInput();
  ev.preventDefault();
}, { passive: false });
document.addEventListener("pointerlockchange", () => {
  if (document.pointerLockElement !== surface && input.captured && !document.hasFocus()) capture(false);
});

function keyEvent(ev, down) {
  if (down && ev.ctrlKey && ev.altKey && ev.code === "KeyZ") { capture(false); ev.preventDefault(); return true; }
  if (!input.captured) return false;
  const code = LINUX_KEYS[ev.code];
  if (code === undefined) return true;
  if (down) input.held.add(code); else input.held.delete(code);
  sendInput();
  ev.preventDefault();
  return true;
}
window.addEventListener("keyup", (ev) => keyEvent(ev, false));
window.addEventListener("blur", () => { if (input.held.size || input.buttons) { input.held.clear(); input.buttons = 0; sendInput(); } });

// A game shook the pad this page holds: its motors, through the Gamepad API (0..65535 each; 0 ms stops them,
// 65535 ms lasts until the next command, which replaces it).
stats.rumbles = 0;
stats.rumblesPlayed = 0;
function rumble(msg) {
  stats.rumbles++;
  const pads = navigator.getGamepads ? navigator.getGamepads() : [];
  const pad = Array.from(pads).find((p) => p && p.connected);
  const motors = pad && pad.vibrationActuator;
  if (!motors) return;
  if (msg.duration_ms === 0) { if (motors.reset) motors.reset().catch(() => {}); return; }
  motors.playEffect("dual-rumble", {
    duration: msg.duration_ms === 65535 ? 10000 : msg.duration_ms,
    strongMagnitude: msg.strong / 65535, weakMagnitude: msg.weak / 65535,
  }).catch(() => {});
  stats.rumblesPlayed++;
}

function axis(value) { return Math.max(-32767, Math.min(32767, Math.round(value * 32767))); }

function pollPad() {
  const pads = navigator.getGamepads ? navigator.getGamepads() : [];
  const pad = Array.from(pads).find((p) => p && p.connected);
  if (pad && ws && ws.readyState === WebSocket.OPEN && hello) {
    const b = (i) => (pad.buttons[i] && pad.buttons[i].pressed ? 1 : 0);
    // The standard mapping: 0 A/South, 1 B/East, 2 X/West, 3 Y/North, 4/5 shoulders, 6/7 triggers,
    // 8 Select, 9 Start, 10/11 sticks, 12–15 the d-pad, 16 the home button.
    const buttons = b(0) | (b(1) << 1) | (b(2) << 2) | (b(3) << 3) | (b(4) << 4) | (b(5) << 5) | (b(10) << 6) |
      (b(11) << 7) | (b(9) << 8) | (b(8) << 9) | (b(16) << 10);
    const trigger = (i) => Math.round(255 * (pad.buttons[i] ? pad.buttons[i].value : 0));
    const a = pad.axes;
    const state = [buttons, axis(a[0] || 0), axis(a[1] || 0), axis(a[2] || 0), axis(a[3] || 0), trigger(6),
      trigger(7), b(15) - b(14), b(13) - b(12)];
    const key = state.join(",");
    const now = performance.now();
    if (key !== lastPad || now - (pollPad.sentAt || 0) > 100) { // on change, and every 100 ms
      lastPad = key; pollPad.sentAt = now;
      const buf = new ArrayBuffer(1 + 16);
      const v = new DataView(buf);
      v.setUint8(0, 0x50); // "P"
      v.setUint16(1, padSeq = (padSeq + 1) & 0xffff, true);
      v.setUint16(3, state[0], true);
      for (let i = 0; i < 4; i++) v.setInt16(5 + 2 * i, state[1 + i], true);
      v.setUint8(13, state[5]); v.setUint8(14, state[6]);
      v.setInt8(15, state[7]); v.setInt8(16, state[8]);
      sendState(buf);
      stats.padStatesSent++;
    }
  }
  requestAnimationFrame(pollPad);
}
requestAnimationFrame(pollPad);
// Keys and the mouse are states: resend every 100 ms while captured, so a lost moment never leaves one held.
setInterval(() => { if (input.captured) sendInput(); }, 100);

document.addEventListener("keydown", (ev) => {
  resumeAudio();
  if (keyEvent(ev, true)) return;
  if (ev.key === "v" || ev.key === "V") overlay.hidden = !overlay.hidden;
  if (ev.key === "f" || ev.key === "F") {
    if (document.fullscreenElement) document.exitFullscreen(); else document.documentElement.requestFullscreen();
  }
});

connect();
