// cert-manager's and prometheus-operator's CRDs as those projects publish them, read from their Go
// modules (the module proxy serves a module's whole tree, CRD manifests included), so a server-side
// dry run checks the charts' Certificate, Issuer, ServiceMonitor and PrometheusRule against the real
// schemas. Downloaded once into the Go module cache; later calls are cache lookups.
import { execFile } from "node:child_process"
import { tmpdir } from "node:os"
import { join } from "node:path"

const modules = [
  {
    module: "github.com/cert-manager/cert-manager",
    version: "v1.21.2",
    files: ["deploy/crds/cert-manager.io_certificates.yaml", "deploy/crds/cert-manager.io_issuers.yaml"],
  },
  {
    // the newest version the module proxy serves of the module that holds the CRD manifests
    module: "github.com/prometheus-operator/prometheus-operator",
    version: "v0.85.0",
    files: [
      "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml",
      "example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml",
    ],
  },
] as const

const moduleDir = (module: string, version: string) =>
  new Promise<string>((resolve, reject) => {
    // Outside any module (tmpdir), so no go.mod's settings apply.
    execFile(
      "go",
      ["mod", "download", "-json", `${module}@${version}`],
      { cwd: tmpdir(), env: { ...process.env, GOFLAGS: "" }, maxBuffer: 4 << 20 },
      (error, stdout, stderr) => {
        let info: { Dir?: string; Error?: string } = {}
        try {
          info = JSON.parse(stdout)
        } catch {}
        if (error || info.Dir === undefined)
          reject(
            new Error(`go mod download ${module}@${version}: ${info.Error ?? (stderr || error?.message)}`),
          )
        else resolve(info.Dir)
      },
    )
  })

/** The paths of the CRD manifests, downloading their modules when they are not cached. */
export const upstreamCrdFiles = async (): Promise<ReadonlyArray<string>> => {
  const dirs = await Promise.all(modules.map((m) => moduleDir(m.module, m.version)))
  return modules.flatMap((m, i) => m.files.map((f) => join(dirs[i] as string, f)))
}
