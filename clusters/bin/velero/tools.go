//go:build tools

// Pins the Velero CLI and server (one binary) and Velero's AWS object-store plugin (S3 backup storage
// locations) for clusters/build-tool.sh: the local fleets' real Velero. One module and one `go build`
// for both, so the packages they share (Kubernetes clients, the AWS SDK, gRPC) compile once. The
// plugin's main package is the subdirectory of the same name, so `go build` names the binary as
// Velero expects.
package tools

import (
	_ "github.com/vmware-tanzu/velero-plugin-for-aws/velero-plugin-for-aws"
	_ "github.com/vmware-tanzu/velero/cmd/velero"
)
