//go:build linux

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/leasectl/leasectl/internal/redistest"

	"github.com/leasectl/leasectl/internal/testproc"
)

// etcdReadyTimeout bounds etcd's start-up on a loaded machine.
const etcdReadyTimeout = 20 * time.Second

// servers are the stores the bench started.
type servers struct {
	redis    *redistest.Server
	stateDir string    // the embedded store's XDG_STATE_HOME
	etcd     *exec.Cmd // nil when etcd is not installed
	etcdURL  string
}

// startServers starts a Redis and, when installed, an etcd, each on free
// loopback ports with its own data folder.
func (b *bench) startServers() error {
	var err error
	if b.redis, err = redistest.Start(redistest.Options{}); err != nil {
		return err
	}
	b.stateDir = filepath.Join(b.tmp, "state")
	if err := b.startEtcd(); err != nil {
		fmt.Printf("# etcd skipped: %v\n", err)
	}
	return nil
}

func (b *bench) stopServers() {
	b.redis.Stop()
	if b.etcd != nil {
		b.etcd.Process.Kill()
		b.etcd.Wait()
	}
}

// startEtcd starts a single-member etcd and waits until it answers.
func (b *bench) startEtcd() error {
	for _, bin := range []string{"etcd", "etcdctl"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%s is not installed (apt-get install etcd-server etcd-client)", bin)
		}
	}
	client, err := testproc.FreePort()
	if err != nil {
		return err
	}
	peer, err := testproc.FreePort()
	if err != nil {
		return err
	}
	b.etcdURL = "http://127.0.0.1:" + strconv.Itoa(client)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peer)
	dir := filepath.Join(b.tmp, "etcd")
	logFile, err := os.Create(dir + ".log")
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := exec.Command("etcd", "--name", "bench", "--data-dir", dir,
		"--listen-client-urls", b.etcdURL, "--advertise-client-urls", b.etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "bench="+peerURL, "--log-level", "warn", "--logger", "zap")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting etcd: %w", err)
	}
	deadline := time.Now().Add(etcdReadyTimeout)
	for {
		out, err := b.etcdctl("endpoint", "health").CombinedOutput()
		if err == nil {
			b.etcd = cmd
			return nil
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			return fmt.Errorf("etcd not healthy after %s: %s", etcdReadyTimeout, strings.TrimSpace(string(out)))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// etcdctl is an etcdctl command against the bench's etcd.
func (b *bench) etcdctl(args ...string) *exec.Cmd {
	cmd := exec.Command("etcdctl", append([]string{"--endpoints", b.etcdURL}, args...)...)
	cmd.Env = append(os.Environ(), "ETCDCTL_API=3")
	return cmd
}

// leasectlCmd is a leasectl command against the Redis (redis true) or the
// embedded store, in the bench's namespace, with no LEASECTL_ setting
// inherited from the caller.
func (b *bench) leasectlCmd(redis bool, args ...string) *exec.Cmd {
	store := ""
	if redis {
		store = b.redis.URL
	}
	return b.leasectlAt(store, args...)
}

// leasectlAt is leasectlCmd on the store at url ("": the embedded store).
func (b *bench) leasectlAt(url string, args ...string) *exec.Cmd {
	cmd := exec.Command(b.leasectl, args...)
	env := []string{"LEASECTL_NAMESPACE=bench", "LEASECTL_LOG_FORMAT=json", "XDG_STATE_HOME=" + b.stateDir}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LEASECTL_") && !strings.HasPrefix(kv, "XDG_STATE_HOME=") {
			env = append(env, kv)
		}
	}
	if url != "" {
		env = append(env, "LEASECTL_STORE="+url)
	}
	cmd.Env = env
	return cmd
}
