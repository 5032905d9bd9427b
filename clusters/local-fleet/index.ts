export { type AgentExecutor, restoreToolPath, startAgentExecutor } from "./agent-executor.ts"
export { type AuditEvent, auditPolicy, mutatingVerbs, parseAuditLog, readAuditLog } from "./audit.ts"
export {
  barmanBackup,
  damageResticPacks,
  etcdSnapshot,
  pgDump,
  type ResticSnapshot,
  resticBackup,
  type S3Server,
  startS3Server,
  writeSampleFiles,
} from "./backups.ts"
export { ensureBinaries, requiredBinaries } from "./binaries.ts"
export {
  apiRequest,
  type ClusterOptions,
  type ClusterUser,
  type FleetOptions,
  type KubectlResult,
  type LocalCluster,
  type LocalFleet,
  renderKubeconfig,
  startFleet,
} from "./fleet.ts"
export {
  establishedWithin,
  installFleetcheck,
  type PreparedSamples,
  type PrepareFleetOptions,
  prepareFleet,
  registerWithSecret,
  tokenPluginExecConfig,
} from "./fleetcheck.ts"
export { type HubLogLine, type HubProcess, type HubProcessOptions, startHubProcess } from "./hub-process.ts"
export type { ManagedProcess } from "./processes.ts"
export {
  type LocalPrometheus,
  type PromAlert,
  type PrometheusOptions,
  type PromResult,
  type PromTarget,
  ruleFileFrom,
  scraperToken,
  startPrometheus,
} from "./prometheus.ts"
export { upstreamCrdFiles } from "./upstream-crds.ts"
export {
  backupItemFiles,
  backupTarballKey,
  editBackupTarball,
  ensureVeleroBinaries,
  type StartVeleroOptions,
  startVelero,
  type VeleroBackup,
  type VeleroBinaries,
  type VeleroServer,
  veleroNamespace,
} from "./velero.ts"
export {
  applyStorefront,
  prepareVeleroSamples,
  storefrontManifest,
  storefrontNamespace,
  storefrontSchedule,
  type VeleroSamples,
  veleroHubSamplesDir,
  veleroSamplesDir,
} from "./velero-samples.ts"
