// What a V8 CPU profile (.cpuprofile, e.g. fleet-scale.ts PROFILE_IDLE) spent its time on, from the
// command line. Prints the profile's span and sampled CPU (samples that were not "(idle)"), then:
//   - self time by function (name, file:line) and by file (node_modules grouped per package)
//   - inclusive time by function and by file: a sample counts once for every distinct function (or
//     file) on its stack, so recursion and chains of one file's frames are not counted twice
// Percentages are of the non-idle samples. "(garbage collector)" and "(program)" are V8's own.
// With a focus (a regexp on "function file:line"), only the samples with a matching frame on their
// stack are counted (percentages still of all non-idle samples): what that function's time went to.
//   node test/bench/cpu-profile-summary.ts <file.cpuprofile> [top=30] [focus]
import { readFileSync } from "node:fs"

interface Frame {
  readonly functionName: string
  readonly url: string
  readonly lineNumber: number
}
interface Node {
  readonly id: number
  readonly callFrame: Frame
  readonly children?: ReadonlyArray<number>
}
interface Profile {
  readonly nodes: ReadonlyArray<Node>
  readonly startTime: number
  readonly endTime: number
  readonly samples: ReadonlyArray<number>
  readonly timeDeltas: ReadonlyArray<number>
}

const path = process.argv[2]
if (!path) throw new Error("usage: cpu-profile-summary.ts <file.cpuprofile> [top] [focus]")
const top = Number(process.argv[3] ?? 30)
const focus = process.argv[4] ? new RegExp(process.argv[4]) : undefined
const profile = JSON.parse(readFileSync(path, "utf8")) as Profile

/** A file's short name: the package for node_modules, the path from the repository root otherwise. */
const fileOf = (url: string) => {
  if (url === "") return "(native)"
  const nm = url.lastIndexOf("/node_modules/")
  if (nm >= 0) {
    const rest = url.slice(nm + "/node_modules/".length).split("/")
    const pkg = rest[0]!.startsWith("@") ? `${rest[0]}/${rest[1]}` : rest[0]!
    return `${pkg} (${rest.slice(rest[0]!.startsWith("@") ? 2 : 1).join("/")})`
  }
  const src = url.search(/\/(src|test)\//)
  return src >= 0 ? url.slice(src + 1) : url.replace(/^file:\/\//, "")
}
const functionOf = (f: Frame) =>
  `${f.functionName || "(anonymous)"} ${fileOf(f.url)}${f.url ? `:${f.lineNumber + 1}` : ""}`

const byId = new Map(profile.nodes.map((n) => [n.id, n]))
const parent = new Map<number, number>()
for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id)

// Each node's stack (root first) as function and file keys, computed once per node.
const stacks = new Map<number, { fns: ReadonlyArray<string>; files: ReadonlyArray<string> }>()
const stackOf = (id: number) => {
  let s = stacks.get(id)
  if (s) return s
  const fns: string[] = []
  const files: string[] = []
  for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
    const f = byId.get(at)!.callFrame
    if (f.functionName === "(root)") continue
    fns.push(functionOf(f))
    files.push(fileOf(f.url))
  }
  s = { fns, files }
  stacks.set(id, s)
  return s
}

const selfFn = new Map<string, number>()
const selfFile = new Map<string, number>()
const inclFn = new Map<string, number>()
const inclFile = new Map<string, number>()
const add = (m: Map<string, number>, k: string, us: number) => m.set(k, (m.get(k) ?? 0) + us)
let busyUs = 0
let idleUs = 0
let focusedUs = 0
// timeDeltas[i] is the time before sample i; the time a sample stands for is the next delta.
for (let i = 0; i < profile.samples.length; i++) {
  const us = profile.timeDeltas[i + 1] ?? 0
  const node = byId.get(profile.samples[i]!)!
  if (node.callFrame.functionName === "(idle)") {
    idleUs += us
    continue
  }
  busyUs += us
  const { fns, files } = stackOf(node.id)
  if (focus && !fns.some((f) => focus.test(f))) continue
  focusedUs += us
  add(selfFn, fns[0] ?? "(root)", us)
  add(selfFile, files[0] ?? "(root)", us)
  for (const k of new Set(fns)) add(inclFn, k, us)
  for (const k of new Set(files)) add(inclFile, k, us)
}

const spanS = (profile.endTime - profile.startTime) / 1e6
console.log(
  `${path}: ${spanS.toFixed(1)} s profiled, main thread busy ${(busyUs / 1e6).toFixed(2)} s (${((busyUs / 1e6 / spanS) * 100).toFixed(1)}% of the span), idle ${(idleUs / 1e6).toFixed(2)} s`,
)
if (focus)
  console.log(
    `focus ${focus}: ${(focusedUs / 1e6).toFixed(2)} s, ${((focusedUs / busyUs) * 100).toFixed(1)}% of the busy samples`,
  )
const table = (title: string, m: Map<string, number>) => {
  console.log(`\n${title}`)
  const rows = [...m].sort((a, b) => b[1] - a[1])
  for (const [k, us] of rows.slice(0, top))
    console.log(
      `${((us / busyUs) * 100).toFixed(1).padStart(6)}%  ${(us / 1e3).toFixed(0).padStart(7)} ms  ${k}`,
    )
}
table("self time by function", selfFn)
table("self time by file", selfFile)
table("inclusive time by function", inclFn)
table("inclusive time by file", inclFile)
