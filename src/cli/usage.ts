// The usage texts of the commands whose modules are heavy to load, apart from them: `fleetcheck help`
// prints every command's usage without loading any command.
import { secretReaderProvider } from "../api/names.ts"

export const registerCommandUsage = `  fleetcheck register NAME --context CTX [--label k=v ...] [--namespaces a,b]
      [--kubeconfig FILE] [--hub-context CTX] [--hub-namespace NS] [--token-expiration 8760h]
      [--member-server URL] [--force] [--clusterprofile]
                                 install the hub's identity (CRD, ServiceAccount, RBAC, token) in the
                                 member of context CTX and write the registration Secret NAME in the hub
                                 (the current context, or --hub-context); re-run to update or renew;
                                 --clusterprofile: a ClusterProfile NAME and its token Secret instead,
                                 read through the ${secretReaderProvider} access provider
`

export const unregisterCommandUsage = `  fleetcheck unregister NAME [--context CTX] [--timeout 60s] [--delete-crd]
      [--kubeconfig FILE] [--hub-context CTX] [--hub-namespace NS] [--force]
                                 delete the Secret (or ClusterProfile), wait for the hub to let go, then remove the identity
                                 and any fleetcheck finalizer from the member (BackupChecks and CRD stay)
`

/** Both commands, for `fleetcheck help`. */
export const registerUsage = registerCommandUsage + unregisterCommandUsage

export const credentialUsage = `  fleetcheck credential secret-reader [--namespace NS] [--kubeconfig FILE]
                                 the exec plugin of the ${secretReaderProvider} access provider:
                                 prints the token register --clusterprofile stored for the profile
`
