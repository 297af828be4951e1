'use strict';
// demo browse: a full-screen list of the sessions in ~/.demo/sessions. Type to search (the
// search line is where input echoes), ↑/↓ to move, → or Enter to open a session (its newest
// messages, with an input line), PgUp/PgDn/Home/End to scroll it, ← to go back, Alt-→ / Alt-←
// to expand / collapse a session's children. The list loads in batches, so its count grows
// before it settles. Every frame is drawn inside synchronized output.

const fs = require('fs');
const os = require('os');
const path = require('path');

const BATCH = 40;

function sessionsDir() {
  return process.env.DEMO_SESSIONS_DIR || path.join(os.homedir(), '.demo', 'sessions');
}

/** The header line of a session file (the first 4 KiB hold it). */
function readHeader(file) {
  const fd = fs.openSync(file, 'r');
  try {
    const buf = Buffer.alloc(4096);
    const n = fs.readSync(fd, buf, 0, buf.length, 0);
    return JSON.parse(buf.subarray(0, n).toString('utf8').split('\n')[0]);
  } finally {
    fs.closeSync(fd);
  }
}

/** Every message of a session file. */
function readMessages(file) {
  const lines = fs.readFileSync(file, 'utf8').split('\n');
  const messages = [];
  for (const line of lines.slice(1)) {
    if (line.trim()) messages.push(JSON.parse(line));
  }
  return messages;
}

/** Key names from terminal input; an escape sequence split across reads is held back. */
class KeyParser {
  constructor() {
    this.held = '';
  }

  feed(text) {
    const data = this.held + text;
    this.held = '';
    const keys = [];
    let i = 0;
    while (i < data.length) {
      const c = data[i];
      if (c === '\x1b') {
        if (i + 1 >= data.length) {
          this.held = data.slice(i);
          break;
        }
        if (data[i + 1] !== '[') {
          i += 2; // Alt + a character: not used
          continue;
        }
        let j = i + 2;
        while (j < data.length && !(data.charCodeAt(j) >= 0x40 && data.charCodeAt(j) <= 0x7e)) j++;
        if (j >= data.length) {
          this.held = data.slice(i);
          break;
        }
        const key = csi(data.slice(i + 2, j), data[j]);
        if (key) keys.push(key);
        i = j + 1;
      } else {
        if (c === '\x7f' || c === '\b') keys.push('backspace');
        else if (c === '\r') keys.push('enter');
        else if (c === '\x03') keys.push('ctrl-c');
        else if (c >= ' ') keys.push({ char: c });
        i += 1;
      }
    }
    return keys;
  }
}

function csi(params, final) {
  const arrows = { A: 'up', B: 'down', C: 'right', D: 'left' };
  if (arrows[final]) return params === '1;3' ? `alt-${arrows[final]}` : params === '' ? arrows[final] : null;
  if (final === '~') return { 5: 'page-up', 6: 'page-down', 3: 'delete' }[params] || null;
  if (final === 'H') return 'home';
  if (final === 'F') return 'end';
  return null; // replies to terminal queries and the rest
}

class Browser {
  constructor(out) {
    this.out = out;
    this.sessions = [];
    this.loading = true;
    this.query = '';
    this.selected = 0;
    this.expanded = new Set();
    this.open = null; // { session, messages, top }
    this.input = '';
  }

  rows() {
    return this.out.rows || 40;
  }

  cols() {
    return this.out.columns || 120;
  }

  /** Loads the headers in batches, drawing after each, so the count grows while loading. */
  load() {
    const dir = sessionsDir();
    let files = [];
    try {
      files = fs.readdirSync(dir).filter((f) => f.endsWith('.jsonl')).sort();
    } catch {
      // no sessions yet
    }
    const next = (from) => {
      for (const file of files.slice(from, from + BATCH)) {
        try {
          const header = readHeader(path.join(dir, file));
          this.sessions.push({ ...header, file: path.join(dir, file) });
        } catch {
          // a broken file is skipped
        }
      }
      if (from + BATCH < files.length) {
        this.draw();
        setImmediate(() => next(from + BATCH));
      } else {
        this.loading = false;
        this.sessions.sort((a, b) => a.name.localeCompare(b.name));
        this.draw();
      }
    };
    next(0);
  }

  /** The list as shown: matching top-level sessions, each followed by its children if expanded. */
  visible() {
    const children = new Map();
    for (const s of this.sessions) {
      if (s.parent) children.set(s.parent, [...(children.get(s.parent) || []), s]);
    }
    const items = [];
    for (const s of this.sessions) {
      if (s.parent || !s.name.includes(this.query)) continue;
      const kids = children.get(s.id) || [];
      items.push({ session: s, depth: 0, children: kids.length });
      if (this.expanded.has(s.id)) for (const k of kids) items.push({ session: k, depth: 1, children: 0 });
    }
    return items;
  }

  key(key) {
    if (key === 'ctrl-c') process.exit(0);
    if (this.open) this.sessionKey(key);
    else this.listKey(key);
    this.draw();
  }

  listKey(key) {
    const items = this.visible();
    const current = items[this.selected];
    if (key === 'up') this.selected = Math.max(0, this.selected - 1);
    else if (key === 'down') this.selected = Math.min(items.length - 1, this.selected + 1);
    else if ((key === 'right' || key === 'enter') && current) this.openSession(current.session);
    else if (key === 'alt-right' && current && current.children) this.expanded.add(current.session.id);
    else if (key === 'alt-left' && current) this.expanded.delete(current.session.id);
    else if (key === 'backspace') {
      this.query = this.query.slice(0, -1);
      this.selected = 0;
    } else if (key.char) {
      this.query += key.char;
      this.selected = 0;
    }
    this.selected = Math.max(0, Math.min(this.selected, this.visible().length - 1));
  }

  openSession(session) {
    const messages = readMessages(session.file);
    this.open = { session, messages, top: Math.max(0, messages.length - this.page()) };
    this.input = '';
  }

  page() {
    return this.rows() - 3;
  }

  sessionKey(key) {
    const o = this.open;
    const bottom = Math.max(0, o.messages.length - this.page());
    const move = { up: -1, down: 1, 'page-up': -this.page(), 'page-down': this.page() };
    if (key in move) o.top = Math.max(0, Math.min(bottom, o.top + move[key]));
    else if (key === 'home') o.top = 0;
    else if (key === 'end') o.top = bottom;
    else if (key === 'left') this.open = null;
    else if (key === 'backspace') this.input = this.input.slice(0, -1);
    else if (key === 'enter') this.input = '';
    else if (key.char) this.input += key.char;
  }

  draw() {
    const rows = [];
    let cursor;
    const width = this.cols() - 1;
    if (this.open) {
      const o = this.open;
      const shown = o.messages.slice(o.top, o.top + this.page());
      rows.push(`session ${o.session.name} — showing messages ${o.top + 1}–${o.top + shown.length} of ${o.messages.length}`);
      for (const m of shown) rows.push(`${m.role}: ${m.text}`);
      while (rows.length < this.rows() - 2) rows.push('');
      rows.push(`> ${this.input}`);
      rows.push('←  back · PgUp/PgDn/Home/End scroll · Ctrl-C quit');
      cursor = [this.rows() - 1, 3 + this.input.length];
    } else {
      const items = this.visible();
      const state = this.loading ? 'loading… ' : '';
      rows.push(`demo sessions — ${state}${this.sessions.length} sessions · ${items.length} shown`);
      rows.push(`Search: ${this.query || '\x1b[2mSearch sessions\x1b[22m'}`);
      const space = this.rows() - 4;
      const first = Math.max(0, this.selected - space + 1);
      items.slice(first, first + space).forEach((item, k) => {
        const mark = first + k === this.selected ? '>' : ' ';
        const glyph = item.children ? (this.expanded.has(item.session.id) ? '▾ ' : '▸ ') : '  ';
        const indent = '    '.repeat(item.depth);
        const extra = item.children ? ` (${item.children})` : '';
        rows.push(`${mark} ${indent}${glyph}${item.session.name}${extra}`);
      });
      while (rows.length < this.rows() - 1) rows.push('');
      rows.push('↑↓ move · → open · Alt-→ expand · type to search · Ctrl-C quit');
      cursor = [2, 9 + this.query.length];
    }
    let frame = '\x1b[?2026h\x1b[H\x1b[2J';
    rows.forEach((row, r) => {
      if (row) frame += `\x1b[${r + 1};1H${row.length > width ? row.slice(0, width) : row}`;
    });
    frame += `\x1b[${cursor[0]};${cursor[1]}H\x1b[?2026l`;
    this.out.write(frame);
  }
}

function browse() {
  const browser = new Browser(process.stdout);
  const parser = new KeyParser();
  process.stdin.setRawMode(true);
  process.stdin.setEncoding('utf8');
  process.stdin.on('data', (text) => {
    for (const key of parser.feed(text)) browser.key(key);
  });
  process.stdin.resume();
  browser.load();
}

module.exports = { browse, KeyParser, Browser };
