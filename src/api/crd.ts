import { stringify } from "yaml"
import * as z from "zod"
import { BackupCheckSpecSchema, BackupCheckStatusSchema } from "./backupcheck.ts"
import { FleetBackupCheckSpecSchema, FleetBackupCheckStatusSchema } from "./fleetbackupcheck.ts"
import { MemberClusterSpecSchema, MemberClusterStatusSchema } from "./membercluster.ts"
import {
  apiGroup,
  apiVersionName,
  backupCheckKind,
  backupCheckPlural,
  fleetBackupCheckKind,
  fleetBackupCheckPlural,
  memberClusterKind,
  memberClusterPlural,
} from "./names.ts"

// CustomResourceDefinitions generated from the zod schemas in this folder. zod's OpenAPI 3.0 output is
// close to a CRD schema but not structural; toStructural() below closes the gap, and refuses (throws
// on) anything Kubernetes would reject rather than emitting it.

export type JSONSchemaProps = { [key: string]: unknown }

export interface PrinterColumn {
  readonly name: string
  readonly type: "string" | "integer" | "number" | "boolean" | "date"
  readonly jsonPath: string
  readonly description?: string
  readonly priority?: number
  readonly format?: string
}

export interface CustomResourceDefinition {
  readonly apiVersion: "apiextensions.k8s.io/v1"
  readonly kind: "CustomResourceDefinition"
  readonly metadata: { readonly name: string; readonly labels?: Record<string, string> }
  readonly spec: {
    readonly group: string
    readonly names: {
      readonly kind: string
      readonly listKind: string
      readonly plural: string
      readonly singular: string
      readonly shortNames: ReadonlyArray<string>
      readonly categories: ReadonlyArray<string>
    }
    readonly scope: "Namespaced" | "Cluster"
    readonly versions: ReadonlyArray<{
      readonly name: string
      readonly served: boolean
      readonly storage: boolean
      readonly subresources: { readonly status: Record<string, never> }
      readonly additionalPrinterColumns: ReadonlyArray<PrinterColumn>
      readonly schema: { readonly openAPIV3Schema: JSONSchemaProps }
    }>
  }
}

// JSONSchemaProps fields apiextensions.k8s.io/v1 accepts (and that a structural schema may use here).
const allowedKeys = new Set([
  "description",
  "type",
  "format",
  "title",
  "default",
  "maximum",
  "exclusiveMaximum",
  "minimum",
  "exclusiveMinimum",
  "maxLength",
  "minLength",
  "pattern",
  "maxItems",
  "minItems",
  "uniqueItems",
  "multipleOf",
  "enum",
  "maxProperties",
  "minProperties",
  "required",
  "items",
  "properties",
  "additionalProperties",
  "example",
  "x-kubernetes-preserve-unknown-fields",
  "x-kubernetes-int-or-string",
  "x-kubernetes-embedded-resource",
  "x-kubernetes-list-type",
  "x-kubernetes-list-map-keys",
  "x-kubernetes-map-type",
  "x-kubernetes-validations",
])
// zod output that carries no meaning for Kubernetes: dropped silently.
const droppedKeys = new Set(["$schema", "$id", "id", "propertyNames"])

const isPlainObject = (v: unknown): v is JSONSchemaProps =>
  typeof v === "object" && v !== null && !Array.isArray(v)

const isEmptySchema = (v: unknown): boolean => v === true || (isPlainObject(v) && Object.keys(v).length === 0)

/**
 * Makes zod's OpenAPI 3.0 output a structural schema:
 * - an open object (additionalProperties: {} or true) becomes x-kubernetes-preserve-unknown-fields;
 * - additionalProperties: false goes (unknown fields are pruned, and kubectl's strict field
 *   validation rejects them); a schema-valued additionalProperties stays only as a map without
 *   properties, so properties and additionalProperties never meet;
 * - integers lose zod's safe-integer bounds, date-time strings their pattern (the format covers it);
 * - keys are sorted (stable, reviewable output, as controller-gen writes it);
 * - anything else Kubernetes does not accept ($ref, anyOf, const, ...) throws, naming the path.
 */
export const toStructural = (schema: unknown, path = ""): JSONSchemaProps => {
  if (!isPlainObject(schema)) throw new Error(`${path || "<root>"}: schema is not an object`)
  const out: JSONSchemaProps = {}
  for (const [key, value] of Object.entries(schema)) {
    if (droppedKeys.has(key)) continue
    if (!allowedKeys.has(key)) throw new Error(`${path || "<root>"}: "${key}" is not allowed in a CRD schema`)
    out[key] = value
  }
  if (out.type === undefined && out["x-kubernetes-preserve-unknown-fields"] !== true) {
    throw new Error(`${path || "<root>"}: a structural schema needs a type`)
  }
  if (out.type === "object") {
    const additional = out.additionalProperties
    const hasProperties = isPlainObject(out.properties)
    if (additional === false) delete out.additionalProperties
    else if (isEmptySchema(additional)) {
      delete out.additionalProperties
      out["x-kubernetes-preserve-unknown-fields"] = true
    } else if (additional !== undefined && hasProperties) {
      throw new Error(`${path || "<root>"}: properties and additionalProperties cannot be used together`)
    }
    if (hasProperties) {
      const properties = out.properties as JSONSchemaProps
      out.properties = Object.fromEntries(
        Object.keys(properties)
          .sort()
          .map((name) => [name, toStructural(properties[name], `${path}.${name}`)]),
      )
    }
    if (isPlainObject(out.additionalProperties)) {
      out.additionalProperties = toStructural(out.additionalProperties, `${path}.*`)
    }
  }
  if (out.type === "array") {
    if (!isPlainObject(out.items)) throw new Error(`${path || "<root>"}: an array needs one items schema`)
    out.items = toStructural(out.items, `${path}[*]`)
  }
  if (out.type === "integer") {
    if (out.maximum === Number.MAX_SAFE_INTEGER) delete out.maximum
    if (out.minimum === Number.MIN_SAFE_INTEGER) delete out.minimum
  }
  if (out.type === "string" && out.format === "date-time") delete out.pattern
  return Object.fromEntries(
    Object.keys(out)
      .sort()
      .map((k) => [k, out[k]]),
  )
}

/** A zod schema as a structural CRD schema (input view: defaulted fields are optional). */
export const crdSchemaOf = (schema: z.ZodType): JSONSchemaProps =>
  toStructural(z.toJSONSchema(schema, { target: "openapi-3.0", io: "input" }))

const rootSchema = (options: {
  readonly description: string
  readonly spec: JSONSchemaProps
  readonly status: JSONSchemaProps
  readonly specRequired: boolean
}): JSONSchemaProps => ({
  description: options.description,
  properties: {
    apiVersion: {
      description:
        "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values.",
      type: "string",
    },
    kind: {
      description:
        "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. In CamelCase.",
      type: "string",
    },
    // The API server owns metadata's schema; a CRD may only restrict name and generateName.
    metadata: { type: "object" },
    spec: options.spec,
    status: options.status,
  },
  ...(options.specRequired ? { required: ["spec"] } : {}),
  type: "object",
})

const conditionColumn = (name: string, type: string, field: "status" | "reason"): PrinterColumn => ({
  name,
  type: "string",
  jsonPath: `.status.conditions[?(@.type=="${type}")].${field}`,
})

const crd = (options: {
  readonly kind: string
  readonly plural: string
  readonly shortNames: ReadonlyArray<string>
  readonly scope: "Namespaced" | "Cluster"
  readonly columns: ReadonlyArray<PrinterColumn>
  readonly schema: JSONSchemaProps
}): CustomResourceDefinition => ({
  apiVersion: "apiextensions.k8s.io/v1",
  kind: "CustomResourceDefinition",
  metadata: {
    name: `${options.plural}.${apiGroup}`,
    labels: { "app.kubernetes.io/name": "fleetcheck", "app.kubernetes.io/part-of": "fleetcheck" },
  },
  spec: {
    group: apiGroup,
    names: {
      kind: options.kind,
      listKind: `${options.kind}List`,
      plural: options.plural,
      singular: options.kind.toLowerCase(),
      shortNames: options.shortNames,
      categories: ["fleetcheck"],
    },
    scope: options.scope,
    versions: [
      {
        name: apiVersionName,
        served: true,
        storage: true,
        subresources: { status: {} },
        additionalPrinterColumns: options.columns,
        schema: { openAPIV3Schema: options.schema },
      },
    ],
  },
})

const ageColumn: PrinterColumn = { name: "Age", type: "date", jsonPath: ".metadata.creationTimestamp" }

export const backupCheckCrd = (): CustomResourceDefinition =>
  crd({
    kind: backupCheckKind,
    plural: backupCheckPlural,
    shortNames: ["bc"],
    scope: "Namespaced",
    columns: [
      conditionColumn("Verified", "Verified", "status"),
      conditionColumn("Reason", "Verified", "reason"),
      { name: "Last Success", type: "date", jsonPath: ".status.lastSuccessfulTime" },
      // A string on purpose: a "date" column shows <invalid> for any time in the future.
      { name: "Next Run", type: "string", jsonPath: ".status.nextRunTime" },
      ageColumn,
      { name: "Schedule", type: "string", jsonPath: ".spec.schedule", priority: 1 },
      { name: "Backup", type: "string", jsonPath: ".spec.backup.name", priority: 1 },
      { ...conditionColumn("Restore Time", "RestoreTimeObjectiveMet", "status"), priority: 1 },
      { ...conditionColumn("Data Age", "DataAgeObjectiveMet", "status"), priority: 1 },
      { name: "Start Window", type: "string", jsonPath: ".spec.startWindow", priority: 1 },
      { name: "Sandbox", type: "string", jsonPath: ".status.lastRun.sandbox.cleanup", priority: 1 },
    ],
    schema: rootSchema({
      description:
        "BackupCheck proves that a backup restores: the fleetcheck hub runs the restore Job on a schedule (or once per spec generation) and reports the outcome in the Verified condition.",
      spec: crdSchemaOf(BackupCheckSpecSchema),
      status: crdSchemaOf(BackupCheckStatusSchema),
      specRequired: true,
    }),
  })

export const memberClusterCrd = (): CustomResourceDefinition =>
  crd({
    kind: memberClusterKind,
    plural: memberClusterPlural,
    shortNames: ["mc"],
    scope: "Cluster",
    columns: [
      conditionColumn("Ready", "Ready", "status"),
      conditionColumn("Connected", "Connected", "status"),
      { name: "Verified", type: "integer", jsonPath: ".status.counts.verified" },
      { name: "Failed", type: "integer", jsonPath: ".status.counts.failed" },
      { name: "Unknown", type: "integer", jsonPath: ".status.counts.unknown" },
      { name: "Version", type: "string", jsonPath: ".status.kubernetesVersion" },
      ageColumn,
      { name: "Total", type: "integer", jsonPath: ".status.counts.total", priority: 1 },
      {
        name: "Objectives Missed",
        type: "integer",
        jsonPath: ".status.counts.objectivesMissed",
        priority: 1,
      },
      { ...conditionColumn("Credentials", "CredentialsValid", "status"), priority: 1 },
      { name: "Source", type: "string", jsonPath: ".status.source.kind", priority: 1 },
    ],
    schema: rootSchema({
      description:
        "MemberCluster is the fleetcheck hub's view of one registered member cluster: connectivity, credentials and how many of its BackupChecks are verified. Written by the hub; one per registration (a labelled Secret, a Cluster API kubeconfig Secret or a ClusterProfile).",
      spec: crdSchemaOf(MemberClusterSpecSchema),
      status: crdSchemaOf(MemberClusterStatusSchema),
      specRequired: false,
    }),
  })

export const fleetBackupCheckCrd = (): CustomResourceDefinition =>
  crd({
    kind: fleetBackupCheckKind,
    plural: fleetBackupCheckPlural,
    shortNames: ["fbc"],
    scope: "Namespaced",
    columns: [
      conditionColumn("Fleet Verified", "FleetVerified", "status"),
      conditionColumn("Reason", "FleetVerified", "reason"),
      { name: "Selected", type: "integer", jsonPath: ".status.counts.selected" },
      { name: "Placed", type: "integer", jsonPath: ".status.counts.placed" },
      { name: "Verified", type: "integer", jsonPath: ".status.counts.verified" },
      ageColumn,
      { name: "Failed", type: "integer", jsonPath: ".status.counts.failed", priority: 1 },
      { name: "Unknown", type: "integer", jsonPath: ".status.counts.unknown", priority: 1 },
      { ...conditionColumn("Placement", "Placed", "reason"), priority: 1 },
    ],
    schema: rootSchema({
      description:
        "FleetBackupCheck places a BackupCheck in every member cluster whose MemberCluster labels match spec.clusterSelector, keeps those checks equal to spec.template, and reports whether the whole selection verified (condition FleetVerified). Lives in the hub's namespace.",
      spec: crdSchemaOf(FleetBackupCheckSpecSchema),
      status: crdSchemaOf(FleetBackupCheckStatusSchema),
      specRequired: true,
    }),
  })

export const crdFileName = (crd: CustomResourceDefinition): string =>
  `${crd.spec.group}_${crd.spec.names.plural}.yaml`

const header = "# Generated by src/api/generate-crds.ts from the zod schemas in src/api. Do not edit.\n"

export const renderCrd = (crd: CustomResourceDefinition): string =>
  header + stringify(crd, { lineWidth: 0, indent: 2, aliasDuplicateObjects: false })

/** YAML text of every CRD, keyed by file name under deploy/crds/. */
export const renderCrds = (): Record<string, string> =>
  Object.fromEntries(
    [backupCheckCrd(), memberClusterCrd(), fleetBackupCheckCrd()].map((c) => [crdFileName(c), renderCrd(c)]),
  )
