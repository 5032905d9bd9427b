export { ensureBinaries, requiredBinaries } from "./binaries.ts"
export {
  renderKubeconfig,
  startFleet,
  type ClusterOptions,
  type FleetOptions,
  type KubectlResult,
  type LocalCluster,
  type LocalFleet,
} from "./fleet.ts"
