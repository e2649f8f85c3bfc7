//go:build linux

// Command setnx is the start-up reference of docs/design.md §8: the least a Go
// binary linked with go-redis does to run a command under a Redis lock —
// SET NX with a TTL, run the command, DEL — with none of leasectl's
// safety. `make bench` compares leasectl run with it.
//
//	setnx REDIS_URL KEY CMD [ARGS...]
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/redis/go-redis/v9"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "setnx: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) < 3 {
		return errors.New("usage: setnx REDIS_URL KEY CMD [ARGS...]")
	}
	opt, err := redis.ParseURL(args[0])
	if err != nil {
		return err
	}
	ctx := context.Background()
	c := redis.NewClient(opt)
	defer c.Close()
	ok, err := c.SetNX(ctx, args[1], "setnx", 30*time.Second).Result()
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%s is held", args[1])
	}
	cmd := exec.Command(args[2], args[3:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	runErr := cmd.Run()
	if err := c.Del(ctx, args[1]).Err(); err != nil {
		return err
	}
	return runErr
}
