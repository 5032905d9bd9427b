//go:build tools

// Pins Helm (the chart's lint, template and install in tests) for clusters/build-tool.sh.
package tools

import _ "helm.sh/helm/v4/cmd/helm"
