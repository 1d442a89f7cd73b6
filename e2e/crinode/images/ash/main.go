// Command ash stands in for /bin/ash of the agnhost image that the
// multus-dynamic-networks-controller's e2e pods run, so that the cluster tier
// pulls nothing (e2e/cluster, dynnet_test.go). Those pods run
//
//	/bin/ash -c "trap : TERM INT; sleep infinity & wait"
//
// which keeps the container up until it is told to stop. This program does
// that and nothing else: it refuses any other command, so that a suite that
// starts asking its pods for more fails here instead of passing by accident.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// script is the one command line it answers.
const script = "trap : TERM INT; sleep infinity & wait"

func main() {
	if len(os.Args) != 3 || os.Args[1] != "-c" || os.Args[2] != script {
		fmt.Fprintf(os.Stderr, "ash (a test stand-in) runs only -c %q, not %q\n", script, os.Args[1:])
		os.Exit(2)
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if sig, ok := s.(syscall.Signal); ok && s != syscall.SIGCHLD {
			// The trap runs ":", and a wait interrupted by a trapped
			// signal returns 128 plus its number (POSIX), which is the
			// script's last status.
			os.Exit(128 + int(sig))
		}
		// As the pod's first process it inherits orphans; reap them.
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
