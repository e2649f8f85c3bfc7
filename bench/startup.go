//go:build linux

package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"time"
)

// starter is one command timed from start to exit.
type starter struct {
	name string
	cmd  func() *exec.Cmd
}

// startup times `leasectl run -- true` on both stores against `true`,
// `flock -n FILE true`, `etcdctl lock j -- true`, a bare Go SET NX binary,
// and `leasectl version` (start-up alone) against an empty static Go
// binary (the floor of any Go start-up), interleaved: each round runs every
// command once, in a new random order.
func (b *bench) startup() error {
	cmds := []starter{
		{"true", func() *exec.Cmd { return exec.Command("true") }},
		b.floorCmd("flock"), b.floorCmd("setnx"), b.floorCmd("empty_go"), b.floorCmd("init_only"),
		{"version", func() *exec.Cmd { return b.leasectlCmd(false, "version") }},
		{"run_redis", func() *exec.Cmd { return b.leasectlCmd(true, "run", "--job", "j", "--", "true") }},
		{"run_embedded", func() *exec.Cmd { return b.leasectlCmd(false, "run", "--job", "j", "--", "true") }},
	}
	if b.etcd != nil {
		cmds = append(cmds, starter{"etcd_lock", func() *exec.Cmd { return b.etcdctl("lock", "j", "--", "true") }})
	}
	samples, cpu, err := b.interleaveCPU(cmds)
	if err != nil {
		return err
	}
	med := func(name string) float64 { return median(samples[name]) }
	medCPU := func(name string) float64 { return median(cpu[name]) }
	n := fmt.Sprintf("median of %d interleaved runs", startupRounds)
	line("true_ms", med("true"), "ms", n+"; reference 0.8")
	line("flock_ms", med("flock"), "ms", "flock -n FILE true; reference 1.7")
	line("setnx_ms", med("setnx"), "ms", "reference: bare Go + go-redis SET NX, true, DEL; 3.9")
	line("empty_go_ms", med("empty_go"), "ms", "reference: static Go binary, func main() {}")
	line("init_only_ms", med("init_only"), "ms", "reference: every package leasectl links, main() {}: runtime start and package init")
	line("leasectl_version_ms", med("version"), "ms", "leasectl version: the binary's start-up alone")
	line("run_redis_ms", med("run_redis"), "ms", "leasectl run --job j -- true, local Redis")
	line("run_embedded_ms", med("run_embedded"), "ms", "same, embedded store")
	if b.etcd != nil {
		line("etcd_lock_ms", med("etcd_lock"), "ms", "etcdctl lock j -- true; reference 15")
	}
	// The targets are ratios to floors measured in the same rounds, so that
	// they hold on any machine: a bare Go binary doing what a run does at
	// least (SET NX, fork and exec, DEL), and an empty Go binary.
	floor := func(name string) string { return floorIs("%.2f ms", med(name)) }
	line("run_redis_vs_setnx", med("run_redis")/med("setnx"), "x", "target <= 1.25; "+floor("setnx"))
	line("run_embedded_vs_setnx", med("run_embedded")/med("setnx"), "x", "target <= 1.15; "+floor("setnx"))
	line("leasectl_version_vs_empty_go", med("version")/med("empty_go"), "x", "target <= 1.5; "+floor("empty_go"))
	line("init_only_vs_empty_go", med("init_only")/med("empty_go"), "x", "reference: what linking leasectl's packages costs before main")
	line("setnx_vs_flock", med("setnx")/med("flock"), "x", "reference: the Go floor against flock")
	line("run_redis_vs_flock", med("run_redis")/med("flock"), "x", "reference")
	if b.etcd != nil {
		line("etcd_lock_vs_flock", med("etcd_lock")/med("flock"), "x", "reference")
	}
	// CPU time: what a run costs the host, the supervisor, its watchdog and
	// the child together (each reaps the other two, so the kernel counts
	// them in its own).
	line("flock_cpu_ms", medCPU("flock"), "ms", "CPU time (user + system) of flock -n FILE true and its child")
	line("run_embedded_cpu_ms", medCPU("run_embedded"), "ms", "CPU time of leasectl run --job j -- true: supervisor, watchdog and child")
	line("run_redis_cpu_ms", medCPU("run_redis"), "ms", "same, local Redis")
	// A run is two Go processes and the child: no design of a supervisor
	// that links every store and a separate watchdog can use less CPU than
	// init_only (the supervisor's start), empty_go (the watchdog's) and
	// true.
	designFloor := medCPU("init_only") + medCPU("empty_go") + medCPU("true")
	line("run_cpu_design_floor_ms", designFloor, "ms", "reference: CPU time of init_only + empty_go + true, the start of a run's two Go processes and its child")
	line("run_embedded_cpu_vs_flock", medCPU("run_embedded")/medCPU("flock"), "x", "target <= 2.5; "+floorIs("%.2f ms of CPU", medCPU("flock"))+fmt.Sprintf("; the design's floor %.2f ms, %.2fx flock's", designFloor, designFloor/medCPU("flock")))
	return nil
}

// floorArgvs are the command lines of the floors, by name, that several
// groups of figures measure beside leasectl: `flock -n FILE true`, the bare
// go-redis SET NX binary, the empty Go binary and initonly.
func (b *bench) floorArgvs() map[string][]string {
	return map[string][]string{
		"flock":     {"flock", "-n", filepath.Join(b.tmp, "flock"), "true"},
		"setnx":     {b.setnx, b.redis.URL, "setnx-j", "true"},
		"empty_go":  {b.emptyGo},
		"init_only": {b.initOnly},
	}
}

// floorCmd is the floor named name (floorArgvs) as a command to time.
func (b *bench) floorCmd(name string) starter {
	argv := b.floorArgvs()[name]
	return starter{name, func() *exec.Cmd { return exec.Command(argv[0], argv[1:]...) }}
}

// interleave runs every command once per round, in a new random order each
// round, and returns each one's times in milliseconds by name, warm-up
// rounds left out.
func (b *bench) interleave(cmds []starter) (map[string][]float64, error) {
	wall, _, err := b.interleaveCPU(cmds)
	return wall, err
}

// interleaveCPU is interleave, with each run's CPU time in milliseconds
// too: user and system, of the command and of the processes it reaped.
func (b *bench) interleaveCPU(cmds []starter) (wall, cpu map[string][]float64, err error) {
	wall, cpu = map[string][]float64{}, map[string][]float64{}
	err = b.rounds(len(cmds), func(i int, keep bool) error {
		c := cmds[i]
		cmd := c.cmd()
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v: %s", c.name, err, out)
		}
		if keep {
			wall[c.name] = append(wall[c.name], ms(time.Since(start)))
			cpu[c.name] = append(cpu[c.name], ms(cmd.ProcessState.UserTime()+cmd.ProcessState.SystemTime()))
		}
		return nil
	})
	return wall, cpu, err
}

// rounds measures each of n commands once per round, in a new random order
// each round: warmupRounds rounds whose figures are not kept (page cache,
// first connections), then startupRounds whose are.
func (b *bench) rounds(n int, measure func(i int, keep bool) error) error {
	for round := range warmupRounds + startupRounds {
		for _, i := range b.rng.Perm(n) {
			if err := measure(i, round >= warmupRounds); err != nil {
				return err
			}
		}
	}
	return nil
}
