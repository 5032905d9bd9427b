export { ensureBinaries, requiredBinaries } from "./binaries.ts"
export {
  type ClusterOptions,
  type FleetOptions,
  type KubectlResult,
  type LocalCluster,
  type LocalFleet,
  renderKubeconfig,
  startFleet,
} from "./fleet.ts"
