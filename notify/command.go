package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// commandWaitDelay is how long a command that timed out, and was killed,
// may take to let go of its output before Send returns anyway.
const commandWaitDelay = time.Second

// Command runs a shell command per event, the event's JSON on its stdin.
type Command struct {
	line string
}

// NewCommand is a sink that runs line with /bin/sh -c.
func NewCommand(line string) (*Command, error) {
	if strings.TrimSpace(line) == "" {
		return nil, fmt.Errorf("invalid notify command: it is empty")
	}
	return &Command{line: line}, nil
}

// String names the command by its first word: the rest may hold secrets.
func (c *Command) String() string {
	first, _, _ := strings.Cut(strings.TrimSpace(c.line), " ")
	return "command " + first
}

// Send runs the command with e's JSON on stdin; exit status 0 is
// delivery. ctx's end kills it.
func (c *Command) Send(ctx context.Context, e Event) error {
	body, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("encode the event: %w", err)
	}
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", c.line)
	cmd.Stdin = bytes.NewReader(append(body, '\n'))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.WaitDelay = commandWaitDelay
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
			msg = msg[i+1:]
		}
		if msg != "" {
			return fmt.Errorf("%w: %s", err, msg)
		}
		return err
	}
	return nil
}
