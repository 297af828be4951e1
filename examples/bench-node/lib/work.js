// A small library whose three operations each do a fixed amount of work, set by
// lib/rounds.json: doubling an operation's rounds makes its benchmark twice as slow, halving
// them twice as fast (the end-to-end tests change them in a commit of a temporary copy).
import { readFileSync } from 'node:fs'

const rounds = JSON.parse(readFileSync(new URL('./rounds.json', import.meta.url), 'utf8'))

const WORDS = 'alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu'.split(' ')
const LINE = WORDS.map((w, i) => `${w}=${i * 7}`).join(';')

/** Parses `key=value;…` lines into objects, `rounds.parse` times. */
export function parse () {
  let fields = 0
  for (let r = 0; r < rounds.parse; r++) {
    const record = {}
    for (const pair of LINE.split(';')) {
      const [key, value] = pair.split('=')
      record[key] = Number(value) + r
    }
    fields += Object.keys(record).length
  }
  return fields
}

/** Renders rows to text, `rounds.render` times. */
export function render () {
  let length = 0
  for (let r = 0; r < rounds.render; r++) {
    length += WORDS.map((w, i) => `${w.padEnd(8)}|${String(i * r).padStart(6)}`).join('\n').length
  }
  return length
}

/** A 32-bit FNV-1a checksum of the words, `rounds.checksum` times. */
export function checksum () {
  let hash = 0x811c9dc5
  for (let r = 0; r < rounds.checksum; r++) {
    for (const word of WORDS) {
      for (let i = 0; i < word.length; i++) {
        hash = Math.imul(hash ^ word.charCodeAt(i), 0x01000193) >>> 0
      }
    }
  }
  return hash
}
