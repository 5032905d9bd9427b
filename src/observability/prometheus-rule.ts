// The PrometheusRule `fleetcheck` (prometheus-operator), generated from the plain rule file
// deploy/prometheus/rules.yaml, the one source of the alerts: the rule groups go in unchanged, so
// `promtool test rules` on the source tests what the operator loads.
import { parse, stringify } from "yaml"

export const prometheusRuleName = "fleetcheck"
export const prometheusRuleNamespace = "fleetcheck-system"

/** The PrometheusRule manifest for the rule file's text (its `groups:` as they are). */
export const renderPrometheusRule = (rulesText: string): string => {
  const rules: unknown = parse(rulesText)
  const groups = (rules as { groups?: unknown } | null)?.groups
  if (!Array.isArray(groups) || groups.length === 0) throw new Error("the rule file has no groups")
  const manifest = {
    apiVersion: "monitoring.coreos.com/v1",
    kind: "PrometheusRule",
    metadata: {
      name: prometheusRuleName,
      namespace: prometheusRuleNamespace,
      labels: { "app.kubernetes.io/name": "fleetcheck", "app.kubernetes.io/part-of": "fleetcheck" },
    },
    spec: { groups },
  }
  const header =
    "# Generated from deploy/prometheus/rules.yaml by `node src/observability/generate-prometheus-rule.ts`; do not edit.\n"
  return header + stringify(manifest, { lineWidth: 0 })
}
