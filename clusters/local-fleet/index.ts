export { ensureBinaries, requiredBinaries } from "./binaries.ts"
export {
  apiRequest,
  type ClusterOptions,
  type FleetOptions,
  type KubectlResult,
  type LocalCluster,
  type LocalFleet,
  renderKubeconfig,
  startFleet,
} from "./fleet.ts"
export {
  installFleetcheck,
  type PrepareFleetOptions,
  prepareFleet,
  registerWithSecret,
} from "./fleetcheck.ts"
