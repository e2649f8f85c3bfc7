// Command initonly links every package leasectl links and does nothing: its
// start-up is what any leasectl process (and its watchdog) pays before
// main, the runtime's start and every package's init, which no change to
// leasectl's own main can cut. make bench times it beside an empty Go
// binary and `leasectl version`.
package main

import _ "github.com/leasectl/leasectl/cmd"

func main() {}
