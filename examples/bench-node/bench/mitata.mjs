// The library's operations in mitata, its JSON printed on standard output (format "mitata",
// no results file): samples and generated code left out, so the output stays small.
import { bench, group, run } from 'mitata'
import { checksum, parse, render } from '../lib/work.js'

group('work', () => {
  bench('parse', parse)
  bench('render', render)
  bench('checksum', checksum)
})
await run({ format: { json: { debug: false, samples: false } } })
