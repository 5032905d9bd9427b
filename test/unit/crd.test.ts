import { readFileSync } from "node:fs"
import { assert, describe, it } from "@effect/vitest"
import { parse } from "yaml"
import * as z from "zod"
import { BackupCheckSpecSchema } from "../../src/api/backupcheck.ts"
import {
  backupCheckCrd,
  type CustomResourceDefinition,
  crdSchemaOf,
  fleetBackupCheckCrd,
  type JSONSchemaProps,
  memberClusterCrd,
  renderCrds,
  toStructural,
} from "../../src/api/crd.ts"

const crdDir = new URL("../../deploy/crds/", import.meta.url)
const schemaOf = (crd: CustomResourceDefinition) => crd.spec.versions[0]!.schema.openAPIV3Schema

interface Node {
  readonly path: string
  readonly schema: JSONSchemaProps
}

/** Every schema node with its path, following properties, additionalProperties and items. */
const walk = (schema: JSONSchemaProps, path = ""): Node[] => {
  const nodes: Node[] = [{ path, schema }]
  const properties = schema.properties as Record<string, JSONSchemaProps> | undefined
  for (const [name, child] of Object.entries(properties ?? {})) nodes.push(...walk(child, `${path}.${name}`))
  if (typeof schema.additionalProperties === "object") {
    nodes.push(...walk(schema.additionalProperties as JSONSchemaProps, `${path}.*`))
  }
  if (typeof schema.items === "object") nodes.push(...walk(schema.items as JSONSchemaProps, `${path}[*]`))
  return nodes
}

const crds = [backupCheckCrd(), memberClusterCrd(), fleetBackupCheckCrd()]

describe("deploy/crds", () => {
  it("is what renderCrds() produces (run `node src/api/generate-crds.ts` when this fails)", () => {
    const rendered = renderCrds()
    assert.deepStrictEqual(Object.keys(rendered).sort(), [
      "fleetcheck.io_backupchecks.yaml",
      "fleetcheck.io_fleetbackupchecks.yaml",
      "fleetcheck.io_memberclusters.yaml",
    ])
    for (const [name, text] of Object.entries(rendered)) {
      const onDisk = readFileSync(new URL(name, crdDir), "utf8")
      assert.strictEqual(onDisk, text, `deploy/crds/${name} is stale`)
    }
  })

  it("parses back to the CRD objects", () => {
    const rendered = renderCrds()
    assert.deepStrictEqual(parse(rendered["fleetcheck.io_backupchecks.yaml"]!), backupCheckCrd())
    assert.deepStrictEqual(parse(rendered["fleetcheck.io_memberclusters.yaml"]!), memberClusterCrd())
    assert.deepStrictEqual(parse(rendered["fleetcheck.io_fleetbackupchecks.yaml"]!), fleetBackupCheckCrd())
  })
})

describe("CRD metadata", () => {
  it("names, scope and subresources", () => {
    const [bc, mc] = crds
    assert.strictEqual(bc!.metadata.name, "backupchecks.fleetcheck.io")
    assert.strictEqual(bc!.spec.scope, "Namespaced")
    assert.deepStrictEqual(bc!.spec.names, {
      kind: "BackupCheck",
      listKind: "BackupCheckList",
      plural: "backupchecks",
      singular: "backupcheck",
      shortNames: ["bc"],
      categories: ["fleetcheck"],
    })
    assert.strictEqual(mc!.metadata.name, "memberclusters.fleetcheck.io")
    assert.strictEqual(mc!.spec.scope, "Cluster")
    assert.deepStrictEqual(mc!.spec.names.shortNames, ["mc"])
    for (const crd of crds) {
      assert.strictEqual(crd.apiVersion, "apiextensions.k8s.io/v1")
      assert.strictEqual(crd.spec.versions.length, 1)
      const version = crd.spec.versions[0]!
      assert.deepStrictEqual([version.name, version.served, version.storage], ["v1alpha1", true, true])
      assert.deepStrictEqual(version.subresources, { status: {} })
    }
  })

  it("printer columns for kubectl get backupchecks", () => {
    const columns = backupCheckCrd().spec.versions[0]!.additionalPrinterColumns.filter((c) => !c.priority)
    assert.deepStrictEqual(
      columns.map((c) => [c.name.toUpperCase(), c.type, c.jsonPath]),
      [
        ["VERIFIED", "string", '.status.conditions[?(@.type=="Verified")].status'],
        ["REASON", "string", '.status.conditions[?(@.type=="Verified")].reason'],
        ["LAST SUCCESS", "date", ".status.lastSuccessfulTime"],
        // "date" renders future times as <invalid>, so the next run is shown as its timestamp.
        ["NEXT RUN", "string", ".status.nextRunTime"],
        ["AGE", "date", ".metadata.creationTimestamp"],
      ],
    )
  })

  it("printer columns for kubectl get memberclusters", () => {
    const columns = memberClusterCrd().spec.versions[0]!.additionalPrinterColumns.filter((c) => !c.priority)
    assert.deepStrictEqual(
      columns.map((c) => [c.name.toUpperCase(), c.type, c.jsonPath]),
      [
        ["READY", "string", '.status.conditions[?(@.type=="Ready")].status'],
        ["CONNECTED", "string", '.status.conditions[?(@.type=="Connected")].status'],
        ["VERIFIED", "integer", ".status.counts.verified"],
        ["FAILED", "integer", ".status.counts.failed"],
        ["UNKNOWN", "integer", ".status.counts.unknown"],
        ["VERSION", "string", ".status.kubernetesVersion"],
        ["AGE", "date", ".metadata.creationTimestamp"],
      ],
    )
  })
})

describe("FleetBackupCheck CRD", () => {
  it("namespaced, short name fbc, status subresource; printer columns for kubectl get fbc", () => {
    const crd = fleetBackupCheckCrd()
    assert.strictEqual(crd.metadata.name, "fleetbackupchecks.fleetcheck.io")
    assert.strictEqual(crd.spec.scope, "Namespaced")
    assert.deepStrictEqual(crd.spec.names.shortNames, ["fbc"])
    assert.deepStrictEqual(crd.spec.versions[0]!.subresources, { status: {} })
    const columns = crd.spec.versions[0]!.additionalPrinterColumns.filter((c) => !c.priority)
    assert.deepStrictEqual(
      columns.map((c) => [c.name.toUpperCase(), c.type, c.jsonPath]),
      [
        ["FLEET VERIFIED", "string", '.status.conditions[?(@.type=="FleetVerified")].status'],
        ["REASON", "string", '.status.conditions[?(@.type=="FleetVerified")].reason'],
        ["SELECTED", "integer", ".status.counts.selected"],
        ["PLACED", "integer", ".status.counts.placed"],
        ["VERIFIED", "integer", ".status.counts.verified"],
        ["AGE", "date", ".metadata.creationTimestamp"],
      ],
    )
  })

  it("spec.template.spec is the BackupCheck spec schema itself, not a copy", () => {
    const spec = schemaOf(fleetBackupCheckCrd()).properties as Record<string, JSONSchemaProps>
    const template = (spec.spec!.properties as Record<string, JSONSchemaProps>).template!
    const templateSpec = (template.properties as Record<string, JSONSchemaProps>).spec
    assert.deepStrictEqual(templateSpec, crdSchemaOf(BackupCheckSpecSchema))
  })
})

describe("CRD schemas are structural", () => {
  const forbidden = [
    "$ref",
    "$schema",
    "anyOf",
    "oneOf",
    "allOf",
    "not",
    "const",
    "definitions",
    "$defs",
    "propertyNames",
  ]

  for (const crd of crds) {
    const nodes = walk(schemaOf(crd))
    const kind = crd.spec.names.kind

    it(`${kind}: every node has a type, and no forbidden keyword`, () => {
      for (const { path, schema } of nodes) {
        assert.isString(schema.type, `${path} needs a type`)
        for (const key of forbidden) assert.notProperty(schema, key, `${path} has ${key}`)
      }
    })

    it(`${kind}: objects have properties, a map value or preserve-unknown-fields, never two of them`, () => {
      for (const { path, schema } of nodes.filter((n) => n.schema.type === "object")) {
        const hasProperties = schema.properties !== undefined
        const isMap = typeof schema.additionalProperties === "object"
        const preserves = schema["x-kubernetes-preserve-unknown-fields"] === true
        assert.notStrictEqual(schema.additionalProperties, false, `${path}: additionalProperties false`)
        assert.isFalse(
          hasProperties && schema.additionalProperties !== undefined,
          `${path}: properties + additionalProperties`,
        )
        assert.isFalse(isMap && preserves, `${path}: map + preserve-unknown-fields`)
        if (path === ".metadata") {
          assert.deepStrictEqual(schema, { type: "object" }, "root metadata stays the API server's")
          continue
        }
        assert.isTrue(
          hasProperties || isMap || preserves,
          `${path}: an object with no schema prunes everything`,
        )
      }
    })

    it(`${kind}: required fields exist, list-map keys are required`, () => {
      for (const { path, schema } of nodes) {
        const properties = (schema.properties ?? {}) as Record<string, JSONSchemaProps>
        for (const name of (schema.required ?? []) as string[]) {
          assert.property(properties, name, `${path}.${name} is required but not declared`)
        }
        if (schema["x-kubernetes-list-type"] === "map") {
          const items = schema.items as JSONSchemaProps
          for (const key of schema["x-kubernetes-list-map-keys"] as string[]) {
            assert.include(items.required as string[], key, `${path}: list-map key ${key} must be required`)
          }
        }
      }
    })

    it(`${kind}: patterns are RE2-compatible and integers have a format`, () => {
      for (const { path, schema } of nodes) {
        if (typeof schema.pattern === "string") {
          assert.notMatch(schema.pattern, /\(\?[=!<]|\\[1-9]/, `${path}: lookaround or backreference`)
          assert.doesNotThrow(() => new RegExp(schema.pattern as string))
        }
        if (schema.type === "integer") assert.oneOf(schema.format, ["int32", "int64"], `${path} format`)
        if (schema.format === "date-time")
          assert.notProperty(schema, "pattern", `${path}: zod's date-time regex`)
      }
    })

    it(`${kind}: the spec rejects unknown fields; only the Job template preserves them`, () => {
      const preserving = nodes
        .filter((n) => n.schema["x-kubernetes-preserve-unknown-fields"] === true)
        .map((n) => n.path)
      // The restore Job's template and the validation phase's (BackupCheck's spec, and the template's).
      const jobTemplate = [
        ".spec.jobTemplate.spec",
        ".spec.jobTemplate.spec.template",
        ".spec.jobTemplate.spec.template.spec",
        ".spec.jobTemplate.spec.template.spec.containers[*]",
        ".spec.validation.jobTemplate.spec",
        ".spec.validation.jobTemplate.spec.template",
        ".spec.validation.jobTemplate.spec.template.spec",
        ".spec.validation.jobTemplate.spec.template.spec.containers[*]",
      ]
      if (kind === "BackupCheck") {
        assert.deepStrictEqual(preserving, jobTemplate)
      } else if (kind === "FleetBackupCheck") {
        assert.deepStrictEqual(
          preserving,
          jobTemplate.map((p) => p.replace(".spec.", ".spec.template.spec.")),
        )
      } else {
        assert.deepStrictEqual(preserving, [])
      }
    })
  }

  it("BackupCheck: defaults are where the API server applies them and satisfy their own schema", () => {
    const nodes = walk(schemaOf(backupCheckCrd()))
    const defaults = Object.fromEntries(
      nodes.filter((n) => "default" in n.schema).map((n) => [n.path, n.schema.default]),
    )
    assert.deepStrictEqual(defaults, {
      ".spec.concurrencyPolicy": "Forbid",
      ".spec.failedRunsHistoryLimit": 1,
      ".spec.historyLimit": 31,
      ".spec.jobTemplate.spec.template.spec.restartPolicy": "Never",
      ".spec.recoveryPoint.policy": "Latest",
      ".spec.restore.etcd.expectKeys": [],
      ".spec.restore.etcd.expectKeys[*].min": 1,
      ".spec.restore.postgres.assertions": [],
      ".spec.restore.postgres.database": "postgres",
      ".spec.restore.restic.snapshot": "latest",
      ".spec.restore.restic.verify": {},
      ".spec.restore.velero.namespace": "velero",
      ".spec.restore.velero.restorePVs": false,
      ".spec.restore.velero.waitForReady": true,
      ".spec.sandbox.egress": [],
      ".spec.sandbox.egress[*].ports[*].protocol": "TCP",
      ".spec.sandbox.validationWindow": "0s",
      ".spec.successfulRunsHistoryLimit": 3,
      ".spec.suspend": false,
      ".spec.timeout": "1h",
      ".spec.validation.jobTemplate.spec.template.spec.restartPolicy": "Never",
    })
    for (const { path, schema } of nodes.filter((n) => "default" in n.schema)) {
      if (typeof schema.pattern === "string")
        assert.match(String(schema.default), new RegExp(schema.pattern), path)
      if (Array.isArray(schema.enum)) assert.include(schema.enum, schema.default, path)
    }
  })

  it("BackupCheck: required fields, enums, patterns and CEL rules reach the API server", () => {
    const spec = schemaOf(backupCheckCrd()).properties as Record<string, JSONSchemaProps>
    assert.deepStrictEqual(schemaOf(backupCheckCrd()).required, ["spec"])
    const s = spec.spec!
    // jobTemplate or restore, exactly one: a CEL rule, not a required field
    assert.deepStrictEqual(s.required, ["backup"])
    const props = s.properties as Record<string, JSONSchemaProps>
    assert.deepStrictEqual(
      (props.jobTemplate!.properties as Record<string, JSONSchemaProps>).metadata!.properties,
      {
        annotations: {
          additionalProperties: { type: "string" },
          description: "Annotations for the restore Job.",
          type: "object",
        },
        labels: {
          additionalProperties: { type: "string" },
          description: "Labels for the restore Job.",
          type: "object",
        },
      },
    )
    assert.strictEqual(
      (props.backup!.properties as Record<string, JSONSchemaProps>).checksum!.pattern,
      "^(sha256:[0-9a-f]{64}|sha512:[0-9a-f]{128}|md5:[0-9a-f]{32})$",
    )
    assert.deepStrictEqual(s["x-kubernetes-validations"], [
      {
        rule: "has(self.jobTemplate) != has(self.restore)",
        message: "exactly one of jobTemplate (a custom restore Job) and restore (a built-in method)",
      },
      {
        rule: "!has(self.restore) || has(self.restore.velero) || !has(self.sandbox)",
        message:
          "sandbox is not available with restore.restic, postgres or etcd yet: the agent reads its credentials Secret in the check's namespace, which a sandbox namespace cannot (docs/adr/0014)",
        fieldPath: ".sandbox",
        reason: "FieldValueForbidden",
      },
      {
        rule: "!has(self.restore) || !has(self.restore.velero) || has(self.sandbox)",
        message:
          "restore.velero requires sandbox: the Backup's namespaces are restored into the run's sandbox namespace, never over live objects",
        fieldPath: ".sandbox",
        reason: "FieldValueRequired",
      },
      {
        rule: "!has(self.timeZone) || has(self.schedule)",
        message: "timeZone requires schedule",
        fieldPath: ".timeZone",
        reason: "FieldValueForbidden",
      },
      {
        rule: "!has(self.startWindow) || has(self.schedule)",
        message: "startWindow requires schedule",
        fieldPath: ".startWindow",
        reason: "FieldValueForbidden",
      },
    ])
    assert.deepStrictEqual(props.concurrencyPolicy!.enum, ["Forbid", "Replace"])
    assert.deepStrictEqual(props.timeout!["x-kubernetes-validations"], [
      { rule: "duration(self) >= duration('1s')", message: "must be at least 1s" },
    ])
    const conditions = (spec.status!.properties as Record<string, JSONSchemaProps>).conditions!
    const status = (conditions.items as JSONSchemaProps).properties as Record<string, JSONSchemaProps>
    assert.deepStrictEqual(status.status!.enum, ["True", "False", "Unknown"])
    assert.strictEqual(status.reason!.pattern, "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
    assert.strictEqual(status.reason!.maxLength, 1024)
    assert.strictEqual(status.message!.maxLength, 32768)
  })

  it("the CRD pattern and the hub agree on schedules", () => {
    const pattern = new RegExp(
      (
        (schemaOf(backupCheckCrd()).properties as Record<string, JSONSchemaProps>).spec!.properties as Record<
          string,
          JSONSchemaProps
        >
      ).schedule!.pattern as string,
    )
    for (const ok of ["0 3 * * *", "*/5 * * * *", "0 3 ? * MON-FRI", "@daily"]) assert.match(ok, pattern)
    for (const bad of [
      "0 3 * * * *",
      "0 3 L * *",
      "0 3 * * 5#2",
      "@every 1h",
      "TZ=UTC 0 3 * * *",
      " 0 3 * * *",
    ]) {
      assert.notMatch(bad, pattern)
    }
  })
})

describe("toStructural", () => {
  it("turns open objects into preserve-unknown-fields and drops additionalProperties: false", () => {
    const open = toStructural({
      type: "object",
      properties: { a: { type: "string" } },
      additionalProperties: {},
    })
    assert.deepStrictEqual(open, {
      properties: { a: { type: "string" } },
      type: "object",
      "x-kubernetes-preserve-unknown-fields": true,
    })
    const closed = toStructural({
      type: "object",
      properties: { a: { type: "string" } },
      additionalProperties: false,
    })
    assert.deepStrictEqual(closed, { properties: { a: { type: "string" } }, type: "object" })
  })

  it("refuses what a CRD cannot express, naming the path", () => {
    assert.throws(
      () => crdSchemaOf(z.object({ a: z.union([z.string(), z.number()]) })),
      /\.a: "anyOf" is not allowed/,
    )
    assert.throws(
      () =>
        toStructural({
          type: "object",
          properties: { a: { type: "string" } },
          additionalProperties: { type: "string" },
        }),
      /properties and additionalProperties/,
    )
    assert.throws(
      () => toStructural({ type: "object", properties: { a: { description: "untyped" } } }),
      /\.a: .*needs a type/,
    )
    assert.throws(() => crdSchemaOf(z.object({ a: z.literal("x").nullable() })), /not allowed|needs a type/)
  })

  it("is what the CRD embeds for the spec", () => {
    const spec = (schemaOf(backupCheckCrd()).properties as Record<string, JSONSchemaProps>).spec
    assert.deepStrictEqual(spec, crdSchemaOf(BackupCheckSpecSchema))
  })
})
