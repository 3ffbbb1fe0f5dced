// CoreDNS for the local cluster and the kind node image, with only the plugins their Corefiles
// use (e2e/cluster/manifests/coredns.yaml's and kubeadm's default, which adds prometheus),
// and log, for debugging. The full build compiles every cloud provider's SDK
// and took 3-9 minutes of a fresh CI machine; this one compiles what the cluster runs.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

// The order in which the plugins handle a query: CoreDNS's plugin.cfg order, cut to these.
var directives = []string{
	"reload", "ready", "health", "prometheus", "errors", "log", "loadbalance", "cache", "kubernetes",
	"loop", "forward",
}

func init() { dnsserver.Directives = directives }

func main() { coremain.Run() }
