// What a V8 heap snapshot holds, by kind, from the command line (snapshots of a hub after a wave are
// gigabytes: DevTools is slow there and cannot be scripted). Prints:
//   - the heap's self sizes by node type and by constructor (top 25)
//   - retained sizes (dominator tree, weak edges left out, as DevTools computes them) of the Kubernetes
//     objects it recognises by shape: restore Jobs (metadata, spec.template, status) and BackupChecks
//     (metadata, spec.backup), with the count and the mean per object
//   - the largest dominators (top 25) with the edge that holds them
//   node test/bench/heap-summary.ts <file.heapsnapshot> [top=25]
import { readFileSync } from "node:fs"

const path = process.argv[2]
if (!path) throw new Error("usage: heap-summary.ts <file.heapsnapshot> [top]")
const top = Number(process.argv[3] ?? 25)
const buf = readFileSync(path)
const mib = (b: number) => `${(b / 1024 / 1024).toFixed(1)} MiB`

const indexOf = (needle: string, from = 0) => {
  const i = buf.indexOf(needle, from, "latin1")
  if (i < 0) throw new Error(`${needle} not found in ${path}`)
  return i
}

/** Reads the JSON array of integers starting at `[` (position `at`) into a typed array of `count`. */
const readNumbers = (at: number, count: number) => {
  const out = new Uint32Array(count) // every field of a node or edge fits
  let n = 0
  let i = at + 1
  let value = 0
  let inNumber = false
  for (; n < count; i++) {
    const c = buf[i]!
    if (c >= 48 && c <= 57) {
      value = value * 10 + (c - 48)
      inNumber = true
    } else {
      if (inNumber) {
        out[n++] = value
        value = 0
        inNumber = false
      }
      if (c === 93) break // ]
    }
  }
  if (n !== count) throw new Error(`read ${n} numbers, expected ${count}`)
  return out
}

/** The snapshot's string table: one JSON string after another from `[`. */
const readStrings = (at: number) => {
  const out: string[] = []
  let i = at + 1
  while (true) {
    while (buf[i] !== 34 && buf[i] !== 93) i++ // " or ]
    if (buf[i] === 93) break
    let j = i + 1
    while (buf[j] !== 34) j += buf[j] === 92 ? 2 : 1
    out.push(JSON.parse(buf.toString("utf8", i, j + 1)))
    i = j + 1
  }
  return out
}

const nodesAt = indexOf('"nodes":')
const header = JSON.parse(`${buf.toString("utf8", 0, nodesAt).replace(/,\s*$/, "")}}`).snapshot
const meta = header.meta
const nodeFields: string[] = meta.node_fields
const edgeFields: string[] = meta.edge_fields
const nodeTypes: string[] = meta.node_types[0]
const edgeTypes: string[] = meta.edge_types[0]
const NF = nodeFields.length
const EF = edgeFields.length
const nodeCount: number = header.node_count
const edgeCount: number = header.edge_count
const nodes = readNumbers(indexOf("[", nodesAt), nodeCount * NF)
const edgesAt = indexOf('"edges":', nodesAt)
const edges = readNumbers(indexOf("[", edgesAt), edgeCount * EF)
const strings = readStrings(indexOf("[", indexOf('"strings":', edgesAt)))

const nType = nodeFields.indexOf("type")
const nName = nodeFields.indexOf("name")
const nSize = nodeFields.indexOf("self_size")
const nEdges = nodeFields.indexOf("edge_count")
const eType = edgeFields.indexOf("type")
const eName = edgeFields.indexOf("name_or_index")
const eTo = edgeFields.indexOf("to_node")
const weak = edgeTypes.indexOf("weak")
const shortcut = edgeTypes.indexOf("shortcut")
const propertyEdge = edgeTypes.indexOf("property")
const elementEdge = edgeTypes.indexOf("element")
const hiddenEdge = edgeTypes.indexOf("hidden")

// First edge of each node (edges are stored node after node).
const firstEdge = new Uint32Array(nodeCount + 1)
for (let n = 0, e = 0; n < nodeCount; n++) {
  firstEdge[n] = e
  e += nodes[n * NF + nEdges]!
  if (n === nodeCount - 1) firstEdge[nodeCount] = e
}
const typeOf = (n: number) => nodeTypes[nodes[n * NF + nType]!] ?? "?"
const nameOf = (n: number) => strings[nodes[n * NF + nName]!] ?? "?"
const selfSize = (n: number) => nodes[n * NF + nSize]!
const edgeName = (e: number) => {
  const t = edges[e * EF + eType]!
  const v = edges[e * EF + eName]!
  return t === elementEdge || t === hiddenEdge ? `[${v}]` : (strings[v] ?? "?")
}
const toOf = (e: number) => edges[e * EF + eTo]! / NF
const essential = (e: number) => {
  const t = edges[e * EF + eType]!
  return t !== weak && t !== shortcut
}
/** The node a property edge `name` of node n points to, or -1. */
const property = (n: number, name: string) => {
  for (let e = firstEdge[n]!; e < firstEdge[n + 1]!; e++)
    if (edges[e * EF + eType] === propertyEdge && strings[edges[e * EF + eName]!] === name) return toOf(e)
  return -1
}

// ---- self sizes by type and by constructor ----------------------------------------------------------
let total = 0
const byType = new Map<string, { n: number; size: number }>()
const byName = new Map<string, { n: number; size: number }>()
for (let n = 0; n < nodeCount; n++) {
  const s = selfSize(n)
  total += s
  const t = typeOf(n)
  const bt = byType.get(t) ?? { n: 0, size: 0 }
  byType.set(t, { n: bt.n + 1, size: bt.size + s })
  const key = t === "object" || t === "closure" || t === "native" ? `${t} ${nameOf(n)}` : t
  const bn = byName.get(key) ?? { n: 0, size: 0 }
  byName.set(key, { n: bn.n + 1, size: bn.size + s })
}
console.log(`${path}: ${nodeCount} nodes, ${edgeCount} edges, self sizes ${mib(total)}`)
console.log("by node type (self size):")
for (const [k, v] of [...byType].sort((a, b) => b[1].size - a[1].size))
  console.log(`  ${k.padEnd(20)} ${mib(v.size).padStart(12)}  ${v.n} nodes`)
console.log(`by constructor (self size, top ${top}):`)
for (const [k, v] of [...byName].sort((a, b) => b[1].size - a[1].size).slice(0, top))
  console.log(`  ${k.slice(0, 60).padEnd(60)} ${mib(v.size).padStart(12)}  ${v.n} nodes`)

// ---- dominator tree (Cooper, Harvey and Kennedy's iterative algorithm, over the DFS postorder) --------
const postorder = new Uint32Array(nodeCount)
const orderOf = new Int32Array(nodeCount).fill(-1)
{
  const visited = new Uint8Array(nodeCount)
  const stackNode = new Uint32Array(nodeCount)
  const stackEdge = new Uint32Array(nodeCount)
  let sp = 0
  let post = 0
  stackNode[0] = 0
  stackEdge[0] = firstEdge[0]!
  visited[0] = 1
  while (sp >= 0) {
    const n = stackNode[sp]!
    const e = stackEdge[sp]!
    if (e < firstEdge[n + 1]!) {
      stackEdge[sp] = e + 1
      if (!essential(e)) continue
      const to = toOf(e)
      if (visited[to]) continue
      visited[to] = 1
      sp++
      stackNode[sp] = to
      stackEdge[sp] = firstEdge[to]!
    } else {
      orderOf[n] = post
      postorder[post++] = n
      sp--
    }
  }
  // Predecessors (reachable ones), in CSR form.
  const predCount = new Uint32Array(nodeCount + 1)
  for (let n = 0; n < nodeCount; n++) {
    if (orderOf[n]! < 0) continue
    for (let e = firstEdge[n]!; e < firstEdge[n + 1]!; e++) if (essential(e)) predCount[toOf(e) + 1]!++
  }
  for (let n = 0; n < nodeCount; n++) predCount[n + 1]! += predCount[n]!
  const preds = new Uint32Array(predCount[nodeCount]!)
  const fill = predCount.slice()
  for (let n = 0; n < nodeCount; n++) {
    if (orderOf[n]! < 0) continue
    for (let e = firstEdge[n]!; e < firstEdge[n + 1]!; e++) if (essential(e)) preds[fill[toOf(e)]!++] = n
  }
  const reachable = post
  const idom = new Int32Array(reachable).fill(-1) // by postorder number
  const rootOrder = orderOf[0]!
  idom[rootOrder] = rootOrder
  let changed = true
  while (changed) {
    changed = false
    for (let o = reachable - 1; o >= 0; o--) {
      if (o === rootOrder) continue
      const n = postorder[o]!
      let best = -1
      for (let p = predCount[n]!; p < predCount[n + 1]!; p++) {
        let other = orderOf[preds[p]!]!
        if (idom[other] === -1) continue
        if (best === -1) {
          best = other
          continue
        }
        let a = best
        while (a !== other) {
          while (a < other) a = idom[a]!
          while (other < a) other = idom[other]!
        }
        best = a
      }
      if (best !== -1 && idom[o] !== best) {
        idom[o] = best
        changed = true
      }
    }
  }
  // Retained sizes: children come before their dominator in postorder.
  const retained = new Float64Array(nodeCount)
  for (let o = 0; o < reachable; o++) retained[postorder[o]!]! += selfSize(postorder[o]!)
  for (let o = 0; o < reachable; o++) {
    const d = idom[o]!
    if (d !== o) retained[postorder[d]!]! += retained[postorder[o]!]!
  }
  const dominatorOf = (n: number) => postorder[idom[orderOf[n]!]!]!

  /** What holds node n: its dominator's edge to it (for a Map's entry: the table array). */
  const holderOf = (n: number) => {
    const d = dominatorOf(n)
    for (let e = firstEdge[d]!; e < firstEdge[d + 1]!; e++)
      if (essential(e) && toOf(e) === n) {
        // An entry of a Map or Set: name the collection and who holds it.
        const up = typeOf(d) === "array" ? dominatorOf(d) : -1
        const via = up >= 0 ? ` in ${typeOf(up)} ${nameOf(up).slice(0, 30)}` : ""
        return `${typeOf(d)} ${nameOf(d).slice(0, 30)} .${typeOf(d) === "array" ? "[]" : edgeName(e)}${via}`
      }
    return `shared (dominated by ${typeOf(d)} ${nameOf(d).slice(0, 30)})`
  }

  // ---- Kubernetes objects by shape -----------------------------------------------------------------
  const kinds = new Map<string, { n: number; size: number; holders: Map<string, number> }>()
  const count = (kind: string, n: number) => {
    const k = kinds.get(kind) ?? { n: 0, size: 0, holders: new Map<string, number>() }
    const by = holderOf(n)
    k.holders.set(by, (k.holders.get(by) ?? 0) + 1)
    kinds.set(kind, { n: k.n + 1, size: k.size + retained[n]!, holders: k.holders })
  }
  for (let n = 0; n < nodeCount; n++) {
    if (orderOf[n]! < 0 || typeOf(n) !== "object") continue
    const metadata = property(n, "metadata")
    const spec = property(n, "spec")
    if (metadata < 0 || spec < 0) continue
    if (property(spec, "backup") >= 0) count("BackupCheck (spec.backup)", n)
    else if (property(spec, "template") >= 0) count("Job (spec.template)", n)
    else if (property(n, "status") >= 0 && property(spec, "containers") < 0)
      count("other with spec and status", n)
  }
  console.log("objects recognised by shape (retained size: what would go with them):")
  for (const [k, v] of kinds) {
    console.log(
      `  ${k.padEnd(30)} ${v.n} objects, ${mib(v.size)} retained, ${(v.size / v.n / 1024).toFixed(2)} KiB each`,
    )
    for (const [by, n] of [...v.holders].sort((a, b) => b[1] - a[1]).slice(0, 5))
      console.log(`    ${String(n).padStart(8)} held by ${by}`)
  }

  // ---- largest dominators ----------------------------------------------------------------------------
  // A node's first holder: the first essential edge into it from its dominator, or any.
  const holder = (n: number) => {
    const d = dominatorOf(n)
    for (let e = firstEdge[d]!; e < firstEdge[d + 1]!; e++)
      if (essential(e) && toOf(e) === n) return `${typeOf(d)} ${nameOf(d).slice(0, 40)} .${edgeName(e)}`
    return `dominated by ${typeOf(d)} ${nameOf(d).slice(0, 40)}`
  }
  const candidates: number[] = []
  for (let o = 0; o < reachable; o++) {
    const n = postorder[o]!
    const t = typeOf(n)
    if (t === "synthetic" || t === "hidden") continue
    if (retained[n]! > 1024 * 1024) candidates.push(n)
  }
  candidates.sort((a, b) => retained[b]! - retained[a]!)
  console.log(`largest dominators (retained > 1 MiB, top ${top}):`)
  for (const n of candidates.slice(0, top))
    console.log(
      `  ${mib(retained[n]!).padStart(10)}  ${typeOf(n)} ${nameOf(n).slice(0, 50)} (${selfSize(n)} B self) ← ${holder(n)}`,
    )
}
