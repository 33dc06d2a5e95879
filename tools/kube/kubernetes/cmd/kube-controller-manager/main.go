// Command kube-controller-manager is the upstream kube-controller-manager main, built from
// the Go module proxy for fleetshare's integration tests (see tools/kube/README.md); the
// tests run only its Job controller.
package main

import (
	"os"
	_ "time/tzdata" // for timeZone support in CronJob

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format registration
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric registration
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	command := app.NewControllerManagerCommand()
	os.Exit(cli.Run(command))
}
