'use strict';
// Length-prefixed frames (a 4-byte big-endian length, then the payload) decoded from chunks of
// any size: chunks are kept as they come and joined once a whole frame is there.

class FrameDecoder {
  constructor() {
    this.chunks = [];
    this.buffered = 0;
  }

  /** Feeds a chunk; returns the frames it completed. */
  push(chunk) {
    this.chunks.push(chunk);
    this.buffered += chunk.length;
    const frames = [];
    while (this.buffered >= 4) {
      const head = this.chunks[0].length >= 4 ? this.chunks[0] : Buffer.concat(this.chunks);
      const length = head.readUInt32BE(0);
      if (this.buffered < 4 + length) break;
      const all = this.chunks.length === 1 ? this.chunks[0] : Buffer.concat(this.chunks, this.buffered);
      frames.push(all.subarray(4, 4 + length));
      const rest = all.subarray(4 + length);
      this.chunks = rest.length ? [rest] : [];
      this.buffered = rest.length;
    }
    return frames;
  }
}

/** A frame of `size` payload bytes. */
function frame(size, fill = 0x61) {
  const buf = Buffer.alloc(4 + size, fill);
  buf.writeUInt32BE(size, 0);
  return buf;
}

module.exports = { FrameDecoder, frame };
