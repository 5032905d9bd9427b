//go:build tools

// Pins Velero's AWS object-store plugin (S3 backup storage locations) for clusters/build-tool.sh. Its
// main package is the subdirectory of the same name, so `go build` names the binary as Velero expects.
package tools

import _ "github.com/vmware-tanzu/velero-plugin-for-aws/velero-plugin-for-aws"
