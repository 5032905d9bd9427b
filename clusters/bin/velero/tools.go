//go:build tools

// Pins the Velero CLI and server (one binary) for clusters/build-tool.sh: the local fleets' real Velero.
package tools

import _ "github.com/vmware-tanzu/velero/cmd/velero"

// ldflags: controller-runtime's metrics server, which Velero does not configure, would bind :8080 on the
// host (a pod's own port in a real cluster); "0" turns it off, so several servers and the dev hub coexist.
// Velero's own metrics stay on --metrics-address.
