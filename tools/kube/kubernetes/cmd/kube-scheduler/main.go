// Command kube-scheduler is the upstream kube-scheduler main, built from the Go
// module proxy for fleetshare's integration tests (see tools/kube/README.md).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format registration
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric registration
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	command := app.NewSchedulerCommand()
	os.Exit(cli.Run(command))
}
