// Finds the Kubernetes binaries a local fleet runs: KUBEBUILDER_ASSETS when set (the envtest
// convention), otherwise clusters/build.sh builds what is missing into the per-version cache and
// prints the directory. Progress from the build goes to our stderr.
import { spawn } from "node:child_process"
import { existsSync } from "node:fs"
import { join } from "node:path"

export const requiredBinaries = [
  "kube-apiserver",
  "kube-controller-manager",
  "kube-scheduler",
  "kubectl",
  "etcd",
  "kwok",
] as const

const buildScript = new URL("../build.sh", import.meta.url).pathname

let cached: Promise<string> | undefined

/** The directory holding every binary in `requiredBinaries`; builds them on first use. */
export const ensureBinaries = (): Promise<string> => {
  cached ??= resolveBinaries()
  return cached
}

const resolveBinaries = async (): Promise<string> => {
  const assets = process.env.KUBEBUILDER_ASSETS
  if (assets) {
    const missing = requiredBinaries.filter((b) => !existsSync(join(assets, b)))
    if (missing.length > 0) {
      throw new Error(`KUBEBUILDER_ASSETS=${assets} lacks ${missing.join(", ")}`)
    }
    return assets
  }
  const out = await new Promise<string>((resolve, reject) => {
    const child = spawn("bash", [buildScript], { stdio: ["ignore", "pipe", "inherit"] })
    let stdout = ""
    child.stdout.on("data", (chunk: Buffer) => {
      stdout += chunk.toString()
    })
    child.once("error", reject)
    child.once("exit", (code) => {
      if (code === 0) resolve(stdout)
      else reject(new Error(`clusters/build.sh exited with ${code}; see the output above`))
    })
  })
  const dir = out.trim().split("\n").at(-1) ?? ""
  if (!dir || !existsSync(join(dir, "kube-apiserver"))) {
    throw new Error(`clusters/build.sh printed no usable binary directory (got ${JSON.stringify(dir)})`)
  }
  return dir
}
