#!/bin/sh
# An exec credential plugin for local fleets (the hub runs it only when its policy or its ClusterProfile
# provider file names it): mints a ServiceAccount token with TokenRequest (kubectl create token) and
# prints it as an ExecCredential. The token lives 10 minutes (TokenRequest's minimum); the
# ExecCredential may announce an earlier expirationTimestamp (FLEETCHECK_PLUGIN_EXPIRES seconds), so a
# test sees many expiries in little time.
#   FLEETCHECK_PLUGIN_KUBECTL         kubectl binary
#   FLEETCHECK_PLUGIN_KUBECONFIG      a kubeconfig allowed to create serviceaccounts/token
#   FLEETCHECK_PLUGIN_NAMESPACE       the ServiceAccount's namespace
#   FLEETCHECK_PLUGIN_SERVICEACCOUNT  its name
#   FLEETCHECK_PLUGIN_EXPIRES         seconds until the announced expiry (default 600)
set -eu
token=$("$FLEETCHECK_PLUGIN_KUBECTL" --kubeconfig "$FLEETCHECK_PLUGIN_KUBECONFIG" \
  -n "$FLEETCHECK_PLUGIN_NAMESPACE" create token "$FLEETCHECK_PLUGIN_SERVICEACCOUNT" --duration=10m)
expires=$(date -u -d "+${FLEETCHECK_PLUGIN_EXPIRES:-600} seconds" +%Y-%m-%dT%H:%M:%SZ)
printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"%s","expirationTimestamp":"%s"}}\n' "$token" "$expires"
