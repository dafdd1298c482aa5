// pyrofling's browser viewer: the canvas fallback's drawing, in a worker of its own (an OffscreenCanvas). Where
// the browser cannot feed a <video> the decoded frames, they are drawn into the page's canvas, and a 720p frame's
// drawImage took the page's main thread 5 ms (p90 9 ms on a busy machine), which the decoder's results and the
// page's input wait behind. Here the drawing waits for nothing of the page's, and the page's thread for none of it.
"use strict";

let canvas = null;
let ctx = null;

self.onmessage = (ev) => {
  const { offscreen, frame, capture } = ev.data;
  if (offscreen) {
    canvas = offscreen;
    ctx = canvas.getContext("2d", { alpha: false, desynchronized: true });
    return;
  }
  if (!frame) return;
  if (ctx) {
    if (canvas.width !== frame.displayWidth || canvas.height !== frame.displayHeight) {
      canvas.width = frame.displayWidth;
      canvas.height = frame.displayHeight;
    }
    ctx.drawImage(frame, 0, 0);
  }
  frame.close();
  // Drawn: the page times capture → drawn when it hears so (this worker's clock is not the page's: its
  // performance.timeOrigin was measured tens of milliseconds apart).
  self.postMessage({ capture });
};
