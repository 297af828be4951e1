// The library's operations in tinybench; the tasks' results are written to
// results/tinybench.json, the file the bench step reads (format "tinybench").
import { mkdirSync, writeFileSync } from 'node:fs'
import { Bench } from 'tinybench'
import { checksum, parse, render } from '../lib/work.js'

const time = Number(process.env.BENCH_TIME_MS ?? 300)
const bench = new Bench({ name: 'work', time, warmupTime: Math.min(100, time) })
bench.add('parse', parse).add('render', render).add('checksum', checksum)
await bench.run()
console.table(bench.table())
mkdirSync('results', { recursive: true })
writeFileSync('results/tinybench.json', JSON.stringify(bench.tasks.map(({ name, result }) => ({ name, result }))))
