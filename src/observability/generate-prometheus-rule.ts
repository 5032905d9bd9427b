// Writes deploy/prometheus/prometheusrule.yaml from deploy/prometheus/rules.yaml.
//
//   node src/observability/generate-prometheus-rule.ts           # write the file
//   node src/observability/generate-prometheus-rule.ts --check   # exit 1 if the checked-in file differs
import { readFile, writeFile } from "node:fs/promises"
import { renderPrometheusRule } from "./prometheus-rule.ts"

const dir = new URL("../../deploy/prometheus/", import.meta.url)
const text = renderPrometheusRule(await readFile(new URL("rules.yaml", dir), "utf8"))
const target = new URL("prometheusrule.yaml", dir)
if (process.argv.includes("--check")) {
  const current = await readFile(target, "utf8").catch(() => undefined)
  if (current !== text) {
    process.stderr.write(
      "deploy/prometheus/prometheusrule.yaml is stale: run `node src/observability/generate-prometheus-rule.ts`\n",
    )
    process.exit(1)
  }
} else {
  await writeFile(target, text)
  process.stdout.write("wrote deploy/prometheus/prometheusrule.yaml\n")
}
