// Command leasectl runs a command under a time-bound lease with a fencing
// token, and gives on-call engineers the tools to inspect and repair leases.
package main

import (
	"os"

	"github.com/leasectl/leasectl/cmd"
)

func main() {
	os.Exit(cmd.Execute())
}
