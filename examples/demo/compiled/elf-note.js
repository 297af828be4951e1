'use strict';
// Adds an ELF note to a copy of a Linux x64 executable, as Node's single executable applications
// need (the SEA blob is a note named NODE_SEA_BLOB that Node finds among the notes of its
// loaded program headers), without postject: the note goes at the end of the file in a new
// read-only loadable segment, and the program header table keeps its size by giving up its
// PT_PHDR entry (which a non-PIE executable does not need: the kernel says where the table is)
// for that segment, while the PT_NOTE entry moves to the new segment, which starts with a copy
// of the notes it covered before (build id, ABI tag).

const PT_LOAD = 1;
const PT_NOTE = 4;
const PT_PHDR = 6;
const PF_R = 4;
const ET_EXEC = 2;
const EM_X86_64 = 62;
const PAGE = 0x1000n;

function fail(why) {
  throw new Error(`cannot add a note to this executable: ${why}`);
}

function readHeaders(elf) {
  if (elf.length < 64 || elf.readUInt32BE(0) !== 0x7f454c46) fail('it is not an ELF file');
  if (elf[4] !== 2 || elf[5] !== 1) fail('it is not a 64-bit little-endian ELF file');
  if (elf.readUInt16LE(0x12) !== EM_X86_64) fail('it is not an x86-64 executable');
  if (elf.readUInt16LE(0x10) !== ET_EXEC) fail('it is position-independent (only a non-PIE executable keeps working without PT_PHDR)');
  const offset = Number(elf.readBigUInt64LE(0x20));
  const size = elf.readUInt16LE(0x36);
  const count = elf.readUInt16LE(0x38);
  if (size !== 56 || offset + size * count > elf.length) fail('its program header table is not where it says');
  const headers = [];
  for (let i = 0; i < count; i++) {
    const at = offset + i * size;
    headers.push({
      type: elf.readUInt32LE(at),
      flags: elf.readUInt32LE(at + 4),
      offset: elf.readBigUInt64LE(at + 8),
      vaddr: elf.readBigUInt64LE(at + 16),
      paddr: elf.readBigUInt64LE(at + 24),
      filesz: elf.readBigUInt64LE(at + 32),
      memsz: elf.readBigUInt64LE(at + 40),
      align: elf.readBigUInt64LE(at + 48),
    });
  }
  return { offset, size, headers };
}

function writeHeaders(out, { offset, size }, headers) {
  headers.forEach((h, i) => {
    const at = offset + i * size;
    out.writeUInt32LE(h.type, at);
    out.writeUInt32LE(h.flags, at + 4);
    out.writeBigUInt64LE(h.offset, at + 8);
    out.writeBigUInt64LE(h.vaddr, at + 16);
    out.writeBigUInt64LE(h.paddr, at + 24);
    out.writeBigUInt64LE(h.filesz, at + 32);
    out.writeBigUInt64LE(h.memsz, at + 40);
    out.writeBigUInt64LE(h.align, at + 48);
  });
}

const pad4 = (n) => (4 - (n % 4)) % 4;
const roundUp = (x, to) => ((x + to - 1n) / to) * to;

// One note: namesz, descsz, type, then the name and the description, each padded to 4 bytes.
function note(name, desc) {
  const named = Buffer.from(`${name}\0`);
  const head = Buffer.alloc(12);
  head.writeUInt32LE(named.length, 0);
  head.writeUInt32LE(desc.length, 4);
  return Buffer.concat([head, named, Buffer.alloc(pad4(named.length)), desc, Buffer.alloc(pad4(desc.length))]);
}

// The executable `elf` with a note `name` holding `desc`.
function addNote(elf, name, desc) {
  const table = readHeaders(elf);
  const { headers } = table;
  const notes = headers.filter((h) => h.type === PT_NOTE);
  if (notes.length !== 1) fail(`it has ${notes.length} PT_NOTE entries (one expected)`);
  if (!headers.some((h) => h.type === PT_PHDR)) fail('it has no PT_PHDR entry to give up');
  const [old] = notes;
  const kept = elf.subarray(Number(old.offset), Number(old.offset + old.filesz));
  const body = Buffer.concat([kept, Buffer.alloc(pad4(kept.length)), note(name, desc)]);
  const loads = headers.filter((h) => h.type === PT_LOAD);
  const end = loads.reduce((top, h) => (h.vaddr + h.memsz > top ? h.vaddr + h.memsz : top), 0n);
  // Page-aligned in the file and in memory, a page past the last segment (its bss and more).
  const offset = roundUp(BigInt(elf.length), PAGE);
  const vaddr = roundUp(end, PAGE) + PAGE;
  const size = BigInt(body.length);
  const segment = { type: PT_LOAD, flags: PF_R, offset, vaddr, paddr: vaddr, filesz: size, memsz: size, align: PAGE };
  const moved = { ...old, offset, vaddr, paddr: vaddr, filesz: size, memsz: size };
  // The loadable segments stay in address order: the new one right after the last.
  const rest = headers.filter((h) => h.type !== PT_PHDR && h !== old);
  const last = rest.reduce((at, h, i) => (h.type === PT_LOAD ? i : at), -1);
  const updated = [...rest.slice(0, last + 1), segment, ...rest.slice(last + 1), moved];
  const out = Buffer.alloc(Number(offset) + body.length);
  elf.copy(out);
  body.copy(out, Number(offset));
  writeHeaders(out, table, updated);
  return out;
}

// Sets the fuse `sentinel:0` (once in the file) to `sentinel:1`.
function blowFuse(buffer, sentinel) {
  const fuse = Buffer.from(`${sentinel}:0`);
  const at = buffer.indexOf(fuse);
  if (at < 0) fail(`it has no fuse ${sentinel}:0 (already a single executable, or not Node)`);
  if (buffer.indexOf(fuse, at + 1) >= 0) fail(`it has the fuse ${sentinel} more than once`);
  buffer[at + fuse.length - 1] = '1'.charCodeAt(0);
  return buffer;
}

module.exports = { addNote, blowFuse, readHeaders, PT_LOAD, PT_NOTE };
