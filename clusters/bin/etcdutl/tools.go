//go:build tools

// Pins etcdutl (the restore agent's etcd snapshot tool) for clusters/build.sh.
package tools

import _ "go.etcd.io/etcd/etcdutl/v3"
